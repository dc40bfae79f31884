"""vizalloc run: trace a whole program into a trace file (like memray run).

    vizalloc run train.py --epochs 2              # -> vizalloc-train.<pid>.vztrace
    vizalloc run -o train.vztrace -f train.py     # a chosen name, overwritten if it exists
    vizalloc run --capture-values --check train.py
    vizalloc run -- ./llama-cli -m model.gguf -n 8    # a real ggml program (Linux)
    vizalloc run -- python uses_ggml_python.py        # Python driving the real ggml

A script written against vizalloc's own runtime is run in this process. A program after
-- is any process that loads ggml as a shared library (C/C++, or Python through
ggml-python or xllamacpp), run unmodified with vizalloc's capture library preloaded: every
graph it plans is replayed through vizalloc's allocators and every offset compared with
what the real allocator did (differences are reported by check and summary). Its
stdin, stdout and stderr are its own; vizalloc's messages go to stderr.

The script runs as __main__ with sys.argv = [script, args...]; options for
vizalloc go before the script's name. Everything the vizalloc runtime does while it
runs is recorded. The trace file is complete even when the script raises (the
traceback is printed and the exit code is 1) or calls sys.exit (its code is kept).
vizalloc's own messages go to stderr, so the script's stdout stays its own.

Exit codes: the script's or program's own (0 when it ends normally, 1 on a Python
exception, 128+N when a program is killed by signal N); with --check, 1 when it
succeeded but the trace has hazards (re-plans aside); 2 when the output exists without
-f, the script or program cannot be found or executed, tracing a real program is not
possible here (no C compiler, not Linux), or a program that succeeded left a capture that
could not be imported (it is kept beside the trace, and the report says why).

Signals: Ctrl-C reaches the program from the terminal; SIGINT, SIGTERM and SIGHUP sent to
vizalloc (kill, timeout) are passed on to it. vizalloc waits for the program and then
imports what it captured: the trace holds what ran, the exit code is the program's.
The -o file is created, empty, when the run starts; a program that replaces or writes it
meanwhile does not lose the trace, which goes to a free name beside it (NAME.1.vztrace).
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import signal
import sys
import traceback
from typing import Any

from vizalloc.errors import UsageError
from vizalloc.text import inert, inert_lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # the script's own options come after its name; a prefix of one of ours ("--c") must
    # reach the script, not be read as --check or --capture-values
    parser.allow_abbrev = False
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="the trace file (default: vizalloc-<script>.<pid>.vztrace in the current directory)")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite the trace file if it exists")
    parser.add_argument("--capture-values", action="store_true",
                        help="also record graph inputs and outputs at every compute (bigger traces; needed for replay)")
    parser.add_argument("--check", action="store_true", help="report hazards in the trace after the run")
    # --tui: browse the trace after the run
    parser.add_argument("--tui", action="store_true", help="open the trace in `vizalloc tui` after the run")
    # dest "target", not "command": the subcommand's own name is args.command, which the
    # error messages ("vizalloc run: error: ...") print
    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="script.py [ARGS] | -- PROGRAM [ARGS]",
                        help="a Python script on vizalloc's runtime and its arguments, or after -- a real ggml "
                             "program and its arguments")


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
    command = list(args.target)
    if command[:1] == ["--"]:
        return _run_program(args, command[1:])
    if not command:
        raise UsageError("name what to trace: vizalloc run [-o FILE] [-f] [--capture-values] [--check] [--tui] "
                         "script.py [its arguments] for a script on vizalloc's runtime (e.g. `vizalloc run -o "
                         "train.vztrace train.py --epochs 2`), or vizalloc run [-o FILE] [-f] -- PROGRAM [ARGS] for a "
                         "real ggml program (e.g. `vizalloc run -- ./llama-cli -m model.gguf`); `vizalloc demo` shows "
                         "a traced example")
    script, args.args = command[0], command[1:]
    if not os.path.isfile(script):
        hint = ""
        if not script.endswith(".py") and shutil.which(script):
            hint = f"; to trace the program {script!r}, put it after --: vizalloc run -- {' '.join(command)}"
        raise UsageError(f"no script at {script!r}; give the path of a Python file to run{hint}")
    return _run_script(args, script)


def _run_program(args: argparse.Namespace, argv: list[str]) -> int:
    """A real ggml process, captured from outside (``vizalloc.capture``)."""
    from vizalloc.capture import trace_program
    from vizalloc.files import check_new
    from vizalloc.export.units import mib
    from vizalloc.runtime.alloc import rules
    from vizalloc.trace.stats import format_nbytes

    if args.capture_values:
        raise UsageError("--capture-values records tensor contents through vizalloc's runtime; a real program's "
                         "values are not captured")
    if args.output:
        check_new(args.output, overwrite=args.force, flag="-f", other="use -o to choose another name")
    err = sys.stderr
    traced = trace_program(argv, args.output, force=args.force, keep_interrupted=True)
    finished = traced.finished
    how = (f"killed by signal {finished.signal}{_signal_name(finished.signal)}, exit code {finished.exit_code}"
           if finished.signal is not None else f"exit code {finished.exit_code}")
    name = inert(argv[0], 200)  # the program's name is the user's, or a script's: shown inert
    err.write(f"vizalloc run: {name} ended ({how})\n")
    for number in dict.fromkeys(finished.received):
        how = ("vizalloc passed it on to the program" if number in finished.forwarded else
               "the terminal sent it to the program too")
        err.write(f"  vizalloc got signal {number}{_signal_name(number)} while {name} ran ({how}); what it "
                  "captured until it ended is imported below\n")
    for note in traced.notes:
        err.write(f"  note: {inert(note, 2000)}\n")
    if finished.signal == signal.SIGKILL and finished.captures:
        err.write("  SIGKILL reaches no handler: the trace holds every record the capture had made by then (it copies "
                  "each into a memory map of its file)\n")
    code = finished.exit_code
    for path, result in traced.traces:
        err.write(f"  pid {result.pid}: {inert(path)}\n")
        for lib in result.libraries:
            # whether this version's allocator was compared with vizalloc's rules (alloc.rules)
            how = f" ({rules.describe(lib.version)})" if lib.status >= 0 else ""
            err.write(f"    ggml {inert(lib.version, 100)} from {inert(lib.path, 400)}{how}\n")
        if any(lib.status >= 0 for lib in result.libraries):
            err.write(f"    {result.replayed_calls} allocator calls replayed, {result.placements_checked:,} placements "
                      f"checked: {result.mismatches} replay difference(s); {result.computes} graph computes\n")
            for b in result.compute_buffers:
                # MiB with two decimals, as llama.cpp logs its compute buffers
                size = (f" ({mib(b.planned)})" if b.planned >= 2**20 else
                        f" ({format_nbytes(b.planned)})" if b.planned >= 2**10 else "")
                real = ("allocated by the process: none" if b.allocated is None else
                        "the same as the process allocated" if b.allocated == b.planned else
                        f"the process allocated {b.allocated:,} bytes")
                err.write(f"    {inert(b.buft, 100)} compute buffer: {b.planned:,} bytes{size} planned by the replay, {real}\n")
        for note in result.notes:
            if note != result.incomplete:
                err.write(f"    note: {inert(note, 2000)}\n")
        if result.cut_at is not None:
            err.write(f"    the capture ends early (cut at byte {result.cut_at:,}): the process stopped mid-write\n")
        if result.incomplete:
            # the program's exit code stands; the trace says it is partial, and check fails on it
            err.write(f"    INCOMPLETE: {inert(result.incomplete, 2000)}\n    the trace holds only what was captured before "
                      "that; `vizalloc check` reports it as incomplete-capture\n")
    if traced.refused and code == 0:
        code = 2  # the program succeeded, but what it captured is not all in a trace (the notes say why)
    if traced.traces:
        first = traced.traces[0][0]
        err.write("look at it with:\n" + "".join(f"  vizalloc {cmd} {inert(first)}\n" for cmd in ("summary", "check", "tui")))
    if args.check:
        found = any(_check(str(path), err) for path, _ in traced.traces)
        if code == 0 and found:
            code = 1
    if getattr(args, "tui", False) and traced.traces:
        from vizalloc.cli.tui import open_tui

        open_tui(str(traced.traces[0][0]))
    return code


def _signal_name(number: int) -> str:
    try:
        return f" ({signal.Signals(number).name})"
    except ValueError:
        return ""


def _run_script(args: argparse.Namespace, script: str) -> int:
    from vizalloc.files import check_new
    from vizalloc.trace.api import read_batches, trace
    from vizalloc.trace.stats import format_nbytes, trace_stats

    output = args.output or default_output(script)
    check_new(output, overwrite=args.force, flag="-f", other="use -o to choose another name")
    err = sys.stderr

    session = trace(output, overwrite=args.force, capture_values=args.capture_values, keep_events=False)
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
    if getattr(args, "tui", False) and stats.n_events:  # --tui: browse the trace
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
    from vizalloc.cli.console import plural
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
    out.write(f"vizalloc run --check: {plural(len(hazards), 'hazard')}{': ' + listed if listed else ''}"
              f" -> {'FAIL' if serious else 'ok'}\n")
    return bool(serious)
