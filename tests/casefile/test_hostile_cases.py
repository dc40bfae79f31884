"""Hostile case files: ``vizalloc plan`` refuses each malformed one with exit 2 naming the
field, takes the odd-but-valid ones, and never lets raw control text reach the terminal."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from tests.casefile.hostile import Hostile, corpus
from vizalloc import cli

CASES = list(corpus())
_RAW = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}


def _raw_chars(text: str) -> list[str]:
    return sorted({f"U+{ord(ch):04X}" for ch in text if ch != "\n" and unicodedata.category(ch) in _RAW})


def test_the_corpus_is_large_and_names_are_unique() -> None:
    assert len(CASES) >= 150
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_case(case: Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    path = tmp_path / "case.json"
    path.write_bytes(case.content)
    modes = [case.args] if case.args else [(), ("--check",), ("--json",)]
    for mode in modes:
        rc = cli.main(["plan", str(path), *mode])
        out, err = capsys.readouterr()
        assert _raw_chars(out + err) == [], f"raw control characters reached the terminal ({mode})"
        if case.expect == "error":
            assert rc == 2, f"{mode}: exit {rc}; stderr: {err[:300]}"
            assert case.field in err, err[:300]
            assert err.startswith("vizalloc plan: error: ") and err.count("\n") == 1 and len(err) < 600
        else:
            assert rc in (0, 1), f"{mode}: exit {rc}; stderr: {err[:300]}"


def test_huge_description_is_cut_before_printing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in CASES if c.name == "huge description")
    path = tmp_path / "case.json"
    path.write_bytes(case.content)
    assert cli.main(["plan", str(path)]) == 0
    head = capsys.readouterr().out.split("step 0")[0].replace("\n", "")
    assert len(head) < 600 and head.rstrip().endswith("characters)")
    assert "\\u202e\\x1b[2J" in head


def test_a_sparse_oversized_file_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.json"
    with open(path, "wb") as f:
        f.truncate(200 * 2**20)  # sparse: no disk used
    assert cli.main(["plan", str(path)]) == 2
    assert "reads case files of at most" in capsys.readouterr().err


def test_directory_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert cli.main(["plan", str(tmp_path / "nope.json")]) == 2
    assert "no such case file" in capsys.readouterr().err


def test_a_trace_file_is_named_and_check_suggested(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vizalloc.scenarios.shared_tensors import run
    from vizalloc.trace import api

    path = tmp_path / "run.vztrace"
    run("none", steps=1, seed=0, around_loop=lambda: api.trace(path))
    assert cli.main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "is a vizalloc trace, not a graph case file" in err
    assert f"vizalloc check {path}" in err and f"vizalloc summary {path}" in err
