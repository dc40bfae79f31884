"""Op constructors refuse what ggml refuses, with ShapeError messages that name the op,
the operands and their shapes; and accept exactly the broadcasts ggml accepts."""

from __future__ import annotations

import itertools

import pytest

from vizalloc.errors import ContextError, GraphError, ShapeError, VizallocError
from vizalloc.runtime import F16, F32, I32, Context, Graph, UnaryOp, ops, set_param
from vizalloc.runtime.ops._common import is_contiguous


@pytest.fixture
def ctx() -> Context:
    return Context(name="t")


def test_add_broadcast_error_names_op_tensors_and_shapes(ctx: Context) -> None:
    a = ctx.new_tensor_2d(F32, 4, 3, name="x")
    b = ctx.new_tensor_1d(F32, 3, name="bias")
    with pytest.raises(ShapeError) as err:
        ops.add(ctx, a, b)
    msg = str(err.value)
    assert msg.startswith("add:")
    assert "'x' f32[4, 3, 1, 1]" in msg and "'bias' f32[3, 1, 1, 1]" in msg
    assert "ggml_can_repeat" in msg
    assert isinstance(err.value, VizallocError)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "add_inplace", "sub_inplace", "mul_inplace", "div_inplace"])
def test_binary_broadcast_rule_is_ggml_can_repeat(ctx: Context, name: str) -> None:
    a = ctx.new_tensor_4d(F32, 6, 4, 2, 3)
    fn = getattr(ops, name)
    accepted = 0
    for ne in itertools.product((1, 2, 3, 6), (1, 2, 4, 3), (1, 2), (1, 3, 2)):
        b = ctx.new_tensor_4d(F32, *ne)
        ok = all(a.ne[i] % ne[i] == 0 for i in range(4))
        if ok:
            r = fn(ctx, a, b)
            assert r.ne == a.ne and r.type is F32
            accepted += 1
        else:
            with pytest.raises(ShapeError, match=name.split("_")[0]):
                fn(ctx, a, b)
    assert accepted > 10


def test_b_larger_than_a_is_refused(ctx: Context) -> None:
    # ggml broadcasts b into a only, never a into b
    a = ctx.new_tensor_1d(F32, 4)
    b = ctx.new_tensor_2d(F32, 4, 3)
    with pytest.raises(ShapeError):
        ops.mul(ctx, a, b)


def test_mul_mat_rules(ctx: Context) -> None:
    a = ctx.new_tensor_4d(F32, 8, 5, 2, 1, name="w")
    ok = ctx.new_tensor_4d(F32, 8, 3, 6, 4)
    assert ops.mul_mat(ctx, a, ok).ne == (5, 3, 6, 4)
    with pytest.raises(ShapeError, match=r"mul_mat: a.ne\[0\] \(8\) must equal b.ne\[0\] \(7\).*'w' f32\[8, 5, 2, 1\]"):
        ops.mul_mat(ctx, a, ctx.new_tensor_2d(F32, 7, 3))
    with pytest.raises(ShapeError, match="broadcast"):
        ops.mul_mat(ctx, a, ctx.new_tensor_3d(F32, 8, 3, 3))
    with pytest.raises(ShapeError, match="transposed"):
        ops.mul_mat(ctx, ops.transpose(ctx, ctx.new_tensor_2d(F32, 8, 8)), ctx.new_tensor_2d(F32, 8, 2))


def test_view_and_reshape_errors(ctx: Context) -> None:
    a = ctx.new_tensor_2d(F32, 4, 3, name="a")
    with pytest.raises(ShapeError, match="reshape_2d: new shape"):
        ops.reshape_2d(ctx, a, 5, 2)
    with pytest.raises(ShapeError, match="must be contiguous"):
        ops.reshape_1d(ctx, ops.transpose(ctx, a), 12)
    with pytest.raises(ShapeError, match="exceed"):
        ops.view_1d(ctx, a, 10, 16)
    with pytest.raises(ShapeError, match="permutation"):
        ops.permute(ctx, a, 0, 0, 1, 2)
    with pytest.raises(ShapeError, match="cpy: a has 12 elements, b has 6"):
        ops.cpy(ctx, a, ctx.new_tensor_1d(F32, 6))
    with pytest.raises(ShapeError, match="cont_4d"):
        ops.cont_4d(ctx, a, 5, 1, 1, 1)


def test_reshape_of_a_contiguous_view_with_a_size1_dim_is_allowed(ctx: Context) -> None:
    # ggml_is_contiguous ignores the stride of a dimension of size 1
    a = ctx.new_tensor_2d(F32, 4, 3)
    row = ops.view_2d(ctx, a, 4, 1, 999 * 4, 16)
    assert is_contiguous(row) and not row.is_contiguous
    assert ops.reshape_1d(ctx, row, 4).ne == (4, 1, 1, 1)


def test_other_op_errors(ctx: Context) -> None:
    a = ctx.new_tensor_2d(F32, 4, 3, name="a")
    h = ctx.new_tensor_2d(F16, 4, 3)
    cases = [
        (lambda: ops.concat(ctx, a, ctx.new_tensor_2d(F32, 5, 3), 1), "concat: dimension 0"),
        (lambda: ops.concat(ctx, a, h, 0), "same type"),
        (lambda: ops.get_rows(ctx, a, ctx.new_tensor_1d(F32, 2)), "i32"),
        (lambda: ops.get_rows(ctx, a, ctx.new_tensor_2d(I32, 2, 2)), "get_rows: need"),
        (lambda: ops.repeat(ctx, a, ctx.new_tensor_2d(F32, 6, 3)), "repeat"),
        (lambda: ops.repeat_back(ctx, a, ctx.new_tensor_2d(F32, 3, 3)), "repeat_back"),
        (lambda: ops.acc(ctx, h, a, 8, 24, 24, 0), "f32"),
        (lambda: ops.acc(ctx, a, ctx.new_tensor_2d(F32, 5, 3), 16, 48, 48, 0), "more elements"),
        (lambda: ops.add1(ctx, a, a), "scalar"),
        (lambda: ops.scale(ctx, ops.transpose(ctx, a), 2.0), "packed rows"),
        (lambda: ops.unary(ctx, ops.transpose(ctx, a), UnaryOp.RELU), "unary RELU"),
        (lambda: ops.soft_max(ctx, ops.transpose(ctx, a)), "contiguous"),
        (lambda: ops.soft_max_ext(ctx, a, ctx.new_tensor_2d(F32, 4, 2), 1.0, 0.0), "mask.ne"),
        (lambda: ops.soft_max_ext(ctx, a, ctx.new_tensor_2d(I32, 4, 3), 1.0, 0.0), "f16 or f32"),
        (lambda: ops.soft_max_ext(ctx, a, None, 1.0, 8.0), "ALiBi"),
        (lambda: ops.argmax(ctx, ctx.new_tensor_3d(F32, 2, 2, 2)), "matrix"),
        (lambda: ops.count_equal(ctx, a, ctx.new_tensor_2d(I32, 3, 4)), "same shape"),
        (lambda: ops.cross_entropy_loss(ctx, a, ctx.new_tensor_2d(F32, 3, 4)), "same shape"),
        (lambda: ops.cross_entropy_loss_back(ctx, a, a, a), "scalar"),
        (lambda: ops.out_prod(ctx, a, ctx.new_tensor_2d(F32, 4, 4)), "out_prod"),
        (lambda: ops.rms_norm_back(ctx, a, ctx.new_tensor_1d(F32, 12), 1e-5), "same shape"),
        (lambda: ops.silu_back(ctx, a, ctx.new_tensor_1d(F32, 12)), "same shape"),
        (lambda: ops.set_1d(ctx, ctx.new_tensor_1d(F32, 2), a, 0), "more elements"),
    ]
    for fn, pattern in cases:
        with pytest.raises(ShapeError, match=pattern):
            fn()
            pytest.fail(f"no ShapeError for the case expecting {pattern!r}")


def test_optimizer_steps_need_a_parameter(ctx: Context) -> None:
    w = ctx.new_tensor_1d(F32, 4, name="w")
    g = ctx.new_tensor_1d(F32, 4)
    p7, p2 = ctx.new_tensor_1d(F32, 7), ctx.new_tensor_1d(F32, 2)
    with pytest.raises(GraphError, match="set_param"):
        ops.opt_step_sgd(ctx, w, g, p2)
    set_param(w)
    with pytest.raises(ShapeError, match="7 elements"):
        ops.opt_step_adamw(ctx, w, g, g, g, p2)
    with pytest.raises(ShapeError, match="grad must have a's shape"):
        ops.opt_step_sgd(ctx, w, ctx.new_tensor_1d(F32, 5), p2)
    step = ops.opt_step_adamw(ctx, w, g, g, g, p7)
    assert step.view_src is w and step.name == "w (view)"


def test_ops_refuse_tensors_of_a_freed_context() -> None:
    old = Context(name="old")
    a = old.new_tensor_1d(F32, 4, name="a")
    old.free()
    new = Context(name="new")
    with pytest.raises(ContextError, match="freed"):
        ops.relu(new, a)
    with pytest.raises(ContextError):
        ops.add(new, new.new_tensor_1d(F32, 4), a)


def test_inplace_results_are_views_with_an_op(ctx: Context) -> None:
    a = ctx.new_tensor_2d(F32, 4, 3, name="a")
    for fn in (ops.relu_inplace, ops.sqr_inplace, ops.soft_max_inplace, ops.dup_inplace):
        r = fn(ctx, a)
        assert r.view_src is a and r.view_offs == 0 and r.nb == a.nb and r.name == "a (view)"
        assert r.src[0] is a and r.op.name != "NONE"
    v = ops.view_1d(ctx, a, 4, 16)
    r = ops.scale_inplace(ctx, v, 2.0)
    # a view of a view collapses onto the root with the offsets summed
    assert r.view_src is a and r.view_offs == 16 and r.op_params == (2.0, 0.0)


def test_graph_order_of_an_inplace_chain(ctx: Context) -> None:
    a = ctx.new_tensor_1d(F32, 4, name="a")
    y = ops.exp_inplace(ctx, ops.neg_inplace(ctx, a))
    g = Graph()
    g.build_forward_expand(y)
    assert [n.op.name for n in g.nodes] == ["UNARY", "UNARY"] and g.leafs == [a]
