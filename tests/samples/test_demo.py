"""``vizalloc demo``: the project's main job, through the CLI entry point."""

from __future__ import annotations

import json

import pytest

from vizalloc.cli import main


def test_json_none_vs_dup(capsys, tmp_path):
    assert main(["demo", "--json", "--steps", "3", "--out-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["strategies"]
    assert set(s) == {"none", "dup"}
    for name in s:
        assert {"final_loss", "reference_loss", "max_abs_loss_diff", "steps"} <= s[name].keys()
        assert s[name]["steps"] == 3
    assert s["none"]["max_abs_loss_diff"] > 1e-3 and s["none"]["safe"] is False
    assert s["dup"]["max_abs_loss_diff"] <= 1e-6 and s["dup"]["safe"] is True
    # both saw the same reference
    assert s["none"]["reference_losses"] == s["dup"]["reference_losses"]


def test_traces_are_written_and_never_overwritten(capsys, tmp_path):
    assert main(["demo", "--steps", "2", "--strategies", "none,clear", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("none", "clear"):
        p = tmp_path / f"demo-{name}.vztrace"
        assert p.exists() and p.stat().st_size > 0
        assert str(p) in out
    assert "CORRUPTED" in out and "safe" in out
    # a second run refuses to overwrite, -f allows it
    assert main(["demo", "--steps", "2", "--strategies", "none", "--out-dir", str(tmp_path)]) == 2
    assert "already exist" in capsys.readouterr().err
    assert main(["demo", "--steps", "2", "--strategies", "none", "--out-dir", str(tmp_path), "-f"]) == 0


def test_trace_holds_the_loop(tmp_path, capsys):
    from vizalloc.trace import api
    from vizalloc.trace import events as ev

    assert main(["demo", "--steps", "2", "--strategies", "none", "--out-dir", str(tmp_path), "--json"]) == 0
    capsys.readouterr()
    trace = api.load(str(tmp_path / "demo-none.vztrace"))
    kinds = [type(e) for e in trace.events]
    assert kinds.count(ev.SchedAlloc) == 4 and ev.NodeCompute in kinds


def test_all_strategies_table(capsys, tmp_path):
    assert main(["demo", "--steps", "2", "--strategies", "all", "--no-trace"]) == 0
    out = capsys.readouterr().out
    for name in ("none", "invalidate", "clear", "dup", "static"):
        assert name in out
    assert "tracing off" in out


def test_reserve_between_defeats_invalidate(capsys):
    assert main(["demo", "--json", "--no-trace", "--steps", "3", "--strategies", "invalidate",
                 "--reserve-between"]) == 0
    assert json.loads(capsys.readouterr().out)["strategies"]["invalidate"]["safe"] is False


@pytest.mark.parametrize("argv,msg", [
    (["--strategies", "bogus"], "unknown strategy"),
    (["--strategies", ","], "empty"),
    (["--steps", "0"], "steps"),
    (["--out-dir", "/nonexistent/dir/for/vizalloc"], "not a directory"),
])
def test_bad_usage(argv, msg, capsys):
    assert main(["demo", *argv]) == 2
    assert msg in capsys.readouterr().err


def test_opt_driver_presized(capsys):
    assert main(["demo", "--json", "--no-trace", "--steps", "3", "--driver", "opt", "--presize"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["driver"] == "opt" and out["presize"] is True
    assert out["strategies"]["none"]["safe"] is False and out["strategies"]["dup"]["safe"] is True


def test_capture_values_records_what_shadow_replays(tmp_path, capsys):
    from vizalloc.trace import api
    from vizalloc.trace import events as ev

    assert main(["demo", "--steps", "1", "--strategies", "none", "--out-dir", str(tmp_path)]) == 0
    plain = api.load(str(tmp_path / "demo-none.vztrace")).events
    assert not any(isinstance(e, ev.ValueSnapshot) for e in plain)
    assert main(["demo", "--steps", "1", "--strategies", "none", "--out-dir", str(tmp_path), "-f",
                 "--capture-values"]) == 0
    captured = api.load(str(tmp_path / "demo-none.vztrace")).events
    assert sum(isinstance(e, ev.ValueSnapshot) for e in captured) > 0
    capsys.readouterr()
