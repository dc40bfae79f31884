"""GraphAllocator behaviour beyond the golden corpus: re-plan causes, buffer rebuilds that
leave dangling tensors, reserve_n_size, external tensors, and the reclaim fix."""

from __future__ import annotations

import numpy as np
import pytest

from vizalloc.errors import DanglingPointerError, GraphError
from vizalloc.runtime import Context, set_strict
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import clear_tensor_pointers, tensor_array
from vizalloc.runtime.tensor import Op
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder

from tests.alloc.helpers import INPUT, OUTPUT, cpu, graph, leaf, node


def _chain(ctx: Context, n: int, width: int = 16):  # type: ignore[no-untyped-def]
    x = leaf(ctx, width, name="x", flags=INPUT)
    t = x
    for i in range(n):
        t = node(ctx, Op.CONT if i % 2 else Op.SQR, [t], name=f"n{i}")
    t.flags |= OUTPUT
    return graph(t)


def _replans(events) -> list[ev.Replan]:  # type: ignore[no-untyped-def]
    return [e for e in events if isinstance(e, ev.Replan)]


def test_replan_causes_are_reported() -> None:
    ctx = Context()
    galloc = GraphAllocator(cpu())
    g1 = _chain(ctx, 3)
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(g1)
        assert galloc.alloc_graph(g1)  # same graph: everything kept, no re-plan
    assert [r.cause for r in _replans(rec.events)] == [ev.ReplanCause.FIRST]
    g2 = _chain(ctx, 4)
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(g2)
    assert [r.cause for r in _replans(rec.events)] == [ev.ReplanCause.N_NODES]
    # same counts, bigger node: NODE_SIZE names the node
    g3 = _chain(ctx, 4, width=64)
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(g3)
    (r,) = _replans(rec.events)
    assert r.cause is ev.ReplanCause.NODE_SIZE and r.node_index == 0 and "needs 256 bytes" in r.detail
    # same counts, the node fits but its source does not: SRC_SIZE names the source
    xs = leaf(ctx, 16, name="xs")
    assert galloc.alloc_graph(graph(node(ctx, Op.SUM, [xs], (1,))))
    xb = leaf(ctx, 64, name="xb")
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(graph(node(ctx, Op.SUM, [xb], (1,))))
    (r,) = _replans(rec.events)
    assert r.cause is ev.ReplanCause.SRC_SIZE and r.tensor_id == xb.id and "source 0 'xb'" in r.detail
    # a node that had data at reserve time and lost it
    ctx4 = Context()
    w = leaf(ctx4, 16, name="w")
    alloc_ctx_tensors(ctx4, BufferType("static"))
    y = node(ctx4, Op.ADD, [w, w], name="y")
    g4 = graph(y)
    assert galloc.reserve(g4)
    clear_tensor_pointers(w)
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(g4)
    (r,) = _replans(rec.events)
    assert r.cause is ev.ReplanCause.LOST_DATA and r.tensor_id == w.id


def test_leaf_count_change_is_a_replan() -> None:
    ctx = Context()
    a, b = leaf(ctx, 8), leaf(ctx, 8)
    s = node(ctx, Op.ADD, [a, b])
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(graph(s))
    c = leaf(ctx, 8)
    s2 = node(ctx, Op.ADD, [a, b])
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(graph(c, s2))
    assert [r.cause for r in _replans(rec.events)] == [ev.ReplanCause.N_LEAFS]


def test_multi_buffer_alloc_graph_refuses_until_reserve_n() -> None:
    ctx = Context()
    g = _chain(ctx, 3)
    galloc = GraphAllocator([cpu(name="A"), cpu(name="B")])
    assert not galloc.alloc_graph(g)
    assert galloc.reserve_n(g, [0, 1, 0], [1])
    assert galloc.alloc_graph(g)
    # every node ends in slot 1: in-place reuse inherits the parent's slot (golden mb01)
    assert (galloc.buffer_size(0), galloc.buffer_size(1)) == (0, 128)
    with pytest.raises(GraphError, match="node_buffer_ids has 2 entries"):
        galloc.reserve_n(g, [0, 1], [1])
    with pytest.raises(GraphError, match=r"leaf_buffer_ids\[0\] = 5"):
        galloc.reserve_n(g, [0, 1, 0], [5])


def test_rebuild_frees_old_buffers_and_old_tensors_dangle() -> None:
    ctx = Context()
    small = _chain(ctx, 2, width=16)
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(small)
    old = small.nodes[0]
    old_buf = galloc.buffers[0][0]
    big = _chain(ctx, 2, width=1024)
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(big)
    assert old_buf.freed and galloc.buffers[0][0] is not old_buf
    freed = [e for e in rec.events if isinstance(e, ev.BufferFreed)]
    assert [e.buffer_id for e in freed] == [old_buf.id]
    assert old.data is not None and old.storage is old_buf  # dangling, detectable
    set_strict(True)
    try:
        with pytest.raises(DanglingPointerError):
            tensor_array(old)
    finally:
        set_strict(False)
    # a plan that fits keeps the buffers
    assert galloc.alloc_graph(small) and galloc.buffers[0][0] is not old_buf
    assert not galloc.buffers[0][0].freed


def test_reserve_n_size_reports_and_frees_when_growth_is_needed() -> None:
    ctx = Context()
    g = _chain(ctx, 3, width=16)
    galloc = GraphAllocator(cpu())
    assert galloc.reserve_n_size(g) == [128]
    assert galloc.buffers[0] is None  # nothing allocated
    assert galloc.reserve(g)
    buf = galloc.buffers[0][0]
    assert galloc.reserve_n_size(g) == [128] and galloc.buffers[0][0] is buf  # fits: kept
    big = _chain(ctx, 3, width=256)
    assert galloc.reserve_n_size(big) == [2048]
    assert buf.freed and galloc.buffers[0] is None  # ggml frees and leaves it empty
    assert galloc.buffer_size(0) == 0


def test_external_tensors_are_invisible_to_the_planner() -> None:
    ctx = Context()
    w = leaf(ctx, 16, name="w")
    static = alloc_ctx_tensors(ctx, BufferType("static"))
    x = leaf(ctx, 16, name="x", flags=INPUT)
    y = node(ctx, Op.ADD, [w, x], name="y")  # may not take w (external), may take x
    g = graph(y)
    galloc = GraphAllocator(cpu())
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(g)
    assert w.storage is static and y.offset == x.offset == 0
    assert [e.tensor_id for e in rec.events if isinstance(e, ev.PlanExternal)] == [w.id]
    refused = [(e.parent_id, e.reason) for e in rec.events if isinstance(e, ev.PlanRefused)]
    assert refused == [(w.id, ev.RefuseReason.EXTERNAL)]


def _sec92(ctx: Context):  # type: ignore[no-untyped-def]
    x = leaf(ctx, 64, name="x", flags=INPUT)
    t = node(ctx, Op.SQR, [x], name="t")
    u = node(ctx, Op.SQR, [t], name="u")
    s = node(ctx, Op.SUM, [u], (1,), name="s", flags=OUTPUT)
    a = graph(s)
    y = leaf(ctx, 64, name="y", flags=INPUT)
    z = node(ctx, Op.ADD, [t, y], name="z")
    q = node(ctx, Op.SUM, [z], (1,), name="q", flags=OUTPUT)
    return a, graph(q), (x, t, y, z)


def test_stale_shared_tensor_is_external_in_the_next_plan() -> None:
    ctx = Context()
    a, b, (x, t, y, z) = _sec92(ctx)
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(a)
    assert (x.offset, t.offset) == (0, 0)
    t_data = t.data
    assert galloc.alloc_graph(b)
    assert t.data == t_data  # kept: stale
    assert y.offset == 0 and z.offset == 0  # §9.1 observed: y and z land on t's bytes


def test_reclaim_replans_shared_tensors_like_fresh_ones() -> None:
    ctx = Context()
    a, b, (x, t, y, z) = _sec92(ctx)
    galloc = GraphAllocator(cpu(), reclaim=True)
    assert galloc.alloc_graph(a)
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(b)
    cleared = {e.tensor_id for e in rec.events if isinstance(e, ev.TensorCleared)}
    assert {x.id, t.id} <= cleared
    assert all(e.by == "invalidate" for e in rec.events if isinstance(e, ev.TensorCleared))
    got = {n.name: n.offset for n in (x, t, y, z)}
    # the same graph planned from scratch
    ctx2 = Context()
    _a2, b2, (x2, t2, y2, z2) = _sec92(ctx2)
    assert GraphAllocator(cpu()).alloc_graph(b2)
    assert got == {n.name: n.offset for n in (x2, t2, y2, z2)}
    assert len({t.offset, y.offset}) == 2  # no longer on top of each other


def test_reclaim_forgets_after_explicit_reserve() -> None:
    ctx = Context()
    a, b, (x, t, y, z) = _sec92(ctx)
    galloc = GraphAllocator(cpu(), reclaim=True)
    assert galloc.alloc_graph(a)
    t_data = t.data
    assert galloc.reserve(b)  # the counter-example: an explicit reserve forgets the bindings
    assert galloc.alloc_graph(b)
    assert t.data == t_data


def test_views_are_bound_to_their_roots() -> None:
    ctx = Context()
    x = leaf(ctx, 8, 4, name="x")
    v = ctx.new_tensor_impl(x.type, (8, 2), x, 64, op=Op.VIEW, src=[x], name="v")
    c = node(ctx, Op.CONT, [v], name="c", flags=OUTPUT)
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(graph(c))
    assert v.data == x.data + 64 and v.buffer is x.buffer
    np.testing.assert_array_equal(tensor_array(v).shape, (1, 1, 2, 8))


def test_graph_view_plans_sources_outside_the_slice() -> None:
    # ggml_graph_view: nodes [1, 3) and no leafs; the source a is not in the graph, so
    # phase 3 allocates it for its consumer, which then takes it over in place
    ctx = Context()
    x = leaf(ctx, 64, name="x")
    a = node(ctx, Op.SQR, [x], name="a")
    b = node(ctx, Op.SQR, [a], name="b")
    c = node(ctx, Op.CONT, [b], name="c")
    g = graph(c).view(1, 3)
    assert [t.name for t in g.nodes] == ["b", "c"] and g.leafs == []
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(g)
    assert (a.offset, b.offset, c.offset, galloc.buffer_size(0)) == (0, 0, 256, 512)
    assert x.data is None  # not reached by the slice


def test_view_root_outside_the_graph() -> None:
    # a view node whose root is no graph member: the root is still counted and planned
    ctx = Context()
    r = leaf(ctx, 32, name="r")
    v = ctx.new_tensor_impl(r.type, (16,), r, 64, op=Op.VIEW, src=[r], name="v")
    c = node(ctx, Op.CONT, [v], name="c")
    g = graph(c)
    g2 = g.view(1, 2)  # just c: v and r are outside
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(g2)
    assert v.data is None and c.offset == 0  # ggml: v's root has no buffer, the view stays unbound


def test_input_node_allocated_in_phase_2_sees_partial_counts() -> None:
    # An INPUT node is allocated during counting (semantics §5.5 phase 2), so its in-place
    # choice sees only the consumers counted so far: y takes x's block because p is x's
    # only consumer before y; x loses its block and is placed again before p in phase 3.
    # Offsets observed with ggml-python 0.0.45 (ggml_relu, ggml_sqr + ggml_set_input,
    # ggml_add; CPU buffer type): x 256, p 512, y 0, q 512, buffer 768 bytes.
    ctx = Context()
    x = leaf(ctx, 64, name="x")
    p = node(ctx, Op.UNARY, [x], name="p")
    y = node(ctx, Op.SQR, [x], name="y", flags=INPUT)
    q = node(ctx, Op.ADD, [p, y], name="q")
    g = graph(q)
    assert [t.name for t in g.nodes] == ["p", "y", "q"]
    galloc = GraphAllocator(cpu())
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(g)
    assert [(t.name, t.offset) for t in (x, p, y, q)] == [("x", 256), ("p", 512), ("y", 0), ("q", 512)]
    assert galloc.buffer_size(0) == 768
    inplace = [(e.tensor_id, e.parent_id) for e in rec.events if isinstance(e, ev.PlanInplace)]
    assert inplace == [(y.id, x.id), (q.id, p.id)]
