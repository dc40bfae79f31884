"""The binding-time overlap check (bytes x live time sweep) against brute force."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from vizalloc.analysis import rects as rects_mod
from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.analysis.rects import intersecting_pairs, intersecting_pairs_brute
from vizalloc.trace import events as ev

from tests.builders import TraceBuilder

rect = st.tuples(st.integers(0, 40), st.integers(0, 12), st.integers(-1, 10), st.integers(0, 8)).map(
    lambda r: (r[0], r[0] + r[1], r[2], r[2] + r[3]))


@settings(max_examples=300, deadline=None)
@given(st.lists(rect, max_size=40))
def test_pairs_equal_brute_force(rects):
    assert intersecting_pairs(rects) == intersecting_pairs_brute(rects)


def test_pairs_edges_touching_is_not_overlapping():
    # bytes [0,8) and [8,16) touch; live [0,3) and [3,5) touch (ggml's in-place pattern)
    assert intersecting_pairs([(0, 8, 0, 3), (8, 16, 0, 3)]) == []
    assert intersecting_pairs([(0, 8, 0, 3), (0, 8, 3, 5)]) == []
    assert intersecting_pairs([(0, 8, 0, 3), (4, 8, 2, 5), (0, 16, -1, 9)]) == [(0, 1), (0, 2), (1, 2)]
    # a nested rectangle and an empty one
    assert intersecting_pairs([(0, 100, 0, 10), (10, 20, 5, 6), (10, 10, 0, 10)]) == [(0, 1)]


def _byte_only_all_pairs(rects):
    """The old check's candidate pairs: every pair sharing a byte (``_overlap`` filters by liveness)."""
    out = []
    for j, (sj, ej, _, _) in enumerate(rects):
        for i in range(j):
            si, ei, _, _ = rects[i]
            if max(si, sj) < min(ei, ej):
                out.append((i, j))
    return out


def random_layout_trace(seed: int) -> list[ev.Event]:
    """A random graph bound twice (a reset in between, so some placements are stale) over packed offsets."""
    rng = random.Random(seed)
    tb = TraceBuilder()
    buf = tb.buffer(4096, pool=0)
    wbuf = tb.buffer(4096)
    leafs = [tb.tensor(f"w{i}", rng.choice((4, 8, 16)), flags=rng.choice((0, 1))) for i in range(rng.randint(1, 5))]
    for w in leafs[:2]:
        tb.place(w, wbuf, rng.randrange(0, 64, 16))
    nodes: list[int] = []
    reads: dict[int, list[int]] = {}
    for i in range(rng.randint(2, 14)):
        pool = leafs + nodes
        srcs = rng.sample(pool, min(len(pool), rng.randint(1, 2)))
        flags = 2 if rng.random() < 0.15 else 0
        nodes.append(tb.node(f"n{i}", rng.choice(("ADD", "MUL", "SQR")), *srcs, ne0=rng.choice((4, 8, 16)),
                             flags=flags))
        reads[nodes[-1]] = srcs
    g = tb.graph(nodes, leafs)
    for rnd in range(2):
        plan = tb.plan(0, g, n_nodes=len(nodes), n_leafs=len(leafs))
        movable = [t for t in nodes + leafs[2:] if rnd == 0 or rng.random() < 0.5]
        tb.bind(0, plan, g, [(t, buf, 16 * rng.randrange(0, 6)) for t in movable])
        tb.compute(g, [(t, reads[t]) for t in nodes])
        tb.sched_reset()
    return tb.events


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_binding_check_finds_what_all_pairs_finds(seed):
    events = random_layout_trace(seed)
    new = [h.report() for h in find_hazards(build_model(events))]
    saved = rects_mod.intersecting_pairs
    rects_mod.intersecting_pairs = _byte_only_all_pairs
    try:
        old = [h.report() for h in find_hazards(build_model(events))]
    finally:
        rects_mod.intersecting_pairs = saved
    assert new == old


def test_random_layouts_do_find_overlaps():
    # the comparison above is not vacuous: the random layouts produce binding-time findings
    kinds = set()
    for seed in range(40):
        kinds |= {h.kind.value for h in find_hazards(build_model(random_layout_trace(seed))) if h.binding_id >= 0}
    assert {"stale-overlap", "use-after-reuse"} <= kinds
