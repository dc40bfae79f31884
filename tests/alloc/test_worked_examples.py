"""The worked examples of ggml-semantics §8, with the offsets real ggml produced."""

from __future__ import annotations

from vizalloc.runtime import Context
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.tensor import Op

from tests.alloc.helpers import INPUT, OUTPUT, cpu, graph, leaf, node, view


def _chunk_of(galloc: GraphAllocator, t) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    for slot, vb in enumerate(galloc.buffers):
        for c, buf in enumerate(vb or []):
            if buf is t.storage:
                return slot, c
    raise AssertionError(f"{t} is not in the allocator's buffers")


def test_8_1_three_node_graph() -> None:
    ctx = Context()
    a = leaf(ctx, 10, 3, name="a", flags=INPUT)
    b = leaf(ctx, 10, 3, name="b")
    n0 = node(ctx, Op.MUL, [a, b])
    n1 = node(ctx, Op.SUM_ROWS, [n0], (1, 3))
    n2 = node(ctx, Op.SCALE, [n1], flags=OUTPUT)
    g = graph(n2)
    assert g.leafs == [a, b] and g.nodes == [n0, n1, n2]
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(g)
    assert [t.offset for t in (n0, n1, n2, a, b)] == [0, 128, 128, 0, 128]
    assert galloc.buffer_size(0) == 256


def test_8_2_views_multiple_consumers_unused_hole() -> None:
    ctx = Context()
    x = leaf(ctx, 64, name="x", flags=INPUT)
    h1 = node(ctx, Op.SQR, [x])
    h2 = node(ctx, Op.ADD, [x, h1])
    v = view(ctx, h2, (16,), 0)
    c = node(ctx, Op.CONT, [v], (16,))
    s = node(ctx, Op.SUM, [h2], (1,))
    o = node(ctx, Op.ADD1, [c, s], flags=OUTPUT)
    g = graph(o)
    assert g.nodes == [h1, h2, v, c, s, o]
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(g)
    assert [t.offset for t in (h1, h2, v, c, s, o, x)] == [256, 0, 0, 256, 320, 256, 0]
    assert galloc.buffer_size(0) == 512


def test_8_3_best_fit_and_later_block_tie() -> None:
    ctx = Context()
    p = [leaf(ctx, 16, name=f"p{i}") for i in range(4)]
    m0 = node(ctx, Op.CONCAT, [p[0], p[2]], (32,))
    m1 = node(ctx, Op.CONT, [p[3]])
    m2 = node(ctx, Op.CONCAT, [m1, p[1]], (32,))
    g = graph(*p, m0, m2)
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(g)
    assert [t.offset for t in (*p, m0, m1, m2)] == [0, 64, 128, 192, 256, 128, 384]
    assert galloc.buffer_size(0) == 512


def test_8_4_chunks_best_size_restarts_per_chunk() -> None:
    ctx = Context()
    names = ["a", "b", "c", "e", "f", "g", "h"]
    sizes = [16, 16, 16, 16, 32, 16, 16]
    t = {n: leaf(ctx, s, name=n) for n, s in zip(names, sizes)}
    n0 = node(ctx, Op.CONCAT, [t["a"], t["c"]], (32,))
    n1 = node(ctx, Op.CONCAT, [t["f"], t["h"]], (48,))
    n2 = node(ctx, Op.CONT, [t["b"]])
    g = graph(*t.values(), n0, n1, n2)
    galloc = GraphAllocator(cpu(max_size=256))
    assert galloc.alloc_graph(g)
    assert _chunk_of(galloc, n2) == (0, 1) and n2.offset == 0
    assert n2.storage is t["f"].storage
    assert [b.nbytes for b in galloc.buffers[0]] == [256, 256, 128, 192]
    assert galloc.buffer_size(0) == 832


def test_8_4_second_chunk_run() -> None:
    ctx = Context()
    a, b, c = (leaf(ctx, 24, name=n) for n in "abc")
    d = leaf(ctx, 100, name="d")
    n0 = node(ctx, Op.CONCAT, [a, b], (48,))
    n1 = node(ctx, Op.CONCAT, [n0, c], (72,))
    n2 = node(ctx, Op.CONCAT, [n1, d], (172,))
    g = graph(a, b, c, d, n2)
    galloc = GraphAllocator(cpu(max_size=256))
    assert galloc.alloc_graph(g)
    where = {x.name or "?": (_chunk_of(galloc, x)[1], x.offset) for x in (a, b, c, d)}
    assert where == {"a": (0, 0), "b": (0, 96), "c": (1, 0), "d": (2, 0)}
    assert [_chunk_of(galloc, x)[1] for x in (n0, n1, n2)] == [3, 4, 5]
    assert [buf.nbytes for buf in galloc.buffers[0]] == [192, 96, 416, 192, 288, 704]
    assert galloc.buffer_size(0) == 1888


def test_8_5_view_parent_never_reused_in_place() -> None:
    ctx = Context()
    x = leaf(ctx, 4, 4, name="x")
    a = node(ctx, Op.CONT, [x])
    r = view(ctx, a, (16,), 0, op=Op.RESHAPE)
    s = node(ctx, Op.SCALE, [r])
    t = node(ctx, Op.SCALE, [s])
    g = graph(t)
    galloc = GraphAllocator(cpu())
    assert galloc.alloc_graph(g)
    assert [u.offset for u in (x, a, r, s, t)] == [0, 64, 64, 0, 0]
    assert galloc.buffer_size(0) == 128
