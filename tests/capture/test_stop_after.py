"""VIZALLOC_CAPTURE_STOP_AFTER: a program run to see one plan ends right after it, with a
complete capture (llama.cpp's no-alloc measurement uses it through its driver)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, VIZALLOC


def _run(tmp_path: Path, stop: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("VIZALLOC_CAPTURE_STOP_AFTER", None)
    if stop is not None:
        env["VIZALLOC_CAPTURE_STOP_AFTER"] = stop
    return subprocess.run([*VIZALLOC, "run", "-f", "-o", "t.vztrace", "--", sys.executable,
                           str(PROGRAMS / "ggml_python_reserve.py")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_process_ends_after_the_named_call(tmp_path: Path) -> None:
    done = _run(tmp_path, "ggml_gallocr_reserve_n")
    assert done.returncode == 0, done.stderr
    assert "reserved" not in done.stdout and "after the reserve" not in done.stdout
    assert "the capture ends early" not in done.stderr  # the record is complete, the end record included
    events = load(tmp_path / "t.vztrace").events
    plans = [e for e in events if isinstance(e, ev.PlanEnd)]
    assert len(plans) == 1 and plans[0].chunk_sizes == ((106496,),)
    assert not [e for e in events if isinstance(e, ev.ReplayMismatch)]
    assert not [e for e in events if isinstance(e, ev.BindingBegin)]  # the alloc_graph after it never ran


def test_without_it_or_with_another_name_the_program_runs_on(tmp_path: Path) -> None:
    for stop in (None, "ggml_backend_sched_reserve_size", "not_a_function"):
        done = _run(tmp_path, stop)
        assert done.returncode == 0, done.stderr
        assert "reserved 106496 bytes" in done.stdout and "after the reserve" in done.stdout
