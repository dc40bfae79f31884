"""The backend interface (``ggml_backend`` + its device): what a backend can run and
which memory it can use.

A backend computes graphs whose tensors live in memory it can address. It names
one default buffer type (``buffer_type``, ggml's ``get_default_buffer_type``),
says which ops it runs (``supports_op``), which buffer types it can read
(``supports_buft``), and which ops it would rather take over from the CPU when their
weights live in host memory (``offload_op``). Subclasses: ``CPUBackend``,
``SimBackend`` (a simulated device), ``CudaBackend`` (cupy).

    >>> from vizalloc.runtime.backends import CPUBackend
    >>> cpu = CPUBackend()
    >>> cpu.name, cpu.is_cpu, cpu.buffer_type.alignment
    ('CPU', True, 32)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from vizalloc.runtime.buffer import Buffer, BufferType, Usage
from vizalloc.runtime.tensor import Op, Tensor

if TYPE_CHECKING:
    from vizalloc.runtime.graph import Graph

#: ``ggml_backend_sched_eval_callback``: ``callback(t, ask)``; see ``graph_compute``.
EvalCallback = Callable[[Tensor, bool], bool]

#: Ops whose node only reinterprets its source's bytes: every backend "runs" them by doing nothing.
NOOP_OPS = frozenset({Op.NONE, Op.VIEW, Op.RESHAPE, Op.PERMUTE, Op.TRANSPOSE})


def op_batch_size(t: Tensor) -> int:
    """``get_op_batch_size`` of ggml-cuda: the dimension that decides offloading."""
    if t.op is Op.GET_ROWS:
        return 0
    if t.op is Op.MUL_MAT_ID:
        return t.ne[2]
    return t.ne[1]


class Backend:
    """Base of every backend. Subclasses set ``name``, ``buffer_type``, ``xp`` and ``is_cpu``.

    Attributes:
        name: shown in traces and errors (``CPU``, ``SIM``, ``CUDA0``).
        buffer_type: the default buffer type; graphs computed here live in it.
        xp: the array module its kernels run with (numpy or cupy).
        is_cpu: ggml's "the CPU backend" (the scheduler's fallback must be one).
        restricts_ops: whether ``supports_op`` refuses ops that have a kernel.
    """

    name: str = "backend"
    buffer_type: BufferType
    xp: Any = np
    is_cpu: bool = False
    #: True when ``supports_op`` is narrower than "has a kernel" (the compute loop then checks it).
    restricts_ops: bool = False

    def __init__(self) -> None:
        # buffer type -> whether this backend's kernels may address it (filled lazily;
        # buffer types are few and live as long as the process)
        self._readable: dict[BufferType, bool] = {}

    # -- capabilities --------------------------------------------------------
    def supports_op(self, t: Tensor) -> bool:
        """``ggml_backend_supports_op``: whether this backend can compute node ``t``."""
        if t.op in NOOP_OPS:
            return True
        from vizalloc.runtime import kernels  # on first use: it loads every kernel module

        return bool(kernels.has_kernel(t))

    def supports_buft(self, buft: BufferType) -> bool:
        """``ggml_backend_supports_buft``: whether this backend can use memory of type ``buft``."""
        return buft is self.buffer_type

    def offload_op(self, t: Tensor) -> bool:
        """``ggml_backend_offload_op``: whether to run ``t`` here although its weights are on the host."""
        return False

    def can_read(self, buft: BufferType) -> bool:
        """``supports_buft``, memoised: the compute loop asks it for every operand."""
        ok = self._readable.get(buft)
        if ok is None:
            ok = self._readable[buft] = bool(self.supports_buft(buft))
        return ok

    # -- memory ----------------------------------------------------------------
    def alloc_buffer(self, nbytes: int, usage: Usage = Usage.ANY, *, cause: str = "") -> Buffer:
        """``ggml_backend_alloc_buffer``: a buffer of the default buffer type."""
        return self.buffer_type.alloc_buffer(nbytes, usage, cause=cause)

    # -- compute ---------------------------------------------------------------
    def graph_compute(self, graph: Graph, callback: EvalCallback | None = None) -> bool:
        """``ggml_backend_graph_compute``: run every node of ``graph`` in order, then synchronize.

        Returns True when every node ran, False when ``callback`` stopped the compute.
        """
        from vizalloc.runtime.backends.compute import run_graph

        try:
            return run_graph(self, graph, callback)
        finally:
            self.synchronize()

    def synchronize(self) -> None:
        """``ggml_backend_synchronize``: wait for queued work (nothing to wait for on the host)."""

    def free(self) -> None:
        """``ggml_backend_free`` (backends hold no resources of their own here)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
