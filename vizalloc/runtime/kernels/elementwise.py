"""Elementwise kernels: add/sub/mul/div with ggml's repetition, add1, scale,
sqr/sqrt/log/sin/cos, the unary functions, silu_back.

f16 follows ggml's CPU backend: each element is widened to f32, computed, and rounded
once. numpy's own float16 loops do exactly that for a single ufunc, so one-ufunc ops run
on f16 directly; composite functions (sigmoid, silu, gelu, ...) compute in an f32
temporary and round once at the end.

GELU matches ggml's default build (``GGML_GELU_FP16``): for f32 input in (-10, 10) the
input is rounded to f16, the tanh approximation is evaluated, and the result is rounded to
f16 (ggml's lookup table holds exactly those values); below -10 gives 0, above 10 gives x.
GELU_QUICK likewise (``GGML_GELU_QUICK_FP16``, no clamp). Measured against ggml-python's
CPU backend the results are bit-identical (tests/runtime/test_kernels_ggml.py); where a
libm's last bit differs, the difference is one f16 step (~1e-3 relative).

    >>> import numpy as np
    >>> from vizalloc.runtime.kernels.elementwise import gelu_f32
    >>> float(gelu_f32(np, np.array([1.0], dtype=np.float32))[0])
    0.84130859375
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vizalloc.runtime.kernels._util import F16, F32, all_float, arr, as_f32, register, split_for_tiling, xp_of
from vizalloc.runtime.tensor import Op, Tensor, UnaryOp

GELU_COEF_A = np.float32(0.044715)
GELU_QUICK_COEF = np.float32(-1.702)
SQRT_2_OVER_PI = np.float32(0.79788456080286535587989211986876)


# -- binary ----------------------------------------------------------------------------------

def _binary(ufunc: str) -> Any:
    def kernel(t: Tensor) -> None:
        a, b = t.src[0], t.src[1]
        assert a is not None and b is not None
        xp = xp_of(t)
        d, x, y = arr(t), arr(a), arr(b)
        if a.ne != b.ne:
            split = split_for_tiling(d.shape, y.shape)
            if split is not None:
                d, x, y = d.reshape(split[0]), x.reshape(split[0]), y.reshape(split[1])
        getattr(xp, ufunc)(x, y, out=d)
    return kernel


for _op, _uf in ((Op.ADD, "add"), (Op.SUB, "subtract"), (Op.MUL, "multiply"), (Op.DIV, "divide")):
    register(_op, all_float)(_binary(_uf))


@register(Op.ADD1, all_float)
def _add1(t: Tensor) -> None:
    xp = xp_of(t)
    xp.add(arr(t.src[0]), arr(t.src[1]), out=arr(t))  # type: ignore[arg-type]


@register(Op.SCALE, all_float)
def _scale(t: Tensor) -> None:
    xp = xp_of(t)
    s, bias = t.op_params[0], t.op_params[1] if len(t.op_params) > 1 else 0.0
    d, x = arr(t), arr(t.src[0])  # type: ignore[arg-type]
    if bias == 0.0:
        xp.multiply(x, np.float32(s), out=d)
    elif d.dtype == F32:
        xp.multiply(x, np.float32(s), out=d)
        xp.add(d, np.float32(bias), out=d)
    else:
        d[...] = as_f32(x) * np.float32(s) + np.float32(bias)


# -- simple one-ufunc ops --------------------------------------------------------------------------

def _ufunc(name: str) -> Any:
    def kernel(t: Tensor) -> None:
        getattr(xp_of(t), name)(arr(t.src[0]), out=arr(t))  # type: ignore[arg-type]
    return kernel


for _op, _uf in ((Op.SQR, "square"), (Op.SQRT, "sqrt"), (Op.LOG, "log"), (Op.SIN, "sin"), (Op.COS, "cos")):
    register(_op, all_float)(_ufunc(_uf))


# -- unary functions ---------------------------------------------------------------------------------
# Each takes (xp, x, d) with f32 arrays; d may be x itself (in place), so every function
# reads x fully before overwriting d or works elementwise in the same order.

def gelu_f32(xp: Any, x: Any) -> Any:
    """ggml's GELU for f32 input, f16-table precision (see the module docstring)."""
    xh = x.astype(F16).astype(F32)
    y = _gelu_formula(xp, xh).astype(F16).astype(F32)
    y = xp.where(x >= np.float32(10.0), x, y)
    return xp.where(x <= np.float32(-10.0), np.float32(0.0), y)


def _gelu_formula(xp: Any, x: Any) -> Any:
    """``ggml_gelu_f32`` in f32 arithmetic, C's order of operations. ``tanhf`` is taken as
    the f64 tanh rounded to f32 (glibc's tanhf is that close; numpy's f32 tanh is not):
    measured bit-identical to ggml's table on 2400 inputs."""
    inner = SQRT_2_OVER_PI * x * (np.float32(1.0) + GELU_COEF_A * x * x)
    th = xp.tanh(inner.astype(np.float64)).astype(F32)
    return np.float32(0.5) * x * (np.float32(1.0) + th)


def _gelu_quick_formula(xp: Any, x: Any) -> Any:
    return x * (np.float32(1.0) / (np.float32(1.0) + xp.exp(GELU_QUICK_COEF * x)))


def _u_sigmoid(xp: Any, x: Any, d: Any) -> None:
    xp.negative(x, out=d)
    xp.exp(d, out=d)
    xp.add(d, np.float32(1.0), out=d)
    xp.reciprocal(d, out=d)


def _u_silu(xp: Any, x: Any, d: Any) -> None:
    den = xp.exp(-x)
    den += np.float32(1.0)
    xp.divide(x, den, out=d)


def _u_gelu(xp: Any, x: Any, d: Any) -> None:
    d[...] = gelu_f32(xp, x)


def _u_gelu_quick(xp: Any, x: Any, d: Any) -> None:
    xh = x.astype(F16).astype(F32)
    d[...] = _gelu_quick_formula(xp, xh).astype(F16)


def _u_elu(xp: Any, x: Any, d: Any) -> None:
    d[...] = xp.where(x > 0, x, xp.expm1(x))


def _u_step(xp: Any, x: Any, d: Any) -> None:
    d[...] = x > 0


def _u_hardsigmoid(xp: Any, x: Any, d: Any) -> None:
    d[...] = xp.minimum(np.float32(1.0), xp.maximum(np.float32(0.0), (x + np.float32(3.0)) / np.float32(6.0)))


def _u_hardswish(xp: Any, x: Any, d: Any) -> None:
    d[...] = x * xp.minimum(np.float32(1.0), xp.maximum(np.float32(0.0), (x + np.float32(3.0)) / np.float32(6.0)))


def _u_relu(xp: Any, x: Any, d: Any) -> None:
    xp.maximum(x, np.float32(0.0), out=d)


# one-ufunc functions run directly on f16 (numpy rounds once, as ggml does)
_DIRECT: dict[UnaryOp, str] = {
    UnaryOp.ABS: "abs", UnaryOp.SGN: "sign", UnaryOp.NEG: "negative", UnaryOp.TANH: "tanh",
    UnaryOp.EXP: "exp",
}
_COMPOSITE: dict[UnaryOp, Any] = {
    UnaryOp.RELU: _u_relu, UnaryOp.SIGMOID: _u_sigmoid, UnaryOp.SILU: _u_silu, UnaryOp.GELU: _u_gelu,
    UnaryOp.GELU_QUICK: _u_gelu_quick, UnaryOp.ELU: _u_elu, UnaryOp.STEP: _u_step,
    UnaryOp.HARDSIGMOID: _u_hardsigmoid, UnaryOp.HARDSWISH: _u_hardswish,
}


def _unary_supported(t: Tensor) -> bool:
    fn = t.op_params[0] if t.op_params else None
    return all_float(t) and (fn in _DIRECT or fn in _COMPOSITE)


@register(Op.UNARY, _unary_supported)
def _unary(t: Tensor) -> None:
    fn = t.op_params[0]
    xp = xp_of(t)
    d, x = arr(t), arr(t.src[0])  # type: ignore[arg-type]
    direct = _DIRECT.get(fn)
    if direct is not None:
        getattr(xp, direct)(x, out=d)
        return
    if fn is UnaryOp.GELU and x.dtype == F16:
        # ggml's f16 path is a pure table lookup: gelu of the f16 value, rounded to f16
        d[...] = _gelu_formula(xp, x.astype(F32))
        return
    if d.dtype == F32 and x.dtype == F32:
        _COMPOSITE[fn](xp, x, d)
    else:
        tmp = x.astype(F32)
        _COMPOSITE[fn](xp, tmp, tmp)
        d[...] = tmp


@register(Op.SILU_BACK, all_float)
def _silu_back(t: Tensor) -> None:
    # src0 = gradient dy, src1 = silu's input x: dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x)
    dy, x = as_f32(arr(t.src[0])), as_f32(arr(t.src[1]))  # type: ignore[arg-type]
    xp = xp_of(t)
    s = xp.exp(-x)
    s += np.float32(1.0)
    xp.reciprocal(s, out=s)
    r = x * (np.float32(1.0) - s)
    r += np.float32(1.0)
    r *= s
    d = arr(t)
    if d.dtype == F32:
        xp.multiply(dy, r, out=d)
    else:
        d[...] = dy * r


__all__ = ["gelu_f32"]
