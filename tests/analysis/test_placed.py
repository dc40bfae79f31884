"""The roots of a bound graph where they sit (``analysis.placed``), as the layout diagram
and the TUI's memory map draw them: stale only where the plan skipped them, dangling once
their buffer is freed."""

from __future__ import annotations

from vizalloc.analysis.model import build_model
from vizalloc.analysis.records import PlacementState
from vizalloc.analysis.placed import placed_roots

from tests.builders import TraceBuilder
from tests.tui.fixture_trace import G1, G2, G3, H, LOSS, W, X, Y, fixed_trace


def test_the_backward_binding_shows_the_skipped_shared_tensors_stale() -> None:
    model = build_model(fixed_trace())
    b = model.bindings[1]
    by_buffer = placed_roots(model, b.graph, b.plan_id, b.end_seq)
    assert sorted(by_buffer) == [0, 1]
    roots = {r.tensor_id: r for r in by_buffer[1]}
    assert sorted(roots) == sorted([X, H, Y, LOSS, G1, G2, G3])
    for t in (X, H, Y, LOSS):
        assert roots[t].state is PlacementState.STALE and not roots[t].planned
        assert roots[t].stale_note() == "stale: placed by binding #0, then reset"
    for t in (G1, G2, G3):
        assert roots[t].state is PlacementState.LIVE and roots[t].planned and roots[t].stale_note() == ""
    # x is an input of the backward graph, read until node 6; grad_y lands on its bytes meanwhile
    assert (roots[X].first, roots[X].last, roots[X].placement.offset) == (-1, 6, 0)
    assert (roots[G1].first, roots[G1].last, roots[G1].placement.offset) == (3, 5, 0)
    # the weight sits in its own buffer, placed outside any plan: never planned, never stale
    (w,) = by_buffer[0]
    assert w.tensor_id == W and w.state is PlacementState.LIVE and not w.planned


def test_the_forward_binding_is_all_live_and_in_place_results_are_not_planned() -> None:
    model = build_model(fixed_trace())
    b = model.bindings[0]
    roots = {r.tensor_id: r for r in placed_roots(model, b.graph, b.plan_id, b.end_seq)[1]}
    assert all(r.state is PlacementState.LIVE for r in roots.values())
    assert {t for t, r in roots.items() if r.planned} == {X, H, LOSS}   # y is computed in place on h


def test_roots_in_a_freed_buffer_are_dangling() -> None:
    tb = TraceBuilder()
    a, b, _, buf = tb.bound_relu()
    tb.free(buf, cause="resized")
    model = build_model(tb.events)
    (binding,) = model.bindings.values()
    by_buffer = placed_roots(model, binding.graph, binding.plan_id, tb.events[-1].seq)
    got = {r.tensor_id: (r.state, r.planned, r.stale_note()) for r in by_buffer[buf]}
    note = f"dangling: buffer #{buf} was freed"
    assert got == {a: (PlacementState.DANGLING, False, note), b: (PlacementState.DANGLING, False, note)}
    # right after the binding the same roots were live and planned
    before = placed_roots(model, binding.graph, binding.plan_id, binding.end_seq)[buf]
    assert [(r.state, r.planned) for r in before] == [(PlacementState.LIVE, True)] * 2


def test_a_split_input_stays_live_until_the_scheduler_copies_it() -> None:
    """The scheduler puts a view of each split input (the input as its source) right before
    the input's copy; the copy reads the input there, and ggml's planner keeps the input's
    bytes until then, so its live range must reach that node."""
    from tests.export.scenarios import two_backends
    from vizalloc.analysis.liveness import graph_spans

    model = build_model(two_backends(compute=False))
    (binding,) = model.bindings.values()
    nodes = binding.graph.nodes
    spans = graph_spans(model, binding.graph)
    copies = [c for s in model.scheds.values() for c in s.copies]
    assert copies
    for c in copies:
        at = nodes.index(c.copy_id)
        dep = model.tensors[nodes[at - 1]]
        assert dep.op == "NONE" and c.src_id in dep.srcs
        src_root = model.root(c.src_id)
        first, last = spans[src_root]
        assert last is not None and last >= at - 1, (model.label(c.src_id), spans[src_root], at)
