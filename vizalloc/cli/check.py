"""vizalloc check: report the hazards in a trace; the exit code says whether there are any.

    vizalloc check run.vztrace                       # sanitizer-style reports, exit 1 on hazards
    vizalloc check run.vztrace --json                # {"hazards": [...], "counts": {...}}
    vizalloc check run.vztrace --fail-on stale-overlap,use-after-reuse
    vizalloc check run.vztrace --fail-on all         # re-plans fail too
    vizalloc check run.vztrace --shadow              # prove it: replay computes with hazards
    vizalloc check runs/ -j 8                        # every trace under runs/, 8 at a time

``--shadow`` re-runs every compute that has a use-after-reuse, uninitialized-read or
clobbered-output hazard twice from the values captured at its start (traces recorded with
``capture_values=True``): with private memory and with the recorded placements, and names
the first node whose output differs. It needs the trace's events, so it reads the whole
trace into memory.

Exit codes: 0 no hazard of the ``--fail-on`` kinds (default: every kind but replan),
1 hazards of those kinds were found, 2 the trace cannot be read or the usage is wrong.
Hazards of other kinds are still reported. On a terminal, long analyses show progress
on stderr.

Several traces (or directories: every ``*.vztrace`` under them) are checked each in its
own process, ``-j N`` at a time, and reported in the order named; the exit code is the
worst of them (``vizalloc/cli/fleet.py``).

The trace is read as a stream, so its size is not bounded by memory: memory holds the
analysis' model and one batch of events, and a step repeated with new ids (a decode
loop's tokens) is analysed once and counted (``vizalloc.analysis.stream``). A trace still
being written (or cut short) is checked up to its last complete frame, with a warning.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vizalloc.errors import UsageError
from vizalloc.gcpause import gc_paused

DEFAULT_FAIL_ON = "all-but-replan"


#: Reads files only: the console script may end the process without freeing objects one by one.
FAST_EXIT = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", nargs="+",
                        help="a trace file (.vztrace); several, or directories (every .vztrace under them), "
                             "are checked one by one (see -j)")
    parser.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                        help="with several traces, check N at a time, each in its own process "
                             "(default: 1; 0: one per CPU core)")
    parser.add_argument("--json", action="store_true", help="print the hazards as JSON")
    parser.add_argument("--fail-on", default=DEFAULT_FAIL_ON, metavar="KINDS",
                        help="comma-separated hazard kinds that make the exit code 1, 'all', or 'none' "
                             "(default: every kind but replan)")
    parser.add_argument("--shadow", action="store_true",
                        help="shadow-execute the computes with access hazards (needs captured values)")
    parser.add_argument("--max-reports", type=int, default=50, metavar="N",
                        help="print at most N reports in text mode (default: 50; counts are always complete)")


def parse_kinds(text: str) -> set[Any]:
    """The hazard kinds named by ``--fail-on``."""
    from vizalloc.analysis.hazards import HazardKind

    text = text.strip()
    if text == "all":
        return set(HazardKind)
    if text == "none":
        return set()
    if text == DEFAULT_FAIL_ON:
        return set(HazardKind) - {HazardKind.REPLAN}
    kinds = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            kinds.add(HazardKind(part))
        except ValueError:
            raise UsageError(f"unknown hazard kind {part!r} in --fail-on; choose from "
                             f"{', '.join(k.value for k in HazardKind)}, 'all' or 'none'") from None
    return kinds


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr when it is a terminal; None (no progress) otherwise.

    The total is unknown until the first update (the bar pulses meanwhile), so the count
    column must render a task whose ``total`` is None.
    """
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    class CountColumn(ProgressColumn):
        """``done/total`` with thousands separators; only ``done`` while the total is unknown."""

        def render(self, task: Task) -> Text:
            done = f"{int(task.completed):,}"
            return Text(done if task.total is None else f"{done}/{int(task.total):,}")

    with Progress(TextColumn("{task.description}"), BarColumn(), CountColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        yield update


def load_model(path: str, label: str = "", command: str = "check") -> Any:
    """Load a trace file and build its model (with progress on a terminal)."""
    from vizalloc.analysis.model import build_model
    from vizalloc.cli.inputs import load_trace

    trace = load_trace(path, command)
    with progress_bar(f"model {label or path}") as progress:
        return build_model(trace, progress=progress)


def analyse_file(path: str, label: str = "", command: str = "check") -> tuple[Any, list[Any], Any]:
    """The model (without its events), the hazards and the header of a trace file, analysed as
    a stream of column batches: memory holds the model and one batch, never the whole trace,
    and steps that repeat are analysed once (``vizalloc.analysis.stream``). A trace cut short
    is analysed up to its last complete frame (``inputs.cut_said``)."""
    import os

    from vizalloc.analysis.stream import COLUMN_BATCH_EVENTS, StreamAnalysis, analysed
    from vizalloc.cli.inputs import check_trace_path, cut_said
    from vizalloc.trace.api import open_reader
    from vizalloc.trace.columns import iter_columns

    check_trace_path(path)

    def run(stream: StreamAnalysis) -> tuple[Any, list[Any], Any]:
        # called again, with a new stream, when a skipped repetition's proof fails (``analysed``)
        with cut_said(command), open_reader(path) as reader, \
                progress_bar(f"analysing {label or path}") as progress, gc_paused():
            total = os.path.getsize(path)
            batches = iter_columns(reader, COLUMN_BATCH_EVENTS)
            while (batch := next(batches, None)) is not None:
                stream.feed_columns(batch)
                del batch  # before the next batch is read: one batch in memory at a time
                if progress is not None:
                    progress(reader.offset, total)
            model, hazards = stream.model, stream.finish()
            reader.warn_if_incomplete()   # once: after the analysis that stands
        return model, hazards, reader.header

    return analysed(run, repeat=os.environ.get("VIZALLOC_REPEAT", "1") != "0")


def model_and_hazards(path: str, shadow: bool) -> tuple[Any, list[Any]]:
    """A trace's model and hazards: with ``shadow`` the whole trace is read (shadow execution
    replays computes: it needs the events), else it is analysed as a stream."""
    if shadow:
        model = load_model(path)
        return model, analyse(model)
    model, hazards, _ = analyse_file(path)
    return model, hazards


def analyse(model: Any, label: str = "") -> list[Any]:
    from vizalloc.analysis.hazards import find_hazards

    with progress_bar(f"hazards {label}") as progress:
        return find_hazards(model, progress=progress)


def report_order(hazards: list[Any]) -> list[Any]:
    """Hazards in the order their reports are printed: errors first, then warnings
    (re-plans); each group in the analysis' order."""
    return [h for h in hazards if h.kind.value != "replan"] + [h for h in hazards if h.kind.value == "replan"]


def counts(hazards: list[Any]) -> dict[str, int]:
    from vizalloc.analysis.hazards import HazardKind

    out = {k.value: 0 for k in HazardKind}
    for h in hazards:
        out[h.kind.value] += 1
    return out


def verdict_line(n_events: int, hazards: list[Any], failing: bool) -> str:
    """check's last line: the hazards per kind, each with its occurrences where a report merged
    several (as the reports above it count them).

        >>> from types import SimpleNamespace as H
        >>> from vizalloc.analysis.hazards import HazardKind
        >>> verdict_line(1, [H(kind=HazardKind.REPLAN, occurrences=2)], False)
        'vizalloc check: 1 event, 1 hazard: 1 replan (2 occurrences) -> ok'
        >>> verdict_line(0, [], False)
        'vizalloc check: 0 events, 0 hazards -> ok'
    """
    from vizalloc.cli.console import plural

    found = counts(hazards)
    seen: dict[str, int] = {}
    for h in hazards:
        seen[h.kind.value] = seen.get(h.kind.value, 0) + h.occurrences
    listed = ", ".join(f"{n} {k}" + (f" ({plural(seen[k], 'occurrence')})" if seen[k] != n else "")
                       for k, n in found.items() if n)
    return (f"vizalloc check: {plural(n_events, 'event')}, {plural(len(hazards), 'hazard')}"
            f"{': ' + listed if listed else ''} -> {'FAIL' if failing else 'ok'}")


def shadow_results(model: Any, hazards: list[Any]) -> list[Any]:
    """Shadow execution of the computes named by access hazards (those with captured values)."""
    from vizalloc.analysis.hazards import HazardKind
    from vizalloc.replay.shadow import shadow_compute

    kinds = {HazardKind.USE_AFTER_REUSE, HazardKind.UNINITIALIZED_READ, HazardKind.CLOBBERED_OUTPUT}
    computes = sorted({c for h in hazards if h.kind in kinds for c in h.steps if c in model.computes})
    captured = {s.compute_id for s in model.snapshots}
    out = []
    for cid in computes:
        if cid not in captured:
            continue
        try:
            out.append(shadow_compute(model, cid))
        except UsageError:
            continue
    return out


def execute(args: argparse.Namespace) -> int:
    fail_on = parse_kinds(args.fail_on)
    if args.max_reports < 0:
        raise UsageError(f"--max-reports must be 0 or more, got {args.max_reports}")
    import os

    if len(args.trace) > 1 or os.path.isdir(args.trace[0]):
        from vizalloc.cli import fleet

        return fleet.execute(args.trace, args.jobs, fail_on, args.max_reports, args.shadow, args.json)
    args.trace = args.trace[0]
    # The analysis pauses the collector; the pause spans it all, and the model then lives
    # while the report is made (and the shadows run), frozen out of the collector's sight;
    # the block's end unfreezes it, so a caller in the same process gets the collector as it was.
    with gc_paused() as pause:
        model, hazards = model_and_hazards(args.trace, args.shadow)
        pause.freeze()
        return _report(args, model, hazards, fail_on)


def _report(args: argparse.Namespace, model: Any, hazards: list[Any], fail_on: set[Any]) -> int:
    """Print the hazards (and shadow results); the exit code."""
    found = counts(hazards)
    failing = [h for h in hazards if h.kind in fail_on]
    shadows = shadow_results(model, hazards) if args.shadow else []
    if args.shadow and not model.snapshots:
        print("vizalloc check: --shadow: the trace has no captured values; record it with capture_values=True",
              file=sys.stderr)
    if args.json:
        data = {"trace": args.trace, "events": model.n_events, "hazards": [h.to_dict() for h in hazards],
                "counts": found, "fail_on": sorted(k.value for k in fail_on), "failed": bool(failing)}
        if args.shadow:
            data["shadow"] = [r.to_dict() for r in shadows]
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from vizalloc.text import inert_lines

        # names, source paths and causes in a report come from the traced program
        out = sys.stdout
        for h in report_order(hazards)[:args.max_reports]:
            out.write(inert_lines(h.report()) + "\n\n")
        if len(hazards) > args.max_reports:
            out.write(f"... {len(hazards) - args.max_reports} more hazard(s) not shown (--max-reports)\n\n")
        for r in shadows:
            out.write(inert_lines(r.summary()) + "\n\n")
        out.write(verdict_line(model.n_events, hazards, bool(failing)) + "\n")
    return 1 if failing else 0
