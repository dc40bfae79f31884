"""Kernels on random shapes (hypothesis): random 4-d shapes, random permutations and
broadcasts, f32 and f16, each against a plain numpy reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.runtime.test_kernels import Rig, UNARY_REF, UNARY_TOL, close, ref_mul_mat, ref_softmax, tile_to
from vizalloc.runtime import F16, F32, UnaryOp, ops

dims = st.integers(1, 5)
shape4 = st.tuples(dims, dims, dims, dims)
SETTINGS = settings(max_examples=20, deadline=None)


@SETTINGS
@given(shape4, st.permutations([0, 1, 2, 3]), st.sampled_from([UnaryOp.RELU, UnaryOp.SILU, UnaryOp.GELU,
                                                               UnaryOp.TANH, UnaryOp.SIGMOID, UnaryOp.NEG]))
def test_unary_on_permuted_views(shape: tuple[int, ...], perm: list[int], fn: UnaryOp) -> None:
    r = Rig()
    a, av = r.rand(*shape, lo=-3, hi=3)
    p = ops.permute(r.ctx, a, *perm)
    want_src = np.transpose(av, _numpy_axes(perm))
    if p.nb[0] != 4 and p.ne[0] != 1:
        p = ops.cont(r.ctx, p)  # ggml's unary needs packed rows
    (got,) = r.run(ops.unary(r.ctx, p, fn))
    rtol, atol = UNARY_TOL.get(fn, (2e-6, 1e-6))
    close(got, UNARY_REF[fn](want_src.astype(np.float64)), rtol=rtol, atol=atol)


def _numpy_axes(perm: list[int]) -> tuple[int, ...]:
    """numpy axes order of ggml's permute(a, *perm) over (ne3, ne2, ne1, ne0) arrays."""
    src_of = {perm[i]: i for i in range(4)}      # result dim -> source dim
    return tuple(3 - src_of[3 - k] for k in range(4))


@SETTINGS
@given(shape4, st.permutations([0, 1, 2, 3]), st.booleans())
def test_cont_of_random_permutation(shape: tuple[int, ...], perm: list[int], half: bool) -> None:
    r = Rig()
    a, av = r.rand(*shape, dtype=F16 if half else F32)
    (got,) = r.run(ops.cont(r.ctx, ops.permute(r.ctx, a, *perm)))
    np.testing.assert_array_equal(got, np.transpose(av, _numpy_axes(perm)))


@SETTINGS
@given(shape4, st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 3), st.integers(1, 2)),
       st.sampled_from(["add", "sub", "mul", "div"]), st.booleans())
def test_binary_random_broadcast(small: tuple[int, ...], reps: tuple[int, ...], name: str, half: bool) -> None:
    r = Rig()
    big = tuple(s * k for s, k in zip(small, reps))
    dtype = F16 if half else F32
    a, av = r.rand(*big, dtype=dtype)
    b, bv = r.rand(*small, dtype=dtype, lo=0.5, hi=2.0)
    (got,) = r.run(getattr(ops, name)(r.ctx, a, b))
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[name]
    want = fn(av.astype(np.float32), tile_to(bv, big).astype(np.float32)).astype(dtype.numpy)
    np.testing.assert_array_equal(got, want)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 9), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 2), st.integers(1, 2))
def test_mul_mat_random(m: int, n: int, k: int, a2: int, a3: int, r2: int, r3: int) -> None:
    r = Rig()
    a, av = r.rand(a3, a2, m, k)
    b, bv = r.rand(a3 * r3, a2 * r2, n, k)
    (got,) = r.run(ops.mul_mat(r.ctx, a, b))
    close(got, ref_mul_mat(av, bv), rtol=1e-5, atol=1e-5)


@SETTINGS
@given(shape4, st.floats(0.1, 2.0))
def test_soft_max_and_rows_random(shape: tuple[int, ...], scale: float) -> None:
    r = Rig()
    a, av = r.rand(*shape, lo=-4, hi=4)
    outs = r.run(ops.soft_max_ext(r.ctx, a, None, scale, 0.0), ops.sum_rows(r.ctx, a), ops.mean(r.ctx, a))
    close(outs[0], ref_softmax(av.astype(np.float64) * np.float32(scale)), rtol=1e-5, atol=1e-7)
    close(outs[1], av.astype(np.float64).sum(-1, keepdims=True), rtol=1e-5, atol=1e-5)
    close(outs[2], av.astype(np.float64).mean(-1, keepdims=True), rtol=1e-5, atol=1e-5)


@SETTINGS
@given(shape4, st.integers(0, 3))
def test_concat_random(shape: tuple[int, ...], dim: int) -> None:
    r = Rig()
    other = list(shape)
    other[3 - dim] = other[3 - dim] % 3 + 1
    a, av = r.rand(*shape)
    b, bv = r.rand(*other)
    (got,) = r.run(ops.concat(r.ctx, a, b, dim))
    np.testing.assert_array_equal(got, np.concatenate([av, bv], axis=3 - dim))
