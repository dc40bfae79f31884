"""``vizalloc plan`` hands its case and results to ``keep_until_exit``: the console script
(``run_main``) ends the process without freeing them one by one, and prints exactly what
an in-process ``main`` prints; an in-process ``main`` (as here) holds and freezes nothing."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vizalloc import cli

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "tests" / "data" / "golden" / "ew01_unary_chain_inplace.json"


def test_in_process_plan_keeps_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    frozen = gc.get_freeze_count()
    assert cli.main(["plan", str(CASE), "--check"]) == 0
    assert cli._kept == [] and gc.get_freeze_count() == frozen
    assert "match ggml" in capsys.readouterr().out


@pytest.mark.parametrize("mode", [[], ["--json"], ["--check"]])
def test_the_console_script_prints_what_main_prints(mode: list[str], capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS="100")
    code = f"import sys; sys.argv = ['vizalloc', 'plan', *{[str(CASE), *mode]!r}]; from vizalloc.cli import run_main; run_main()"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(["plan", str(CASE), *mode]) == 0
    assert p.stdout == capsys.readouterr().out and p.stdout.strip()
