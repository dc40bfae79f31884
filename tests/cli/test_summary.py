"""vizalloc summary."""

from __future__ import annotations

import json

from vizalloc.cli import main

from tests.cli.test_check import traces  # noqa: F401  (the fixture)


def test_summary_tables(traces, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["summary", str(traces["none"])]) == 0
    out = capsys.readouterr().out
    for title in ("graphs", "plans and their quality", "buffers", "hazards", "live at each plan's peak"):
        assert title in out
    assert "stale-overlap" in out and "lower bound" in out


def test_summary_json(traces, capsys):  # noqa: F811
    assert main(["summary", str(traces["none"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hazard_counts"]["stale-overlap"] > 0
    first = data["plans"][0]
    assert first["lower_bound_bytes"] <= first["plan_bytes"]
    assert data["peak_buffer_bytes"] >= max(b["nbytes"] for b in data["buffers"])
    assert main(["summary", str(traces["bad"])]) == 2
