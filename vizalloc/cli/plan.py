"""vizalloc plan CASE.json: replay a graph case file (golden format) through vizalloc's
graph allocator and print where every tensor went.

    vizalloc plan tests/data/golden/ew01_unary_chain_inplace.json           # tables
    vizalloc plan CASE.json --json                                          # results as JSON
    vizalloc plan CASE.json --check                                         # compare with ggml's

``--check`` prints every difference from the results recorded in the file and exits 1
if there is any (0 when everything matches, 2 for a malformed file).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from vizalloc.errors import CaseFormatError, UsageError


#: Reads files only: the console script may end the process without freeing objects one by one.
FAST_EXIT = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("case", metavar="CASE.json", help="a graph case file in the vizalloc-golden/1 format")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="print each step's result in the golden 'result' shape")
    mode.add_argument("--check", action="store_true",
                      help="compare with the results recorded in the file; exit 1 on any difference")
    parser.add_argument("--reclaim", action="store_true",
                        help="use the 'invalidate' fix (GraphAllocator(reclaim=True)); differs from ggml on purpose")


def _read(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise UsageError(f"no such case file: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CaseFormatError(f"{path} is not JSON: {exc}") from None


def execute(args: argparse.Namespace) -> int:
    from vizalloc.runtime.casefile import compare_results, parse_case, replay_case

    case = parse_case(_read(args.case))
    results = replay_case(case, reclaim=args.reclaim)
    if args.json:
        json.dump([{"index": s.index, "action": s.action, "result": r} for s, r in zip(case.steps, results)],
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if args.check:
        diffs = compare_results(case, results)
        for d in diffs:
            print(d)
        n_checked = sum(1 for s in case.steps if s.expected is not None)
        if diffs:
            print(f"{case.name}: {len(diffs)} difference(s) from ggml in {n_checked} recorded step(s)")
            return 1
        print(f"{case.name}: all {n_checked} recorded step(s) match ggml")
        return 0
    _print_tables(case, results)
    return 0


def _print_tables(case: Any, results: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{escape(case.name)}[/bold]: {escape(case.description)}")
    names = [t["name"] for t in case.tensors]
    for step, res in zip(case.steps, results):
        head = f"step {step.index}: {step.action}  ok={res['ok']}  buffer_sizes={res['buffer_sizes']}"
        if res["buffers_allocated"] or res["buffers_freed"]:
            head += f"  allocated={res['buffers_allocated']} freed={res['buffers_freed']}"
        if step.nodes is None and not res["tensors"]:
            console.print(escape(head))
            continue
        table = Table(title=escape(head), title_justify="left")
        for col in ("id", "name", "buffer", "chunk", "offset", "nbytes", "kept", "live"):
            table.add_column(col, justify="right" if col in ("id", "offset", "nbytes", "chunk") else "left")
        for key, e in sorted(res["tensors"].items(), key=lambda kv: int(kv[0])):
            where = escape(str(e.get("external_buffer"))) + " (static)" if e.get("buffer") is None else str(e["buffer"])
            table.add_row(
                key, escape(names[int(key)]), where, str(e.get("chunk", "")), str(e["offset"]), str(e["nbytes"]),
                "yes" if e["kept"] else "", "" if e["live"] else "[red]freed[/red]",
            )
        console.print(table)
        if "conflicting_pairs" in res and res["conflicting_pairs"]:
            console.print(f"[red]{res['conflicting_pairs']} overlapping pair(s) live at the same time[/red]")
