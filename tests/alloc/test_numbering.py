"""``flatten`` numbers tensors two ways: while it scans them (incremental) or all at once
first (bulk, also the fallback for a graph that lists a tensor twice). Both must give the
same numbering, also for graphs that the incremental numbering cannot finish: sources
outside the graph or later in it, view roots outside it, tensors listed twice. The plans
made with and without a trace recording must be the same too."""

from __future__ import annotations

from vizalloc.runtime import Context, Graph
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.alloc.planner import flatten
from vizalloc.runtime.tensor import Op
from vizalloc.trace.recorder import StrictRecorder

from tests.alloc.helpers import INPUT, cpu, leaf, node, view


def _records(g: Graph, traced: bool) -> tuple:
    galloc = GraphAllocator(cpu())
    if traced:
        with StrictRecorder():
            galloc.reserve(g)
    else:
        galloc.reserve(g)
    plan = galloc.plan
    assert plan is not None
    srcs = [[plan.src(i, j) for j in range(len(n.src))] for i, n in enumerate(g.nodes)]
    return plan.node_records(), plan.leaf_records(), srcs, galloc.chunk_sizes()


def _numbering(g: Graph, incremental: bool) -> tuple:
    f = flatten(g, plain=True, incremental=incremental)
    return (f.tensors, f.leaf_k, f.node_k, f.node_src, f.empty, f.view_root, bytes(f.flags), bytes(f.state),
            f.size, bytes(f.has_record), f.external)


def _same_both_ways(g: Graph) -> None:
    incremental, bulk = _numbering(g, incremental=True), _numbering(g, incremental=False)
    assert incremental == bulk
    tensors = incremental[0]
    assert len({id(t) for t in tensors}) == len(tensors)  # one number per tensor
    assert _records(g, traced=False) == _records(g, traced=True)


def _chain(ctx: Context) -> tuple:
    a = leaf(ctx, 64, name="a", flags=INPUT)
    b = node(ctx, Op.SQR, [a], name="b")
    c = node(ctx, Op.ADD, [b, a], name="c")
    d = node(ctx, Op.UNARY, [c], name="d")
    e = node(ctx, Op.MUL, [d, b], name="e")
    return a, b, c, d, e


def _graph(leafs: list, nodes: list) -> Graph:
    g = Graph()
    g.leafs = list(leafs)
    g.nodes = list(nodes)
    return g


def test_ordinary_graph() -> None:
    ctx = Context()
    a, b, c, d, e = _chain(ctx)
    _same_both_ways(_graph([a], [b, c, d, e]))


def test_source_outside_the_graph() -> None:
    ctx = Context()
    a, b, c, d, e = _chain(ctx)
    _same_both_ways(_graph([a], [c, d, e]))  # b is a source of c and e but not listed


def test_source_later_in_the_graph() -> None:
    ctx = Context()
    a, b, c, d, e = _chain(ctx)
    _same_both_ways(_graph([a], [c, b, d, e]))  # c's source b comes after it


def test_view_root_outside_and_later() -> None:
    ctx = Context()
    a, b, c, d, e = _chain(ctx)
    v = view(ctx, c, (32,), name="v")
    w = node(ctx, Op.SCALE, [v], (32,), name="w")
    _same_both_ways(_graph([a], [b, v, w, c, d, e]))  # v's root c comes later
    x = view(ctx, b, (16,), 64, name="x", op=Op.NONE)
    y = node(ctx, Op.SQR, [x], (16,), name="y")
    _same_both_ways(_graph([a], [y, c]))  # x and its root b are not listed
    z = ctx.new_tensor_impl(c.type, (32,), c, 0, op=Op.VIEW, name="z")  # a view without sources
    u = node(ctx, Op.SQR, [z], (32,), name="u")
    _same_both_ways(_graph([a], [b, z, u, c, d, e]))  # z's root c comes later


def test_tensor_listed_twice() -> None:
    ctx = Context()
    a, b, c, d, e = _chain(ctx)
    _same_both_ways(_graph([a], [b, c, d, c, e]))
    _same_both_ways(_graph([a, a], [b, c, d, e]))
    _same_both_ways(_graph([a], [b, c, d, e, a]))
