"""vizalloc diff: compare two traces: plans (buffer sizes, tensors whose offset or size
changed), hazards added or removed, peak buffer bytes. Tensor ids differ between runs,
so tensors are matched by name: the n-th tensor of a name that a plan places in A with
the n-th of that name in B ("x (2nd of that name)" when a name repeats).

    vizalloc diff before.vztrace after.vztrace
    vizalloc diff before.vztrace after.vztrace --json
    vizalloc diff run.vztrace run.vztrace --plans 0 3    # two plans (of one trace or two)

Exit codes: 0 no difference, 1 differences, 2 a trace cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from vizalloc.cli.check import analyse, load_model
from vizalloc.cli.console import stdout_console

#: Longest tensor name shown in a table cell (names are data: shown inert and cut).
NAME_CHARS = 80


#: Reads files only: the console script may end the process without freeing objects one by one.
FAST_EXIT = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the first trace file")
    parser.add_argument("b", metavar="B", help="the second trace file")
    parser.add_argument("--json", action="store_true", help="print the differences as JSON")
    parser.add_argument("--plans", type=int, nargs=2, metavar=("PLAN_A", "PLAN_B"),
                        help="compare only plan PLAN_A of A with plan PLAN_B of B (ids as 'summary' shows them)")
    parser.add_argument("--max-tensors", type=int, default=20, metavar="N",
                        help="tensor rows shown per plan in text mode (default: 20)")


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def to_dict(d: Any) -> dict[str, Any]:
    return {
        "plans": [{"plan_a": p.plan_a, "plan_b": p.plan_b, "bytes_a": list(p.bytes_a), "bytes_b": list(p.bytes_b),
                   "size_delta": p.size_delta,
                   "changes": {k: {"tensors": n, "bytes": b} for k, (n, b) in p.counts().items()},
                   "tensors": [{"name": t.name, "position": t.position, "status": t.status, "change": t.change,
                                "delta": t.delta, "slot_a": t.slot_a, "offset_a": t.offset_a, "nbytes_a": t.nbytes_a,
                                "slot_b": t.slot_b, "offset_b": t.offset_b, "nbytes_b": t.nbytes_b}
                               for t in p.tensors]}
                  for p in d.plans],
        "settings": [{"setting": k, "a": va, "b": vb} for k, va, vb in d.settings],
        "unmatched_plans_a": list(d.unmatched_plans_a), "unmatched_plans_b": list(d.unmatched_plans_b),
        "hazards_added": [h.to_dict() for h in d.hazards_added],
        "hazards_removed": [h.to_dict() for h in d.hazards_removed],
        "peak_buffer_bytes_a": d.peak_buffer_bytes_a, "peak_buffer_bytes_b": d.peak_buffer_bytes_b,
        "identical": d.is_empty,
    }


def _setting(value: str | None) -> str:
    from vizalloc.text import inert

    return "(not given)" if value is None else ("(given)" if value == "" else inert(value, NAME_CHARS))


def _render(d: Any, max_tensors: int) -> None:
    from rich.table import Table
    from rich.text import Text

    from vizalloc.text import inert

    from vizalloc.cli.console import plural, sized

    console = stdout_console(fits=True)
    if d.settings:
        said = [f"{inert(k, NAME_CHARS)} {_setting(va)} -> {_setting(vb)}" for k, va, vb in d.settings]
        console.print(Text("the runs' settings differ (A -> B): " + "; ".join(said)), soft_wrap=True)
    delta = d.peak_buffer_bytes_b - d.peak_buffer_bytes_a
    console.print(Text(f"peak buffer bytes: {sized(d.peak_buffer_bytes_a)} -> {sized(d.peak_buffer_bytes_b)} "
                       f"({delta:+,})"), soft_wrap=True)
    if any(not p.is_empty for p in d.plans):
        console.print(Text("plans: A and B say where each plan put a tensor, as slot:offset+bytes; tensors are "
                           "matched by name (the n-th of a name in A with the n-th in B), and listed by the bytes "
                           "they add or take away, most first", style="dim"))
    for p in d.plans:
        if p.is_empty:
            continue
        counts = ", ".join(f"{plural(n, 'tensor')} {kind} ({b:+,} bytes)" if kind != "moved" else
                           f"{plural(n, 'tensor')} moved" for kind, (n, b) in p.counts().items())
        console.print(Text(f"plan #{p.plan_a} vs #{p.plan_b}: {sized(sum(p.bytes_a))} -> {sized(sum(p.bytes_b))} "
                           f"({p.size_delta:+,}): {counts}", style="italic"), soft_wrap=True)
        t = Table()
        for col in ("tensor", "change", "bytes", "A slot:offset+bytes", "B slot:offset+bytes"):
            # narrow terminals wrap a cell, never cut it
            t.add_column(col, justify="left" if col in ("tensor", "change") else "right", overflow="fold")
        repeated = {c.name for c in p.tensors if c.position > 0}
        for c in p.tensors[:max_tensors]:
            side_a = "" if c.offset_a < 0 else f"{c.slot_a}:{c.offset_a:,}+{c.nbytes_a:,}"
            side_b = "" if c.offset_b < 0 else f"{c.slot_b}:{c.offset_b:,}+{c.nbytes_b:,}"
            name = inert(c.name, NAME_CHARS) + (f" ({_ordinal(c.position + 1)} of that name)"
                                                if c.name in repeated else "")
            t.add_row(Text(name), c.change, f"{c.delta:+,}" if c.delta else "", side_a, side_b)
        if len(p.tensors) > max_tensors:
            t.add_row(f"... {len(p.tensors) - max_tensors} more (--max-tensors N)", "", "", "", "")
        console.print(t)
    if d.unmatched_plans_a or d.unmatched_plans_b:
        console.print(Text(f"plans only in A: {list(d.unmatched_plans_a)}; only in B: {list(d.unmatched_plans_b)}"))
    for title, items in (("hazards only in B (added)", d.hazards_added), ("hazards only in A (removed)",
                                                                           d.hazards_removed)):
        if not items:
            continue
        t = Table(title=title)
        for col in ("kind", "tensor", "conflicting", "cause"):
            t.add_column(col)
        for h in items:
            t.add_row(h.kind.value, Text(inert(h.tensor.label, NAME_CHARS) if h.tensor else ""),
                      Text(inert(h.other.label, NAME_CHARS) if h.other else ""), Text(inert(h.cause)))
        console.print(t)
    if d.is_empty:
        console.print("no differences")


def execute(args: argparse.Namespace) -> int:
    from vizalloc.analysis.diff import TraceDiff, diff_models, diff_plans
    from vizalloc.errors import UsageError

    a = load_model(args.a, "A", command="diff")
    b = load_model(args.b, "B", command="diff")
    if args.plans:
        pa, pb = args.plans
        for model, pid, which in ((a, pa, args.a), (b, pb, args.b)):
            if pid not in model.plans:
                raise UsageError(f"{which} has no plan #{pid}; it has plans "
                                 f"{', '.join(str(p) for p in sorted(model.plans)) or 'none'}")
        one = diff_plans(a, a.plans[pa], b, b.plans[pb])
        d = TraceDiff((one,), (), (), (), (), 0, 0)
    else:
        from vizalloc.trace.api import read_header

        d = diff_models(a, b, hazards_a=analyse(a, "A"), hazards_b=analyse(b, "B"),
                        argv_a=read_header(args.a).argv, argv_b=read_header(args.b).argv)
    if args.json:
        json.dump(to_dict(d), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _render(d, max(0, args.max_tensors))
    return 0 if d.is_empty else 1
