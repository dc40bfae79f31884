"""One conformance run: a real program run plainly and unmodified under ``vizalloc run --``.

:func:`conform` runs both and holds the capture to the suite's bar: the exit code and the
output are the program's own (lines that hold a time or another figure of the run itself
are compared with the figures blanked), every placement the process made replays with 0
differences, and ``vizalloc check`` on the trace is read back (its findings are the test's
to explain). The caller compares the compute buffers the program logs with the trace's.
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

VIZALLOC = [sys.executable, "-m", "vizalloc"]
_CHECKED = re.compile(r"(\d[\d,]*) allocator calls replayed, (\d[\d,]*) placements checked: (\d+) replay difference")
#: figures that differ from run to run: times, rates, addresses
_VOLATILE = re.compile(r"\s*(0x[0-9a-fA-F]+|\d+(\.\d+)?)")


@dataclass
class Conformance:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str  #: the captured run's (the program's own and vizalloc run's report)
    plain_seconds: float
    captured_seconds: float
    trace: Path
    events: list[ev.Event]
    calls: int  #: allocator calls replayed
    placements: int  #: placements checked
    differences: int
    check_code: int
    #: ``vizalloc check``'s counts, kinds with none left out; ``check-error`` when check
    #: itself failed (its message in ``check_stderr``)
    findings: dict[str, int]
    check_seconds: float
    check_stderr: str
    notes: list[str] = field(default_factory=list)

    def compute_buffers(self) -> list[ev.BufferAllocated]:
        return [e for e in self.events if isinstance(e, ev.BufferAllocated) and e.usage == "compute"]

    def line(self) -> str:
        """The one-line result of the README's table."""
        listed = ", ".join(f"{n} {k}" for k, n in self.findings.items()) or "none"
        return (f"{self.placements:,} placements checked, {self.differences} differences, findings: {listed}; "
                f"{self.plain_seconds:.1f} s plain, {self.captured_seconds:.1f} s captured")


def _same(text: str, volatile: re.Pattern[str] | None) -> list[str]:
    lines = text.splitlines()
    if volatile is None:
        return lines
    return [_VOLATILE.sub(" #", s) if volatile.search(s) else s for s in lines]


def conform(argv: list[str], tmp: Path, *, volatile: str | None = None, timeout: float = 600,
            cwd: Path | None = None) -> Conformance:
    """Run ``argv`` plainly and under ``vizalloc run --``; assert what holds for every program.

    ``volatile`` is a pattern of the output lines whose figures differ between two runs (times,
    addresses); their figures are blanked before the two outputs are compared."""
    where = cwd or tmp
    pattern = re.compile(volatile) if volatile else None
    t0 = time.perf_counter()
    plain = subprocess.run(argv, cwd=where, capture_output=True, text=True, timeout=timeout)
    t1 = time.perf_counter()
    trace = tmp / "conformance.vztrace"
    captured = subprocess.run([*VIZALLOC, "run", "-o", str(trace), "--", *argv], cwd=where, capture_output=True,
                              text=True, timeout=timeout)
    t2 = time.perf_counter()
    report = captured.stderr
    assert captured.returncode == plain.returncode, (plain.returncode, captured.returncode, report[-3000:])
    ours, theirs = _same(captured.stdout, pattern), _same(plain.stdout, pattern)
    assert ours == theirs, "\n".join(difflib.unified_diff(theirs, ours, "plain", "captured", lineterm=""))
    # the program's own stderr is all there, among vizalloc run's report
    mine = _same(report, pattern)
    missing = [s for s in _same(plain.stderr, pattern) if s not in mine]
    assert not missing, missing[:10]
    assert "INCOMPLETE" not in report, report[-3000:]
    m = _CHECKED.search(report)
    assert m is not None, report[-3000:]
    calls, placements, differences = (int(g.replace(",", "")) for g in m.groups())
    events = load(trace).events
    assert differences == 0 and not [e for e in events if isinstance(e, ev.ReplayMismatch)], report[-3000:]

    t3 = time.perf_counter()
    check = subprocess.run([*VIZALLOC, "check", "--json", str(trace)], capture_output=True, text=True,
                           timeout=timeout)
    t4 = time.perf_counter()
    findings: dict[str, int] = {}
    if check.returncode in (0, 1):
        data: dict[str, Any] = json.loads(check.stdout)
        findings = {k: n for k, n in data["counts"].items() if n}
    else:  # check could not analyse the trace: never a clean result
        findings = {"check-error": 1}
    notes = [line.strip() for line in report.splitlines() if line.strip().startswith("note:")]
    return Conformance(argv, plain.returncode, plain.stdout, report, t1 - t0, t2 - t1, trace, events, calls,
                       placements, differences, check.returncode, findings, t4 - t3, check.stderr, notes)
