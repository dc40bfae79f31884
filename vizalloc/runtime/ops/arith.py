"""Elementwise ops: add/sub/mul/div with ggml's repeat-broadcasting, add1, scale,
sqr/sqrt/log/sin/cos, the unary functions, silu_back — each with its ``_inplace`` variant
where ggml has one (a ``ggml_view_tensor`` of ``a`` carrying the op).

    >>> from vizalloc.runtime import Context, F32, UnaryOp, ops
    >>> ctx = Context(); x = ctx.new_tensor_2d(F32, 4, 3, name="x"); b = ctx.new_tensor_1d(F32, 4)
    >>> y = ops.add_inplace(ctx, x, b)
    >>> y.op.name, y.name, y.view_src is x
    ('ADD', 'x (view)', True)
    >>> ops.unary(ctx, x, UnaryOp.GELU).op_params
    (UnaryOp.GELU,)
"""

from __future__ import annotations

from vizalloc.runtime.context import Context
from vizalloc.runtime.ops._common import (
    alive, are_same_shape, can_repeat, dup_or_view, fail, is_contiguous_rows, is_padded_1d, is_scalar,
)
from vizalloc.runtime.tensor import Op, Tensor, UnaryOp


# -- binary with broadcasting ------------------------------------------------------------

def _binary(ctx: Context, a: Tensor, b: Tensor, op: Op, inplace: bool) -> Tensor:
    alive(a, b)
    if not can_repeat(b, a):
        name = op.name.lower() + ("_inplace" if inplace else "")
        raise fail(
            name, "cannot broadcast b into a: every dimension of a must be a multiple of b's (ggml_can_repeat)",
            a=a, b=b,
        )
    return dup_or_view(ctx, a, inplace, op, [a, b])


def add(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_add``: ``a + b``, ``b`` tiled over ``a`` (result has ``a``'s type and shape)."""
    return _binary(ctx, a, b, Op.ADD, False)


def add_inplace(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    return _binary(ctx, a, b, Op.ADD, True)


def sub(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_sub``: ``a - b`` with ``b`` tiled over ``a``."""
    return _binary(ctx, a, b, Op.SUB, False)


def sub_inplace(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    return _binary(ctx, a, b, Op.SUB, True)


def mul(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_mul``: ``a * b`` elementwise with ``b`` tiled over ``a``."""
    return _binary(ctx, a, b, Op.MUL, False)


def mul_inplace(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    return _binary(ctx, a, b, Op.MUL, True)


def div(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_div``: ``a / b`` with ``b`` tiled over ``a``."""
    return _binary(ctx, a, b, Op.DIV, False)


def div_inplace(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    return _binary(ctx, a, b, Op.DIV, True)


def _add1(ctx: Context, a: Tensor, b: Tensor, inplace: bool) -> Tensor:
    alive(a, b)
    name = "add1_inplace" if inplace else "add1"
    if not is_scalar(b):
        raise fail(name, "b must be a scalar (one element)", a=a, b=b)
    if not is_padded_1d(a):
        raise fail(name, f"a must have packed rows (strides {list(a.nb)})", a=a)
    return dup_or_view(ctx, a, inplace, Op.ADD1, [a, b])


def add1(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_add1``: add the scalar tensor ``b`` to every element of ``a``."""
    return _add1(ctx, a, b, False)


def add1_inplace(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    return _add1(ctx, a, b, True)


# -- scale -------------------------------------------------------------------------------

def _scale(ctx: Context, a: Tensor, s: float, bias: float, inplace: bool) -> Tensor:
    alive(a)
    if not is_padded_1d(a):
        raise fail("scale", f"a must have packed rows (strides {list(a.nb)})", a=a)
    return dup_or_view(ctx, a, inplace, Op.SCALE, [a], (float(s), float(bias)))


def scale(ctx: Context, a: Tensor, s: float) -> Tensor:
    """``ggml_scale``: ``a * s`` (op params ``(s, 0.0)``)."""
    return _scale(ctx, a, s, 0.0, False)


def scale_inplace(ctx: Context, a: Tensor, s: float) -> Tensor:
    return _scale(ctx, a, s, 0.0, True)


def scale_bias(ctx: Context, a: Tensor, s: float, b: float) -> Tensor:
    """``ggml_scale_bias``: ``a * s + b``."""
    return _scale(ctx, a, s, b, False)


def scale_bias_inplace(ctx: Context, a: Tensor, s: float, b: float) -> Tensor:
    return _scale(ctx, a, s, b, True)


# -- simple unary ops with their own op code -------------------------------------------------

def _simple(ctx: Context, a: Tensor, op: Op, inplace: bool) -> Tensor:
    alive(a)
    return dup_or_view(ctx, a, inplace, op, [a])


def sqr(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_sqr``: ``a * a``."""
    return _simple(ctx, a, Op.SQR, False)


def sqr_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _simple(ctx, a, Op.SQR, True)


def sqrt(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_sqrt``."""
    return _simple(ctx, a, Op.SQRT, False)


def sqrt_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _simple(ctx, a, Op.SQRT, True)


def log(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_log`` (natural logarithm)."""
    return _simple(ctx, a, Op.LOG, False)


def log_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _simple(ctx, a, Op.LOG, True)


def sin(ctx: Context, a: Tensor) -> Tensor:
    return _simple(ctx, a, Op.SIN, False)


def sin_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _simple(ctx, a, Op.SIN, True)


def cos(ctx: Context, a: Tensor) -> Tensor:
    return _simple(ctx, a, Op.COS, False)


def cos_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _simple(ctx, a, Op.COS, True)


# -- op UNARY ------------------------------------------------------------------------------------

def _unary(ctx: Context, a: Tensor, fn: UnaryOp, inplace: bool) -> Tensor:
    alive(a)
    if not isinstance(fn, UnaryOp):
        raise fail("unary", f"{fn!r} is not a UnaryOp", a=a)
    if not is_contiguous_rows(a):
        raise fail(f"unary {fn.name}", f"a's rows must be packed (nb[0] == {a.type.type_size})", a=a)
    return dup_or_view(ctx, a, inplace, Op.UNARY, [a], (fn,))


def unary(ctx: Context, a: Tensor, fn: UnaryOp) -> Tensor:
    """``ggml_unary``: op UNARY with ``op_params = (fn,)``."""
    return _unary(ctx, a, fn, False)


def unary_inplace(ctx: Context, a: Tensor, fn: UnaryOp) -> Tensor:
    return _unary(ctx, a, fn, True)


def abs(ctx: Context, a: Tensor) -> Tensor:  # noqa: A001
    return _unary(ctx, a, UnaryOp.ABS, False)


def abs_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.ABS, True)


def sgn(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.SGN, False)


def sgn_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.SGN, True)


def neg(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.NEG, False)


def neg_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.NEG, True)


def step(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.STEP, False)


def step_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.STEP, True)


def tanh(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.TANH, False)


def tanh_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.TANH, True)


def elu(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.ELU, False)


def elu_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.ELU, True)


def relu(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.RELU, False)


def relu_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.RELU, True)


def sigmoid(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.SIGMOID, False)


def sigmoid_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.SIGMOID, True)


def gelu(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.GELU, False)


def gelu_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.GELU, True)


def gelu_quick(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.GELU_QUICK, False)


def gelu_quick_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.GELU_QUICK, True)


def silu(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.SILU, False)


def silu_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.SILU, True)


def hardswish(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.HARDSWISH, False)


def hardsigmoid(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.HARDSIGMOID, False)


def exp(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.EXP, False)


def exp_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _unary(ctx, a, UnaryOp.EXP, True)


def silu_back(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_silu_back(grad, x)``: the gradient of silu at ``x = b`` times ``grad = a``."""
    alive(a, b)
    if not are_same_shape(a, b):
        raise fail("silu_back", "a (the gradient) and b (silu's input) must have the same shape", a=a, b=b)
    return dup_or_view(ctx, a, False, Op.SILU_BACK, [a, b])


__all__ = [
    "abs", "abs_inplace", "add", "add1", "add1_inplace", "add_inplace", "cos", "cos_inplace", "div", "div_inplace",
    "elu", "elu_inplace", "exp", "exp_inplace", "gelu", "gelu_inplace", "gelu_quick", "gelu_quick_inplace",
    "hardsigmoid", "hardswish", "log", "log_inplace", "mul", "mul_inplace", "neg", "neg_inplace", "relu",
    "relu_inplace", "scale", "scale_bias", "scale_bias_inplace", "scale_inplace", "sgn", "sgn_inplace", "sigmoid",
    "sigmoid_inplace", "silu", "silu_back", "silu_inplace", "sin", "sin_inplace", "sqr", "sqr_inplace", "sqrt",
    "sqrt_inplace", "step", "step_inplace", "sub", "sub_inplace", "tanh", "tanh_inplace", "unary", "unary_inplace",
]
