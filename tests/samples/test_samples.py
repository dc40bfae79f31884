"""Every sample runs as a script with --help, and with a tiny configuration through its main()."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
NAMES = ["shared_tensors", "invalidate_defeated", "weight_transform", "transformer_block"]


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"sample_{name}", SAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_sample_is_listed_in_the_readme():
    readme = (SAMPLES / "README.md").read_text()
    for name in NAMES:
        assert f"`{name}.py`" in readme


@pytest.mark.parametrize("name", NAMES)
def test_help_as_a_script(name):
    proc = subprocess.run([sys.executable, str(SAMPLES / f"{name}.py"), "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout and "Library code" in proc.stdout
    assert "``" not in proc.stdout  # reST literals read as noise in a terminal


def test_shared_tensors_none_diverges(capsys):
    assert load("shared_tensors").main(["--fix", "none", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "DIVERGED" in out and out.count("\n") >= 6


def test_shared_tensors_dup_matches(capsys):
    assert load("shared_tensors").main(["--fix", "dup", "--steps", "2", "--config", "B"]) == 0
    out = capsys.readouterr().out
    assert "matches the reference" in out and "DIVERGED" not in out


def test_shared_tensors_bad_steps(capsys):
    assert load("shared_tensors").main(["--steps", "0"]) == 2
    assert "steps" in capsys.readouterr().err


def test_invalidate_defeated(capsys):
    assert load("invalidate_defeated").main(["--steps", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    verdicts = [line.split()[-1] for line in lines[1:]]
    assert verdicts == ["correct", "CORRUPTED", "correct", "correct"]


def test_weight_transform(capsys):
    assert load("weight_transform").main([]) == 0
    out = capsys.readouterr().out
    assert "identical F16 weights: True" in out and "originals dropped" in out


def test_transformer_block_tiny(capsys):
    mod = load("transformer_block")
    assert mod.main(["--d-model", "8", "--heads", "2", "--ff", "16", "--tokens", "4", "--sim-ops", "MUL_MAT"]) == 0
    out = capsys.readouterr().out
    assert "SIM#" in out and "CPU#" in out and "vs CPU-only run: 0" in out
    assert mod.main(["--tokens", "4", "--assignments"]) == 0
    assert "## SPLIT #0" in capsys.readouterr().out


def test_transformer_block_bad_config(capsys):
    assert load("transformer_block").main(["--d-model", "10", "--heads", "4"]) == 2
    assert "multiple" in capsys.readouterr().err


def test_shared_tensors_opt_driver(capsys):
    assert load("shared_tensors").main(["--driver", "opt", "--presize", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "driver=opt" in out and "DIVERGED" in out
