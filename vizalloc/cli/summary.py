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
    the same graphs, plans and buffers at every step). The tables fit the terminal (cells
    wrap, sizes in binary units: ``--json`` has every byte); lines of prose are not cut."""
    from rich.table import Table
    from rich.text import Text

    from vizalloc.cli.console import plural, sized
    from vizalloc.export.units import fmt_bytes
    from vizalloc.text import inert

    def cell(text: str) -> Text:
        # names are data from the traced program: inert, cut, never parsed as markup
        return Text(inert(text, NAME_CHARS), overflow="fold")

    def table(title: str, columns: list[tuple[str, str]], widths: dict[str, int] | None = None) -> Table:
        t = Table(title=title, title_justify="left")
        for name, justify in columns:
            # numbers and sizes stay whole; ids, names and causes wrap (words kept whole when they fit)
            t.add_column(name, justify=justify, overflow="fold",  # type: ignore[arg-type]
                         no_wrap=justify == "right", min_width=(widths or {}).get(name))
        return t

    def say(text: str, style: str | None = None) -> None:
        console.print(Text(text, style=style or ""), soft_wrap=True)

    console = stdout_console(fits=True)
    if data["incomplete"]:
        say(inert(data["incomplete"], 2000), style="bold red")
    say(f"{plural(data['events'], 'event')}, {plural(data['tensors'], 'tensor')}, "
        f"{plural(len(data['graphs']), 'graph')}, {plural(len(data['plans']), 'plan')}, "
        f"{plural(data['bindings'], 'binding')}, {plural(data['computes'], 'compute')}; "
        f"peak buffer bytes {sized(data['peak_buffer_bytes'])}")

    for c in data["captured"]:
        rules = "" if c["rules_version"] in ("", c["ggml_version"]) else f", replayed with ggml {c['rules_version']}'s rules"
        where = f"ggml {c['ggml_version']} ({c['ggml_path']}){rules}" if c["ggml_version"] else "no ggml"
        say(f"captured from {inert(c['program'], NAME_CHARS)} (pid {c['pid']}): {inert(where, 400)}; "
            f"{len(data['replay_differences'])} replay difference(s)")
        if c["note"]:
            say(f"  note: {inert(c['note'], 2000)}")
    for d in data["replay_differences"]:
        who = f"tensor {inert(d['tensor'] or '', NAME_CHARS)!r} (#{d['tensor_id']}): " if d["tensor_id"] >= 0 else ""
        times = f" ({d['occurrences']}x)" if d["occurrences"] > 1 else ""
        say(f"  replay difference{times}: {who}{inert(d['detail'], 2000)}", style="bold red")

    t = table("graphs (equal ones folded)", [("graphs", "left"), ("kind", "left"), ("nodes", "right"),
                                              ("leafs", "right"), ("copied from", "left")])
    for group in _groups(data["graphs"], lambda g: (g["kind"], g["nodes"], g["leafs"], g["source_graph"] >= 0)):
        g = group[0]
        sources = [x["source_graph"] for x in group if x["source_graph"] >= 0]
        t.add_row(fold_ids([x["graph_id"] for x in group]), cell(g["kind"]), str(g["nodes"]), str(g["leafs"]),
                  fold_ids(sources))
    console.print(t)

    def plan_key(p: dict[str, Any]) -> tuple[Any, ...]:
        return (p["n_nodes"], tuple(p["causes"]), p["plan_bytes"], p["lower_bound_bytes"], p["greedy_bytes"],
                p["fragmentation_bytes"], p["padding_bytes"])

    t = table("plans and their quality (equal ones folded; bytes vs the lower bound)",
              [("plans", "left"), ("nodes", "right"), ("bytes", "right"), ("bound", "right"),
               ("greedy", "right"), ("frag, pad", "right"), ("cause", "left")],
              {"plans": 10, "cause": 10})
    for group in _groups(data["plans"], plan_key):
        p = group[0]
        ratio = f"\n({p['plan_bytes'] / p['lower_bound_bytes']:.2f}x)" if p["lower_bound_bytes"] else ""
        which = (f"{fold_ids([x['plan_id'] for x in group])}\ngalloc {fold_ids([x['galloc_id'] for x in group])}"
                 f"\ngraph {fold_ids([x['graph_id'] for x in group])}")
        t.add_row(Text(which, overflow="fold"), str(p["n_nodes"]), fmt_bytes(p["plan_bytes"]) + ratio,
                  fmt_bytes(p["lower_bound_bytes"]), fmt_bytes(p["greedy_bytes"]),
                  f"{fmt_bytes(p['fragmentation_bytes'])}\n{fmt_bytes(p['padding_bytes'])}",
                  cell(", ".join(p["causes"])))
    console.print(t)

    with_peak = [p for p in data["plans"] if p["live_at_peak"]]
    if with_peak:
        t = table("live at each plan's peak (largest blocks; in-place takeovers counted once; plans with "
                  "the same blocks folded)", [("plans", "left"), ("slot", "right"), ("offset", "right"),
                                              ("bytes", "right"), ("tensors", "left")])
        for group in _groups(with_peak, lambda p: tuple((b["slot"], b["offset"], b["nbytes"], tuple(b["tensors"]))
                                                        for b in p["live_at_peak"])):
            ids = fold_ids([x["plan_id"] for x in group])
            for k, blk in enumerate(group[0]["live_at_peak"]):
                t.add_row(ids if k == 0 else "", str(blk["slot"]), f"{blk['offset']:,}", fmt_bytes(blk["nbytes"]),
                          Text(" <- ".join(inert(n, NAME_CHARS) for n in blk["tensors"]), overflow="fold"))
        console.print(t)

    held = [b for b in data["buffers"] if b["nbytes"]]
    empty = len(data["buffers"]) - len(held)
    pooled = any(b["pool_id"] >= 0 for b in held)
    t = table("buffers (equal ones folded; the most bytes first; pool: galloc slot/chunk)",
              [("buffers", "left"), ("type", "left"), ("bytes", "right")]
              + ([("pool", "left")] if pooled else []) + [("freed", "left"), ("placed", "right")],
              {"type": 12, "freed": 16})
    groups = _groups(held, lambda b: (b["backend"], b["buft"], b["usage"], b["nbytes"], b["pool_id"] >= 0, b["slot"],
                                      b["chunk"], b["freed_seq"] is not None, _free_kind(b["free_cause"])))
    groups.sort(key=lambda g: -g[0]["nbytes"])   # stable: equal sizes stay in allocation order
    for group in groups:
        b = group[0]
        freed = [x for x in group if x["freed_seq"] is not None]
        when = ""
        if len(freed) == 1:
            when = f"at {freed[0]['freed_seq']}: {freed[0]['free_cause']}"
        elif freed:
            when = f"{len(freed)}x, first at {freed[0]['freed_seq']}: {freed[0]['free_cause']}"
        when = when.replace("ggml_backend_buffer_free", "buffer_free")   # ggml's function, the usual way
        places = sorted({x["placements"] for x in group})
        kind = (b["buft"] if b["backend"] == b["buft"] else f"{b['backend']} {b['buft']}") + f" {b['usage']}"
        pool = [(fold_ids([x["pool_id"] for x in group]) + f" {b['slot']}/{b['chunk']}") if b["pool_id"] >= 0
                else ""] if pooled else []
        t.add_row(fold_ids([x["buffer_id"] for x in group]), cell(kind), fmt_bytes(b["nbytes"]),
                  *pool, cell(when), str(places[0]) if len(places) == 1 else f"{places[0]}-{places[-1]}")
    console.print(t)
    if empty:
        say(f"and {plural(empty, 'zero-byte buffer')}, not listed: they hold no memory (a program asking a "
            "buffer type what it supports makes them); --json lists every buffer", style="dim")

    t = table("hazards", [("kind", "left"), ("count", "right")])
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
