"""One graph, one number: check, export (dot, layout, Perfetto) and the TUI name a graph the scheduler copied as the
program's graph, with its copy (``TraceModel.graph_name``: ``graph #1 (sched copy #5)``).
Before, the TUI's timeline, memory map and graph pane said ``graph #5`` where check said
``graph #1``, and export said ``(scheduler graph #5)``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.tui.conftest import ready
from vizalloc.cli import main
from vizalloc.scenarios.shared_tensors import run
from vizalloc.trace.api import save
from vizalloc.trace.recorder import ListRecorder
from vizalloc.trace.value import Trace, TraceHeader
from vizalloc.tui.app import VizallocApp
from vizalloc.tui.screens.timeline import StepsSource
from vizalloc.tui.steps import StepKind
from vizalloc.tui.widgets.table import VirtualTable


@pytest.mark.anyio
async def test_a_scheduler_copy_has_the_same_number_in_check_export_and_the_tui(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ListRecorder() as rec:   # a runtime run with the scheduler, its graphs copied (ggml_backend_sched)
        run("none", steps=2, config="A", driver="graphs")
    path = tmp_path / "sched.vztrace"
    save(Trace(TraceHeader.new(), tuple(rec.events)), path)

    assert main(["check", str(path)]) == 1
    named = dict(re.findall(r"binding #(\d+) of (graph #\d+ \(sched copy #\d+\))", capsys.readouterr().out))
    assert named, "check names no scheduler copy"
    binding, name = next(iter(named.items()))
    program, copy = map(int, re.findall(r"#(\d+)", name))
    assert program != copy

    for fmt in ("dot", "layout"):
        out = tmp_path / f"b.{fmt}"
        assert main(["export", str(path), "--format", fmt, "--binding", binding, "-o", str(out)]) == 0
        assert f"{name} binding #{binding}," in out.read_text(), fmt
    out = tmp_path / "b.perfetto.json"
    assert main(["export", str(path), "--format", "perfetto", "-o", str(out)]) == 0
    computes = {e["args"]["compute_id"]: e["name"] for e in json.loads(out.read_text())["traceEvents"]
                if e.get("cat") == "compute"}
    capsys.readouterr()

    app = VizallocApp(str(path))
    async with app.run_test(size=(160, 40)) as pilot:
        await ready(pilot)
        table = app.screen.query_one("#steps", VirtualTable)
        src = table.source
        assert isinstance(src, StepsSource)
        (row,) = [i for i in range(len(src)) if src.step(i).kind is StepKind.BINDING
                  and src.step(i).step_id == int(binding)]
        assert src.cells(row)[3] == f"#{program}"   # the timeline's graph column
        # the scheduler computes split views of its copy: the timeline and Perfetto number them alike
        steps = [src.step(i) for i in range(len(src))]
        shown = {s.step_id: src.cells(i)[3] for i, s in enumerate(steps) if s.kind is StepKind.COMPUTE}
        assert shown and set(shown) == set(computes)
        assert any(s.graph_id != int(shown[s.step_id][1:]) for s in steps if s.kind is StepKind.COMPUTE)
        for c, graph in shown.items():
            assert re.fullmatch(rf"compute #{c} graph {graph} \(view copy #\d+\)", computes[c]), computes[c]
        table.cursor = row
        await pilot.pause()
        assert app.selected_binding == int(binding)
        await pilot.press("2")
        await pilot.pause()
        head = str(app.screen.query_one("#maphead").render())
        assert f"binding #{binding} of {name} (plan #" in head, head
        await pilot.press("5")
        await ready(pilot)
        info = str(app.screen.query_one("#info").render())
        assert f"{name} as bound by binding #{binding}" in info, info
