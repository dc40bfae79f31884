"""Kernels that move data: dup/cont/cpy (and cast), get_rows, get_rows_back, concat,
repeat, repeat_back, acc, set.

Copies between shapes follow ggml's element order (dimension 0 fastest), which is
numpy's C order over the ``(ne3, ne2, ne1, ne0)`` arrays. Type conversion rounds to
nearest even (as ggml's FP32->FP16) and truncates floats to ints (a C cast).

    >>> import numpy as np
    >>> from vizalloc.runtime import Context, F32, alloc_ctx_tensors, ops, tensor_get, tensor_set
    >>> from vizalloc.runtime.buffer import BufferType
    >>> from vizalloc.runtime.kernels import compute_forward
    >>> ctx = Context(); a = ctx.new_tensor_2d(F32, 3, 2); t = ops.cont(ctx, ops.transpose(ctx, a))
    >>> _ = alloc_ctx_tensors(ctx, BufferType("CPU")); tensor_set(a, np.arange(6))
    >>> compute_forward(t); tensor_get(t).tolist()
    [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vizalloc.errors import BoundsError
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.kernels._util import F32, all_float, arr, raw_view, register, split_for_tiling, src_types, xp_of
from vizalloc.runtime.ops.layout import check_window
from vizalloc.runtime.tensor import Op, Tensor, label

_ANY = frozenset(DType)
_FLOATS = frozenset({DType.F32, DType.F16})


def _any_types(t: Tensor) -> bool:
    return True


@register(Op.DUP, _any_types)
@register(Op.CONT, _any_types)
@register(Op.CPY, _any_types)
def _copy(t: Tensor) -> None:
    # CPY's destination is a view of src[1] (or, for cast, the tensor itself): writing
    # t's bytes is writing b's bytes.
    d, x = arr(t), arr(t.src[0])  # type: ignore[arg-type]
    if x.shape != d.shape:
        x = x.reshape(d.shape)
    xp = xp_of(t)
    if x.dtype == d.dtype or xp is not np:
        xp.copyto(d, x, casting="unsafe")
    else:
        # like C, out-of-range values become inf (f16) or wrap (ints) without a warning
        with np.errstate(over="ignore", invalid="ignore"):
            np.copyto(d, x, casting="unsafe")


@register(Op.GET_ROWS, lambda t: src_types(t, _ANY, {DType.I32}))
def _get_rows(t: Tensor) -> None:
    a, b = t.src[0], t.src[1]
    assert a is not None and b is not None
    xp = xp_of(t)
    d, x, idx = arr(t), arr(a), arr(b)
    _check_rows(idx, a.ne[1], "get_rows", a, b)
    # x: (ne03, ne02, ne01, ne00); idx: (1, ne12, ne11, ne10) with ne12 == ne03, ne11 == ne02
    rows = idx[0]
    if x.shape[0] == 1 and x.shape[1] == 1 and rows.shape[0] == 1 and rows.shape[1] == 1:
        picked = xp.take(x[0, 0], rows[0, 0], axis=0)
        d[0, 0] = picked
        return
    picked = xp.take_along_axis(x, rows[..., None], axis=2)
    d[...] = picked


def _check_rows(idx: Any, n_rows: int, op: str, table: Tensor, indices: Tensor) -> None:
    """ggml asserts ``0 <= i < ne01`` for every row index; numpy would wrap -1 around."""
    if idx.size == 0:
        return
    lo, hi = int(idx.min()), int(idx.max())
    if lo < 0 or hi >= n_rows:
        bad = lo if lo < 0 else hi
        raise BoundsError(f"{op}: index {bad} in {label(indices)} is outside the {n_rows} rows of {label(table)} "
                          f"(indices must be in 0..{n_rows - 1})")


@register(Op.GET_ROWS_BACK, lambda t: src_types(t, _FLOATS, {DType.I32}))
def _get_rows_back(t: Tensor) -> None:
    a, b = t.src[0], t.src[1]
    assert a is not None and b is not None
    xp = xp_of(t)
    d = arr(t)
    d[...] = 0
    grads = arr(a).reshape(-1, a.ne[0])
    rows = arr(b).reshape(-1)
    _check_rows(rows, t.ne[1], "get_rows_back", t, b)
    target = d.reshape(-1, t.ne[0])
    # rows may repeat: every occurrence adds (ggml loops in order, so does add.at)
    add_at = getattr(xp.add, "at", None)
    if add_at is not None:
        add_at(target, rows, grads)
    else:  # pragma: no cover - array modules without ufunc.at
        for i, r in enumerate(rows.tolist()):
            target[r] += grads[i]


@register(Op.CONCAT, _any_types)
def _concat(t: Tensor) -> None:
    a, b = t.src[0], t.src[1]
    assert a is not None and b is not None
    dim = int(t.op_params[0])
    axis = 3 - dim
    d = arr(t)
    n = a.ne[dim]
    head = [slice(None)] * 4
    tail = [slice(None)] * 4
    head[axis] = slice(0, n)
    tail[axis] = slice(n, None)
    d[tuple(head)] = arr(a)
    d[tuple(tail)] = arr(b)


@register(Op.REPEAT, _any_types)
def _repeat(t: Tensor) -> None:
    a = t.src[0]
    assert a is not None
    d, x = arr(t), arr(a)
    if 0 in d.shape:
        return
    split = split_for_tiling(d.shape, x.shape)
    if split is None:
        d[...] = x
    else:
        d.reshape(split[0])[...] = x.reshape(split[1])


@register(Op.REPEAT_BACK, lambda t: all_float(t))
def _repeat_back(t: Tensor) -> None:
    a = t.src[0]
    assert a is not None
    xp = xp_of(t)
    d, x = arr(t), arr(a)
    # sum every tile of x (shape of a) down to d (shape of b): split x's axes, sum the repeats
    shape: list[int] = []
    keep: list[int] = []
    for nx, nd in zip(x.shape, d.shape):
        shape += [nx // nd, nd]
        keep.append(nd)
    summed = xp.sum(x.reshape(shape), axis=(0, 2, 4, 6), dtype=F32)
    d[...] = summed.reshape(keep)


def _check_window(t: Tensor, name: str, nb: tuple[int, int, int], offset: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and strides of the window of ``t`` that src[1] covers; checked to stay inside ``t``."""
    b = t.src[1]
    assert b is not None
    check_window(name, t, b, nb, offset)
    return (b.ne[3], b.ne[2], b.ne[1], b.ne[0]), (nb[2], nb[1], nb[0], t.type.type_size)


def _window_op(t: Tensor, add: bool) -> None:
    a, b = t.src[0], t.src[1]
    assert a is not None and b is not None
    nb1, nb2, nb3, offset, inplace = (int(p) for p in t.op_params[:5])
    d = arr(t)
    if not inplace:
        # ggml copies src0 into dst first (a memcpy of ggml_nbytes)
        xp_of(t).copyto(d, arr(a))
    shape, strides = _check_window(t, "acc" if add else "set", (nb1, nb2, nb3), offset)
    if 0 in shape:
        return
    w = raw_view(t, offset, shape, strides)
    y = arr(b)
    if add:
        xp_of(t).add(w, y, out=w)
    else:
        w[...] = y


@register(Op.ACC, lambda t: src_types(t, {DType.F32}, {DType.F32}))
def _acc(t: Tensor) -> None:
    _window_op(t, add=True)


@register(Op.SET, lambda t: src_types(t, {DType.F32, DType.I32}, {DType.F32, DType.I32}))
def _set(t: Tensor) -> None:
    _window_op(t, add=False)


__all__: list[str] = []
