"""Neural-network ops: mul_mat, out_prod, soft_max (+ext, +back), diag masks, norm,
rms_norm (+back), cross-entropy loss (+back), and the optimizer steps.

    >>> from vizalloc.runtime import Context, F32, ops
    >>> ctx = Context(); w = ctx.new_tensor_2d(F32, 784, 128); x = ctx.new_tensor_2d(F32, 784, 32)
    >>> ops.mul_mat(ctx, w, x).ne      # [a.ne1, b.ne1] = (x @ w.T) in numpy terms
    (128, 32, 1, 1)
"""

from __future__ import annotations

from vizalloc.errors import GraphError
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.ops._common import (
    alive, are_same_shape, dup_or_view, fail, is_contiguous, is_scalar, is_transposed, nelements, new_result,
    view_result,
)
from vizalloc.runtime.tensor import Flag, Op, Tensor


# -- matrix products ---------------------------------------------------------------------------

def mul_mat(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_mul_mat``: f32 ``[a.ne1, b.ne1, b.ne2, b.ne3]``; per matrix ``b @ a^T``.

    ``a`` is broadcast over dimensions 2 and 3 (``b.ne[i] % a.ne[i] == 0``).
    """
    alive(a, b)
    if a.ne[0] != b.ne[0]:
        raise fail("mul_mat", f"a.ne[0] ({a.ne[0]}) must equal b.ne[0] ({b.ne[0]}): both are the shared dimension",
                   a=a, b=b)
    if b.ne[2] % a.ne[2] or b.ne[3] % a.ne[3]:
        raise fail("mul_mat", "a cannot be broadcast over b's dimensions 2 and 3 (b.ne[i] % a.ne[i] != 0)",
                   a=a, b=b)
    if is_transposed(a):
        raise fail("mul_mat", f"a must not be transposed (nb[0]={a.nb[0]} > nb[1]={a.nb[1]}); use ops.cont first",
                   a=a)
    return new_result(ctx, DType.F32, (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), Op.MUL_MAT, [a, b])


def out_prod(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_out_prod``: f32 ``[a.ne0, b.ne0, b.ne2, b.ne3]``; per matrix ``b^T @ a`` (numpy order)."""
    alive(a, b)
    if a.ne[1] != b.ne[1]:
        raise fail("out_prod", f"a.ne[1] ({a.ne[1]}) must equal b.ne[1] ({b.ne[1]})", a=a, b=b)
    if b.ne[2] % a.ne[2] or b.ne[3] % a.ne[3]:
        raise fail("out_prod", "a cannot be broadcast over b's dimensions 2 and 3", a=a, b=b)
    if is_transposed(a):
        raise fail("out_prod", "a must not be transposed", a=a)
    return new_result(ctx, DType.F32, (a.ne[0], b.ne[0], b.ne[2], b.ne[3]), Op.OUT_PROD, [a, b])


# -- soft max -------------------------------------------------------------------------------------

def _soft_max_impl(ctx: Context, a: Tensor, mask: Tensor | None, scale: float, max_bias: float,
                   inplace: bool, opname: str) -> Tensor:
    alive(a, mask)
    if not is_contiguous(a):
        raise fail(opname, "a must be contiguous", a=a)
    if mask is not None:
        if mask.type not in (DType.F16, DType.F32):
            raise fail(opname, "mask must be f16 or f32", mask=mask)
        if not is_contiguous(mask):
            raise fail(opname, "mask must be contiguous", mask=mask)
        if mask.ne[0] != a.ne[0] or mask.ne[1] < a.ne[1]:
            raise fail(opname, "need mask.ne[0] == a.ne[0] and mask.ne[1] >= a.ne[1]", a=a, mask=mask)
        if a.ne[2] % mask.ne[2] or a.ne[3] % mask.ne[3]:
            raise fail(opname, "mask cannot be broadcast over a's dimensions 2 and 3", a=a, mask=mask)
    if max_bias > 0.0 and mask is None:
        raise fail(opname, f"max_bias {max_bias} > 0 (ALiBi) needs a mask", a=a)
    return dup_or_view(ctx, a, inplace, Op.SOFT_MAX, [a, mask], (float(scale), float(max_bias)))


def soft_max(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_soft_max`` over each row (dimension 0)."""
    return _soft_max_impl(ctx, a, None, 1.0, 0.0, False, "soft_max")


def soft_max_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _soft_max_impl(ctx, a, None, 1.0, 0.0, True, "soft_max_inplace")


def soft_max_ext(ctx: Context, a: Tensor, mask: Tensor | None, scale: float, max_bias: float) -> Tensor:
    """``ggml_soft_max_ext``: ``soft_max(a * scale + slope * mask)``; the mask's rows broadcast,
    its dimensions 2, 3 tile over ``a``'s; ``max_bias > 0`` gives ALiBi slopes per head (dimension 2)."""
    return _soft_max_impl(ctx, a, mask, scale, max_bias, False, "soft_max_ext")


def soft_max_ext_inplace(ctx: Context, a: Tensor, mask: Tensor | None, scale: float, max_bias: float) -> Tensor:
    return _soft_max_impl(ctx, a, mask, scale, max_bias, True, "soft_max_ext_inplace")


def _soft_max_ext_back_impl(ctx: Context, a: Tensor, b: Tensor, scale: float, max_bias: float,
                            inplace: bool) -> Tensor:
    alive(a, b)
    if not are_same_shape(a, b):
        raise fail("soft_max_ext_back", "a (the gradient) and b (soft_max's output) must have the same shape",
                   a=a, b=b)
    return dup_or_view(ctx, a, inplace, Op.SOFT_MAX_BACK, [a, b], (float(scale), float(max_bias)))


def soft_max_ext_back(ctx: Context, a: Tensor, b: Tensor, scale: float, max_bias: float) -> Tensor:
    """``ggml_soft_max_ext_back(grad, y, scale, max_bias)``: op SOFT_MAX_BACK."""
    return _soft_max_ext_back_impl(ctx, a, b, scale, max_bias, False)


def soft_max_ext_back_inplace(ctx: Context, a: Tensor, b: Tensor, scale: float, max_bias: float) -> Tensor:
    return _soft_max_ext_back_impl(ctx, a, b, scale, max_bias, True)


# -- masks and norms ----------------------------------------------------------------------------------

def _diag_mask(ctx: Context, a: Tensor, n_past: int, op: Op, inplace: bool) -> Tensor:
    alive(a)
    return dup_or_view(ctx, a, inplace, op, [a], (int(n_past),))


def diag_mask_inf(ctx: Context, a: Tensor, n_past: int) -> Tensor:
    """``ggml_diag_mask_inf``: elements with column ``i > n_past + row`` become -inf."""
    return _diag_mask(ctx, a, n_past, Op.DIAG_MASK_INF, False)


def diag_mask_inf_inplace(ctx: Context, a: Tensor, n_past: int) -> Tensor:
    return _diag_mask(ctx, a, n_past, Op.DIAG_MASK_INF, True)


def diag_mask_zero(ctx: Context, a: Tensor, n_past: int) -> Tensor:
    """``ggml_diag_mask_zero``: elements with column ``i > n_past + row`` become 0."""
    return _diag_mask(ctx, a, n_past, Op.DIAG_MASK_ZERO, False)


def diag_mask_zero_inplace(ctx: Context, a: Tensor, n_past: int) -> Tensor:
    return _diag_mask(ctx, a, n_past, Op.DIAG_MASK_ZERO, True)


def norm(ctx: Context, a: Tensor, eps: float) -> Tensor:
    """``ggml_norm``: each row minus its mean, over its standard deviation (``eps`` inside the root)."""
    alive(a)
    return dup_or_view(ctx, a, False, Op.NORM, [a], (float(eps),))


def norm_inplace(ctx: Context, a: Tensor, eps: float) -> Tensor:
    alive(a)
    return dup_or_view(ctx, a, True, Op.NORM, [a], (float(eps),))


def rms_norm(ctx: Context, a: Tensor, eps: float) -> Tensor:
    """``ggml_rms_norm``: each row over the root of its mean square plus ``eps``."""
    alive(a)
    return dup_or_view(ctx, a, False, Op.RMS_NORM, [a], (float(eps),))


def rms_norm_inplace(ctx: Context, a: Tensor, eps: float) -> Tensor:
    alive(a)
    return dup_or_view(ctx, a, True, Op.RMS_NORM, [a], (float(eps),))


def rms_norm_back(ctx: Context, a: Tensor, b: Tensor, eps: float) -> Tensor:
    """``ggml_rms_norm_back(grad, x, eps)``: the gradient of rms_norm at ``x = b``."""
    alive(a, b)
    if not are_same_shape(a, b):
        raise fail("rms_norm_back", "a (the gradient) and b (rms_norm's input) must have the same shape", a=a, b=b)
    return dup_or_view(ctx, a, False, Op.RMS_NORM_BACK, [a, b], (float(eps),))


# -- loss -------------------------------------------------------------------------------------------

def cross_entropy_loss(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_cross_entropy_loss(logits, labels)``: one element, ``-sum(log_softmax(a) * b) / nrows``."""
    alive(a, b)
    if not are_same_shape(a, b):
        raise fail("cross_entropy_loss", "logits a and labels b must have the same shape", a=a, b=b)
    return new_result(ctx, a.type, (1,), Op.CROSS_ENTROPY_LOSS, [a, b])


def cross_entropy_loss_back(ctx: Context, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """``ggml_cross_entropy_loss_back(grad, logits, labels)``: ``(softmax(b) - c) * grad / nrows``."""
    alive(a, b, c)
    if not is_scalar(a):
        raise fail("cross_entropy_loss_back", "a (the loss gradient) must be a scalar", a=a)
    if not are_same_shape(b, c):
        raise fail("cross_entropy_loss_back", "logits b and labels c must have the same shape", b=b, c=c)
    return new_result(ctx, b.type, b.ne, Op.CROSS_ENTROPY_LOSS_BACK, [a, b, c])


# -- optimizer steps -----------------------------------------------------------------------------------

def _check_param(opname: str, a: Tensor) -> None:
    if not a.flags & Flag.PARAM:
        raise GraphError(f"{opname}: tensor {a.name or a.id!r} is not a parameter; call set_param on it first")


def opt_step_adamw(ctx: Context, a: Tensor, grad: Tensor, m: Tensor, v: Tensor, params: Tensor) -> Tensor:
    """``ggml_opt_step_adamw``: updates ``a``, ``m``, ``v`` in place; the result is a view of ``a``.

    ``params`` is f32 with 7 elements: alpha, beta1, beta2, eps, wd, beta1h, beta2h.
    """
    alive(a, grad, m, v, params)
    _check_param("opt_step_adamw", a)
    for role, t in (("grad", grad), ("m", m), ("v", v)):
        if not are_same_shape(a, t):
            raise fail("opt_step_adamw", f"{role} must have a's shape", a=a, **{role: t})
    if params.type is not DType.F32 or nelements(params) != 7:
        raise fail("opt_step_adamw", "params must be f32 with 7 elements (alpha, beta1, beta2, eps, wd, "
                   "beta1h, beta2h)", params=params)
    return view_result(ctx, a, Op.OPT_STEP_ADAMW, [a, grad, m, v, params])


def opt_step_sgd(ctx: Context, a: Tensor, grad: Tensor, params: Tensor) -> Tensor:
    """``ggml_opt_step_sgd``: ``a = a * (1 - alpha * wd) - alpha * grad``; ``params`` = f32 (alpha, wd)."""
    alive(a, grad, params)
    _check_param("opt_step_sgd", a)
    if not are_same_shape(a, grad):
        raise fail("opt_step_sgd", "grad must have a's shape", a=a, grad=grad)
    if params.type is not DType.F32 or nelements(params) != 2:
        raise fail("opt_step_sgd", "params must be f32 with 2 elements (alpha, wd)", params=params)
    return view_result(ctx, a, Op.OPT_STEP_SGD, [a, grad, params])


__all__ = [
    "cross_entropy_loss", "cross_entropy_loss_back", "diag_mask_inf", "diag_mask_inf_inplace", "diag_mask_zero",
    "diag_mask_zero_inplace", "mul_mat", "norm", "norm_inplace", "opt_step_adamw", "opt_step_sgd", "out_prod",
    "rms_norm", "rms_norm_back", "rms_norm_inplace", "soft_max", "soft_max_ext", "soft_max_ext_back",
    "soft_max_ext_back_inplace", "soft_max_ext_inplace", "soft_max_inplace",
]
