"""The JSON report: hazards, plans, bindings, buffers and plan quality, for CI and scripts.

The schema is ``docs/report-schema.md`` (``"schema": "vizalloc.report/1"``); every key
listed there is always present, ids are integers, sizes are bytes, ``seq`` values are
event sequence numbers of the trace. Hazards are the analysis's own ``to_dict()``.

Plan quality per (plan, buffer slot) comes from ``vizalloc.analysis.quality`` (the plan's
bytes, the lower bound, greedy-by-size, fragmentation, padding, what is live at the
peak); ``overlapping_pairs`` re-checks the recorded offsets on the plan's MiniMalloc
problem (:mod:`vizalloc.export.minimalloc`): 0 for a correct planner.

    import io
    from vizalloc.analysis.model import build_model
    from vizalloc.analysis.hazards import find_hazards
    from vizalloc.export.report import report_dict, write_report
    model = build_model(events)
    write_report(model, find_hazards(model), io.StringIO())
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.quality import plan_quality
from vizalloc.analysis.records import NEVER
from vizalloc.export.minimalloc import plan_problems
from vizalloc.trace.events import enum_text

SCHEMA = "vizalloc.report/1"


def _seq(x: int) -> int | None:
    return None if x == NEVER else x


def _quality(model: TraceModel, plan_id: int) -> list[dict[str, Any]]:
    """Per buffer slot: ``vizalloc.analysis.quality`` figures, plus the MiniMalloc check of the offsets."""
    overlaps: dict[int, int] = {}
    for p in plan_problems(model, plan_id):
        overlaps[p.slot] = overlaps.get(p.slot, 0) + len(p.overlaps())
    out = []
    for pq in plan_quality(model, plan_id):
        for sq in pq.slots:
            out.append({
                "slot": sq.slot, "plan_nbytes": sq.plan_bytes, "lower_bound_nbytes": sq.lower_bound_bytes,
                "greedy_nbytes": sq.greedy_bytes,
                "ratio": round(sq.plan_bytes / sq.lower_bound_bytes, 4) if sq.lower_bound_bytes else None,
                "ratio_greedy": round(sq.plan_bytes / sq.greedy_bytes, 4) if sq.greedy_bytes else None,
                "peak_step": sq.peak_step, "fragmentation_nbytes": sq.fragmentation_bytes,
                "padding_nbytes": sq.padding_bytes, "n_blocks": sq.n_blocks,
                "live_at_peak": [{"tensor_ids": list(b.tensor_ids), "names": list(b.names), "chunk": b.chunk,
                                  "offset": b.offset, "nbytes": b.nbytes} for b in sq.live_at_peak],
                "overlapping_pairs": overlaps.get(sq.slot, 0),
            })
    return out


def report_dict(model: TraceModel, hazards: Sequence[Any], *, header: Any = None) -> dict[str, Any]:
    """The report as plain JSON-ready data (see ``docs/report-schema.md``)."""
    by_kind = Counter(getattr(h.kind, "value", str(h.kind)) for h in hazards)
    plans = []
    for plan in sorted(model.plans.values(), key=lambda p: p.plan_id):
        refused = Counter(enum_text(d.reason) for d in plan.refused)
        plans.append({
            "plan_id": plan.plan_id, "galloc_id": plan.galloc_id, "graph_id": plan.graph_id,
            "n_nodes": plan.n_nodes, "n_leafs": plan.n_leafs, "begin_seq": plan.begin_seq,
            "end_seq": _seq(plan.end_seq),
            "chunk_nbytes": [list(c) for c in plan.chunk_sizes], "total_nbytes": plan.buffer_bytes,
            "replans": [{"cause": enum_text(r.cause), "detail": r.detail, "seq": r.seq} for r in plan.replans],
            "n_allocs": len(plan.allocs), "n_inplace": len(plan.inplace), "n_frees": len(plan.frees),
            "n_externals": len(plan.externals), "refused": dict(sorted(refused.items())),
            "quality": _quality(model, plan.plan_id),
        })
    # by id, each binding read when its row is made (a streamed model makes the records of
    # repeated steps on demand: all of them at once would be every step's graph again)
    bindings = [
        {"binding_id": b.binding_id, "galloc_id": b.galloc_id, "plan_id": b.plan_id, "graph_id": b.graph_id,
         "sched_id": b.sched_id, "ok": b.ok, "begin_seq": b.begin_seq, "end_seq": _seq(b.end_seq),
         "n_placements": len(b.placements)}
        for b in map(model.bindings.__getitem__, sorted(model.bindings))
    ]
    buffers = [
        {"buffer_id": b.buffer_id, "backend": b.backend, "buft": b.buft, "nbytes": b.nbytes,
         "alignment": b.alignment, "usage": b.usage, "pool_id": b.pool_id, "slot": b.slot, "chunk": b.chunk,
         "cause": b.cause, "alloc_seq": b.alloc_seq, "freed_seq": _seq(b.freed_seq), "free_cause": b.free_cause}
        for b in sorted(model.buffers.values(), key=lambda b: b.buffer_id)
    ]
    head: dict[str, Any] | None = None
    if header is not None:
        head = {"format_version": header.format_version, "vizalloc_version": header.vizalloc_version,
                "python_version": header.python_version, "created_unix_ns": header.created_unix_ns,
                "pid": header.pid, "argv": list(header.argv), "capture_values": header.capture_values}
    return {
        "schema": SCHEMA,
        "trace": {"header": head, "n_events": model.n_events, "n_tensors": len(model.tensors),
                  "n_graphs": len(model.graphs), "n_computes": len(model.computes)},
        "summary": {"n_hazards": len(hazards), "by_kind": dict(sorted(by_kind.items())),
                    "n_plans": len(plans), "n_bindings": len(bindings), "n_buffers": len(buffers),
                    "n_replans": len(model.replans)},
        "hazards": [h.to_dict() for h in hazards],
        "plans": plans,
        "bindings": bindings,
        "buffers": buffers,
    }


def report_json(model: TraceModel, hazards: Sequence[Any], *, header: Any = None) -> str:
    """The report as indented JSON text."""
    return json.dumps(report_dict(model, hazards, header=header), indent=2, allow_nan=False) + "\n"


def write_report(model: TraceModel, hazards: Sequence[Any], out: TextIO, *, header: Any = None) -> None:
    """Write the report to a text stream."""
    out.write(report_json(model, hazards, header=header))
