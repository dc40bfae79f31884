"""Perfetto / Chrome trace JSON: structure per the Trace Event Format, content per the trace."""

from __future__ import annotations

import io
import json

from tests.builders import TraceBuilder
from tests.export.scenarios import seed_stale, two_backends
from tests.export.trace_event_format import problems
from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.export.findings import highlights
from vizalloc.export.perfetto import (
    BUFFER_PID_BASE,
    COMPUTE_PID,
    _Coverage,
    perfetto_trace,
    write_perfetto,
)
from vizalloc.trace import events as ev


def _doc(events):
    model = build_model(events)
    return model, perfetto_trace(model, highlights(find_hazards(model)))


def test_checker_catches_broken_documents():
    bad = {"traceEvents": [
        {"name": "a", "ph": "X", "ts": 5, "dur": 10, "pid": 1, "tid": 1},
        {"name": "b", "ph": "X", "ts": 10, "dur": 10, "pid": 1, "tid": 1},   # partial overlap
        {"name": "c", "ph": "b", "cat": "k", "ts": 1, "pid": 1, "id": "1"},  # never ended
        {"name": "d", "ph": "C", "ts": 2, "pid": 1, "args": {"v": "x"}},      # non-numeric counter
        {"name": "e", "ph": "e", "cat": "k", "ts": 3, "pid": 1, "id": "2"},  # end without begin
        {"name": "f", "ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1},     # goes back in time
    ]}
    found = "\n".join(problems(bad))
    for text in ("overlaps its parent", "never ended", "counter values", "without a begin", "goes back"):
        assert text in found


def test_multi_backend_compute_is_well_formed():
    model, doc = _doc(two_backends())
    assert problems(doc) == []
    evs = doc["traceEvents"]
    threads = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 1}
    assert threads == {"backend SIM", "backend CPU"}
    nodes = [e for e in evs if e["ph"] == "X" and e.get("cat") == "node"]
    assert sorted(e["name"] for e in nodes) == ["h", "o", "r"]
    computes = [e for e in evs if e["ph"] == "X" and e.get("cat") == "compute"]
    assert len(computes) == len(model.computes) == 3
    # every node slice lies inside a compute slice of its own thread
    for n in nodes:
        assert any(c["tid"] == n["tid"] and c["ts"] <= n["ts"] and n["ts"] + n["dur"] <= c["ts"] + c["dur"] + 1e-6
                   for c in computes)


def test_lifetimes_are_async_pairs_one_per_placement():
    model, doc = _doc(seed_stale())
    assert problems(doc) == []
    evs = doc["traceEvents"]
    begins = [e for e in evs if e["ph"] == "b"]
    ends = [e for e in evs if e["ph"] == "e"]
    assert len(begins) == len(ends) == len(model.placements)
    assert len({e["id"] for e in begins}) == len(begins)
    assert {e["pid"] for e in begins} == {BUFFER_PID_BASE + b for b in model.buffers}
    # overlapping lifetimes (x, t, y, z share bytes [0, 256)) are async, never X slices
    assert not [e for e in evs if e["ph"] == "X" and e.get("cat") == "placement"]


def test_bytes_in_use_counter_counts_overlaps_once():
    model, doc = _doc(seed_stale())
    (buf,) = model.buffers
    values = [e["args"]["bytes"] for e in doc["traceEvents"]
              if e["ph"] == "C" and e["pid"] == BUFFER_PID_BASE + buf]
    # 0 at allocation; x, t, u share [0, 256); s adds [256, 260); y, z, q reuse the same bytes
    assert values[0] == 0 and max(values) == 260 and values[-1] == 260


def test_findings_and_replans_are_instants():
    model, doc = _doc(seed_stale())
    inst = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    hazards = [e for e in inst if e.get("cat") == "hazard"]
    assert [e["args"]["kind"] for e in hazards] == ["stale-overlap", "stale-overlap"]
    assert all(e["s"] == "g" for e in hazards)
    replans = [e for e in inst if e.get("cat") == "replan"]
    assert [e["name"] for e in replans] == ["replan: first", "replan: n_leafs"]


def test_freed_buffer_counter_drops_to_zero_and_lifetimes_end():
    b = TraceBuilder(auto_loc=False)
    b.emit(ev.BufferAllocated, 3, "CPU", "CPU", 0x10000, 64, 32, "compute", -1, -1, -1, "")
    b.tensor("w", 4, tid=7)
    b.place(7, 3, 0, nbytes=16)
    b.emit(ev.BufferFreed, 3, "test")
    b.emit(ev.Marker, "after free")
    model = build_model(b.events)
    doc = perfetto_trace(model)
    assert problems(doc) == []
    values = [e["args"]["bytes"] for e in doc["traceEvents"] if e["ph"] == "C"]
    assert values == [0, 16, 0]
    end = next(e for e in doc["traceEvents"] if e["ph"] == "e")
    assert end["ts"] == (b.events[3].t_ns - b.events[0].t_ns) / 1000
    assert any(e["name"] == "after free" and e["s"] == "g" for e in doc["traceEvents"] if e["ph"] == "i")


def test_write_perfetto_is_valid_json_with_ns_display_unit():
    model = build_model(two_backends())
    out = io.StringIO()
    write_perfetto(model, out)
    doc = json.loads(out.getvalue())
    assert doc["displayTimeUnit"] == "ns" and problems(doc) == []
    assert any(e["pid"] == COMPUTE_PID for e in doc["traceEvents"])


def test_empty_trace_gives_an_empty_event_list():
    assert perfetto_trace(build_model([]))["traceEvents"] == []


def test_coverage_counts_union_of_ranges():
    c = _Coverage()
    c.change(0, 256, 1)
    c.change(0, 256, 1)
    c.change(128, 300, 1)
    assert c.covered == 300
    c.change(0, 256, -1)
    assert c.covered == 300
    c.change(0, 256, -1)
    assert c.covered == 172
    c.change(128, 300, -1)
    assert c.covered == 0
