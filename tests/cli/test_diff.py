"""vizalloc diff."""

from __future__ import annotations

import json

from vizalloc.cli import main

from tests.cli.test_check import traces  # noqa: F401  (the fixture)


def test_diff_of_identical_traces_exits_0(traces, capsys):  # noqa: F811
    assert main(["diff", str(traces["dup"]), str(traces["dup"])]) == 0
    assert "no differences" in capsys.readouterr().out


def test_diff_of_fix_and_no_fix(traces, capsys):  # noqa: F811
    assert main(["diff", str(traces["dup"]), str(traces["none"]), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    added = {h["kind"] for h in data["hazards_added"]}
    assert {"stale-overlap", "use-after-reuse"} <= added
    assert data["peak_buffer_bytes_a"] > data["peak_buffer_bytes_b"]  # the stale run never grows to what gb needs
    assert any(t["status"] == "changed" for p in data["plans"] for t in p["tensors"])
    assert main(["diff", str(traces["dup"]), str(traces["none"])]) == 1
    assert "hazards only in B (added)" in capsys.readouterr().out
    assert main(["diff", str(traces["dup"]), str(traces["bad"])]) == 2


def test_diff_two_plans_of_one_trace(traces, capsys):  # noqa: F811
    assert main(["summary", str(traces["none"]), "--json"]) == 0
    fwd, bwd = (str(p["plan_id"]) for p in json.loads(capsys.readouterr().out)["plans"][:2])
    path = str(traces["none"])
    assert main(["diff", path, path, "--plans", fwd, bwd, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    (p,) = data["plans"]
    assert (str(p["plan_a"]), str(p["plan_b"])) == (fwd, bwd) and p["size_delta"] != 0
    assert main(["diff", path, path, "--plans", fwd, fwd]) == 0
    assert main(["diff", path, path, "--plans", fwd, "999999"]) == 2
    assert "has no plan #999999" in capsys.readouterr().err


def test_diff_columns_explain_themselves(tmp_path, capsys):
    """No bare "k" column: the explanation is printed once, and a name that repeats in a
    plan says which one of that name the row is."""
    from tests.export.scenarios import seed_stale
    from vizalloc.trace.api import save
    from vizalloc.trace.value import Trace, TraceHeader

    a, b = tmp_path / "a.vztrace", tmp_path / "b.vztrace"
    save(Trace(TraceHeader.new(), tuple(seed_stale())), a)
    # the same program with two tensors sharing one name
    save(Trace(TraceHeader.new(), tuple(seed_stale(("x", "t", "t", "s", "y", "z", "q")))), b)
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "tensor" in line and "change" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == ["tensor", "change", "bytes", "A slot:offset+bytes",
                                                                 "B slot:offset+bytes"]
    assert out.count("tensors are matched by name") == 1
    assert "t (2nd of that name)" in out
