"""Kernels for matrix products, soft max, masks, norms, reductions, losses and the
optimizer steps, following ggml's CPU backend (``ggml-cpu/ops.cpp``).

* ``mul_mat(a, b)`` is ``b @ a^T`` per matrix, written by BLAS straight into the output
  when the layouts allow (numpy needs unit stride along one axis of every matrix; a
  permuted operand without one is copied once). As on ggml's CPU backend, ``b`` is first
  rounded to ``a``'s dot type (f16 when ``a`` is f16) and products accumulate in f32.
* ``soft_max`` with a mask adds ``slope * mask`` (rows of the mask broadcast, dimensions
  2 and 3 repeat by modulo) after scaling; ``max_bias > 0`` gives ggml's ALiBi slope per
  head (dimension 2).
* ``cross_entropy_loss`` is ``-sum(log_softmax(logits) * labels) / nrows``.
* ``count_equal`` writes an i32 count (ggml: i64; see ``ops.count_equal``).

    >>> import numpy as np
    >>> from vizalloc.runtime import Context, F32, alloc_ctx_tensors, ops, tensor_get, tensor_set
    >>> from vizalloc.runtime.buffer import BufferType
    >>> from vizalloc.runtime.kernels import compute_forward
    >>> ctx = Context(); w = ctx.new_tensor_2d(F32, 2, 3); x = ctx.new_tensor_2d(F32, 2, 1)
    >>> y = ops.mul_mat(ctx, w, x); _ = alloc_ctx_tensors(ctx, BufferType("CPU"))
    >>> tensor_set(w, np.arange(6)); tensor_set(x, [1, 1]); compute_forward(y)
    >>> tensor_get(y).tolist()
    [1.0, 5.0, 9.0]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vizalloc.runtime.dtype import DType
from vizalloc.runtime.kernels._util import (
    F16, F32, FLOAT_TYPES, all_float, arr, as_f32, blasable, only_f32, register, scratch_f32, split_for_blocks,
    split_for_tiling, src_types, xp_of,
)
from vizalloc.runtime.tensor import Op, Tensor

_F32 = frozenset({DType.F32})
_MASK_TYPES = frozenset({DType.F32, DType.F16})


# -- matrix products ----------------------------------------------------------------------------

def _block_split(t: Tensor, d: Any, big: Any, small: Any) -> tuple[Any, Any, Any]:
    """Reshape for ggml's block broadcast of ``small`` over ``big`` in dimensions 2, 3."""
    split = split_for_blocks(big.shape[:2], small.shape[:2])
    if split is None:
        return d, big, small
    bshape, sshape = split
    return (d.reshape(bshape + d.shape[2:]), big.reshape(bshape + big.shape[2:]),
            small.reshape(sshape + small.shape[2:]))


@register(Op.MUL_MAT, lambda t: src_types(t, FLOAT_TYPES, FLOAT_TYPES))
def _mul_mat(t: Tensor) -> None:
    a, b = t.src[0], t.src[1]
    assert a is not None and b is not None
    x, y = arr(a), arr(b)
    if a.type is DType.F16 and y.dtype != F16:
        y = y.astype(F16)  # ggml converts src1 to src0's vec_dot_type first
    x, y = as_f32(x), as_f32(y)
    d = arr(t)
    d, y, x = _block_split(t, d, y, x)
    xp = xp_of(t)
    if xp is np:
        xt = x.swapaxes(-1, -2)
        if not blasable(xt):
            xt = np.ascontiguousarray(xt)
        if not blasable(y):
            y = np.ascontiguousarray(y)
        np.matmul(y, xt, out=d)
    else:
        xp.matmul(y, x.swapaxes(-1, -2), out=d)


@register(Op.OUT_PROD, lambda t: src_types(t, FLOAT_TYPES, FLOAT_TYPES))
def _out_prod(t: Tensor) -> None:
    a, b = t.src[0], t.src[1]
    assert a is not None and b is not None
    x, y = as_f32(arr(a)), as_f32(arr(b))
    d = arr(t)
    d, y, x = _block_split(t, d, y, x)
    xp = xp_of(t)
    if xp is np:
        yt = y.swapaxes(-1, -2)
        np.matmul(yt if blasable(yt) else np.ascontiguousarray(yt), x if blasable(x) else np.ascontiguousarray(x),
                  out=d)
    else:
        xp.matmul(y.swapaxes(-1, -2), x, out=d)


# -- soft max ---------------------------------------------------------------------------------------

def alibi_slopes(n_head: int, max_bias: float) -> np.ndarray:
    """ggml's ALiBi slope per head (``ggml_compute_forward_soft_max_f32``), f32."""
    if max_bias <= 0.0:
        return np.ones(n_head, dtype=F32)
    n_head_log2 = 1 << int(math.floor(math.log2(n_head)))
    m0 = np.float32(2.0) ** np.float32(-max_bias / n_head_log2)
    m1 = np.float32(2.0) ** np.float32(-(max_bias / 2.0) / n_head_log2)
    h = np.arange(n_head)
    return np.where(h < n_head_log2, m0 ** (h + 1), m1 ** (2 * (h - n_head_log2) + 1)).astype(F32)


def _soft_max_supported(t: Tensor) -> bool:
    if not only_f32(t):
        return False
    mask = t.src[1] if len(t.src) > 1 else None
    return mask is None or mask.type in _MASK_TYPES


@register(Op.SOFT_MAX, _soft_max_supported)
def _soft_max(t: Tensor) -> None:
    a = t.src[0]
    assert a is not None
    mask = t.src[1] if len(t.src) > 1 else None
    scale, max_bias = float(t.op_params[0]), float(t.op_params[1])
    xp = xp_of(t)
    d, x = arr(t), arr(a)
    if mask is None and scale == 1.0:
        w = d
        mx = x.max(axis=-1, keepdims=True)
        xp.subtract(x, mx, out=w)
    else:
        w = xp.multiply(x, np.float32(scale))
        if mask is not None:
            m = as_f32(arr(mask)[:, :, : a.ne[1], :])
            if max_bias > 0.0:
                slopes = xp.asarray(alibi_slopes(a.ne[2], max_bias))
                # slope follows the head of a (dimension 2), so tile the mask first
                m = xp.broadcast_to(m, m.shape) if m.shape == w.shape else _tile_to(xp, m, w.shape)
                m = m * slopes.reshape(1, -1, 1, 1)
            split = split_for_tiling(w.shape, m.shape)
            if split is None:
                w += m
            else:
                w.reshape(split[0])[...] += m.reshape(split[1])
        mx = w.max(axis=-1, keepdims=True)
        w -= mx
    xp.exp(w, out=w)
    s = w.sum(axis=-1, keepdims=True)
    xp.divide(w, s, out=d)


def _tile_to(xp: Any, small: Any, shape: tuple[int, ...]) -> Any:
    split = split_for_tiling(shape, small.shape)
    if split is None:
        return xp.broadcast_to(small, shape)
    return xp.broadcast_to(small.reshape(split[1]), split[0]).reshape(shape)


@register(Op.SOFT_MAX_BACK, lambda t: src_types(t, _F32, _F32))
def _soft_max_back(t: Tensor) -> None:
    # src0 = dy, src1 = y (soft_max's output): dx = (dy - dot(y, dy)) * y * scale.
    # The allocator may place dx on dy or on y (SOFT_MAX_BACK can run in place), so the
    # result is formed in a temporary and written once; ggml's row loop would overwrite
    # y before reading it when dx sits on y.
    xp = xp_of(t)
    dy, y = arr(t.src[0]), arr(t.src[1])  # type: ignore[arg-type]
    scale = float(t.op_params[0])
    dot = (y * dy).sum(axis=-1, keepdims=True)
    r = dy - dot
    r *= y
    if scale != 1.0:
        r *= np.float32(scale)
    arr(t)[...] = r


# -- masks and norms ------------------------------------------------------------------------------------

def _diag_mask(t: Tensor, value: float) -> None:
    a = t.src[0]
    assert a is not None
    xp = xp_of(t)
    d = arr(t)
    if t.data != a.data:
        xp.copyto(d, arr(a))
    n_past = int(t.op_params[0])
    ne0, ne1 = t.ne[0], t.ne[1]
    cond = xp.arange(ne0)[None, :] > (n_past + xp.arange(ne1))[:, None]
    d[..., cond] = np.float32(value)


@register(Op.DIAG_MASK_INF, only_f32)
def _diag_mask_inf(t: Tensor) -> None:
    _diag_mask(t, -math.inf)


@register(Op.DIAG_MASK_ZERO, only_f32)
def _diag_mask_zero(t: Tensor) -> None:
    _diag_mask(t, 0.0)


@register(Op.NORM, only_f32)
def _norm(t: Tensor) -> None:
    xp = xp_of(t)
    x, d = arr(t.src[0]), arr(t)  # type: ignore[arg-type]
    eps = np.float32(t.op_params[0])
    mean = x.mean(axis=-1, keepdims=True)
    xp.subtract(x, mean, out=d)
    var = (d * d).mean(axis=-1, keepdims=True)
    d *= np.float32(1.0) / xp.sqrt(var + eps)


@register(Op.RMS_NORM, only_f32)
def _rms_norm(t: Tensor) -> None:
    xp = xp_of(t)
    x, d = arr(t.src[0]), arr(t)  # type: ignore[arg-type]
    eps = np.float32(t.op_params[0])
    ms = (x * x).mean(axis=-1, keepdims=True)
    xp.multiply(x, np.float32(1.0) / xp.sqrt(ms + eps), out=d)


@register(Op.RMS_NORM_BACK, lambda t: src_types(t, _F32, _F32))
def _rms_norm_back(t: Tensor) -> None:
    # src0 = dz (gradient), src1 = x: dx = (dz + x * (-sum(x dz) / (sum(x x) + eps n))) / sqrt(mean(x x) + eps)
    xp = xp_of(t)
    dz, x = arr(t.src[0]), arr(t.src[1])  # type: ignore[arg-type]
    eps = np.float32(t.op_params[0])
    n = np.float32(t.ne[0])
    sum_xx = (x * x).sum(axis=-1, keepdims=True)
    sum_xdz = (x * dz).sum(axis=-1, keepdims=True)
    rrms = np.float32(1.0) / xp.sqrt(sum_xx / n + eps)
    scale_x = -sum_xdz / (sum_xx + eps * n)
    d = arr(t)
    r = x * scale_x
    r += dz
    xp.multiply(r, rrms, out=d)


# -- reductions -----------------------------------------------------------------------------------------

@register(Op.SUM, all_float)
def _sum(t: Tensor) -> None:
    d = arr(t)
    d[...] = arr(t.src[0]).sum(dtype=np.float64)  # type: ignore[arg-type]


@register(Op.SUM_ROWS, all_float)
def _sum_rows(t: Tensor) -> None:
    xp = xp_of(t)
    x, d = arr(t.src[0]), arr(t)  # type: ignore[arg-type]
    if x.dtype == F32 and d.dtype == F32:
        xp.sum(x, axis=-1, keepdims=True, out=d)
    else:
        d[...] = x.sum(axis=-1, keepdims=True, dtype=F32)


@register(Op.MEAN, only_f32)
def _mean(t: Tensor) -> None:
    xp = xp_of(t)
    x, d = arr(t.src[0]), arr(t)  # type: ignore[arg-type]
    xp.sum(x, axis=-1, keepdims=True, out=d)
    d /= np.float32(t.src[0].ne[0])  # type: ignore[union-attr]


@register(Op.ARGMAX, only_f32)
def _argmax(t: Tensor) -> None:
    x, d = arr(t.src[0]), arr(t)  # type: ignore[arg-type]
    d[...] = x.argmax(axis=-1).reshape(d.shape)


@register(Op.COUNT_EQUAL, lambda t: src_types(t, {DType.I32}, {DType.I32}))
def _count_equal(t: Tensor) -> None:
    x, y, d = arr(t.src[0]), arr(t.src[1]), arr(t)  # type: ignore[arg-type]
    d[...] = (x == y).sum()


# -- losses -------------------------------------------------------------------------------------------------

def _rows(t: Tensor, x: Any) -> Any:
    """``x`` as (nrows, ne0)."""
    return x.reshape(-1, t.ne[0])


@register(Op.CROSS_ENTROPY_LOSS, lambda t: src_types(t, _F32, _F32))
def _cross_entropy_loss(t: Tensor) -> None:
    xp = xp_of(t)
    a = t.src[0]
    assert a is not None
    x, labels = _rows(a, arr(a)), _rows(a, arr(t.src[1]))  # type: ignore[arg-type]
    nr = x.shape[0]
    sh = x - x.max(axis=-1, keepdims=True)
    lse = xp.log(xp.exp(sh).sum(axis=-1, keepdims=True, dtype=np.float64))
    sh -= lse.astype(F32)
    sh *= labels
    total = sh.sum(dtype=np.float64)
    arr(t)[...] = -total / nr


@register(Op.CROSS_ENTROPY_LOSS_BACK, lambda t: src_types(t, _F32, _F32, _F32))
def _cross_entropy_loss_back(t: Tensor) -> None:
    xp = xp_of(t)
    b = t.src[1]
    assert b is not None
    grad = arr(t.src[0]).reshape(-1)[0]  # type: ignore[arg-type]
    x, labels = _rows(b, arr(b)), _rows(b, arr(t.src[2]))  # type: ignore[arg-type]
    nr = x.shape[0]
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    e -= labels
    e *= (grad / np.float32(nr)).astype(F32)
    arr(t)[...] = e.reshape(arr(t).shape)


# -- optimizer steps ------------------------------------------------------------------------------------------

def _scalars(t: Tensor) -> list[float]:
    return [float(v) for v in arr(t).reshape(-1).tolist()]


@register(Op.OPT_STEP_ADAMW, lambda t: src_types(t, _F32, _F32, _F32, _F32, _F32))
def _opt_step_adamw(t: Tensor) -> None:
    # ggml's loop per element: m = m*beta1 + g*(1 - beta1); v = v*beta2 + g*g*(1 - beta2);
    # mh = m*beta1h; vh = sqrtf(v*beta2h) + eps; w = w*keep - alpha*mh/vh (alpha*mh first),
    # here with every operation rounded once. ggml-python's x86 build contracts the m, v and
    # w updates to FMAs (emulating that reproduces it bit for bit), so ~1% of elements
    # differ in the last bit with wd = 0 (~25% with wd > 0); f64 emulation would cost two
    # weight-sized f64 passes per update. Intermediates go to two reused scratch arrays.
    xp = xp_of(t)
    w, g, m, v = (arr(s) for s in t.src[:4])  # type: ignore[arg-type]
    alpha, beta1, beta2, eps, wd, beta1h, beta2h = (np.float32(p) for p in _scalars(t.src[4]))  # type: ignore[arg-type]
    one = np.float32(1.0)
    keep = one - alpha * wd
    tmp, mh = scratch_f32(xp, w.shape, 0), scratch_f32(xp, w.shape, 1)
    xp.multiply(m, beta1, out=m)
    xp.multiply(g, one - beta1, out=tmp)
    m += tmp
    xp.multiply(v, beta2, out=v)
    xp.multiply(g, g, out=tmp)
    tmp *= one - beta2
    v += tmp
    xp.multiply(m, beta1h, out=mh)
    mh *= alpha
    xp.multiply(v, beta2h, out=tmp)
    xp.sqrt(tmp, out=tmp)
    tmp += eps
    mh /= tmp
    if keep != one:  # w * 1.0f is w, bit for bit
        xp.multiply(w, keep, out=w)
    w -= mh


@register(Op.OPT_STEP_SGD, lambda t: src_types(t, _F32, _F32, _F32))
def _opt_step_sgd(t: Tensor) -> None:
    xp = xp_of(t)
    w, g = arr(t.src[0]), arr(t.src[1])  # type: ignore[arg-type]
    alpha, wd = (np.float32(p) for p in _scalars(t.src[2])[:2])  # type: ignore[arg-type]
    keep = np.float32(1.0) - alpha * wd
    xp.multiply(w, keep, out=w)
    w -= g * alpha


__all__ = ["alibi_slopes"]
