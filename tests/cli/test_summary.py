"""vizalloc summary."""

from __future__ import annotations

import json
import re

from vizalloc.cli import main

from tests.cli.test_check import traces  # noqa: F401  (the fixture)


def test_summary_tables(traces, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["summary", str(traces["none"])]) == 0
    out = capsys.readouterr().out
    for title in ("graphs", "plans and their quality", "buffers", "hazards", "live at each plan's peak"):
        assert title in out
    assert "stale-overlap" in out and "bound" in out


def test_summary_json(traces, capsys):  # noqa: F811
    assert main(["summary", str(traces["none"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hazard_counts"]["stale-overlap"] > 0
    first = data["plans"][0]
    assert first["lower_bound_bytes"] <= first["plan_bytes"]
    assert data["peak_buffer_bytes"] >= max(b["nbytes"] for b in data["buffers"])
    assert main(["summary", str(traces["bad"])]) == 2


def test_summary_into_a_pipe_is_not_cut_and_folds_the_loop(tmp_path, capsys, monkeypatch):
    """Written to a file (not a terminal), nothing is cut: the tables are 120 columns wide
    (``$COLUMNS`` unset) and their cells wrap; a training loop's graphs, plans and buffers,
    equal but for their ids, take one row each."""
    from vizalloc.scenarios.shared_tensors import run
    from vizalloc.trace import api

    path = tmp_path / "loop.vztrace"
    run("none", steps=6, seed=0, around_loop=lambda: api.trace(path))
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\u2026" not in out                          # no cell cut with an ellipsis
    tables = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert tables and max(map(len, tables)) <= 120
    # a buffer's free cause wraps in its cell, every word of it there
    cause = re.compile(r"galloc \d+ slot 0: chunk\(s\) \[0\] must grow to \[\d+\] bytes")
    buffers = out[out.index("buffers (equal ones folded"):].splitlines()
    cells = " ".join(line.split("│")[-3].strip() for line in buffers if line.count("│") == 7)
    assert cause.search(cells), cells
    # the hazards table has a row per kind whatever the trace; the rows before it are the loop's
    loop_part = out[:out.index("\nhazards")]
    data_rows = [line for line in loop_part.splitlines() if line.startswith("\u2502")]
    # 6 steps x (forward + backward): 26 graphs, 12 plans and 3 buffers fold into a few rows
    assert len(data_rows) < 31, out
    graphs = [line for line in data_rows if " sched " in line]
    assert len(graphs) == 2 and any("step 4" in line for line in graphs)


def test_fold_ids():
    from vizalloc.cli.summary import fold_ids

    assert fold_ids([2, 6, 10, 14, 18]) == "2-18 step 4"
    assert fold_ids([0, 1, 2, 3, 7]) == "0-3, 7"
    assert fold_ids([5, 1]) == "1, 5"
    assert fold_ids(list(range(0, 60, 2)) + [61]) == "0-58 step 2, 61"
    assert fold_ids([1, 2, 4, 5, 7, 8, 10, 11, 13, 14]) == "1, 2, 4, ... 14 (10 in all)"


def test_summary_and_check_count_in_words(tmp_path, capsys):
    """'1 graph', '2 plans': each count with its word in the singular or plural; check's verdict
    counts a report's occurrences as the report does."""
    from tests.export.scenarios import mlp_chain
    from vizalloc.trace.api import save
    from vizalloc.trace.value import Trace, TraceHeader

    path = tmp_path / "one.vztrace"
    save(Trace(TraceHeader.new(), tuple(mlp_chain(1))), path)
    assert main(["summary", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert main(["summary", str(path)]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    for n, word in ((len(data["graphs"]), "graph"), (len(data["plans"]), "plan"), (data["bindings"], "binding"),
                    (data["computes"], "compute")):
        assert f" {n} {word}{'' if n == 1 else 's'}," in head or f" {n} {word}{'' if n == 1 else 's'};" in head, head
    assert 1 in (len(data["graphs"]), data["bindings"], data["computes"])   # a singular was seen
    main(["check", str(path)])
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.match(r"vizalloc check: [\d,]+ events, \d+ hazards?[:]? ", last + " "), last
    assert "hazard(s)" not in last
