"""The trace model: history, placements, staleness, memory maps, plans, bindings, live ranges."""

from __future__ import annotations

from vizalloc.analysis.model import build_model
from vizalloc.analysis.liveness import both_live, compute_spans
from vizalloc.analysis.records import NEVER, HistoryKind, PlacementState, nbytes_of
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder

from tests.builders import TraceBuilder
from tests.analysis.test_hazards import stale_scenario


def test_nbytes_matches_ggml():
    assert nbytes_of("f32", (4, 3, 1, 1), (4, 16, 48, 48)) == 48
    # a transposed view: strides swapped, same span
    assert nbytes_of("f32", (3, 4, 1, 1), (16, 4, 48, 48)) == 48
    assert nbytes_of("f16", (0, 3, 1, 1), (2, 0, 0, 0)) == 0


def test_quantized_tensors_are_sized_by_blocks_as_the_runtime_sizes_them():
    # a captured llama.cpp weight: q4_K [1024, 640] is 640 rows of 4 blocks of 144 B. Sized
    # as 1024 elements of 144 B it came out 515,520 B and overlapped the next weight.
    assert nbytes_of("q4_K", (1024, 640, 1, 1), (144, 576, 368640, 368640)) == 368640
    from vizalloc.runtime import Context
    from vizalloc.runtime.dtype import DType

    with StrictRecorder() as rec:
        ctx = Context()
        made = {t: ctx.new_tensor_2d(t, 512, 3) for t in (DType.Q4_0, DType.Q6_K, DType.IQ4_NL, DType.F16)}
    m = build_model(rec)
    by_name = {info.dtype: info.nbytes for info in m.tensors.values()}
    assert by_name == {t.label: x.nbytes for t, x in made.items()}
    assert by_name["q4_0"] == 3 * 512 // 32 * 18
    # a type this version does not know: one element of nb[0] bytes, as before
    assert nbytes_of("q9_future", (4, 2, 1, 1), (3, 12, 24, 24)) == 24


def test_accepts_a_recorder_or_events():
    rec = StrictRecorder()
    rec.events.append(ev.Marker(1, 0, None, "hello"))
    assert build_model(rec).markers[0].text == "hello"
    assert build_model(tuple(rec.events)).n_events == 1


def test_history_in_order_with_kinds_and_locations():
    tb, ids = stale_scenario()
    m = build_model(tb.events)
    kinds = [h.kind for h in m.history(ids["x"])]
    assert kinds[0] is HistoryKind.CREATED
    assert HistoryKind.PLACED in kinds and HistoryKind.SET in kinds and HistoryKind.READ in kinds
    seqs = [h.seq for h in m.history(ids["x"])]
    assert seqs == sorted(seqs)
    assert all(h.loc is not None and h.loc.file == "user.py" for h in m.history(ids["x"]))
    t_kinds = [h.kind for h in m.history(ids["t"])]
    assert t_kinds.count(HistoryKind.WRITTEN) == 2  # computed in both graphs


def test_staleness_by_replan_and_memory_map():
    tb, ids = stale_scenario()
    m = build_model(tb.events)
    px = m.placements[m.tensors[ids["x"]].placements[0]]
    assert px.stale_reason == "re-planned" and px.stale_seq < NEVER
    assert px.end_seq == NEVER  # still carried: nobody cleared it
    before, after = px.stale_seq - 1, px.stale_seq
    assert m.placement_state(px, before) is PlacementState.LIVE
    assert m.placement_state(px, after) is PlacementState.STALE
    end = m.events[-1].seq
    rows = m.memory_map(px.buffer_id, end)
    by_name = {(r.name, r.state) for r in rows}
    assert ("x", PlacementState.STALE) in by_name and ("y", PlacementState.LIVE) in by_name
    assert [r.offset for r in rows] == sorted(r.offset for r in rows)
    # before graph B was bound, only graph A's tensors are there, all live
    rows_a = m.memory_map(px.buffer_id, before)
    assert {r.name for r in rows_a} == {"x", "t", "u", "s"}
    assert all(r.state is PlacementState.LIVE for r in rows_a)


def test_staleness_by_reset_and_clear_ends_placements():
    tb = TraceBuilder()
    buf = tb.buffer(256, pool=0)
    a = tb.tensor("a", 16, flags=1)
    g = tb.graph([], [a])
    tb.sched_split(g, [])
    plan = tb.plan(0, g, [(a, 0, 64)], n_leafs=1)
    tb.bind(0, plan, g, [(a, buf, 0)])
    tb.emit(ev.SchedAlloc, 0, g, g, True)
    tb.sched_reset(0)
    reset_seq = tb.events[-1].seq
    tb.clear(a)
    m = build_model(tb.events)
    (p,) = [m.placements[i] for i in m.tensors[a].placements]
    assert (p.stale_reason, p.stale_seq) == ("reset", reset_seq)
    assert p.end_reason == "cleared by clear" and m.placement_at(a, tb.events[-1].seq) is None
    assert m.scheds[0].gallocs == {0} and m.bindings[1].sched_id == 0


def test_dangling_after_free():
    tb = TraceBuilder()
    buf = tb.buffer(64, pool=0)
    a = tb.tensor("a", 16)
    g = tb.graph([], [a])
    plan = tb.plan(0, g, [(a, 0, 64)], n_leafs=1)
    tb.bind(0, plan, g, [(a, buf, 0)])
    tb.free(buf, "grow")
    m = build_model(tb.events)
    p = m.placement_at(a, tb.events[-1].seq)
    assert p is not None and m.placement_state(p, tb.events[-1].seq) is PlacementState.DANGLING
    assert m.buffers[buf].free_cause == "grow" and not m.buffers[buf].alive_at(tb.events[-1].seq)
    assert p.stale_reason == "freed"


def test_plans_bindings_and_graph_snapshots():
    tb, ids = stale_scenario()
    m = build_model(tb.events)
    p1, p2 = sorted(m.plans.values(), key=lambda p: p.begin_seq)
    assert [a.tensor_id for a in p1.allocs] == [ids["x"], ids["s"]]
    assert p2.replans and p2.replans[0].cause is ev.ReplanCause.N_NODES
    assert p1.buffer_bytes == 288
    b1, b2 = sorted(m.bindings.values(), key=lambda b: b.begin_seq)
    assert b1.graph is not None and b1.graph.nodes == [ids["t"], ids["u"], ids["s"]]
    assert [m.placements[i].tensor_id for i in b2.placements] == [ids["y"], ids["z"], ids["q"]]


def test_a_recreated_graph_keeps_old_snapshots():
    tb = TraceBuilder()
    a = tb.tensor("a")
    b = tb.tensor("b")
    g = tb.graph([a])
    tb.emit(ev.ComputeBegin, 1, g, "CPU", 1)
    tb.emit(ev.ComputeEnd, 1, 0)
    tb.emit(ev.GraphCreated, g, 16, "new", -1)  # cleared and refilled
    tb.emit(ev.GraphExpanded, g, (b,), ())
    m = build_model(tb.events)
    assert m.computes[1].graph is not None and m.computes[1].graph.nodes == [a]
    assert m.graphs[g].nodes == [b]


def test_live_ranges_of_a_compute():
    tb, ids = stale_scenario()
    m = build_model(tb.events)
    c = max(m.computes.values(), key=lambda c: c.begin_seq)
    r = compute_spans(m, c)
    assert r[ids["x"]] == (-1, 0)          # input, read by node 0
    assert r[ids["t"]] == (0, 1)
    assert r[ids["q"]] == (2, 3)           # output: to the end
    assert both_live(r[ids["y"]], r[ids["t"]]) and not both_live(r[ids["x"]], r[ids["z"]])


def test_event_at_and_node_seq():
    tb, _ = stale_scenario()
    m = build_model(tb.events)
    c = max(m.computes.values(), key=lambda c: c.begin_seq)
    seq = m.node_seq(c.compute_id, 1)
    assert isinstance(m.event_at(seq), ev.NodeCompute) and m.event_at(seq).index == 1


def test_progress_callbacks_reach_the_total():
    from vizalloc.analysis.hazards import find_hazards

    tb, _ = stale_scenario()
    seen: list[tuple[int, int]] = []
    m = build_model(tb.events, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (len(tb.events), len(tb.events))
    seen.clear()
    find_hazards(m, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (len(tb.events), len(tb.events))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_build_and_hazards_leave_the_garbage_collector_as_they_found_it():
    import gc

    from vizalloc.analysis.hazards import find_hazards

    was = gc.isenabled()
    try:
        for state in (True, False):
            (gc.enable if state else gc.disable)()
            find_hazards(build_model([]))
            assert gc.isenabled() is state
    finally:
        (gc.enable if was else gc.disable)()
