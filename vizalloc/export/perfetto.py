"""A trace as Chrome Trace Event Format JSON, for ui.perfetto.dev and chrome://tracing.

What goes where (``pid``/``tid`` are ours, chosen so related tracks sit together):

* process 1 "vizalloc compute": one thread per backend. Each graph compute is a
  complete slice (``ph: X``) and each node compute a slice nested inside it
  (``[t_ns - wall_ns, t_ns]``, the node event is emitted after its kernel ran).
* one process per buffer (pid ``100 + buffer_id``): a counter (``ph: C``) of the
  bytes some tensor's current placement covers (overlaps counted once, 0 once the
  buffer is freed); tensor lifetimes, one async slice per placement (``ph: b``/``e``,
  ``cat: placement``, a unique ``id``), from the placement to its end (cleared, placed
  again, end of trace): overlapping lifetimes never share a synchronous track; and an
  instant (``ph: i``, thread scope) per placement.
* findings: global instants (``ph: i``, ``s: g``) named by their kind, at the step
  where the analysis saw them; markers too.

Timestamps are microseconds from the first event (``displayTimeUnit: ns``); events are
sorted by timestamp, metadata first, so every track is monotone. Names are passed
through :func:`vizalloc.text.inert` (no raw control characters or lone
surrogates reach the JSON).

    import io, json
    from vizalloc.analysis.model import build_model
    from vizalloc.export.perfetto import perfetto_trace, write_perfetto
    doc = perfetto_trace(build_model(events))      # a dict
    write_perfetto(build_model(events), io.StringIO())
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from typing import Any, TextIO

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.records import NEVER
from vizalloc.text import inert
from vizalloc.export.findings import Highlight
from vizalloc.export.units import fmt_bytes
from vizalloc.trace import events as ev

COMPUTE_PID = 1
BUFFER_PID_BASE = 100
NAME_CHARS = 120

JsonEvent = dict[str, Any]


class _Coverage:
    """Bytes covered by at least one of a set of byte ranges, kept up to date incrementally.

    Boundaries are kept sorted with a cover count per elementary segment, so adding or
    removing a range costs the segments it spans (views and in-place reuse overlap a lot,
    so a plain sum would count bytes twice).
    """

    def __init__(self) -> None:
        self.points: list[int] = []   # segment starts, sorted
        self.counts: list[int] = []   # cover count of [points[i], points[i + 1])
        self.covered = 0

    def _split(self, x: int) -> int:
        i = bisect.bisect_left(self.points, x)
        if i < len(self.points) and self.points[i] == x:
            return i
        count = self.counts[i - 1] if i > 0 else 0
        self.points.insert(i, x)
        self.counts.insert(i, count)
        return i

    def change(self, start: int, end: int, delta: int) -> None:
        if end <= start:
            return
        i = self._split(start)
        j = self._split(end)
        for k in range(i, j):
            before = self.counts[k]
            after = before + delta
            self.counts[k] = after
            length = self.points[k + 1] - self.points[k]
            if before == 0 and after > 0:
                self.covered += length
            elif before > 0 and after == 0:
                self.covered -= length


def _us(t_ns: int, t0: int) -> float:
    return round((t_ns - t0) / 1000.0, 3)


def _name(model: TraceModel, tensor_id: int) -> str:
    return inert(model.label(tensor_id), NAME_CHARS)


def perfetto_events(model: TraceModel, findings: Sequence[Highlight] = ()) -> list[JsonEvent]:
    """The trace events (metadata first, then by timestamp)."""
    events = model.events
    if not events:
        return []
    t0 = events[0].t_ns
    t_of = {e.seq: e.t_ns for e in events}
    t_end = events[-1].t_ns
    meta: list[JsonEvent] = [
        {"name": "process_name", "ph": "M", "pid": COMPUTE_PID, "tid": 0, "args": {"name": "vizalloc compute"}},
        {"name": "process_sort_index", "ph": "M", "pid": COMPUTE_PID, "tid": 0, "args": {"sort_index": 0}},
    ]
    out: list[JsonEvent] = []

    # 1. computes and node computes: one thread per backend
    tids: dict[str, int] = {}

    def backend_tid(name: str) -> int:
        tid = tids.get(name)
        if tid is None:
            tid = tids[name] = len(tids) + 1
            meta.append({"name": "thread_name", "ph": "M", "pid": COMPUTE_PID, "tid": tid,
                         "args": {"name": f"backend {inert(name, NAME_CHARS)}"}})
        return tid

    for c in sorted(model.computes.values(), key=lambda c: c.begin_seq):
        tid = backend_tid(c.backend)
        begin = t_of[c.begin_seq]
        end = t_of.get(c.end_seq, t_end) if c.end_seq != NEVER else t_end
        out.append({"name": f"compute #{c.compute_id} {model.graph_name(c.graph_id)}", "cat": "compute", "ph": "X",
                    "ts": _us(begin, t0), "dur": max(_us(end, t0) - _us(begin, t0), 0.0), "pid": COMPUTE_PID,
                    "tid": tid, "args": {"compute_id": c.compute_id, "graph_id": c.graph_id, "n_nodes": c.n_nodes}})
        prev_end = begin
        for n in c.nodes:
            # node slices must nest in the compute slice and not overlap each other
            start = min(max(n.t_ns - n.wall_ns, prev_end), n.t_ns)
            stop = min(n.t_ns, end)
            prev_end = stop
            ntid = backend_tid(n.backend) if n.backend != c.backend else tid
            out.append({"name": _name(model, n.tensor_id), "cat": "node", "ph": "X", "ts": _us(start, t0),
                        "dur": max(_us(stop, t0) - _us(start, t0), 0.0), "pid": COMPUTE_PID, "tid": ntid,
                        "args": {"tensor_id": n.tensor_id, "index": n.index, "op": model.tensors[n.tensor_id].op
                                 if n.tensor_id in model.tensors else "?",
                                 "reads": [_name(model, r) for r in n.reads], "wall_ns": n.wall_ns}})

    # 2. per buffer: metadata, lifetimes (async), placement instants, bytes counter
    for b in sorted(model.buffers.values(), key=lambda b: b.buffer_id):
        pid = BUFFER_PID_BASE + b.buffer_id
        title = f"buffer #{b.buffer_id} {inert(b.backend, 40)} {inert(b.usage, 20)} {fmt_bytes(b.nbytes)}"
        meta += [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": title}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": 1 + b.buffer_id}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "placements"}},
        ]
        changes: list[tuple[int, int, int, int]] = []  # (seq, order, +1/-1, placement index)
        for idx in b.placements:
            p = model.placements[idx]
            is_view = model.tensors[p.tensor_id].is_view if p.tensor_id in model.tensors else False
            name = _name(model, p.tensor_id)
            end_seq = min(p.end_seq, b.freed_seq)
            args = {"tensor_id": p.tensor_id, "buffer_id": p.buffer_id, "offset": p.offset, "nbytes": p.nbytes,
                    "placed_by": ev.enum_text(p.by), "binding_id": p.binding_id, "view": is_view,
                    "stale_reason": p.stale_reason, "end_reason": p.end_reason or "end of trace"}
            ts_b = _us(t_of[p.seq], t0)
            ts_e = _us(t_of.get(end_seq, t_end), t0) if end_seq != NEVER else _us(t_end, t0)
            pid_id = f"0x{idx:x}"
            out.append({"name": name, "cat": "placement", "ph": "b", "ts": ts_b, "pid": pid, "tid": 1,
                        "id": pid_id, "args": args})
            # an end at its own begin's timestamp must still sort after that begin
            out.append({"name": name, "cat": "placement", "ph": "e", "ts": max(ts_e, ts_b), "pid": pid, "tid": 1,
                        "id": pid_id, "_o": 0 if ts_e > ts_b else 6})
            out.append({"name": f"place {name}", "cat": "placement", "ph": "i", "s": "t", "ts": ts_b, "pid": pid,
                        "tid": 1, "args": args})
            if not is_view:
                changes.append((p.seq, 1, 1, idx))
                if end_seq != NEVER:
                    changes.append((end_seq, 0, -1, idx))
        counter_name = f"bytes in use #{b.buffer_id}"
        cover = _Coverage()
        out.append({"name": counter_name, "ph": "C", "ts": _us(t_of[b.alloc_seq], t0), "pid": pid,
                    "args": {"bytes": 0}})
        changes.sort()
        k = 0
        while k < len(changes):
            seq = changes[k][0]
            while k < len(changes) and changes[k][0] == seq:  # one counter value per step
                _, _, delta, idx = changes[k]
                p = model.placements[idx]
                cover.change(p.offset, p.end, delta)
                k += 1
            value = 0 if seq >= b.freed_seq else cover.covered
            out.append({"name": counter_name, "ph": "C", "ts": _us(t_of[seq], t0), "pid": pid,
                        "args": {"bytes": value}})
        if b.freed_seq != NEVER and not any(seq == b.freed_seq for seq, _, _, _ in changes):
            out.append({"name": counter_name, "ph": "C", "ts": _us(t_of[b.freed_seq], t0), "pid": pid,
                        "args": {"bytes": 0}})

    # 3. findings and markers: global instants
    for f in findings:
        if f.kind == "replan":
            continue  # every re-plan is drawn below from the model, with its cause
        ts = _us(t_of.get(f.seq, t_end), t0)
        who = _name(model, f.tensor_id) if f.tensor_id >= 0 else ""
        if f.other_id >= 0:
            who += f" / {_name(model, f.other_id)}"
        out.append({"name": f"{f.kind}: {who}" if who else f.kind, "cat": "hazard", "ph": "i", "s": "g", "ts": ts,
                    "pid": COMPUTE_PID, "tid": 0,
                    "args": {"kind": f.kind, "reason": inert(f.reason, 300), "tensor_id": f.tensor_id,
                             "other_id": f.other_id, "binding_id": f.binding_id, "seq": f.seq}})
    for mk in model.markers:
        out.append({"name": inert(mk.text, NAME_CHARS), "cat": "marker", "ph": "i", "s": "g",
                    "ts": _us(mk.t_ns, t0), "pid": COMPUTE_PID, "tid": 0, "args": {"seq": mk.seq}})
    for r in model.replans:
        out.append({"name": f"replan: {ev.enum_text(r.cause)}", "cat": "replan", "ph": "i", "s": "p",
                    "ts": _us(r.t_ns, t0), "pid": COMPUTE_PID, "tid": 0,
                    "args": {"galloc_id": r.galloc_id, "detail": inert(r.detail, 300)}})

    # stable sort: "e" before "b" at the same time keeps per-id pairs ordered; X by start then longest first
    phase_order = {"e": 0, "X": 1, "b": 2, "C": 3, "i": 4}
    out.sort(key=lambda e: (e["ts"], e.get("_o", phase_order.get(e["ph"], 5)), -e.get("dur", 0.0)))
    for e in out:
        e.pop("_o", None)
    return meta + out


def perfetto_trace(model: TraceModel, findings: Sequence[Highlight] = ()) -> dict[str, Any]:
    """The whole JSON document as a dict (``traceEvents`` plus ``displayTimeUnit``)."""
    return {
        "traceEvents": perfetto_events(model, findings),
        "displayTimeUnit": "ns",
        "otherData": {"generator": "vizalloc", "n_events": model.n_events},
    }


def write_perfetto(model: TraceModel, out: TextIO, findings: Sequence[Highlight] = ()) -> None:
    """Write the JSON document to a text stream."""
    json.dump(perfetto_trace(model, findings), out, separators=(",", ":"), allow_nan=False)
    out.write("\n")


def perfetto_json(model: TraceModel, findings: Sequence[Highlight] = ()) -> str:
    """The JSON document as a string."""
    return json.dumps(perfetto_trace(model, findings), separators=(",", ":"), allow_nan=False) + "\n"
