"""``vizalloc check`` on several traces or directories: each trace's verdict is the single check's,
the reports come in the order named, ``-j`` changes nothing but the speed, the exit code is the worst."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.analysis import decode_loops
from tests.export import scenarios
from vizalloc.cli import main
from vizalloc.trace.api import save
from vizalloc.trace.value import Trace, TraceHeader


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fleet")
    save(Trace(TraceHeader.new(), tuple(decode_loops.record("plain", tokens=5))), d / "a-clean.vztrace")
    save(Trace(TraceHeader.new(), tuple(scenarios.seed_stale())), d / "b-stale.vztrace")
    (d / "sub").mkdir()
    save(Trace(TraceHeader.new(), tuple(scenarios.two_backends())), d / "sub" / "c-backends.vztrace")
    return d


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_a_directory_is_every_trace_under_it_in_order(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _json(capsys, ["check", str(fleet), "--json"])
    names = [Path(t["trace"]).name for t in doc["traces"]]
    assert names == ["a-clean.vztrace", "b-stale.vztrace", "c-backends.vztrace"]
    # each trace's result is what checking it alone gives
    for t in doc["traces"]:
        single_code, single = _json(capsys, ["check", t["trace"], "--json"])
        assert (t["hazards"], t["counts"], t["failed"]) == (single["hazards"], single["counts"], single["failed"])
        assert t["exit"] == single_code
    assert doc["n_traces"] == 3 and doc["n_failed"] == 1 and doc["n_errors"] == 0
    assert doc["counts"]["stale-overlap"] == sum(t["counts"]["stale-overlap"] for t in doc["traces"]) > 0
    assert code == 1 and doc["exit"] == 1


def test_jobs_change_nothing_but_the_speed(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(fleet), "--max-reports", "2"]) == 1
    one = capsys.readouterr().out
    assert main(["check", str(fleet), "--max-reports", "2", "-j", "2"]) == 1
    two = capsys.readouterr().out
    assert one == two
    assert one.index("== ") == 0 and one.rstrip().splitlines()[-1].startswith("vizalloc check: 3 traces, 1 with")


def test_an_unreadable_trace_makes_the_exit_code_2(fleet: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "broken.vztrace"
    bad.write_bytes(b"not a trace at all")
    code = main(["check", str(fleet / "a-clean.vztrace"), str(bad)])
    captured = capsys.readouterr()
    assert code == 2
    assert "broken.vztrace: vizalloc check: error:" in captured.err and "not a vizalloc trace" in captured.err
    assert "1 unreadable" in captured.out and "a-clean.vztrace: " in captured.out


def test_clean_traces_pass(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(fleet / "a-clean.vztrace"), str(fleet / "sub"), "-j", "0"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("-> ok")


def test_usage_errors(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path), str(fleet)]) == 2
    assert "is a directory, not a trace file, and holds no .vztrace file" in capsys.readouterr().err
    assert main(["check", str(fleet), "-j", "-1"]) == 2


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_cut_traces_warning_reaches_stderr(fleet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             jobs: str) -> None:
    # what a check says on stderr in its worker (here: where the trace is cut) is printed by the parent
    data = (fleet / "b-stale.vztrace").read_bytes()
    cut = tmp_path / "cut.vztrace"
    cut.write_bytes(data[:-3])  # the end record torn: every frame before it is complete
    code = main(["check", str(fleet / "a-clean.vztrace"), str(cut), "-j", jobs])
    captured = capsys.readouterr()
    assert code == 1  # the stale hazards are in the frames read
    assert f"vizalloc check: warning: {cut}: trace cut at byte " in captured.err
    assert "TraceTruncatedWarning" not in captured.err
    assert f"== {cut}" in captured.out
