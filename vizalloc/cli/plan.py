"""vizalloc plan CASE.json: replay a graph case file (golden format) through vizalloc's
graph allocator and print where every tensor went.

    vizalloc plan tests/data/golden/ew01_unary_chain_inplace.json           # tables
    vizalloc plan CASE.json --json                                          # results as JSON
    vizalloc plan CASE.json --check                                         # compare with ggml's

``--check`` prints every difference from the results recorded in the file and exits 1
if there is any (0 when everything matches, 2 for a malformed file: the message names
the field). Names and descriptions from the file are shown inert (control characters as
escapes) and cut; the tables show the first 200 tensors of each step (``--json`` has all).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from typing import Any

from vizalloc.errors import UsageError
from vizalloc.text import inert


#: Reads files only: the console script may end the process without freeing objects one by one.
FAST_EXIT = True

#: The largest case file read (a 100,000-node graph is about 25 MB of JSON).
MAX_FILE_BYTES = 128 * 2**20
#: Tensor rows shown per step in the tables (``--json`` lists every tensor).
MAX_ROWS = 200
#: Longest tensor name, and description, shown in text mode.
NAME_CHARS = 60
DESCRIPTION_CHARS = 400


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("case", metavar="CASE.json", help="a graph case file in the vizalloc-golden/1 format")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="print each step's result in the golden 'result' shape")
    mode.add_argument("--check", action="store_true",
                      help="compare with the results recorded in the file; exit 1 on any difference")
    parser.add_argument("--reclaim", action="store_true",
                        help="use the 'invalidate' fix (GraphAllocator(reclaim=True)); differs from ggml on purpose")


def read_case_bytes(path: str) -> bytes:
    """The file's bytes; a trace file, a directory or an oversized file is a clear error."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_FILE_BYTES:
                raise UsageError(f"{path} has {size:,} bytes; vizalloc plan reads case files of at most "
                                 f"{MAX_FILE_BYTES:,}")
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"no such case file: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory, not a case file") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise UsageError(f"{path} has more than {MAX_FILE_BYTES:,} bytes; vizalloc plan reads case files of at "
                         f"most {MAX_FILE_BYTES:,}")
    if data[:1] != b"{" and not data[:1].isspace():
        # a case file starts with "{" (or white space): only another file may be a trace,
        # and only then is the trace file format imported to tell
        from vizalloc.trace.fileformat import MAGIC

        if data.startswith(MAGIC):
            raise UsageError(f"{path} is a vizalloc trace, not a graph case file; look at it with "
                             f"`vizalloc check {path}` or `vizalloc summary {path}`")
    return data


def execute(args: argparse.Namespace) -> int:
    from vizalloc.gcpause import gc_paused

    # a large case is millions of small objects that all stay alive while the command runs:
    # a collection would visit each of them and free nothing
    with gc_paused():
        return _plan(args)


def _plan(args: argparse.Namespace) -> int:
    from vizalloc.casefile import CaseReplay, compare_results, parse_case
    from vizalloc.cli import keep_until_exit

    case = parse_case(read_case_bytes(args.case), where=args.case)
    # the full list of overlapping pairs is built only where it is printed or compared
    replay = CaseReplay(case, reclaim=args.reclaim, list_overlaps=args.json or args.check)
    results = replay.run()
    # 100,000s of objects (the case, its replayed tensors, the results): the process'
    # exit frees them at once
    keep_until_exit(case, replay, results)
    if args.json:
        # one step per line, through the json module's C encoder (an indented dump is
        # written by its pure-Python one, several seconds for 100,000 tensors)
        out = sys.stdout
        out.write("[\n")
        for k, (s, r) in enumerate(zip(case.steps, results)):
            out.write(("," if k else " ") + json.dumps({"index": s.index, "action": s.action, "result": r}) + "\n")
        out.write("]\n")
        return 0
    name = inert(case.name, NAME_CHARS) or inert(args.case, NAME_CHARS)
    if args.check:
        diffs = compare_results(case, results)
        for d in diffs:
            print(d)
        n_checked = sum(1 for s in case.steps if s.expected is not None)
        if diffs:
            print(f"{name}: {len(diffs)} difference(s) from ggml in {n_checked} recorded step(s)")
            return 1
        print(f"{name}: all {n_checked} recorded step(s) match ggml")
        return 0
    _print_tables(case, results, name)
    return 0


def _print_tables(case: Any, results: list[dict[str, Any]], name: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    head = Text(name, style="bold")
    if case.description:
        # cut before Rich sees it: wrapping a long text costs Rich quadratic time
        more = f" ({len(case.description):,} characters)" if len(case.description) > DESCRIPTION_CHARS else ""
        head.append(f": {inert(case.description, DESCRIPTION_CHARS)}{more}")
    console.print(head)
    names = [t.name for t in case.tensors]
    for step, res in zip(case.steps, results):
        title = f"step {step.index}: {step.action}  ok={res['ok']}  buffer_sizes={res['buffer_sizes']}"
        if res["buffers_allocated"] or res["buffers_freed"]:
            title += f"  allocated={res['buffers_allocated']} freed={res['buffers_freed']}"
        if step.nodes is None and not res["tensors"]:
            console.print(Text(title))
            continue
        table = Table(title=Text(title), title_justify="left")
        for col in ("id", "name", "buffer", "chunk", "offset", "nbytes", "kept", "live"):
            table.add_column(col, justify="right" if col in ("id", "offset", "nbytes", "chunk") else "left")
        rows = res["tensors"]  # in tensor id order
        for key, e in itertools.islice(rows.items(), MAX_ROWS):
            where = (Text(inert(e.get("external_buffer"), NAME_CHARS) + " (static)") if e.get("buffer") is None
                     else Text(str(e["buffer"])))
            table.add_row(
                key, Text(inert(names[int(key)], NAME_CHARS)), where, str(e.get("chunk", "")), str(e["offset"]),
                str(e["nbytes"]), "yes" if e["kept"] else "", "" if e["live"] else Text("freed", style="red"),
            )
        if len(rows) > MAX_ROWS:
            table.add_row("", Text(f"... {len(rows) - MAX_ROWS:,} more (--json lists every tensor)"),
                          "", "", "", "", "", "")
        console.print(table)
        if res.get("conflicting_pairs"):
            console.print(Text(f"{res['conflicting_pairs']} overlapping pair(s) live at the same time", style="red"))
        if res.get("plan_entries_not_applied"):
            console.print(Text(f"{len(res['plan_entries_not_applied'])} plan entry(ies) not applied (the plan was "
                               "made for another graph; --json lists them)", style="yellow"))
