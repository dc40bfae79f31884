"""vizalloc run: trace a whole Python script into a trace file (like ``memray run``).

    vizalloc run train.py --epochs 2              # -> vizalloc-train.<pid>.vztrace
    vizalloc run -o train.vztrace -f train.py     # a chosen name, overwritten if it exists
    vizalloc run --capture-values --check train.py

The script runs as ``__main__`` with ``sys.argv = [script, args...]``; options for
vizalloc go before the script's name. Everything the vizalloc runtime does while it
runs is recorded. The trace file is complete even when the script raises (the
traceback is printed and the exit code is 1) or calls ``sys.exit`` (its code is kept).
vizalloc's own messages go to stderr, so the script's stdout stays its own.

Exit codes: the script's own (0 when it ends normally, 1 on an exception); with
``--check``, 1 when the script succeeded but the trace has hazards (re-plans aside);
2 when the output exists without ``-f`` or the script cannot be found.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from typing import Any

from vizalloc.errors import UsageError
from vizalloc.text import inert_lines

HELP = "trace a Python script into a trace file (like memray run)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="the trace file (default: vizalloc-<script>.<pid>.vztrace in the current directory)")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite the trace file if it exists")
    parser.add_argument("--capture-values", action="store_true",
                        help="also record graph inputs and outputs at every compute (bigger traces; needed for replay)")
    parser.add_argument("--check", action="store_true", help="report hazards in the trace after the run")
    # --tui (added by the TUI engineer): browse the trace after the run
    parser.add_argument("--tui", action="store_true", help="open the trace in `vizalloc tui` after the run")
    parser.add_argument("script", metavar="script.py", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")


def default_output(script: str, pid: int | None = None) -> str:
    """``vizalloc-<script stem>.<pid>.vztrace`` (memray's naming)."""
    stem = os.path.splitext(os.path.basename(script))[0] or "script"
    return f"vizalloc-{stem}.{os.getpid() if pid is None else pid}.vztrace"


def run_script(script: str, argv: list[str]) -> int:
    """Run ``script`` as ``__main__`` with ``sys.argv``; its exit code (exceptions: traceback, 1)."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python script.py` does
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 - the script's own failure: report it like Python does
        etype, value, tb = sys.exc_info()
        # drop the frames of vizalloc and runpy: the first frame shown is the script's
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != os.path.abspath(script):
            tb = tb.tb_next
        traceback.print_exception(etype, value, tb, file=sys.stderr)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def execute(args: argparse.Namespace) -> int:
    from vizalloc.trace.api import read_batches, trace
    from vizalloc.trace.stats import format_nbytes, trace_stats

    script = args.script
    if not os.path.isfile(script):
        raise UsageError(f"no script at {script!r}; give the path of a Python file to run")
    output = args.output or default_output(script)
    if os.path.exists(output) and not args.force:
        raise UsageError(f"the trace file {output} already exists; pass -f to overwrite it or -o to choose another")
    err = sys.stderr

    session = trace(output, capture_values=args.capture_values, keep_events=False)
    with session:
        code = run_script(script, list(args.args))

    stats = trace_stats(e for batch in read_batches(output) for e in batch)
    nbytes = os.path.getsize(output)
    per_event = f" ({nbytes / stats.n_events:.1f} B/event)" if stats.n_events else ""
    err.write(
        f"vizalloc run: traced {script} into {output}\n"
        f"  {stats.n_events:,} events, {stats.n_graphs} graphs, {stats.n_computes} computes, "
        f"{stats.n_buffers} buffers, peak {format_nbytes(stats.peak_buffer_nbytes)} of buffers allocated at once; "
        f"{format_nbytes(nbytes)} on disk{per_event}\n"
    )
    if stats.n_events == 0:
        err.write("  (the script used no vizalloc runtime, so there is nothing to look at)\n")
    else:
        err.write("look at it with:\n" + "".join(f"  vizalloc {cmd} {output}\n" for cmd in ("summary", "check", "tui")))
    if args.check:
        found = _check(output, err)
        if code == 0 and found:
            code = 1
    if getattr(args, "tui", False) and stats.n_events:  # --tui: browse the trace (TUI engineer)
        from vizalloc.cli.tui import open_tui

        open_tui(output)
    return code


def _check(path: str, out: Any) -> bool:
    """Run the hazard check on the trace; True when it found hazards other than re-plans."""
    try:
        from vizalloc.analysis.hazards import find_hazards
        from vizalloc.analysis.model import build_model
    except ImportError:
        out.write("vizalloc run --check: the hazard check is not available in this vizalloc\n")
        return False
    from vizalloc.trace.api import load

    hazards = find_hazards(build_model(load(path)))
    serious = [h for h in hazards if h.kind.value != "replan"]
    for h in serious[:5]:
        out.write(inert_lines(h.report()) + "\n\n")
    if len(serious) > 5:
        out.write(f"... {len(serious) - 5} more; run: vizalloc check {path}\n")
    kinds: dict[str, int] = {}
    for h in hazards:
        kinds[h.kind.value] = kinds.get(h.kind.value, 0) + 1
    listed = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    out.write(f"vizalloc run --check: {len(hazards)} hazard(s){': ' + listed if listed else ''}"
              f" -> {'FAIL' if serious else 'ok'}\n")
    return bool(serious)
