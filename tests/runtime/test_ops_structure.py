"""Op constructors against real ggml (ggml-python 0.0.45): the same calls must build the
same tensors (ne, nb, type, op, op params, flags, names, view roots and offsets, sources)
and the same graph node and leaf order."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runtime import ggml_oracle as oracle
from vizalloc.runtime import UnaryOp

pytestmark = pytest.mark.skipif(not oracle.HAVE_GGML, reason="ggml-python (the oracle) is not installed")


def nb1_of(b: Any, t: Any) -> int:
    """Row stride of a builder tensor in either runtime."""
    return t.nb[1] if isinstance(b, oracle.VizBuilder) else t.contents.nb[1]


def nb_of(b: Any, t: Any) -> tuple[int, ...]:
    return tuple(t.nb) if isinstance(b, oracle.VizBuilder) else tuple(t.contents.nb)


# -- whole constructions ---------------------------------------------------------------------------

def mlp_two_layer(b: Any) -> list[Any]:
    x = b.new("f32", (16, 4), "x")
    b.set_input(x)
    w1, b1 = b.new("f32", (16, 32), "w1"), b.new("f32", (32,), "b1")
    w2, b2 = b.new("f32", (32, 8), "w2"), b.new("f32", (8,), "b2")
    for p in (w1, b1, w2, b2):
        b.set_param(p)
    h = b.op("relu", b.op("add", b.op("mul_mat", w1, x), b1))
    logits = b.op("add", b.op("mul_mat", w2, h), b2)
    labels = b.new("f32", (8, 4), "labels")
    b.set_input(labels)
    loss = b.op("cross_entropy_loss", logits, labels)
    b.set_output(loss)
    pred = b.op("argmax", logits)
    return [loss, pred]


def attention_single_head(b: Any) -> list[Any]:
    d, t = 8, 6
    x = b.new("f32", (d, t), "x")
    wq, wk, wv = (b.new("f32", (d, d), n) for n in ("wq", "wk", "wv"))
    q = b.op("reshape_3d", b.op("mul_mat", wq, x), d, 1, t)
    k = b.op("reshape_3d", b.op("mul_mat", wk, x), d, 1, t)
    v = b.op("reshape_3d", b.op("mul_mat", wv, x), d, 1, t)
    qp = b.op("permute", q, 0, 2, 1, 3)
    kp = b.op("permute", k, 0, 2, 1, 3)
    kq = b.op("mul_mat", kp, qp)
    kq = b.op("diag_mask_inf", kq, 0)
    kq = b.op("soft_max_ext", kq, None, 0.35355339, 0.0)
    vt = b.op("cont", b.op("transpose", b.op("reshape_2d", v, d, t)))
    kqv = b.op("mul_mat", vt, kq)
    out = b.op("cont_2d", b.op("permute", kqv, 0, 2, 1, 3), d, t)
    b.set_output(out)
    return [out]


def attention_multi_head_masked(b: Any) -> list[Any]:
    dh, h, t = 4, 2, 5
    x = b.new("f32", (dh * h, t), "x")
    wq, wk, wv = (b.new("f32", (dh * h, dh * h), n) for n in ("wq", "wk", "wv"))
    mask = b.new("f16", (t, t), "kq_mask")
    q = b.op("permute", b.op("reshape_3d", b.op("mul_mat", wq, x), dh, h, t), 0, 2, 1, 3)
    k = b.op("permute", b.op("reshape_3d", b.op("mul_mat", wk, x), dh, h, t), 0, 2, 1, 3)
    v = b.op("cont", b.op("permute", b.op("reshape_3d", b.op("mul_mat", wv, x), dh, h, t), 1, 2, 0, 3))
    kq = b.op("soft_max_ext", b.op("mul_mat", k, q), mask, 0.5, 8.0)
    kqv = b.op("permute", b.op("mul_mat", v, kq), 0, 2, 1, 3)
    out = b.op("cpy", kqv, b.new("f32", (dh, h, t), "out"))
    return [out]


def view_chains(b: Any) -> list[Any]:
    a = b.new("f32", (12, 6, 2), "a")
    v1 = b.op("view_2d", a, 6, 4, nb1_of(b, a), 16)
    v2 = b.op("view_1d", v1, 5, 8)
    v3 = b.op("view_3d", a, 4, 3, 2, 24, 144, 4)
    nb = nb_of(b, a)
    v4 = b.op("view_4d", a, 3, 2, 2, 1, nb[1], nb[2], nb[3], 0)
    r = b.op("reshape_4d", b.op("cont", v1), 3, 2, 2, 2)
    p = b.op("permute", r, 3, 1, 0, 2)
    tr = b.op("transpose", p)
    s = b.op("add", b.op("cont", tr), b.op("cont", b.op("view_tensor", b.op("cont", tr))))
    return [b.op("sum", b.op("cont", v2)), b.op("cont", v3), b.op("scale", b.op("cont", v4), 2.0), s]


def inplace_variants(b: Any) -> list[Any]:
    a = b.new("f32", (8, 4), "a")
    c = b.new("f32", (8,), "c")
    s = b.new("f32", (1,), "s")
    y = b.op("add_inplace", a, c)
    y = b.op("sub_inplace", y, c)
    y = b.op("mul_inplace", y, c)
    y = b.op("div_inplace", y, c)
    y = b.op("add1_inplace", y, s)
    y = b.op("scale_inplace", y, 0.25)
    y = b.op("sqr_inplace", y)
    y = b.op("sqrt_inplace", y)
    y = b.op("log_inplace", y)
    for fn in ("relu", "gelu", "silu", "tanh", "sigmoid", "neg", "abs", "step", "exp", "sgn", "elu", "gelu_quick"):
        y = b.op(f"{fn}_inplace", y)
    y = b.op("unary_inplace", y, UnaryOp.SILU)
    y = b.op("diag_mask_inf_inplace", y, 1)
    y = b.op("diag_mask_zero_inplace", y, 2)
    y = b.op("soft_max_inplace", y)
    y = b.op("soft_max_ext_inplace", y, None, 0.5, 0.0)
    y = b.op("norm_inplace", y, 1e-5)
    y = b.op("rms_norm_inplace", y, 1e-6)
    y = b.op("dup_inplace", y)
    z = b.op("acc_inplace", y, b.new("f32", (4, 2), "patch"), 32, 64, 64, 8)
    z = b.op("set_1d_inplace", z, b.new("f32", (3,), "p1"), 4)
    z = b.op("set_2d_inplace", z, b.new("f32", (2, 2), "p2"), 32, 0)
    z = b.op("soft_max_ext_back_inplace", z, b.op("soft_max", a), 1.0, 0.0)
    return [z]


def every_other_op(b: Any) -> list[Any]:
    a = b.new("f32", (6, 4, 2), "a")
    h = b.new("f16", (6, 4, 2), "h")
    r = b.new("f32", (6, 1), "r")
    idx = b.new("i32", (3,), "idx")
    emb = b.new("f32", (6, 10), "emb")
    lab = b.new("i32", (5, 2), "lab")
    outs = [
        b.op("dup", a), b.op("cast", a, "f16"), b.op("cast", h, "f32"), b.op("cont_1d", a, 48),
        b.op("cont_3d", a, 2, 3, 8), b.op("cont_4d", a, 3, 2, 4, 2), b.op("reshape", a, h),
        b.op("reshape_1d", a, 48), b.op("get_rows", emb, idx), b.op("get_rows", b.new("f16", (6, 10), "e16"), idx),
        b.op("get_rows_back", b.new("f32", (6, 3), "g"), idx, emb), b.op("concat", a, a, 2),
        b.op("concat", a, b.new("f32", (6, 3, 2), "a2"), 1), b.op("repeat", r, a),
        b.op("repeat_4d", r, 6, 2, 3, 1), b.op("repeat_back", a, r), b.op("acc", a, r, 24, 96, 192, 4),
        b.op("set", a, r, 24, 96, 192, 8), b.op("set_1d", a, r, 8), b.op("set_2d", a, r, 24, 0),
        b.op("add", a, r), b.op("sub", a, r), b.op("mul", h, h), b.op("div", a, a), b.op("add1", a, b.new("f32", (1,), "one")),
        b.op("scale_bias", a, 2.0, 0.5), b.op("sqr", a), b.op("sqrt", a), b.op("log", a), b.op("sin", a), b.op("cos", a),
        b.op("hardswish", a), b.op("hardsigmoid", a), b.op("silu_back", a, a), b.op("sum", a), b.op("sum_rows", a),
        b.op("mean", a), b.op("out_prod", b.new("f32", (5, 4), "op_a"), b.new("f32", (7, 4, 3), "op_b")),
        b.op("mul_mat", b.new("f32", (6, 3, 2, 1), "mm_a"), b.new("f32", (6, 5, 4, 3), "mm_b")),
        b.op("soft_max", a), b.op("soft_max_ext", a, b.new("f32", (6, 7, 1), "m"), 0.5, 0.0),
        b.op("soft_max_ext_back", a, a, 0.5, 0.0), b.op("diag_mask_zero", a, 1), b.op("norm", a, 1e-5),
        b.op("rms_norm", a, 1e-6), b.op("rms_norm_back", a, a, 1e-6),
        b.op("cross_entropy_loss_back", b.new("f32", (1,), "dl"), a, a),
    ]
    pa = b.new("f32", (6, 4), "param")
    b.set_param(pa)
    g, m, v = (b.new("f32", (6, 4), n) for n in ("grad", "m", "v"))
    outs.append(b.op("opt_step_adamw", pa, g, m, v, b.new("f32", (7,), "adamw_params")))
    pb = b.new("f32", (3,), "param_b")
    b.set_param(pb)
    outs.append(b.op("opt_step_sgd", pb, b.new("f32", (3,), "grad_b"), b.new("f32", (2,), "sgd_params")))
    outs.append(b.op("argmax", b.new("f32", (5, 2), "am")))
    del lab
    return outs


def long_names(b: Any) -> list[Any]:
    a = b.new("f32", (4, 4), "n" * 60)
    return [b.op("cont", b.op("transpose", b.op("cpy", a, b.new("f32", (4, 4), "m" * 40))))]


@pytest.mark.parametrize(
    "program",
    [mlp_two_layer, attention_single_head, attention_multi_head_masked, view_chains, inplace_variants,
     every_other_op, long_names],
)
def test_same_structure_as_ggml(program: Any) -> None:
    snap = oracle.assert_same_structure(program)
    assert len(snap.tensors) > 2


def test_oracle_detects_a_difference() -> None:
    """The comparison can fail: different calls give a reported difference."""

    def ours(b: Any) -> list[Any]:
        a = b.new("f32", (4, 3), "a")
        return [b.op("transpose", a) if isinstance(b, oracle.VizBuilder) else b.op("cont", a)]

    problems = oracle.diff_snapshots(oracle.snapshot_viz(ours), oracle.snapshot_ggml(ours))
    assert any("op" in p for p in problems)
    assert any("nb" in p for p in problems)


def test_count_equal_differs_only_in_type() -> None:
    """Documented difference: ggml's count_equal is i64, vizalloc's i32; everything else agrees."""

    def prog(b: Any) -> list[Any]:
        a, c = b.new("i32", (5, 2), "a"), b.new("i32", (5, 2), "c")
        return [b.op("count_equal", a, c)]

    problems = oracle.diff_snapshots(oracle.snapshot_viz(prog), oracle.snapshot_ggml(prog))
    assert problems and all(("type" in p or "nb" in p) for p in problems), problems


def test_cast_is_its_own_second_source() -> None:
    def prog(b: Any) -> list[Any]:
        return [b.op("cast", b.new("f32", (4,), "x"), "f16")]

    snap = oracle.assert_same_structure(prog)
    cast = snap.tensors[snap.nodes[0]]
    assert cast.src == (1, cast.index)
