"""Graph construction order, copies and the context rules behind them."""

from __future__ import annotations

import pytest

from vizalloc.errors import ContextError, GraphError, ShapeError
from vizalloc.runtime import F16, F32, Context, Graph, Op, graph_deep_copy, ops, set_param
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.trace import events as ev


def test_post_order_in_slot_order_with_params_as_nodes() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    w = ctx.new_tensor_1d(F32, 4, name="w")
    set_param(w)
    b = ctx.new_tensor_1d(F32, 4, name="b")
    s = ops.add(ctx, ops.mul(ctx, a, w), b)
    g = Graph()
    g.build_forward_expand(s)
    assert [t.name for t in g.leafs] == ["a", "b"]
    assert [t for t in g.nodes] == [w, s.src[0], s]  # a PARAM is a node even with op NONE


def test_repeated_expands_append_and_visit_once() -> None:
    ctx = Context()
    x = ctx.new_tensor_1d(F32, 4, name="x")
    y = ops.sqr(ctx, x)
    z = ops.add(ctx, y, y)
    g = Graph()
    g.build_forward_expand(y)
    g.build_forward_expand(z)
    g.build_forward_expand(z)
    assert g.nodes == [y, z] and g.leafs == [x]


def test_unnamed_tensors_get_ggml_names() -> None:
    ctx = Context()
    x = ctx.new_tensor_1d(F32, 4)
    g = Graph()
    g.build_forward_expand(ops.relu(ctx, x))
    assert x.name == "leaf_0" and g.nodes[0].name == "node_0"


def test_deep_chains_need_no_recursion() -> None:
    ctx = Context()
    t = ctx.new_tensor_1d(F32, 4)
    for _ in range(5000):
        t = ops.relu(ctx, t)
    g = Graph(size=8192)
    g.build_forward_expand(t)
    assert g.n_nodes == 5000


def test_full_graph_and_freed_context_are_clear_errors() -> None:
    ctx = Context()
    t = ctx.new_tensor_1d(F32, 4)
    for _ in range(3):
        t = ops.relu(ctx, t)
    with pytest.raises(GraphError, match="full"):
        Graph(size=2).build_forward_expand(t)
    ctx.free()
    with pytest.raises(ContextError, match="freed"):
        Graph().build_forward_expand(t)
    with pytest.raises(ContextError, match="freed"):
        ctx.new_tensor_1d(F32, 4)


def test_a_freed_context_lets_go_of_its_tensors_without_the_cycle_collector() -> None:
    # a tensor points at its context and the context lists its tensors: ggml_free ends
    # that cycle, so a large replay's tensors go by reference counting
    import gc
    import weakref

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        ctx = Context()
        t = ops.relu(ctx, ctx.new_tensor_1d(F32, 4))
        alive = weakref.ref(t)
        del t
        assert alive() is not None  # the context still lists it
        ctx.free()
        assert alive() is None
        assert list(ctx.tensors()) == [] and len(ctx) == 0
    finally:
        if was_enabled:
            gc.enable()


def test_view_of_view_collapses_onto_the_root() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 64, name="a")
    v1 = ops.view_1d(ctx, a, 32, 64)
    v2 = ops.view_1d(ctx, v1, 8, 16)
    assert v2.view_src is a and v2.view_offs == 80
    with pytest.raises(ShapeError, match="exceed"):
        ops.view_1d(ctx, a, 64, 4)


def test_view_of_an_allocated_root_has_data_but_no_buffer() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 16)
    buf = alloc_ctx_tensors(ctx, BufferType("CPU"))
    v = ops.view_1d(ctx, a, 4, 8)
    assert v.data == buf.base + 8 and v.buffer is None  # ggml: data at creation, buffer at view_init


def test_shallow_copies_share_tensors_deep_copies_do_not(recorded) -> None:
    ctx = Context()
    x = ctx.new_tensor_1d(F32, 4, name="x")
    y = ops.cast(ctx, ops.relu(ctx, x), F16)  # a cast is its own src[1]
    g = Graph()
    g.build_forward_expand(y)
    shallow = g.dup()
    assert shallow.nodes == g.nodes and shallow.leafs == g.leafs
    deep = graph_deep_copy(Context(), g)
    assert [t.op for t in deep.nodes] == [t.op for t in g.nodes]
    assert not set(map(id, deep.nodes)) & set(map(id, g.nodes))
    copy_of_y = deep.nodes[-1]
    assert copy_of_y.src[1] is copy_of_y and copy_of_y.src[0] is deep.nodes[0]
    self_refs = [e for e in recorded.events if isinstance(e, ev.TensorSrcSet) and e.src_id == e.tensor_id]
    assert {e.tensor_id for e in self_refs} == {y.id, copy_of_y.id}
    copies = {e.tensor_id: e.copy_of for e in recorded.events if isinstance(e, ev.TensorCreated) and e.copy_of >= 0}
    assert copies[copy_of_y.id] == y.id


def test_deep_copy_of_a_static_tensor_aliases_its_bytes() -> None:
    weights = Context(name="weights")
    w = weights.new_tensor_1d(F32, 8, name="w")
    alloc_ctx_tensors(weights, BufferType("CPU"))
    ctx = Context()
    out = ops.scale(ctx, w, 2.0)
    g = Graph()
    g.build_forward_expand(out)
    deep = graph_deep_copy(Context(), g)
    w_copy = deep.leafs[0]
    assert w_copy.data == w.data and w_copy.buffer is w.buffer  # external: the planner will skip it
    assert deep.nodes[0].data is None and deep.nodes[0].op is Op.SCALE


def test_the_deep_copy_is_named_after_what_it_is():
    """ggml-opt's dup_graph is a *deep* copy, unlike ggml_graph_dup (Graph.dup): the old
    name still works but warns, so nobody silently gets the fix for the other."""
    import warnings

    import vizalloc.runtime as rt
    from vizalloc.runtime import graph as graph_module

    assert "dup_graph" not in rt.__all__ and "graph_deep_copy" in rt.__all__
    with pytest.warns(DeprecationWarning, match=r"deep.*graph_deep_copy.*Graph\.dup"):
        old = rt.dup_graph
    assert old is graph_deep_copy
    with pytest.warns(DeprecationWarning, match="graph_deep_copy"):
        assert graph_module.dup_graph is graph_deep_copy
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rt.graph_deep_copy is graph_deep_copy
    with pytest.raises(AttributeError):
        rt.no_such_name  # noqa: B018


def test_what_a_program_calls_is_in_vizalloc_runtime():
    import vizalloc.runtime as rt
    from vizalloc.runtime import backends, backward, memory

    expected = {"tensor_set": memory.tensor_set, "tensor_get": memory.tensor_get,
                "graph_compute": backends.graph_compute, "alloc_ctx_tensors": backends.alloc_ctx_tensors,
                "graph_get_grad": backward.graph_get_grad, "CPUBackend": backends.CPUBackend}
    for name, obj in expected.items():
        assert name in rt.__all__ and getattr(rt, name) is obj, name
