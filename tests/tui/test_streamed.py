"""A trace file too big to hold as events is browsed from a streamed analysis
(``tui.data.analyse_streamed``): the same timeline steps, hazards and tensor rows (but first
and last use, which need events) as the object path, and every pane works."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.analysis import decode_loops
from tests.tui.conftest import ready
from vizalloc.trace.api import save
from vizalloc.trace.value import Trace, TraceHeader
from vizalloc.tui import data as data_mod
from vizalloc.tui.app import VizallocApp
from vizalloc.tui.data import analyse, analyse_streamed, read_events
from vizalloc.tui.steps import Prescan
from vizalloc.tui.tensorrows import RepeatedRows, TensorState
from vizalloc.tui.widgets.table import VirtualTable


@pytest.fixture(scope="module", params=["replan_after", "clear_old", "reuse"])
def trace_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("streamed") / f"{request.param}.vztrace"
    save(Trace(TraceHeader.new(), tuple(decode_loops.record(request.param, tokens=30))), path)
    return path


def _steps(scan: Prescan) -> list[tuple[object, ...]]:
    return [(s.seq, s.kind, s.step_id, s.graph_id, s.n_nodes, s.galloc_id, s.plan_id, s.binding_id, s.detail,
             s.wall_ns, s.n_hazards) for s in scan.steps]


def test_streamed_analysis_shows_what_the_object_path_shows(trace_path: Path) -> None:
    from vizalloc.tui.steps import count_hazards

    scan_a = Prescan()
    events, header = read_events(trace_path, scan_a)
    a = analyse(events, header)
    count_hazards(scan_a.steps, a.hazards)
    scan_b = Prescan()
    b = analyse_streamed(trace_path, scan_b)
    count_hazards(scan_b.steps, b.hazards)
    assert isinstance(b.tensors, RepeatedRows)
    if "reuse" not in trace_path.name:   # a reused graph makes no tensors per token
        assert len(b.tensors.protos) < len(b.tensors) - 20
    assert _steps(scan_a) == _steps(scan_b)
    assert [h.to_dict() for h in a.hazards] == [h.to_dict() for h in b.hazards]
    ra, rb = a.tensors, b.tensors
    assert list(ra.ids) == list(map(int, rb.ids))
    for col in ("names", "ops", "shapes", "dtypes", "buffers", "offsets", "nbytes", "states"):
        assert list(getattr(ra, col)) == list(getattr(rb, col)), col
    assert set(rb.first_use) == {-1}   # a streamed model keeps no events to tell first use
    for key in ("id", "name", "op", "nbytes", "offset", "state"):
        for needle, state in (("", None), ("inp", None), ("", TensorState.FRESH)):
            assert np.array_equal(a.tensor_order.order(key, False, needle, state),
                                  b.tensor_order.order(key, False, needle, state)), (key, needle, state)
    for binding in list(a.model.bindings)[:3] + list(a.model.bindings)[-3:]:
        ma, mb = a.binding_map(binding), b.binding_map(binding)

        def blocks(m: object) -> list[tuple[object, ...]]:
            return [(p.buffer_id, p.title, p.nbytes, [(x.tensor_id, x.offset, x.nbytes, x.first, x.last)
                                                     for x in p.blocks], p.overlaps) for p in m.panels]

        assert blocks(ma) == blocks(mb)


@pytest.mark.anyio
async def test_every_pane_opens_on_a_streamed_trace(trace_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_mod, "STREAM_BYTES", 0)  # every file streams
    app = VizallocApp(str(trace_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        assert app.analysis is not None and isinstance(app.analysis.tensors, RepeatedRows)
        for key in ("2", "3", "4", "5", "1"):
            await pilot.press(key)
            await pilot.pause()
        await pilot.press("3")
        await pilot.press("n", "end", "enter")   # a tensor's detail: its history has no events
        await pilot.pause()
        await pilot.press("escape", "1", "end")
        table = app.screen.query_one("#steps", VirtualTable)
        assert len(table.source) == len(app.scan.steps) > 30


@pytest.mark.anyio
async def test_a_failed_proof_is_browsed_as_every_step_analysed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A streamed trace whose proof of repetition fails (the analysis' own fault, made here as
    its fallback test makes it: the last step reads the writes as the observed step left them) is
    read again with every step analysed (``analysis.stream.analysed``), on a fresh pre-scan: the
    app shows what the object path shows, no error."""
    from tests.analysis.test_stream import _unmoved
    from vizalloc.analysis.stream import RepetitionError, analyse_columns
    from vizalloc.tui.steps import count_hazards
    from vizalloc.trace.columns import iter_columns
    from vizalloc.trace.fileformat import TraceFileReader

    path = tmp_path / "unset.vztrace"
    save(Trace(TraceHeader.new(), tuple(decode_loops.record("reuse_unset_input", tokens=30))), path)
    scan_a = Prescan()
    events, header = read_events(path, scan_a)
    a = analyse(events, header)
    count_hazards(scan_a.steps, a.hazards)
    _unmoved(monkeypatch)
    with path.open("rb") as f, pytest.raises(RepetitionError):   # the proof does fail on this trace
        analyse_columns(iter_columns(TraceFileReader(f), 1 << 20))
    monkeypatch.setattr(data_mod, "STREAM_BYTES", 0)
    app = VizallocApp(str(path))
    phases: list[str] = []
    told = app._progress
    app._progress = lambda phase, done, total: (phases.append(phase), told(phase, done, total))[1]  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        assert app.load_error == ""
        assert "reread" in phases and phases.index("reread") > phases.index("read")   # the bar says so
        b = app.analysis
        assert b is not None and isinstance(b.tensors, RepeatedRows)
        assert _steps(app.scan) == _steps(scan_a) and len(scan_a.steps) > 30
        assert [h.to_dict() for h in b.hazards] == [h.to_dict() for h in a.hazards]
        assert list(map(int, b.tensors.ids)) == list(a.tensors.ids)
        table = app.screen.query_one("#steps", VirtualTable)
        assert len(table.source) == len(scan_a.steps)


@pytest.mark.anyio
async def test_the_timeline_follows_a_new_prescan(trace_path: Path) -> None:
    """When the stream is read again (a failed proof), the app's pre-scan is a new one: the
    timeline, told the steps grew, shows the new list, not the one it held."""
    from vizalloc.tui.screens.timeline import StepsSource, TimelineScreen

    app = VizallocApp(str(trace_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        screen = app.screen
        assert isinstance(screen, TimelineScreen)
        table = screen.query_one("#steps", VirtualTable)
        events, _ = read_events(trace_path, Prescan())
        fresh = Prescan()
        fresh.feed(events[:len(events) // 3])
        assert 0 < len(fresh.steps) < len(table.source)
        app.scan = fresh
        screen.steps_grew()
        await pilot.pause()
        assert isinstance(table.source, StepsSource) and table.source.steps is fresh.steps
        assert len(table.source) == len(fresh.steps)
