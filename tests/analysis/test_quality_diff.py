"""Plan quality (lower bound, greedy by size, fragmentation, padding, peak set) and diffs."""

from __future__ import annotations

import json
from pathlib import Path

from vizalloc.analysis.diff import diff_models
from vizalloc.analysis.hazards import HazardKind
from vizalloc.analysis.model import build_model
from vizalloc.analysis.quality import Block, greedy_by_size, peak_live, plan_quality
from vizalloc.casefile import CaseReplay, parse_case
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder

from tests.builders import TraceBuilder
from tests.analysis.test_hazards import stale_scenario

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


def block(nbytes: int, start: int, end: int) -> Block:
    return Block((0,), ("t",), 0, 0, 0, nbytes, start, end)


def test_greedy_by_size_reuses_gaps_of_dead_blocks():
    # a [0,2) 100 B, b [1,3) 50 B, c [2,4) 100 B: a and c never overlap in time -> 150 B
    assert greedy_by_size([block(100, 0, 2), block(50, 1, 3), block(100, 2, 4)]) == 150
    # everything live together -> the sum
    assert greedy_by_size([block(64, 0, 5), block(32, 0, 5), block(32, 0, 5)]) == 128
    # blocks that are never live together share offsets whatever their order
    blocks = [block(100, 0, 10), block(40, 0, 2), block(100, 0, 10), block(60, 0, 2), block(100, 0, 10),
              block(40, 3, 5), block(60, 3, 5)]
    assert greedy_by_size(blocks) == 400


def test_quality_of_a_plan_with_a_hole():
    """ggml-style online placement leaves a hole that greedy-by-size avoids."""
    tb = TraceBuilder()
    a = tb.tensor("a", 8)     # 32 B
    b = tb.tensor("b", 16)    # 64 B
    c = tb.tensor("c", 24)    # 96 B
    g = tb.graph([a, b, c])
    pid = next(tb._plan_ids)
    tb.emit(ev.PlanBegin, 0, pid, g, 3, 0, (32,))
    tb.emit(ev.PlanAlloc, pid, a, 0, 0, 0, 32, 3, -1)
    tb.emit(ev.PlanAlloc, pid, b, 0, 0, 32, 64, 3, -1)
    tb.emit(ev.PlanFree, pid, a, 0, 0, 0, 32)
    tb.emit(ev.PlanAlloc, pid, c, 0, 0, 96, 96, 3, -1)   # does not fit the 32 B hole
    tb.emit(ev.PlanEnd, pid, ((192,),))
    (q,) = plan_quality(build_model(tb.events))
    (s,) = q.slots
    assert s.plan_bytes == 192
    assert s.lower_bound_bytes == 160          # b + c live together
    assert s.greedy_bytes == 160
    assert s.fragmentation_bytes == 32         # the hole a left below c at the peak
    assert s.padding_bytes == 0
    assert [blk.names for blk in s.live_at_peak] == [("c",), ("b",)]
    assert abs(s.vs_lower_bound - 1.2) < 1e-9


def test_peak_live_sums_half_open_ranges_and_names_the_first_peak_step():
    assert peak_live([(0, 2, 100), (1, 3, 50), (2, 4, 100)]) == (150, 1)
    assert peak_live([(0, 2, 100), (2, 4, 100)]) == (100, 0)     # one ends where the other starts
    assert peak_live([(-1, 5, 8), (3, 3, 1000), (4, 2, 1000), (0, 9, 0)]) == (8, -1)  # empty ranges count nothing
    assert peak_live([]) == (0, None)


def test_in_place_bytes_are_counted_once_at_the_peak():
    tb = TraceBuilder()
    a = tb.tensor("a", 16, flags=1)
    b = tb.node("b", "RELU", a)
    c = tb.node("c", "ADD", b, a)
    g = tb.graph([b, c], [a])
    tb.plan(0, g, [(a, 0, 64), (c, 64, 64)], inplace=[(b, a, 0)])
    (q,) = plan_quality(build_model(tb.events))
    (s,) = q.slots
    assert s.lower_bound_bytes == 128
    names = sorted(blk.names for blk in s.live_at_peak)
    assert names == [("a", "b"), ("c",)]


def test_padding_waste():
    tb = TraceBuilder()
    a = tb.tensor("a", 3)  # 12 B padded to 32
    g = tb.graph([a])
    tb.plan(0, g, [(a, 0, 32)])
    (q,) = plan_quality(build_model(tb.events))
    assert q.slots[0].padding_bytes == 20


def golden_model(name: str):
    data = json.loads((GOLDEN / f"{name}.json").read_text())
    with StrictRecorder() as rec:
        CaseReplay(parse_case(data)).run()
    return data, build_model(rec.events)


def test_golden_plans_never_beat_the_lower_bound():
    for name in ("rnd07_s707_n300", "tfm01_layer", "mb02_two_bufts_by_op", "mb03_same_buft_twice"):
        data, model = golden_model(name)
        for q in plan_quality(model):
            for s in q.slots:
                assert s.lower_bound_bytes <= s.plan_bytes
                assert s.lower_bound_bytes <= s.greedy_bytes
    # one allocator behind two slots (same buffer type twice): counted once, as ggml reports it
    data, model = golden_model("mb03_same_buft_twice")
    q = plan_quality(model)[0]
    assert [s.plan_bytes for s in q.slots] == [data["steps"][-1]["result"]["buffer_sizes"][0]]


def test_diff_of_two_batch_sizes():
    def run(n: int) -> TraceBuilder:
        tb = TraceBuilder()
        a = tb.tensor("a", n, flags=1)
        b = tb.node("b", "RELU", a, ne0=n)
        c = tb.node("c", "SUM", b, ne0=1, flags=2)
        g = tb.graph([b, c], [a])
        tb.plan(0, g, [(a, 0, 4 * n), (c, 4 * n, 32)], inplace=[(b, a, 0)])
        return tb

    a = build_model(run(16).events)
    b = build_model(run(32).events)
    d = diff_models(a, b)
    (p,) = d.plans
    assert p.bytes_a == (96,) and p.bytes_b == (160,) and p.size_delta == 64
    changed = {(t.name, t.status): (t.offset_a, t.offset_b, t.nbytes_a, t.nbytes_b) for t in p.tensors}
    assert changed == {("a", "changed"): (0, 0, 64, 128), ("b", "changed"): (0, 0, 64, 128),
                       ("c", "changed"): (64, 128, 32, 32)}
    assert not d.is_empty
    assert diff_models(a, build_model(run(16).events)).is_empty


def test_diff_reports_hazards_added_and_removed():
    broken, _ = stale_scenario("none")
    fixed, _ = stale_scenario("clear")
    d = diff_models(build_model(fixed.events), build_model(broken.events))
    kinds = {h.kind for h in d.hazards_added}
    assert HazardKind.STALE_OVERLAP in kinds and HazardKind.USE_AFTER_REUSE in kinds
    assert d.hazards_removed == ()
    back = diff_models(build_model(broken.events), build_model(fixed.events))
    assert {h.kind for h in back.hazards_removed} == kinds
