"""vizalloc check / summary / diff on real trace files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vizalloc.cli import main
from vizalloc.scenarios.shared_tensors import run
from vizalloc.trace import api
from vizalloc.trace.value import Trace, TraceHeader

from tests.builders import TraceBuilder
from tests.analysis.test_hazards import stale_scenario


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("traces")
    out = {}
    for strategy in ("none", "dup"):
        path = d / f"{strategy}.vztrace"
        run(strategy, steps=2, seed=0, around_loop=lambda path=path: api.trace(path))
        out[strategy] = path
    tb, _ = stale_scenario("clear")
    out["clear_builder"] = d / "clear_builder.vztrace"
    api.save(Trace(TraceHeader.new(), tuple(tb.events)), out["clear_builder"])
    out["bad"] = d / "bad.vztrace"
    out["bad"].write_bytes(b"not a trace at all")
    return out


def test_check_exit_1_with_reports(traces, capsys):
    assert main(["check", str(traces["none"])]) == 1
    text = capsys.readouterr().out
    assert "==vizalloc== ERROR: stale-overlap on tensor 'x'" in text
    assert "==vizalloc== ERROR: use-after-reuse" in text
    assert "SUMMARY: vizalloc:" in text
    assert text.rstrip().endswith("-> FAIL")
    # errors come before the re-plan warnings
    assert text.index("ERROR") < text.index("WARNING")


def test_check_clean_trace_exits_0_and_replans_only_fail_when_asked(traces, capsys):
    assert main(["check", str(traces["dup"])]) == 0
    assert capsys.readouterr().out.rstrip().endswith("-> ok")
    assert main(["check", str(traces["dup"]), "--fail-on", "all"]) == 1
    assert main(["check", str(traces["none"]), "--fail-on", "plan-mismatch,uninitialized-read"]) == 0
    assert main(["check", str(traces["none"]), "--fail-on", "none"]) == 0


def test_check_json(traces, capsys):
    assert main(["check", str(traces["none"]), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"hazards", "counts"}
    assert data["counts"]["stale-overlap"] > 0 and data["counts"]["use-after-reuse"] > 0
    assert sum(data["counts"].values()) == len(data["hazards"])
    h = next(h for h in data["hazards"] if h["kind"] == "stale-overlap")
    assert h["tensor"]["name"] and h["other"]["name"] and h["ranges"] and h["tensor"]["created_at"]["line"] > 0


def test_check_builder_trace_round_trips_through_a_file(traces, capsys):
    assert main(["check", str(traces["clear_builder"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [h["kind"] for h in data["hazards"]] == ["replan"]


def test_check_bad_input_exits_2(traces, tmp_path, capsys):
    assert main(["check", str(traces["bad"])]) == 2
    assert "not a vizalloc trace" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "missing.vztrace")]) == 2
    assert main(["check", str(traces["dup"]), "--fail-on", "bogus"]) == 2
    assert "unknown hazard kind 'bogus'" in capsys.readouterr().err
    assert main(["check"]) == 2


def test_check_max_reports(traces, capsys):
    assert main(["check", str(traces["none"]), "--max-reports", "1"]) == 1
    text = capsys.readouterr().out
    assert text.count("==vizalloc==") == 1 and "more hazard(s) not shown" in text


def test_names_are_shown_inert(tmp_path, capsys):
    tb = TraceBuilder()
    a, b, g, _ = tb.bound_relu("evil\x1b[31m[red]")
    tb.compute(g, [(b, [a])])
    path = tmp_path / "evil.vztrace"
    api.save(Trace(TraceHeader.new(), tuple(tb.events)), path)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "evil\\x1b[31m[red]" in out


def test_no_progress_bar_without_a_terminal(capsys):
    from vizalloc.cli.check import progress_bar

    with progress_bar("x") as progress:
        assert progress is None  # pytest's stderr is not a TTY
    assert capsys.readouterr().err == ""


def test_check_shadow_names_the_first_corrupted_node(tmp_path, capsys):
    path = tmp_path / "none_cap.vztrace"
    run("none", steps=2, seed=0, around_loop=lambda: api.trace(path, capture_values=True))
    assert main(["check", str(path), "--shadow", "--max-reports", "0"]) == 1
    out = capsys.readouterr().out
    assert "first diverging node: 18 'grad for W1'" in out
    # the first backward step too: the parameters (op-NONE nodes) are captured at compute begin
    assert "INCONCLUSIVE" not in out and "synthetic" not in out
    assert main(["check", str(path), "--shadow", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["shadow"] and all(s["conclusive"] and s["first_name"] == "grad for W1" for s in data["shadow"])
