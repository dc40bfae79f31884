"""Kernels: compute one graph node by reading its sources' bytes and writing its own.

``compute_forward(t)`` runs node ``t`` on the memory behind it (``t.storage.xp`` is
numpy, or cupy for CUDA buffers); arrays are strided views of the real buffers, so views,
in-place ops and aliasing behave as in ggml. View ops and op NONE do nothing, as in
ggml's backends. ``has_kernel(t)`` says whether ``t``'s op and types can be computed
(the type rules of ggml's CPU backend: soft_max, norms, losses, optimizer steps, acc,
mean, argmax are f32-only; count_equal i32-only).

Known differences from ggml's CPU backend: count_equal writes an i32 count (ggml: i64);
SOFT_MAX_BACK placed in place on its ``y`` source still gives the mathematical result
(ggml's row loop would read an overwritten ``y``); f32 sums use numpy's pairwise order,
so the last bits of reductions may differ from ggml's sequential sums.

    >>> import numpy as np
    >>> from vizalloc.runtime import Context, F32, alloc_ctx_tensors, ops, tensor_get, tensor_set
    >>> from vizalloc.runtime.buffer import BufferType
    >>> from vizalloc.runtime.kernels import compute_forward, has_kernel
    >>> ctx = Context(); a = ctx.new_tensor_1d(F32, 3); y = ops.relu(ctx, a)
    >>> _ = alloc_ctx_tensors(ctx, BufferType("CPU")); tensor_set(a, [-1, 0, 2])
    >>> has_kernel(y), compute_forward(y), tensor_get(y).tolist()
    (True, None, [0.0, 0.0, 2.0])
"""

from __future__ import annotations

from vizalloc.errors import BackendError
from vizalloc.runtime.kernels import elementwise, layout, nn  # noqa: F401  (they register their kernels)
from vizalloc.runtime.kernels._util import KERNELS
from vizalloc.runtime.memory import tensor_array
from vizalloc.runtime.tensor import Op, Tensor

#: Ops that only describe memory (ggml_op_is_empty): computing them does nothing.
EMPTY_OPS = frozenset({Op.NONE, Op.VIEW, Op.RESHAPE, Op.PERMUTE, Op.TRANSPOSE})


def has_kernel(t: Tensor) -> bool:
    """Whether ``compute_forward`` can run ``t`` (its op, unary function and types)."""
    if t.op in EMPTY_OPS:
        return True
    entry = KERNELS.get(t.op)
    return entry is not None and entry[1](t)


def compute_forward(t: Tensor) -> None:
    """Compute node ``t`` in place in its memory. Raises ``BackendError`` for an op or
    type combination without a kernel, ``NoMemoryError`` if a tensor has no memory."""
    entry = KERNELS.get(t.op)
    if entry is None:
        if t.op in EMPTY_OPS:
            return
        raise BackendError(_missing(t))
    fn, supports = entry
    if not supports(t):
        raise BackendError(_missing(t))
    if t.storage is None or t.data is None:
        tensor_array(t)  # raises NoMemoryError naming the tensor
    if t.ne[0] and t.ne[1] and t.ne[2] and t.ne[3]:
        fn(t)


def _missing(t: Tensor) -> str:
    what = t.op.name
    if t.op is Op.UNARY and t.op_params:
        what += f" ({getattr(t.op_params[0], 'name', t.op_params[0])})"
    types = ", ".join(s.type.label for s in t.src if s is not None)
    return (
        f"no kernel for op {what} on tensor {t.name or t.id!r} ({t.type.label}{list(t.ne)}, sources {types}); "
        "vizalloc computes the ops listed in vizalloc.runtime.kernels.KERNELS — run this node on a simulated "
        "backend or change the graph"
    )


__all__ = ["EMPTY_OPS", "KERNELS", "compute_forward", "has_kernel"]
