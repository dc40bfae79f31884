"""A simulated device: host memory that the CPU must treat as device memory.

``SimBackend`` makes multi-backend work testable without a GPU. Its buffers are
numpy arrays, but its buffer type says ``is_host=False`` and has its own name,
alignment and size limit, so:

* the CPU backend refuses to read tensors placed there (``supports_buft`` is False),
  and the scheduler must copy inputs across, as it does for a real GPU;
* it runs only the ops it is told to (``supported_ops``), so graphs get split;
* a ``max_size`` makes the allocators split buffers into chunks.

Its kernels are the CPU's numpy kernels: results are exact, only placement differs.

    >>> from vizalloc.runtime.backends import SimBackend
    >>> from vizalloc.runtime import Op
    >>> sim = SimBackend("GPU", alignment=256, max_size=1 << 20, supported_ops={Op.MUL_MAT, "ADD"})
    >>> sim.buffer_type.name, sim.buffer_type.is_host, sim.buffer_type.max_size
    ('GPU', False, 1048576)
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from vizalloc.runtime.backends.base import NOOP_OPS, Backend, op_batch_size
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.tensor import Op, Tensor, UnaryOp


class SimBackend(Backend):
    """A simulated non-host device.

    Args:
        name: the backend's name in traces (``SIM``).
        alignment: its buffer type's alignment (a power of two).
        max_size: its buffer type's largest buffer, None for no limit.
        supported_ops: the ops it runs: ``Op`` members, op names (``"MUL_MAT"``), or
            ``UnaryOp`` members for single unary functions (``UnaryOp.RELU``); None
            means every op that has a kernel. View-only ops are always supported.
        buft_name: its buffer type's name (defaults to ``name``).
        offload_min_batch: ``offload_op`` is true for ops whose batch
            dimension is at least this (ggml-cuda uses 32); None never offloads.
    """

    is_cpu = False
    xp = np

    def __init__(
        self,
        name: str = "SIM",
        alignment: int = 32,
        max_size: int | None = None,
        supported_ops: Iterable[Op | UnaryOp | str] | None = None,
        *,
        buft_name: str | None = None,
        offload_min_batch: int | None = 32,
    ) -> None:
        super().__init__()
        self.name = name
        self.buffer_type = BufferType(
            buft_name or name, alignment=alignment, max_size=max_size, device=np, is_host=False,
            backend_name=name,
        )
        self.offload_min_batch = offload_min_batch
        self._ops: frozenset[Op] | None = None
        self._unary: frozenset[UnaryOp] = frozenset()
        if supported_ops is not None:
            ops: set[Op] = set()
            unary: set[UnaryOp] = set()
            for entry in supported_ops:
                if isinstance(entry, Op):
                    ops.add(entry)
                elif isinstance(entry, UnaryOp):
                    unary.add(entry)
                elif isinstance(entry, str) and entry.upper() in Op.__members__:
                    ops.add(Op[entry.upper()])
                elif isinstance(entry, str) and entry.upper() in UnaryOp.__members__:
                    unary.add(UnaryOp[entry.upper()])
                else:
                    raise ValueError(f"SimBackend {name!r}: {entry!r} names no op (use Op, UnaryOp or an op name)")
            self._ops = frozenset(ops)
            self._unary = frozenset(unary)
            self.restricts_ops = True

    @property
    def supported_ops(self) -> frozenset[Op] | None:
        """The ops this backend was limited to (None: all ops with a kernel)."""
        return self._ops

    def supports_op(self, t: Tensor) -> bool:
        if t.op in NOOP_OPS:
            return True
        if self._ops is not None and t.op not in self._ops and not self._unary_listed(t):
            return False
        return super().supports_op(t)

    def _unary_listed(self, t: Tensor) -> bool:
        return t.op is Op.UNARY and any(p in self._unary for p in t.op_params if isinstance(p, UnaryOp))

    def offload_op(self, t: Tensor) -> bool:
        """ggml-cuda's rule: offload when the batch dimension is large enough.

        Like ggml it does not ask ``supports_op``; the scheduler asks both.
        """
        if self.offload_min_batch is None:
            return False
        return op_batch_size(t) >= self.offload_min_batch

    def __repr__(self) -> str:
        ops = "all ops" if self._ops is None else f"{len(self._ops) + len(self._unary)} ops"
        return f"<SimBackend {self.name} {self.buffer_type!r} {ops}>"
