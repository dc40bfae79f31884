"""Kernels against real ggml's CPU backend (ggml-python 0.0.45, one thread): the same
program on the same inputs must give the same numbers, within the tolerance each op
allows (f32 summation order and SIMD exp/tanh differ in the last bits; f16 tables round)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.runtime import ggml_oracle as oracle

pytestmark = pytest.mark.skipif(not oracle.HAVE_GGML, reason="ggml-python (the oracle) is not installed")

RNG = np.random.default_rng(77)


def rand(*shape: int, lo: float = -2.0, hi: float = 2.0, dtype: Any = np.float32) -> np.ndarray:
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def both(program: Any, inputs: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return oracle.compute_viz(program, inputs), oracle.compute_ggml(program, inputs)


def check(program: Any, inputs: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    ours, theirs = both(program, inputs)
    assert len(ours) == len(theirs)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape and a.dtype == b.dtype, (k, a.shape, b.shape, a.dtype, b.dtype)
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"root {k} of {program.__name__}")


def test_gelu_matches_ggml_table() -> None:
    def prog(b: Any) -> list[Any]:
        x = b.new("f32", (400,), "x")
        h = b.new("f16", (400,), "h")
        return [b.op("gelu", x), b.op("gelu", h), b.op("gelu_quick", x)]

    x = np.concatenate([np.linspace(-12, 12, 200), rand(200, lo=-4, hi=4)]).astype(np.float32)
    ours, theirs = both(prog, {"x": x, "h": x.astype(np.float16)})
    for a, b in zip(ours, theirs):
        # both round through f16: equal, or one f16 step apart where tanhf's last bit differs
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-3, atol=1e-6)
    for k in range(3):
        exact = np.mean(ours[k] == theirs[k])
        assert exact > 0.99, f"root {k}: only {exact:.2%} of the values are bit-identical to ggml"


def test_unary_and_elementwise_match_ggml() -> None:
    def prog(b: Any) -> list[Any]:
        x = b.new("f32", (13, 4), "x")
        y = b.new("f32", (13, 1), "y")
        outs = [b.op(fn, x) for fn in ("relu", "silu", "sigmoid", "tanh", "exp", "neg", "abs", "step", "elu",
                                       "hardswish", "hardsigmoid", "sqr")]
        outs += [b.op("add", x, y), b.op("mul", x, y), b.op("div", x, y), b.op("sub", x, y), b.op("scale", x, 0.3)]
        return outs

    check(prog, {"x": rand(4, 13), "y": rand(1, 13, lo=0.5, hi=2)}, rtol=2e-6, atol=1e-6)


def test_mul_mat_and_out_prod_match_ggml() -> None:
    def prog(b: Any) -> list[Any]:
        w = b.new("f32", (32, 16, 2), "w")
        x = b.new("f32", (32, 5, 4), "x")
        w16 = b.new("f16", (32, 16), "w16")
        xp = b.op("permute", b.new("f32", (32, 4, 5), "xp"), 0, 2, 1, 3)
        oa = b.new("f32", (16, 5, 2), "oa")
        ob = b.new("f32", (7, 5, 4), "ob")
        return [b.op("mul_mat", w, x), b.op("mul_mat", w16, x), b.op("mul_mat", w, xp), b.op("out_prod", oa, ob)]

    inputs = {"w": rand(2, 16, 32), "x": rand(4, 5, 32), "w16": rand(16, 32).astype(np.float16),
              "xp": rand(5, 4, 32), "oa": rand(2, 5, 16), "ob": rand(4, 5, 7)}
    check(prog, inputs, rtol=1e-4, atol=1e-4)


def test_soft_max_family_matches_ggml() -> None:
    def prog(b: Any) -> list[Any]:
        a = b.new("f32", (9, 5, 6), "a")
        m32 = b.new("f32", (9, 7), "m32")
        m16 = b.new("f16", (9, 5, 2), "m16")
        y = b.new("f32", (9, 5, 6), "y")
        dy = b.new("f32", (9, 5, 6), "dy")
        return [b.op("soft_max", a), b.op("soft_max_ext", a, m32, 0.25, 0.0), b.op("soft_max_ext", a, m16, 1.5, 8.0),
                b.op("soft_max_ext_back", dy, y, 0.5, 0.0), b.op("diag_mask_inf", a, 1),
                b.op("soft_max", b.op("diag_mask_inf", a, 0))]

    inputs = {"a": rand(6, 5, 9, lo=-3, hi=3), "m32": rand(7, 9), "m16": rand(2, 5, 9).astype(np.float16),
              "y": rand(6, 5, 9, lo=0, hi=1), "dy": rand(6, 5, 9)}
    check(prog, inputs, rtol=1e-5, atol=1e-7)


def test_norms_and_backs_match_ggml() -> None:
    def prog(b: Any) -> list[Any]:
        x = b.new("f32", (24, 3, 2), "x")
        dz = b.new("f32", (24, 3, 2), "dz")
        return [b.op("norm", x, 1e-5), b.op("rms_norm", x, 1e-6), b.op("rms_norm_back", dz, x, 1e-6),
                b.op("silu_back", dz, x)]

    check(prog, {"x": rand(2, 3, 24), "dz": rand(2, 3, 24)}, rtol=1e-4, atol=1e-5)


def test_losses_match_ggml() -> None:
    def prog(b: Any) -> list[Any]:
        logits = b.new("f32", (10, 8), "logits")
        labels = b.new("f32", (10, 8), "labels")
        grad = b.new("f32", (1,), "grad")
        return [b.op("cross_entropy_loss", logits, labels), b.op("cross_entropy_loss_back", grad, logits, labels)]

    p = RNG.uniform(size=(8, 10))
    inputs = {"logits": rand(8, 10, lo=-5, hi=5), "labels": (p / p.sum(-1, keepdims=True)).astype(np.float32),
              "grad": np.array([1.3], dtype=np.float32)}
    check(prog, inputs, rtol=1e-5, atol=1e-7)


def test_reductions_and_layout_match_ggml() -> None:
    def prog(b: Any) -> list[Any]:
        a = b.new("f32", (7, 6, 2), "a")
        r = b.new("f32", (7, 3), "r")
        rows = b.new("i32", (5,), "rows")
        emb = b.new("f32", (7, 9), "emb")
        g = b.new("f32", (7, 5), "g")
        lab = b.new("f32", (7, 4), "lab")
        return [b.op("sum", a), b.op("sum_rows", a), b.op("mean", a), b.op("argmax", emb), b.op("repeat_back", a, r),
                b.op("repeat", r, a), b.op("get_rows", emb, rows), b.op("get_rows_back", g, rows, emb),
                b.op("concat", a, a, 1), b.op("acc", a, lab, 28, 56, 56, 8), b.op("set_1d", a, lab, 12),
                b.op("cont", b.op("permute", a, 2, 0, 1, 3)), b.op("cast", a, "f16"),
                b.op("cpy", b.op("transpose", emb), b.new("f16", (9, 7), "e16"))]

    inputs = {"a": rand(2, 6, 7), "r": rand(3, 7), "rows": np.array([8, 0, 3, 3, 5], dtype=np.int32),
              "emb": rand(9, 7), "g": rand(5, 7), "lab": rand(4, 7), "e16": np.zeros((7, 9), np.float16)}
    check(prog, inputs, rtol=1e-5, atol=1e-6)


def test_count_equal_value_matches_ggml() -> None:
    def prog(b: Any) -> list[Any]:
        return [b.op("count_equal", b.new("i32", (6, 3), "p"), b.new("i32", (6, 3), "q"))]

    p = RNG.integers(0, 3, size=(3, 6)).astype(np.int32)
    q = RNG.integers(0, 3, size=(3, 6)).astype(np.int32)
    ours, theirs = both(prog, {"p": p, "q": q})
    assert ours[0].dtype == np.int32 and theirs[0].dtype == np.int64   # the documented difference
    assert int(ours[0].reshape(-1)[0]) == int(theirs[0].reshape(-1)[0]) == int((p == q).sum())


def test_optimizer_steps_match_ggml() -> None:
    def prog(b: Any) -> list[Any]:
        w = b.new("f32", (6, 4), "w")
        b.set_param(w)
        w2 = b.new("f32", (5,), "w2")
        b.set_param(w2)
        step = b.op("opt_step_adamw", w, b.new("f32", (6, 4), "g"), b.new("f32", (6, 4), "m"),
                    b.new("f32", (6, 4), "v"), b.new("f32", (7,), "ap"))
        sgd = b.op("opt_step_sgd", w2, b.new("f32", (5,), "g2"), b.new("f32", (2,), "sp"))
        return [step, sgd]

    inputs = {"w": rand(4, 6), "g": rand(4, 6), "m": rand(4, 6), "v": rand(4, 6, lo=0, hi=1),
              "ap": np.array([1e-2, 0.9, 0.999, 1e-8, 0.1, 1 / (1 - 0.9**2), 1 / (1 - 0.999**2)], np.float32),
              "w2": rand(5), "g2": rand(5), "sp": np.array([0.1, 0.01], np.float32)}
    check(prog, inputs, rtol=1e-6, atol=1e-7)
