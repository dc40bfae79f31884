"""Every kernel against a plain numpy reference: random shapes (seeded), broadcasting,
non-contiguous sources (transposed, permuted, strided views) and f16.

The references are written independently of the kernels (explicit tiling with np.tile,
explicit loops for batched products) and work in float64 where that is simpler.
Buffers are filled with garbage before inputs are set, so an element a kernel forgets to
write shows up as a mismatch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vizalloc.errors import BackendError
from vizalloc.runtime import F16, F32, I32, Context, DType, Graph, Op, UnaryOp, ops, set_param
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.kernels import compute_forward, has_kernel
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_array, tensor_set
from vizalloc.runtime.tensor import Tensor

GARBAGE = 0x7F  # f32 3.39e38, f16 NaN: an unwritten element cannot pass


def as4(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.reshape((1,) * (4 - x.ndim) + x.shape)


class Rig:
    """A context whose tensors get one CPU buffer; runs a graph node by node."""

    def __init__(self) -> None:
        self.ctx = Context(name="rig")
        self.inputs: list[tuple[Tensor, np.ndarray]] = []
        self.rng = np.random.default_rng(1234)

    def tensor(self, values: Any, dtype: DType = F32, name: str = "") -> Tensor:
        v = np.asarray(values)
        ne = tuple(reversed(v.shape)) or (1,)
        t = self.ctx.new_tensor_impl(dtype, ne, name=name)
        self.inputs.append((t, v.astype(dtype.numpy)))
        return t

    def rand(self, *shape: int, dtype: DType = F32, lo: float = -2.0, hi: float = 2.0) -> tuple[Tensor, np.ndarray]:
        """A tensor of numpy shape ``shape`` and its values (rounded to ``dtype``), as a 4-d array."""
        v = self.rng.uniform(lo, hi, size=shape).astype(dtype.numpy)
        return self.tensor(v, dtype), as4(v)

    def run(self, *outs: Tensor) -> list[np.ndarray]:
        buf = alloc_ctx_tensors(self.ctx, BufferType("CPU"))
        assert buf is not None and not isinstance(buf, list)
        buf.clear(GARBAGE)
        for t, v in self.inputs:
            tensor_set(t, v)
        g = Graph()
        for o in outs:
            g.build_forward_expand(o)
        for n in g.nodes:
            compute_forward(n)
        return [tensor_array(o).copy() for o in outs]


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


def tile_to(b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.tile(b, tuple(s // n for s, n in zip(shape, b.shape)))


# -- binary ops ---------------------------------------------------------------------------------

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("bshape", [(3, 2, 4, 6), (1, 1, 1, 6), (3, 1, 4, 1), (1, 2, 2, 3), (3, 2, 1, 2), (1, 1, 1, 1)])
def test_binary_repeats_b_by_modulo(name: str, bshape: tuple[int, ...]) -> None:
    r = Rig()
    a, av = r.rand(3, 2, 4, 6)
    b, bv = r.rand(*bshape, lo=0.5, hi=2.0)
    (got,) = r.run(getattr(ops, name)(r.ctx, a, b))
    close(got, BINARY[name](av, tile_to(bv, av.shape)))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3]), min_size=4, max_size=4),
       st.lists(st.sampled_from([1, 2]), min_size=4, max_size=4))
def test_binary_broadcast_property(small: list[int], reps: list[int]) -> None:
    r = Rig()
    big = tuple(s * k for s, k in zip(small, reps))
    a, av = r.rand(*big)
    b, bv = r.rand(*small)
    (got,) = r.run(ops.mul(r.ctx, a, b))
    close(got, av * tile_to(bv, big))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_on_non_contiguous_views(name: str) -> None:
    r = Rig()
    base, bv = r.rand(5, 7)
    other, ov = r.rand(2, 7, 5, lo=0.5, hi=2.0)
    a = ops.transpose(r.ctx, base)                                     # (7, 5) view, nb0 > nb1
    b = ops.view_2d(r.ctx, other, 5, 7, other.nb[1] * 2, other.nb[1])  # every other row, offset one row
    (got,) = r.run(getattr(ops, name)(r.ctx, a, b))
    rows = ov.reshape(14, 5)[1::2]  # offset one row, stride two rows
    close(got, as4(BINARY[name](bv[0, 0].T, rows)))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_f16_rounds_once(name: str) -> None:
    r = Rig()
    a, av = r.rand(4, 9, dtype=F16)
    b, bv = r.rand(9, dtype=F16, lo=0.5, hi=2.0)
    (got,) = r.run(getattr(ops, name)(r.ctx, a, b))
    want = BINARY[name](av.astype(np.float32), bv.astype(np.float32)).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)


def test_add_f16_plus_f32_into_f16() -> None:
    r = Rig()
    a, av = r.rand(3, 5, dtype=F16)
    b, bv = r.rand(3, 5)
    (got,) = r.run(ops.add(r.ctx, a, b))
    np.testing.assert_array_equal(got, (av.astype(np.float32) + bv).astype(np.float16))


def test_add1_and_scale() -> None:
    r = Rig()
    a, av = r.rand(2, 3, 4)
    s = r.tensor(np.array([0.75], dtype=np.float32))
    outs = r.run(ops.add1(r.ctx, a, s), ops.scale(r.ctx, a, -1.5), ops.scale_bias(r.ctx, a, 2.0, 0.25))
    close(outs[0], av + 0.75)
    close(outs[1], av * -1.5)
    close(outs[2], av * 2.0 + 0.25)


# -- unary ops ---------------------------------------------------------------------------------------

def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * x * (1 + 0.044715 * x * x)))


UNARY_REF = {
    UnaryOp.ABS: np.abs, UnaryOp.SGN: np.sign, UnaryOp.NEG: np.negative, UnaryOp.STEP: lambda x: (x > 0) * 1.0,
    UnaryOp.TANH: np.tanh, UnaryOp.ELU: lambda x: np.where(x > 0, x, np.expm1(x)),
    UnaryOp.RELU: lambda x: np.maximum(x, 0), UnaryOp.SIGMOID: lambda x: 1 / (1 + np.exp(-x)),
    UnaryOp.GELU: _gelu, UnaryOp.GELU_QUICK: lambda x: x / (1 + np.exp(-1.702 * x)),
    UnaryOp.SILU: lambda x: x / (1 + np.exp(-x)), UnaryOp.EXP: np.exp,
    UnaryOp.HARDSIGMOID: lambda x: np.clip((x + 3) / 6, 0, 1), UnaryOp.HARDSWISH: lambda x: x * np.clip((x + 3) / 6, 0, 1),
}
# GELU and GELU_QUICK go through ggml's f16 table: ~1e-3 relative
UNARY_TOL = {UnaryOp.GELU: (2e-3, 2e-3), UnaryOp.GELU_QUICK: (2e-3, 2e-3)}


@pytest.mark.parametrize("fn", list(UnaryOp), ids=lambda u: u.name)
def test_unary_f32(fn: UnaryOp) -> None:
    r = Rig()
    a, av = r.rand(3, 4, 17, lo=-4, hi=4)
    (got,) = r.run(ops.unary(r.ctx, a, fn))
    rtol, atol = UNARY_TOL.get(fn, (2e-6, 1e-6))
    close(got, UNARY_REF[fn](av.astype(np.float64)), rtol=rtol, atol=atol)


@pytest.mark.parametrize("fn", list(UnaryOp), ids=lambda u: u.name)
def test_unary_f16_and_inplace_and_permuted(fn: UnaryOp) -> None:
    r = Rig()
    h, hv = r.rand(6, 10, dtype=F16, lo=-3, hi=3)
    base, bv = r.rand(2, 5, 3, 8, lo=-3, hi=3)
    perm = ops.permute(r.ctx, base, 0, 2, 1, 3)  # keeps rows packed, shuffles the outer strides
    inplace_src, iv = r.rand(4, 8, lo=-3, hi=3)
    outs = r.run(ops.unary(r.ctx, h, fn), ops.unary(r.ctx, perm, fn), ops.unary_inplace(r.ctx, inplace_src, fn))
    want16 = UNARY_REF[fn](hv.astype(np.float64)).astype(np.float16)
    assert outs[0].dtype == np.float16
    close(outs[0], want16, rtol=2e-3, atol=2e-3)
    rtol, atol = UNARY_TOL.get(fn, (2e-6, 1e-6))
    close(outs[1], UNARY_REF[fn](bv.transpose(0, 2, 1, 3).astype(np.float64)), rtol=rtol, atol=atol)
    close(outs[2], UNARY_REF[fn](iv.astype(np.float64)), rtol=rtol, atol=atol)


def test_gelu_uses_ggml_f16_table_rules() -> None:
    r = Rig()
    x = np.array([-12.0, -10.0, -9.99, -0.3, 0.0, 1e-4, 0.5, 1.0, 9.99, 10.0, 25.0], dtype=np.float32)
    a = r.tensor(x)
    (got,) = r.run(ops.gelu(r.ctx, a))
    got = got.reshape(-1)
    assert got[0] == 0.0 and got[1] == 0.0      # x <= -10 -> 0
    assert got[9] == 10.0 and got[10] == 25.0   # x >= 10 -> x
    inside = _gelu(x[2:9].astype(np.float16).astype(np.float64)).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(got[2:9], inside, rtol=1e-3, atol=1e-6)
    # the table result is f16-exact: representable in f16 without change
    np.testing.assert_array_equal(got[2:9].astype(np.float16).astype(np.float32), got[2:9])


@pytest.mark.parametrize("name,ref", [("sqr", np.square), ("sqrt", np.sqrt), ("log", np.log), ("sin", np.sin),
                                      ("cos", np.cos)])
def test_simple_math(name: str, ref: Any) -> None:
    r = Rig()
    a, av = r.rand(2, 3, 11, lo=0.1, hi=3.0)
    h, hv = r.rand(3, 11, dtype=F16, lo=0.1, hi=3.0)
    outs = r.run(getattr(ops, name)(r.ctx, a), getattr(ops, f"{name}_inplace")(r.ctx, h))
    close(outs[0], ref(av.astype(np.float64)), rtol=2e-6)
    np.testing.assert_allclose(outs[1].astype(np.float64), ref(hv.astype(np.float64)), rtol=1e-3)


def test_silu_back() -> None:
    r = Rig()
    g, gv = r.rand(3, 9)
    x, xv = r.rand(3, 9, lo=-4, hi=4)
    (got,) = r.run(ops.silu_back(r.ctx, g, x))
    s = 1 / (1 + np.exp(-xv.astype(np.float64)))
    close(got, gv * s * (1 + xv * (1 - s)), rtol=1e-5)


# -- copies and layout -------------------------------------------------------------------------------------

def test_cont_of_transposed_and_permuted() -> None:
    r = Rig()
    a, av = r.rand(2, 3, 4, 5)
    outs = r.run(ops.cont(r.ctx, ops.transpose(r.ctx, a)), ops.cont(r.ctx, ops.permute(r.ctx, a, 2, 0, 3, 1)),
                 ops.cont_2d(r.ctx, ops.transpose(r.ctx, a), 12, 10))
    np.testing.assert_array_equal(outs[0], av.swapaxes(2, 3))
    # permute(2, 0, 3, 1): source dim i goes to result dim axis_i; numpy axis of ggml dim k is 3 - k
    want = np.transpose(av, (1, 3, 0, 2))
    np.testing.assert_array_equal(outs[1], want)
    np.testing.assert_array_equal(outs[2], av.swapaxes(2, 3).reshape(1, 1, 10, 12))


def test_cpy_into_a_view_writes_the_destination_bytes() -> None:
    r = Rig()
    a, av = r.rand(4, 3)
    dst, dv = r.rand(3, 4)
    c = ops.cpy(r.ctx, a, ops.transpose(r.ctx, dst))
    (got,) = r.run(c)
    np.testing.assert_array_equal(got, av)
    np.testing.assert_array_equal(tensor_array(dst), as4(av[0, 0].T))  # dst's own bytes changed


def test_cast_and_dup_convert_types() -> None:
    r = Rig()
    a, av = r.rand(5, 7, lo=-70000, hi=70000)
    h16 = ops.cast(r.ctx, a, F16)
    back = ops.cast(r.ctx, h16, F32)
    to_i = ops.cpy(r.ctx, a, r.ctx.new_tensor_2d(I32, 7, 5))
    outs = r.run(h16, back, ops.dup(r.ctx, a), to_i)
    with np.errstate(over="ignore"):
        want16 = av.astype(np.float16)                              # round to nearest even, inf above 65504
    np.testing.assert_array_equal(outs[0], want16)
    np.testing.assert_array_equal(outs[1], want16.astype(np.float32))
    np.testing.assert_array_equal(outs[2], av)
    np.testing.assert_array_equal(outs[3], av.astype(np.int32))     # C cast truncates


def test_get_rows_and_back() -> None:
    r = Rig()
    emb, ev = r.rand(10, 6)
    e16, e16v = r.rand(10, 6, dtype=F16)
    idx = r.tensor(np.array([3, 0, 9, 3], dtype=np.int32), I32)
    emb3, e3v = r.rand(2, 3, 5, 4)                         # batched: a.ne2 == b.ne1, a.ne3 == b.ne2
    idx3 = r.tensor(np.array([[[4, 0], [1, 1], [2, 3]], [[0, 0], [4, 2], [3, 1]]], dtype=np.int32), I32)
    grads, gv = r.rand(4, 6)
    outs = r.run(ops.get_rows(r.ctx, emb, idx), ops.get_rows(r.ctx, e16, idx), ops.get_rows(r.ctx, emb3, idx3),
                 ops.get_rows_back(r.ctx, grads, idx, emb))
    np.testing.assert_array_equal(outs[0], ev[:, :, [3, 0, 9, 3]])
    assert outs[1].dtype == np.float32
    np.testing.assert_array_equal(outs[1], e16v[:, :, [3, 0, 9, 3]].astype(np.float32))
    i3 = np.array([[[4, 0], [1, 1], [2, 3]], [[0, 0], [4, 2], [3, 1]]])
    want = np.stack([np.stack([e3v[i, j][i3[i, j]] for j in range(3)]) for i in range(2)])
    np.testing.assert_array_equal(outs[2], want)
    back = np.zeros((10, 6))
    for k, row in enumerate([3, 0, 9, 3]):
        back[row] += gv[0, 0, k]
    close(outs[3], as4(back))


@pytest.mark.parametrize("dim", [0, 1, 2, 3])
def test_concat(dim: int) -> None:
    r = Rig()
    shape_b = [2, 3, 4, 5]
    shape_b[3 - dim] = 2
    a, av = r.rand(2, 3, 4, 5)
    b, bv = r.rand(*shape_b)
    (got,) = r.run(ops.concat(r.ctx, a, b, dim))
    np.testing.assert_array_equal(got, np.concatenate([av, bv], axis=3 - dim))


def test_repeat_and_repeat_back() -> None:
    r = Rig()
    a, av = r.rand(1, 2, 1, 3)
    like = r.ctx.new_tensor_4d(F32, 6, 4, 2, 3)
    big, bigv = r.rand(2, 4, 6, 6)
    small = r.ctx.new_tensor_4d(F32, 3, 2, 2, 1)
    outs = r.run(ops.repeat(r.ctx, a, like), ops.repeat_back(r.ctx, big, small))
    np.testing.assert_array_equal(outs[0], tile_to(av, (3, 2, 4, 6)))
    want = bigv.reshape(2, 1, 2, 2, 3, 2, 2, 3).sum(axis=(0, 2, 4, 6))
    close(outs[1], want, rtol=1e-5)


def test_acc_and_set() -> None:
    r = Rig()
    a, av = r.rand(4, 6)
    b, bv = r.rand(2, 3)
    nb1 = 6 * 4
    outs = r.run(ops.acc(r.ctx, a, b, nb1, nb1 * 4, nb1 * 4, 4 * (nb1 // 4 + 2)),
                 ops.set_2d(r.ctx, a, b, nb1, 4), ops.set_1d(r.ctx, a, r.tensor(np.ones(5, np.float32)), 8))
    want = av.copy()
    want[0, 0, 1:3, 2:5] += bv[0, 0]
    close(outs[0], want)
    want = av.copy()
    want[0, 0, 0:2, 1:4] = bv[0, 0]
    np.testing.assert_array_equal(outs[1], want)
    want = av.copy().reshape(-1)
    want[2:7] = 1.0
    np.testing.assert_array_equal(outs[2], want.reshape(av.shape))


def test_acc_inplace_changes_a() -> None:
    r = Rig()
    a, av = r.rand(3, 4)
    b, bv = r.rand(4)
    (got,) = r.run(ops.acc_inplace(r.ctx, a, b, 16, 48, 48, 16))
    want = av.copy()
    want[0, 0, 1] += bv[0, 0, 0]
    close(got, want)
    close(tensor_array(a), want)


# -- matrix products ----------------------------------------------------------------------------------------

def ref_mul_mat(av: np.ndarray, bv: np.ndarray) -> np.ndarray:
    """ggml mul_mat(a, b) by explicit loops over batches: out[i3, i2] = b[i3, i2] @ a[i3 / r3, i2 / r2]^T."""
    ne3, ne2 = bv.shape[:2]
    r3, r2 = ne3 // av.shape[0], ne2 // av.shape[1]
    out = np.zeros((ne3, ne2, bv.shape[2], av.shape[2]))
    for i3 in range(ne3):
        for i2 in range(ne2):
            out[i3, i2] = bv[i3, i2].astype(np.float64) @ av[i3 // r3, i2 // r2].astype(np.float64).T
    return out


@pytest.mark.parametrize("ashape,bshape", [((1, 1, 5, 8), (1, 1, 3, 8)), ((2, 3, 5, 8), (2, 3, 4, 8)),
                                           ((1, 2, 5, 8), (3, 4, 4, 8)), ((2, 1, 2, 3), (4, 3, 1, 3)),
                                           ((1, 1, 1, 7), (1, 1, 6, 7))])
def test_mul_mat_batched_broadcast(ashape: tuple[int, ...], bshape: tuple[int, ...]) -> None:
    r = Rig()
    a, av = r.rand(*ashape)
    b, bv = r.rand(*bshape)
    (got,) = r.run(ops.mul_mat(r.ctx, a, b))
    close(got, ref_mul_mat(av, bv), rtol=1e-5, atol=1e-5)


def test_mul_mat_permuted_and_strided_operands() -> None:
    r = Rig()
    k, kv = r.rand(6, 2, 4)         # [D=4, H=2, T=6] -> permute(0, 2, 1, 3) = [D, T, H]
    q, qv = r.rand(5, 2, 4)
    kp = ops.permute(r.ctx, k, 0, 2, 1, 3)
    qp = ops.permute(r.ctx, q, 0, 2, 1, 3)
    base, basev = r.rand(7, 9)
    strided = ops.view_2d(r.ctx, base, 4, 3, base.nb[1] * 2, 4)  # rows 0, 2, 4 from column 1
    w, wv = r.rand(5, 4)
    outs = r.run(ops.mul_mat(r.ctx, kp, qp), ops.mul_mat(r.ctx, w, strided),
                 ops.mul_mat(r.ctx, ops.cont(r.ctx, ops.transpose(r.ctx, w)), r.tensor(np.ones((2, 5), np.float32))))
    kk = kv[0].transpose(1, 0, 2)[None]   # (1, H, T, D)
    qq = qv[0].transpose(1, 0, 2)[None]
    close(outs[0], ref_mul_mat(kk, qq), rtol=1e-5, atol=1e-5)
    close(outs[1], ref_mul_mat(wv, as4(basev[0, 0, 0:5:2, 1:5])), rtol=1e-5, atol=1e-5)
    close(outs[2], ref_mul_mat(as4(wv[0, 0].T), as4(np.ones((2, 5)))), rtol=1e-5, atol=1e-5)


def test_mul_mat_f16_rounds_b_to_f16_and_accumulates_in_f32() -> None:
    r = Rig()
    a, av = r.rand(6, 32, dtype=F16)
    b, bv = r.rand(3, 32)
    (got,) = r.run(ops.mul_mat(r.ctx, a, b))
    b16 = bv.astype(np.float16).astype(np.float64)
    close(got, ref_mul_mat(av, b16), rtol=1e-5, atol=1e-4)


def test_out_prod() -> None:
    r = Rig()
    a, av = r.rand(1, 2, 4, 5)      # ne = [5, 4, 2, 1]
    b, bv = r.rand(2, 4, 4, 3)      # ne = [3, 4, 4, 2]
    (got,) = r.run(ops.out_prod(r.ctx, a, b))
    want = np.zeros((2, 4, 3, 5))
    for i3 in range(2):
        for i2 in range(4):
            want[i3, i2] = bv[i3, i2].T.astype(np.float64) @ av[i3 // 2, i2 // 2]
    close(got, want, rtol=1e-5, atol=1e-5)


# -- soft max, masks, norms ---------------------------------------------------------------------------------

def ref_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_soft_max_plain_and_inplace() -> None:
    r = Rig()
    a, av = r.rand(2, 3, 4, 7, lo=-5, hi=5)
    i, iv = r.rand(3, 7)
    outs = r.run(ops.soft_max(r.ctx, a), ops.soft_max_inplace(r.ctx, i))
    close(outs[0], ref_softmax(av), rtol=1e-5)
    close(outs[1], ref_softmax(iv), rtol=1e-5)


@pytest.mark.parametrize("mask_type", [F32, F16])
def test_soft_max_ext_mask_broadcast_and_scale(mask_type: DType) -> None:
    r = Rig()
    a, av = r.rand(2, 4, 5, 6, lo=-3, hi=3)
    mask, mv = r.rand(1, 2, 8, 6, dtype=mask_type)    # more rows than a; dims 2, 3 repeat by modulo
    (got,) = r.run(ops.soft_max_ext(r.ctx, a, mask, 0.3, 0.0))
    m = tile_to(mv[:, :, :5, :].astype(np.float64), (2, 4, 5, 6))
    close(got, ref_softmax(av * 0.3 + m), rtol=1e-5, atol=1e-7)


def test_soft_max_ext_alibi() -> None:
    r = Rig()
    n_head = 6
    a, av = r.rand(1, n_head, 3, 5)
    mask, mv = r.rand(1, 1, 3, 5)
    (got,) = r.run(ops.soft_max_ext(r.ctx, a, mask, 1.0, 8.0))
    n_log2 = 4
    m0, m1 = 2 ** (-8.0 / n_log2), 2 ** (-4.0 / n_log2)
    slopes = [m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n_head)]
    want = ref_softmax(av + np.array(slopes).reshape(1, -1, 1, 1) * mv)
    close(got, want, rtol=1e-5, atol=1e-7)


def test_soft_max_ext_back() -> None:
    r = Rig()
    dy, dyv = r.rand(2, 3, 6)
    y, yv = r.rand(2, 3, 6, lo=0, hi=1)
    (got,) = r.run(ops.soft_max_ext_back(r.ctx, dy, y, 0.5, 0.0))
    dot = (dyv * yv).astype(np.float64).sum(axis=-1, keepdims=True)
    close(got, (dyv - dot) * yv * 0.5, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n_past", [0, 2])
def test_diag_masks(n_past: int) -> None:
    r = Rig()
    a, av = r.rand(2, 4, 6)
    b, bv = r.rand(4, 6)
    outs = r.run(ops.diag_mask_inf(r.ctx, a, n_past), ops.diag_mask_zero_inplace(r.ctx, b, n_past))
    cols, rows = np.meshgrid(np.arange(6), np.arange(4))
    masked = cols > n_past + rows
    np.testing.assert_array_equal(outs[0], np.where(masked, -np.inf, av))
    np.testing.assert_array_equal(outs[1], np.where(masked, 0.0, bv))


def test_norm_rms_norm_and_back() -> None:
    r = Rig()
    a, av = r.rand(2, 3, 16)
    dz, dzv = r.rand(2, 3, 16)
    outs = r.run(ops.norm(r.ctx, a, 1e-5), ops.rms_norm(r.ctx, a, 1e-6), ops.rms_norm_back(r.ctx, dz, a, 1e-6))
    x = av.astype(np.float64)
    c = x - x.mean(-1, keepdims=True)
    close(outs[0], c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5), rtol=1e-4, atol=1e-5)
    rms = np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    close(outs[1], x / rms, rtol=1e-5, atol=1e-6)
    # analytic gradient of sum(dz * rms_norm(x)) with respect to x
    n = x.shape[-1]
    g = dzv / rms - x * (dzv * x).sum(-1, keepdims=True) / (n * rms**3)
    close(outs[2], g, rtol=1e-4, atol=1e-5)


# -- reductions ----------------------------------------------------------------------------------------------

def test_reductions() -> None:
    r = Rig()
    a, av = r.rand(2, 3, 4, 9)
    h, hv = r.rand(5, 9, dtype=F16)
    m, mv = r.rand(6, 11)
    outs = r.run(ops.sum(r.ctx, a), ops.sum_rows(r.ctx, a), ops.mean(r.ctx, a), ops.argmax(r.ctx, m),
                 ops.sum(r.ctx, h), ops.sum_rows(r.ctx, h))
    close(outs[0], as4(np.array([av.astype(np.float64).sum()])), rtol=1e-6)
    close(outs[1], av.astype(np.float64).sum(-1, keepdims=True), rtol=1e-5)
    close(outs[2], av.astype(np.float64).mean(-1, keepdims=True), rtol=1e-5)
    assert outs[3].dtype == np.int32
    np.testing.assert_array_equal(outs[3], as4(mv[0, 0].argmax(-1)))
    assert outs[4].dtype == np.float16
    close(outs[4], as4(np.array([hv.astype(np.float64).sum()])), rtol=1e-3)
    close(outs[5], hv.astype(np.float64).sum(-1, keepdims=True), rtol=1e-3, atol=1e-3)


def test_count_equal_is_an_i32_count() -> None:
    r = Rig()
    x = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.int32)
    y = np.array([[1, 0, 3, 4], [0, 6, 0, 8]], dtype=np.int32)
    (got,) = r.run(ops.count_equal(r.ctx, r.tensor(x, I32), r.tensor(y, I32)))
    assert got.dtype == np.int32 and got.reshape(-1).tolist() == [5]


# -- losses and optimizer steps -------------------------------------------------------------------------------

def test_cross_entropy_loss_and_back() -> None:
    r = Rig()
    logits, lv = r.rand(4, 10, lo=-4, hi=4)
    p = r.rng.uniform(size=(4, 10))
    labels = r.tensor((p / p.sum(-1, keepdims=True)).astype(np.float32))
    grad = r.tensor(np.array([0.7], dtype=np.float32))
    loss = ops.cross_entropy_loss(r.ctx, logits, labels)
    back = ops.cross_entropy_loss_back(r.ctx, grad, logits, labels)
    outs = r.run(loss, back)
    x = lv[0, 0].astype(np.float64)
    lab = (p / p.sum(-1, keepdims=True)).astype(np.float32).astype(np.float64)
    logsm = x - x.max(-1, keepdims=True)
    logsm -= np.log(np.exp(logsm).sum(-1, keepdims=True))
    close(outs[0], as4(np.array([-(logsm * lab).sum() / 4])), rtol=1e-5)
    close(outs[1], as4((ref_softmax(x) - lab) * 0.7 / 4), rtol=1e-5, atol=1e-7)


def test_opt_step_adamw_updates_w_m_v_in_place() -> None:
    r = Rig()
    w, wv = r.rand(3, 5)
    set_param(w)
    g, gv = r.rand(3, 5)
    m, mv = r.rand(3, 5)
    v, vv = r.rand(3, 5, lo=0, hi=1)
    alpha, beta1, beta2, eps, wd = 1e-2, 0.9, 0.999, 1e-8, 0.1
    beta1h, beta2h = 1 / (1 - beta1**3), 1 / (1 - beta2**3)
    params = r.tensor(np.array([alpha, beta1, beta2, eps, wd, beta1h, beta2h], dtype=np.float32))
    step = ops.opt_step_adamw(r.ctx, w, g, m, v, params)
    (got,) = r.run(step)
    m2 = mv * beta1 + gv * (1 - beta1)
    v2 = vv * beta2 + gv * gv * (1 - beta2)
    w2 = wv * (1 - alpha * wd) - alpha * (m2 * beta1h) / (np.sqrt(v2 * beta2h) + eps)
    close(got, w2, rtol=1e-5, atol=1e-7)
    close(tensor_array(w), w2, rtol=1e-5, atol=1e-7)
    close(tensor_array(m), m2, rtol=1e-5, atol=1e-7)
    close(tensor_array(v), v2, rtol=1e-5, atol=1e-7)


def test_opt_step_sgd() -> None:
    r = Rig()
    w, wv = r.rand(4, 3)
    set_param(w)
    g, gv = r.rand(4, 3)
    params = r.tensor(np.array([0.05, 0.01], dtype=np.float32))
    (got,) = r.run(ops.opt_step_sgd(r.ctx, w, g, params))
    close(got, wv * (1 - 0.05 * 0.01) - 0.05 * gv, rtol=1e-6, atol=1e-7)


# -- what has no kernel -------------------------------------------------------------------------------------------

def test_missing_kernel_is_a_backend_error_naming_the_op() -> None:
    r = Rig()
    a, _ = r.rand(4, 8)
    rope = r.ctx.new_tensor_impl(F32, a.ne, op=Op.ROPE, src=[a], name="rope0")
    sm16 = ops.soft_max(r.ctx, r.tensor(np.zeros((2, 3), np.float16), F16))
    assert not has_kernel(rope) and not has_kernel(sm16)
    assert has_kernel(ops.relu(r.ctx, a)) and has_kernel(ops.transpose(r.ctx, a))
    alloc_ctx_tensors(r.ctx, BufferType("CPU"))
    with pytest.raises(BackendError, match="no kernel for op ROPE on tensor 'rope0'"):
        compute_forward(rope)
    with pytest.raises(BackendError, match="SOFT_MAX"):
        compute_forward(sm16)
