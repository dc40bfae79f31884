"""``vizalloc check`` on many traces at once (a CI fleet): each trace checked in its own
process, ``-j N`` at a time, reports printed in the order the traces were named, one
verdict for all.

    vizalloc check runs/ -j 8               # every .vztrace under runs/, 8 at a time
    vizalloc check a.vztrace b.vztrace --json

Each check is the single-trace check (the stream analysis: memory of one trace's model
and one batch of events per process). The exit code is the worst of all: 3 if a check
hit a bug in vizalloc, else 2 if a trace could not be read, else 1 if one has hazards of
the ``--fail-on`` kinds, else 0.

Why a command and not the Parquet export into DuckDB: finding hazards replays every
access over byte-range maps in order, which SQL over exported tables cannot do, and a
CI job wants one verdict; the Parquet export stays the way to query events across runs.
"""

from __future__ import annotations

import io
import json
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

from vizalloc.cli import INTERNAL_ERROR
from vizalloc.cli.console import plural
from vizalloc.errors import UsageError


def expand(paths: Sequence[str]) -> list[str]:
    """The trace files named: files as given, directories as every ``*.vztrace`` under them (sorted).

    Raises:
        UsageError: a path does not exist, or a directory holds no trace.
    """
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(str(x) for x in Path(p).rglob("*.vztrace") if x.is_file())
            if not found:
                raise UsageError(f"{p} is a directory, not a trace file, and holds no .vztrace file to check")
            out += found
        else:
            out.append(p)
    return out


def check_one(path: str, fail_on: list[str], max_reports: int, shadow: bool) -> dict[str, Any]:
    """Check one trace (in a worker): what the parent prints and the exit code, as plain data."""
    import warnings

    from vizalloc.analysis.hazards import HazardKind
    from vizalloc.cli.check import counts, model_and_hazards, report_order, shadow_results
    from vizalloc.errors import VizallocError

    kinds = {HazardKind(k) for k in fail_on}
    out: dict[str, Any] = {"trace": path, "error": None, "stderr": ""}
    err = io.StringIO()  # what the check says on stderr (warnings about cut traces), passed to the parent
    try:
        with warnings.catch_warnings(), redirect_stderr(err):
            warnings.simplefilter("ignore")
            model, hazards = model_and_hazards(path, shadow)
            shadows = shadow_results(model, hazards) if shadow else []
    except VizallocError as exc:
        out.update(error=f"vizalloc check: error: {exc}", exit=exc.exit_code, stderr=err.getvalue())
        return out
    except MemoryError:
        out.update(error="vizalloc check: error: out of memory checking this trace (run fewer checks at once: -j)",
                   exit=2, stderr=err.getvalue())
        return out
    except Exception:  # noqa: BLE001 - a bug: said as one, never as findings
        out.update(error=f"vizalloc check: internal error: this is a bug in vizalloc, please report it\n"
                         f"{traceback.format_exc()}", exit=INTERNAL_ERROR, stderr=err.getvalue())
        return out
    from vizalloc.text import inert_lines

    failing = [h for h in hazards if h.kind in kinds]
    # names, source paths and causes in a report come from the traced program
    out.update(
        events=model.n_events, counts=counts(hazards), failed=bool(failing), exit=1 if failing else 0,
        hazards=[h.to_dict() for h in hazards],
        reports=[inert_lines(h.report()) for h in report_order(hazards)[:max_reports]],
        n_hazards=len(hazards), shadow=[r.to_dict() for r in shadows],
        shadow_text=[inert_lines(r.summary()) for r in shadows], stderr=err.getvalue())
    return out


def results(paths: Sequence[str], jobs: int, fail_on: list[str], max_reports: int,
            shadow: bool) -> Iterator[dict[str, Any]]:
    """Each trace's check, in the order of ``paths``, ``jobs`` at a time (1: in this process)."""
    if jobs <= 1 or len(paths) <= 1:
        for p in paths:
            yield check_one(p, fail_on, max_reports, shadow)
        return
    with ProcessPoolExecutor(max_workers=min(jobs, len(paths))) as pool:
        n = len(paths)
        yield from pool.map(check_one, paths, [fail_on] * n, [max_reports] * n, [shadow] * n)


def execute(paths: Sequence[str], jobs: int, fail_on: set[Any], max_reports: int, shadow: bool,
            as_json: bool) -> int:
    """Check every trace; print each one's reports (or one JSON document); the worst exit code."""
    if jobs < 0:
        raise UsageError(f"-j must be 0 (one check per CPU core) or more, got {jobs}")
    traces = expand(paths)
    jobs = jobs or (os.cpu_count() or 1)
    kinds = sorted(k.value for k in fail_on)
    totals: dict[str, int] = {}
    worst = 0
    n_failed = n_errors = 0
    docs = []
    out = sys.stdout
    for r in results(traces, jobs, kinds, max_reports, shadow):
        if r["stderr"]:
            sys.stderr.write(r["stderr"])
        worst = max(worst, r["exit"])
        if r["error"] is not None:
            n_errors += 1
            print(f"{r['trace']}: {r['error']}", file=sys.stderr)
            if as_json:
                docs.append({"trace": r["trace"], "error": r["error"], "exit": r["exit"]})
            continue
        n_failed += r["failed"]
        for k, n in r["counts"].items():
            totals[k] = totals.get(k, 0) + n
        if as_json:
            doc = {"trace": r["trace"], "events": r["events"], "hazards": r["hazards"], "counts": r["counts"],
                   "failed": r["failed"], "error": None, "exit": r["exit"]}
            if shadow:
                doc["shadow"] = r["shadow"]
            docs.append(doc)
            continue
        out.write(f"== {r['trace']}\n")
        for text in r["reports"]:
            out.write(text + "\n\n")
        if r["n_hazards"] > len(r["reports"]):
            out.write(f"... {r['n_hazards'] - len(r['reports'])} more hazard(s) not shown (--max-reports)\n\n")
        for text in r["shadow_text"]:
            out.write(text + "\n\n")
        listed = ", ".join(f"{n} {k}" for k, n in r["counts"].items() if n)
        out.write(f"{r['trace']}: {plural(r['events'], 'event')}, {plural(sum(r['counts'].values()), 'hazard')}"
                  f"{': ' + listed if listed else ''} -> {'FAIL' if r['failed'] else 'ok'}\n\n")
        out.flush()
    verdict = "FAIL" if worst else "ok"
    if as_json:
        json.dump({"traces": docs, "counts": totals, "fail_on": kinds, "n_traces": len(traces),
                   "n_failed": n_failed, "n_errors": n_errors, "failed": worst != 0, "exit": worst}, out, indent=2)
        out.write("\n")
    else:
        listed = ", ".join(f"{n} {k}" for k, n in totals.items() if n)
        out.write(f"vizalloc check: {plural(len(traces), 'trace')}, {n_failed} with hazards of the --fail-on kinds, "
                  f"{n_errors} unreadable; {plural(sum(totals.values()), 'hazard')}{': ' + listed if listed else ''} "
                  f"-> {verdict}\n")
    return worst
