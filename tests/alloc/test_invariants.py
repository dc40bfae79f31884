"""Plan invariants on random graphs without external tensors: tensors whose live ranges
intersect never share bytes (except an in-place child with its parent, and views with
their roots); every offset is aligned and inside its buffer.

Live range of a root R (graph positions): from -1 for leafs and inputs (their contents
exist before the graph runs), else R's own position; to the last position of a node that
reads R or a view of R, or to the end for outputs and tensors nobody reads.
"""

from __future__ import annotations

import random

import pytest

from vizalloc.runtime import F32, Context, Graph
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.tensor import INPLACE_OPS, Op, Tensor, contiguous_strides

from tests.alloc.helpers import INPUT, OUTPUT, cpu


def random_graph(seed: int) -> tuple[Graph, list[int]]:
    """A random graph of elementwise ops, copies, concats, view ops and in-place API views."""
    rng = random.Random(seed)
    ctx = Context()
    pool: list[Tensor] = []
    shapes = [(8,), (16,), (8, 2), (16, 4), (24, 3)]
    n_slots = rng.choice([1, 1, 2])

    def new_leaf() -> Tensor:
        t = ctx.new_tensor_impl(F32, rng.choice(shapes))
        if rng.random() < 0.4:
            t.flags = INPUT
        pool.append(t)
        return t

    for _ in range(rng.randint(1, 4)):
        new_leaf()
    for _ in range(rng.randint(3, 40)):
        a = pool[-1 - rng.randrange(min(len(pool), 5))]
        kind = rng.random()
        if kind < 0.35:
            same = [t for t in pool if t.ne == a.ne and t.nb == a.nb]
            b = rng.choice(same)
            op = rng.choice([Op.ADD, Op.MUL, Op.SUB, Op.SQR, Op.UNARY, Op.SCALE])
            srcs = [a, b] if op in (Op.ADD, Op.MUL, Op.SUB) else [a]
            t = ctx.new_tensor_impl(a.type, a.ne, op=op, src=srcs, nb=contiguous_strides(a.type, a.ne)
                                    if a.view_src is None else None)
        elif kind < 0.5:
            t = ctx.new_tensor_impl(a.type, a.ne, op=Op.CONT, src=[a])
        elif kind < 0.6:
            n = a.nelements
            t = ctx.new_tensor_impl(a.type, (2 * n,), op=Op.CONCAT, src=[a, a])
        elif kind < 0.75:
            root = a.root
            n = max(1, root.nelements // rng.choice([1, 2, 4]))
            offs = rng.randrange(root.nelements - n + 1) * root.type.type_size
            t = ctx.new_tensor_impl(a.type, (n,), root, offs, op=rng.choice([Op.VIEW, Op.RESHAPE]), src=[a])
        elif kind < 0.85 and a.view_src is None:
            # ggml_add_inplace / ggml_scale_inplace: a view of a with a compute op
            t = ctx.new_tensor_impl(a.type, a.ne, a, 0, nb=a.nb, op=rng.choice([Op.ADD, Op.SCALE]), src=[a])
        elif kind < 0.92:
            t = ctx.new_tensor_impl(a.type, (1,), op=Op.SUM, src=[a])
        else:
            t = new_leaf()
            continue
        if rng.random() < 0.1:
            t.flags = OUTPUT
            if t.view_src is not None:
                t.view_src.flags |= OUTPUT
        pool.append(t)
    g = Graph()
    consumed = {id(s) for t in pool for s in t.src if s is not None}
    for t in pool:
        if id(t) not in consumed or rng.random() < 0.05:
            g.build_forward_expand(t)
    ids = [rng.randrange(n_slots) for _ in g.nodes]
    return g, ids


def live_ranges(g: Graph) -> dict[int, tuple[int, int]]:
    n = len(g.nodes)
    pos = {id(t): i for i, t in enumerate(g.nodes)}
    roots: dict[int, Tensor] = {}
    for t in g.leafs + g.nodes:
        roots[id(t.root)] = t.root
    start = {}
    end: dict[int, int] = {}
    for rid, r in roots.items():
        start[rid] = -1 if (id(r) not in pos or r.flags & INPUT) else pos[id(r)]
        end[rid] = start[rid]
    read_any = set()
    for i, t in enumerate(g.nodes):
        for s in t.src:
            if s is not None:
                rid = id(s.root)
                end[rid] = max(end[rid], i)
                read_any.add(rid)
        if t.view_src is not None and t.op is not Op.NONE:
            # a view node keeps its root until the view's own readers are done
            end[id(t.root)] = max(end[id(t.root)], i)
    for rid, r in roots.items():
        if r.flags & OUTPUT or rid not in read_any:
            end[rid] = n
    return {rid: (start[rid], end[rid]) for rid in roots}


def check_invariants(g: Graph, galloc: GraphAllocator) -> list[str]:
    problems = []
    ranges = live_ranges(g)
    roots = {id(t.root): t.root for t in g.leafs + g.nodes}
    placed = [r for r in roots.values() if r.data is not None]
    for r in placed:
        buf = r.storage
        off = r.data - buf.base
        if off % buf.buft.alignment:
            problems.append(f"{r} offset {off} not aligned to {buf.buft.alignment}")
        if off + buf.buft.alloc_size(r) > buf.nbytes:
            problems.append(f"{r} [{off}, +{r.nbytes}) outside its {buf.nbytes}-byte buffer")
        owned = any(buf is b for vb in galloc.buffers for b in (vb or []))
        if not owned:
            problems.append(f"{r} is not in the allocator's buffers")
    for i, a in enumerate(placed):
        for b in placed[i + 1:]:
            if a.storage is not b.storage or a.nbytes == 0 or b.nbytes == 0:
                continue
            if a.data >= b.data + b.nbytes or b.data >= a.data + a.nbytes:
                continue
            (sa, ea), (sb, eb) = ranges[id(a)], ranges[id(b)]
            first, second = (a, b) if sa <= sb else (b, a)
            (s1, e1), (s2, e2) = ranges[id(first)], ranges[id(second)]
            if e1 < s2:
                continue
            if e1 == s2 and second.op in INPLACE_OPS and any(s is first for s in second.src):
                continue  # in-place: the child is written by the parent's last reader
            problems.append(f"{a.name or a.id} {ranges[id(a)]} and {b.name or b.id} {ranges[id(b)]} share bytes")
    return problems


@pytest.mark.parametrize("seed", range(400))
def test_plan_invariants_hold(seed: int) -> None:
    g, ids = random_graph(seed)
    bufts = [cpu(alignment=32), cpu(alignment=64, max_size=512, name="B")]
    galloc = GraphAllocator(bufts[: max(ids, default=0) + 1])
    if len(galloc.bufts) > 1:
        assert galloc.reserve_n(g, ids, [0] * len(g.leafs))
    assert galloc.alloc_graph(g)
    assert check_invariants(g, galloc) == []


def test_the_checker_catches_a_shared_live_pair() -> None:
    # sanity: move a tensor onto the bytes of one that is live at the same time
    found = 0
    for seed in range(50):
        g, _ = random_graph(seed)
        galloc = GraphAllocator(cpu())
        assert galloc.alloc_graph(g)
        ranges = live_ranges(g)
        live = [t for t in g.nodes if t.view_src is None and t.data is not None]
        pairs = [(a, b) for a in live for b in live
                 if a is not b and ranges[id(a)][0] < ranges[id(b)][0] < ranges[id(a)][1]]
        if not pairs:
            continue
        a, b = pairs[0]
        b.data, b.storage = a.data, a.storage
        assert any("share bytes" in p for p in check_invariants(g, galloc))
        found += 1
    assert found > 20
