"""Every planning decision is an event (and nothing is built while no trace records)."""

from __future__ import annotations

from vizalloc.runtime import Context
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.tensor import Op
from vizalloc.trace import events as ev
from vizalloc.trace import recorder
from vizalloc.trace.recorder import StrictRecorder

from tests.alloc.helpers import INPUT, OUTPUT, cpu, graph, leaf, node, view


def _three_node(ctx: Context):  # type: ignore[no-untyped-def]
    a = leaf(ctx, 10, 3, name="a", flags=INPUT)
    b = leaf(ctx, 10, 3, name="b")
    n0 = node(ctx, Op.MUL, [a, b], name="n0")
    n1 = node(ctx, Op.SUM_ROWS, [n0], (1, 3), name="n1")
    n2 = node(ctx, Op.SCALE, [n1], name="n2", flags=OUTPUT)
    return graph(n2), (a, b, n0, n1, n2)


def test_plan_of_the_three_node_graph_step_by_step() -> None:
    ctx = Context()
    g, (a, b, n0, n1, n2) = _three_node(ctx)
    galloc = GraphAllocator(cpu())
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(g)
    plan = [e for e in rec.events if type(e).__name__.startswith("Plan")]
    begin = plan[0]
    assert isinstance(begin, ev.PlanBegin)
    assert (begin.galloc_id, begin.graph_id, begin.n_nodes, begin.n_leafs, begin.alignments) == (
        galloc.id, g.id, 3, 2, (32,))
    pid = begin.plan_id
    body = [(type(e).__name__, *ev.payload_fields(type(e))) for e in plan[1:]]
    got = [tuple(getattr(e, f) for f in ev.payload_fields(type(e))) for e in plan[1:]]
    assert [b[0] for b in body] == ["PlanAlloc", "PlanAlloc", "PlanInplace", "PlanFree", "PlanAlloc", "PlanFree",
                                    "PlanInplace", "PlanEnd"]
    assert got == [
        (pid, a.id, 0, 0, 0, 128, 1, -1),       # a: phase 1, new chunk
        (pid, b.id, 0, 0, 128, 128, 1, 0),      # b: phase 1, the tail (block 0)
        (pid, n0.id, a.id, 0, 0, 0),            # n0 takes a in place
        (pid, b.id, 0, 0, 128, 128),            # b freed after its last consumer
        (pid, n1.id, 0, 0, 128, 32, 3, 0),      # n1 in b's bytes (merged into the tail)
        (pid, n0.id, 0, 0, 0, 128),
        (pid, n2.id, n1.id, 0, 0, 128),
        (pid, ((256,),)),
    ]
    bind = [e for e in rec.events if isinstance(e, (ev.BindingBegin, ev.BindingEnd))]
    assert [type(e).__name__ for e in bind] == ["BindingBegin", "BindingEnd"]
    assert bind[0].plan_id == pid and bind[1].ok
    placed = [e for e in rec.events if isinstance(e, ev.TensorPlaced)]
    assert {e.tensor_id: e.offset for e in placed} == {a.id: 0, b.id: 128, n0.id: 0, n1.id: 128, n2.id: 128}
    assert all(e.by is ev.PlacedBy.GALLOCR and e.binding_id == bind[0].binding_id for e in placed)
    allocated = [e for e in rec.events if isinstance(e, ev.BufferAllocated)]
    assert [(e.pool_id, e.slot, e.chunk, e.nbytes, e.usage) for e in allocated] == [(galloc.id, 0, 0, 256, "compute")]


def test_refusals_name_every_parent_examined() -> None:
    ctx = Context()
    w = leaf(ctx, 16, name="w")
    alloc_ctx_tensors(ctx, BufferType("static"))
    x = leaf(ctx, 16, name="x")
    o = node(ctx, Op.SQR, [x], name="o", flags=OUTPUT)
    v = view(ctx, o, (16,), name="v")
    i16 = leaf(ctx, 8, name="i16", dtype=x.type)
    p = node(ctx, Op.CONT, [x], name="p")
    q = node(ctx, Op.ADD, [w, v], name="q")            # external, then view
    r = node(ctx, Op.ADD, [o, p], name="r")            # output, then p (used again later)
    s = node(ctx, Op.ADD, [r, i16], (16,), name="s")   # r in place (last use)
    t = node(ctx, Op.MUL, [p, s], (16,), name="t")     # p: consumers done now? it is the last use: takes p
    u = node(ctx, Op.SCALE, [i16], (16,), name="u")    # layout differs from i16 ([8] vs [16])
    g = graph(q, t, u)
    galloc = GraphAllocator(cpu())
    with StrictRecorder() as rec:
        assert galloc.alloc_graph(g)
    names = {k.id: k.name for k in (w, x, o, v, i16, p, q, r, s, t, u)}
    refused = [(names[e.tensor_id], names[e.parent_id], e.reason.value) for e in rec.events
               if isinstance(e, ev.PlanRefused)]
    inplace = [(names[e.tensor_id], names[e.parent_id]) for e in rec.events if isinstance(e, ev.PlanInplace)]
    assert ("q", "w", "external") in refused and ("q", "v", "view") in refused
    assert ("r", "o", "output") in refused and ("r", "p", "consumers") in refused
    assert ("u", "i16", "layout") in refused
    assert ("o", "x") not in inplace  # x has two consumers when o is planned
    assert ("o", "x", "consumers") in refused
    assert ("s", "r") in inplace and ("t", "p") in inplace


def test_not_own_parent() -> None:
    # an INPUT node is planned in phase 2, before its parent exists: the parent is not own
    ctx = Context()
    x = leaf(ctx, 16, name="x")
    p = node(ctx, Op.CONT, [x], name="p")
    q = node(ctx, Op.SCALE, [p], name="q", flags=INPUT)
    with StrictRecorder() as rec:
        assert GraphAllocator(cpu()).alloc_graph(graph(q))
    refused = [(e.tensor_id, e.parent_id, e.reason) for e in rec.events if isinstance(e, ev.PlanRefused)]
    assert refused == [(q.id, p.id, ev.RefuseReason.NOT_OWN)]
    phases = {e.tensor_id: e.phase for e in rec.events if isinstance(e, ev.PlanAlloc)}
    assert phases == {x.id: 1, q.id: 2, p.id: 3}


def test_no_events_are_built_without_a_recorder() -> None:
    built = []
    original = recorder.emit

    def spy(*args, **kw):  # type: ignore[no-untyped-def]
        built.append(args[0])
        return original(*args, **kw)

    recorder.emit = spy  # type: ignore[assignment]
    try:
        ctx = Context()
        g, _ = _three_node(ctx)
        assert GraphAllocator(cpu()).alloc_graph(g)
    finally:
        recorder.emit = original  # type: ignore[assignment]
    assert not recorder.active() and built == []
