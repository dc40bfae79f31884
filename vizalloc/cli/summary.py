"""vizalloc summary: tables of a trace's graphs, plans, buffers, peaks, plan quality and hazards.

    vizalloc summary run.vztrace
    vizalloc summary run.vztrace --json     # the same numbers as JSON

Plan quality compares each plan's buffer with the lower bound (the most bytes live at any
step of the plan) and with a greedy-by-size packing of the same lifetimes (Pisarchyk &
Lee, 2020); "live at peak" lists the largest blocks live at the plan's peak, with tensors
that took a block over in place shown together.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from vizalloc.cli.check import analyse, counts, load_model

HELP = "tables of graphs, plans, buffers, peaks and hazards"


#: Reads files only: the console script may end the process without freeing objects one by one.
FAST_EXIT = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="a trace file (.vztrace)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="blocks shown per plan peak (default: 5)")


#: Longest name (tensor, buffer type, backend, context) shown in a table cell.
NAME_CHARS = 60


def summarize(model: Any, hazards: list[Any], top: int = 5) -> dict[str, Any]:
    """The summary as plain data (what ``--json`` prints and the tables show)."""
    from vizalloc.analysis.diff import peak_buffer_bytes
    from vizalloc.analysis.model import NEVER
    from vizalloc.analysis.quality import plan_quality

    quality = {q.plan_id: q for q in plan_quality(model)}
    plans = []
    for p in sorted(model.plans.values(), key=lambda p: p.begin_seq):
        q = quality[p.plan_id]
        peak = []
        for s in q.slots:
            for blk in s.live_at_peak[:top]:
                peak.append({"slot": s.slot, "tensors": list(blk.names), "offset": blk.offset,
                             "nbytes": blk.nbytes})
        plans.append({
            "plan_id": p.plan_id, "galloc_id": p.galloc_id, "graph_id": p.graph_id, "n_nodes": p.n_nodes,
            "n_leafs": p.n_leafs, "causes": [r.cause.value if hasattr(r.cause, "value") else str(r.cause)
                                             for r in p.replans],
            "plan_bytes": q.plan_bytes, "lower_bound_bytes": q.lower_bound_bytes, "greedy_bytes": q.greedy_bytes,
            "fragmentation_bytes": sum(s.fragmentation_bytes for s in q.slots),
            "padding_bytes": sum(s.padding_bytes for s in q.slots), "live_at_peak": peak,
        })
    return {
        "events": model.n_events,
        "tensors": len(model.tensors),
        "graphs": [{"graph_id": g.graph_id, "kind": g.kind, "nodes": len(g.nodes), "leafs": len(g.leafs),
                    "source_graph": g.source_graph} for g in model.graphs.values()],
        "plans": plans,
        "bindings": len(model.bindings),
        "computes": len(model.computes),
        "buffers": [{"buffer_id": b.buffer_id, "backend": b.backend, "buft": b.buft, "usage": b.usage,
                     "nbytes": b.nbytes, "pool_id": b.pool_id, "slot": b.slot, "chunk": b.chunk,
                     "allocated_seq": b.alloc_seq, "freed_seq": None if b.freed_seq == NEVER else b.freed_seq,
                     "free_cause": b.free_cause, "placements": len(b.placements)} for b in model.buffers.values()],
        "peak_buffer_bytes": peak_buffer_bytes(model),
        "hazard_counts": counts(hazards),
    }


def _render(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from vizalloc.text import inert

    def cell(text: str) -> Text:
        # names are data from the traced program: inert, cut, never parsed as markup
        return Text(inert(text, NAME_CHARS))

    console = Console(highlight=False)
    console.print(Text(f"{data['events']:,} events, {data['tensors']:,} tensors, {len(data['graphs'])} graphs, "
                       f"{len(data['plans'])} plans, {data['bindings']} bindings, {data['computes']} computes; "
                       f"peak buffer bytes {data['peak_buffer_bytes']:,}"))

    t = Table(title="graphs")
    for col in ("graph", "kind", "nodes", "leafs", "copied from"):
        t.add_column(col, justify="right" if col != "kind" else "left")
    for g in data["graphs"]:
        t.add_row(str(g["graph_id"]), cell(g["kind"]), str(g["nodes"]), str(g["leafs"]),
                  "" if g["source_graph"] < 0 else str(g["source_graph"]))
    console.print(t)

    t = Table(title="plans and their quality")
    for col in ("plan", "galloc", "graph", "nodes", "cause", "bytes", "lower bound", "greedy", "frag", "padding"):
        t.add_column(col, justify="left" if col == "cause" else "right")
    for p in data["plans"]:
        ratio = f" ({p['plan_bytes'] / p['lower_bound_bytes']:.2f}x)" if p["lower_bound_bytes"] else ""
        t.add_row(str(p["plan_id"]), str(p["galloc_id"]), str(p["graph_id"]), str(p["n_nodes"]),
                  cell(",".join(p["causes"])), f"{p['plan_bytes']:,}{ratio}", f"{p['lower_bound_bytes']:,}",
                  f"{p['greedy_bytes']:,}", f"{p['fragmentation_bytes']:,}", f"{p['padding_bytes']:,}")
    console.print(t)

    if any(p["live_at_peak"] for p in data["plans"]):
        t = Table(title="live at each plan's peak (largest blocks; in-place takeovers counted once)")
        for col in ("plan", "slot", "offset", "bytes", "tensors"):
            t.add_column(col, justify="left" if col == "tensors" else "right")
        for p in data["plans"]:
            for blk in p["live_at_peak"]:
                t.add_row(str(p["plan_id"]), str(blk["slot"]), f"{blk['offset']:,}", f"{blk['nbytes']:,}",
                          Text(" <- ".join(inert(n, NAME_CHARS) for n in blk["tensors"])))
        console.print(t)

    t = Table(title="buffers")
    for col in ("buffer", "backend", "type", "usage", "bytes", "pool/slot/chunk", "allocated", "freed", "placements"):
        t.add_column(col, justify="right" if col in ("buffer", "bytes", "allocated", "freed", "placements") else "left")
    for b in data["buffers"]:
        pool = "" if b["pool_id"] < 0 else f"{b['pool_id']}/{b['slot']}/{b['chunk']}"
        freed = "" if b["freed_seq"] is None else f"{b['freed_seq']} {b['free_cause']}".strip()
        t.add_row(str(b["buffer_id"]), cell(b["backend"]), cell(b["buft"]), cell(b["usage"]), f"{b['nbytes']:,}",
                  pool, str(b["allocated_seq"]), cell(freed), str(b["placements"]))
    console.print(t)

    t = Table(title="hazards")
    t.add_column("kind")
    t.add_column("count", justify="right")
    for kind, n in data["hazard_counts"].items():
        t.add_row(kind, str(n), style="bold red" if n and kind != "replan" else None)
    console.print(t)


def execute(args: argparse.Namespace) -> int:
    model = load_model(args.trace)
    hazards = analyse(model)
    data = summarize(model, hazards, top=max(0, args.top))
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _render(data)
    return 0
