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
import re
import sys
from collections.abc import Callable
from typing import Any

from vizalloc.cli.check import analyse_file, counts
from vizalloc.cli.console import stdout_console


#: Reads files only: the console script may end the process without freeing objects one by one.
FAST_EXIT = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="a trace file (.vztrace)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="blocks shown per plan peak (default: 5)")


#: Longest text from the trace (a name, a cause) shown in a table cell: real ones are far
#: shorter and never cut; a hostile 10,000-character name is.
NAME_CHARS = 300


def summarize(model: Any, hazards: list[Any], top: int = 5) -> dict[str, Any]:
    """The summary as plain data (what ``--json`` prints and the tables show)."""
    from vizalloc.analysis.diff import peak_buffer_bytes
    from vizalloc.analysis.quality import plan_quality
    from vizalloc.analysis.records import NEVER
    from vizalloc.analysis.static import incomplete_notice
    from vizalloc.trace import events as ev

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
            "n_leafs": p.n_leafs, "causes": [ev.enum_text(r.cause) for r in p.replans],
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
        # a trace captured from a real process: which one, and every place vizalloc's replay
        # of its allocator disagreed with it (never hidden)
        "captured": [{"program": e.program, "pid": e.pid, "ggml_version": e.ggml_version, "ggml_path": e.ggml_path,
                      "rules_version": e.rules_version, "note": e.note} for e in model.captured],
        # a captured process the trace holds only part of (or none of): said first
        "incomplete": incomplete_notice(model),
        "replay_differences": [
            {"what": h.cause, "tensor": h.tensor.name if h.tensor is not None else None,
             "tensor_id": h.tensor_id, "call": h.access, "detail": h.detail, "occurrences": h.occurrences}
            for h in hazards if h.kind.value == "replay-mismatch"],
    }


def fold_ids(ids: list[int], most: int = 6) -> str:
    """Ids as a short text: runs with one step folded (``0-3``, ``2-22 step 4``), the rest
    listed; more than ``most`` parts are cut in the middle, with the count.

        >>> fold_ids([2, 6, 10, 14, 18]), fold_ids([0, 1, 2, 3, 7]), fold_ids([5])
        ('2-18 step 4', '0-3, 7', '5')
        >>> fold_ids([1, 2, 4, 5, 7, 8, 10, 11, 13, 14])
        '1, 2, 4, ... 14 (10 in all)'
    """
    ids = sorted(set(ids))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i + 1
        if j < len(ids):
            step = ids[j] - ids[i]
            while j + 1 < len(ids) and ids[j + 1] - ids[j] == step:
                j += 1
            if j - i >= 2:   # three or more in one step
                parts.append(f"{ids[i]}-{ids[j]}" + ("" if step == 1 else f" step {step}"))
                i = j + 1
                continue
        parts.append(str(ids[i]))
        i += 1
    if len(parts) > most:
        return ", ".join(parts[:3]) + f", ... {parts[-1]} ({len(ids)} in all)"
    return ", ".join(parts)


def _groups(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> list[list[dict[str, Any]]]:
    """Rows with equal ``key``, in the order of each group's first row."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return list(groups.values())


def _render(data: dict[str, Any]) -> None:
    """The tables; rows that only differ by their ids are folded into one (a loop repeats
    the same graphs, plans and buffers at every step)."""
    from rich.table import Table
    from rich.text import Text

    from vizalloc.text import inert

    def cell(text: str) -> Text:
        # names are data from the traced program: inert, cut, never parsed as markup
        return Text(inert(text, NAME_CHARS))

    console = stdout_console()   # into a file or a pipe: as wide as the tables need, nothing cut
    if data["incomplete"]:
        console.print(Text(inert(data["incomplete"], 2000), style="bold red"))
    console.print(Text(f"{data['events']:,} events, {data['tensors']:,} tensors, {len(data['graphs'])} graphs, "
                       f"{len(data['plans'])} plans, {data['bindings']} bindings, {data['computes']} computes; "
                       f"peak buffer bytes {data['peak_buffer_bytes']:,}"))

    for c in data["captured"]:
        rules = "" if c["rules_version"] in ("", c["ggml_version"]) else f", replayed with ggml {c['rules_version']}'s rules"
        where = f"ggml {c['ggml_version']} ({c['ggml_path']}){rules}" if c["ggml_version"] else "no ggml"
        console.print(Text(f"captured from {inert(c['program'], NAME_CHARS)} (pid {c['pid']}): {inert(where, 400)}; "
                           f"{len(data['replay_differences'])} replay difference(s)"))
        if c["note"]:
            console.print(Text(f"  note: {inert(c['note'], 2000)}"))
    for d in data["replay_differences"]:
        who = f"tensor {inert(d['tensor'] or '', NAME_CHARS)!r} (#{d['tensor_id']}): " if d["tensor_id"] >= 0 else ""
        times = f" ({d['occurrences']}x)" if d["occurrences"] > 1 else ""
        console.print(Text(f"  replay difference{times}: {who}{inert(d['detail'], 2000)}", style="bold red"))

    t = Table(title="graphs (equal ones folded)", title_justify="left")
    for col in ("graphs", "kind", "nodes", "leafs", "copied from"):
        t.add_column(col, justify="left" if col in ("graphs", "kind", "copied from") else "right")
    for group in _groups(data["graphs"], lambda g: (g["kind"], g["nodes"], g["leafs"], g["source_graph"] >= 0)):
        g = group[0]
        sources = [x["source_graph"] for x in group if x["source_graph"] >= 0]
        t.add_row(fold_ids([x["graph_id"] for x in group]), cell(g["kind"]), str(g["nodes"]), str(g["leafs"]),
                  fold_ids(sources))
    console.print(t)

    def plan_key(p: dict[str, Any]) -> tuple[Any, ...]:
        return (p["n_nodes"], tuple(p["causes"]), p["plan_bytes"], p["lower_bound_bytes"], p["greedy_bytes"],
                p["fragmentation_bytes"], p["padding_bytes"])

    t = Table(title="plans and their quality (equal ones folded; bytes vs the lower bound)", title_justify="left")
    for col in ("plans", "gallocs", "graphs", "nodes", "cause", "bytes", "lower bound", "greedy", "frag",
                "padding"):
        t.add_column(col, justify="left" if col in ("plans", "gallocs", "graphs", "cause") else "right")
    for group in _groups(data["plans"], plan_key):
        p = group[0]
        ratio = f" ({p['plan_bytes'] / p['lower_bound_bytes']:.2f}x)" if p["lower_bound_bytes"] else ""
        t.add_row(fold_ids([x["plan_id"] for x in group]), fold_ids([x["galloc_id"] for x in group]),
                  fold_ids([x["graph_id"] for x in group]), str(p["n_nodes"]), cell(",".join(p["causes"])),
                  f"{p['plan_bytes']:,}{ratio}", f"{p['lower_bound_bytes']:,}", f"{p['greedy_bytes']:,}",
                  f"{p['fragmentation_bytes']:,}", f"{p['padding_bytes']:,}")
    console.print(t)

    with_peak = [p for p in data["plans"] if p["live_at_peak"]]
    if with_peak:
        t = Table(title="live at each plan's peak (largest blocks; in-place takeovers counted once; plans with "
                        "the same blocks folded)", title_justify="left")
        for col in ("plans", "slot", "offset", "bytes", "tensors"):
            t.add_column(col, justify="left" if col in ("plans", "tensors") else "right")
        for group in _groups(with_peak, lambda p: tuple((b["slot"], b["offset"], b["nbytes"], tuple(b["tensors"]))
                                                        for b in p["live_at_peak"])):
            ids = fold_ids([x["plan_id"] for x in group])
            for k, blk in enumerate(group[0]["live_at_peak"]):
                t.add_row(ids if k == 0 else "", str(blk["slot"]), f"{blk['offset']:,}", f"{blk['nbytes']:,}",
                          Text(" <- ".join(inert(n, NAME_CHARS) for n in blk["tensors"])))
        console.print(t)

    t = Table(title="buffers (equal ones folded)", title_justify="left")
    for col in ("buffers", "backend", "type", "usage", "bytes", "gallocs", "slot/chunk", "freed", "placements"):
        t.add_column(col, justify="right" if col in ("bytes", "placements") else "left")
    for group in _groups(data["buffers"], lambda b: (b["backend"], b["buft"], b["usage"], b["nbytes"],
                                                     b["pool_id"] >= 0, b["slot"], b["chunk"],
                                                     b["freed_seq"] is not None, _free_kind(b["free_cause"]))):
        b = group[0]
        pooled = b["pool_id"] >= 0
        freed = [x for x in group if x["freed_seq"] is not None]
        when = ""
        if len(freed) == 1:
            when = f"at {freed[0]['freed_seq']}: {freed[0]['free_cause']}"
        elif freed:
            when = f"{len(freed)}x, first at {freed[0]['freed_seq']}: {freed[0]['free_cause']}"
        places = sorted({x["placements"] for x in group})
        t.add_row(fold_ids([x["buffer_id"] for x in group]), cell(b["backend"]), cell(b["buft"]), cell(b["usage"]),
                  f"{b['nbytes']:,}", fold_ids([x["pool_id"] for x in group]) if pooled else "",
                  f"{b['slot']}/{b['chunk']}" if pooled else "", cell(when),
                  str(places[0]) if len(places) == 1 else f"{places[0]}-{places[-1]}")
    console.print(t)

    t = Table(title="hazards", title_justify="left")
    t.add_column("kind")
    t.add_column("count", justify="right")
    for kind, n in data["hazard_counts"].items():
        t.add_row(kind, str(n), style="bold red" if n and kind != "replan" else None)
    console.print(t)


def _free_kind(cause: str) -> str:
    """A free cause without its numbers (the same reason at every step folds into one row)."""
    return re.sub(r"\d+", "N", cause)


def execute(args: argparse.Namespace) -> int:
    model, hazards, _ = analyse_file(args.trace, command="summary")
    data = summarize(model, hazards, top=max(0, args.top))
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _render(data)
    return 0
