"""A big graph's memory map and node list are made in a worker (``VizallocApp.prepare_binding``):
the pane says it waits, then shows what the UI thread would have made itself; a worker that
fails leaves the pane to make them itself, once."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from textual.widgets import Static

from tests.tui.conftest import ready
from vizalloc.trace.value import Trace
from vizalloc.tui import data
from vizalloc.tui.app import VizallocApp
from vizalloc.tui.screens.graph import GraphScreen
from vizalloc.tui.screens.memory_map import MapScreen
from vizalloc.tui.widgets.memory_map import MemoryMap

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


def _shown(app: VizallocApp) -> dict[str, Any]:
    """What the map and the graph pane show of the selected binding."""
    panes = app.panes
    map_pane, graph_pane = panes[MapScreen], panes[GraphScreen]
    mmap = map_pane.query_one(MemoryMap)
    return {
        "binding": map_pane.bmap.binding_id if map_pane.bmap is not None else None,
        "buffer": mmap.panel.buffer_id if mmap.panel is not None else None,
        "head": str(map_pane.query_one("#maphead", Static).render()),
        "info": str(map_pane.query_one("#info", Static).render()),
        "graph rows": [(r.kind, r.name) for r in graph_pane.rows],
        "graph info": str(graph_pane.query_one("#info", Static).render()),
    }


async def _visit(trace: Trace, gate: threading.Event | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Open the map and the graph pane with nothing prepared yet; what they show while the
    worker is held at ``gate`` (None: not held) and once it is done."""
    app = VizallocApp(trace)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        a = app.analysis
        assert a is not None
        a._maps.clear()
        app.panes[GraphScreen]._prepared.clear()
        if gate is not None:
            prepare = app._prepare_panes

            def held(binding_id: int) -> None:
                assert gate.wait(10), "the test never opened the gate"
                prepare(binding_id)

            app._prepare_panes = held  # type: ignore[method-assign]
        await pilot.press("2")
        await pilot.press("5")
        await pilot.pause()
        waiting = {"map": app.panes[MapScreen].waiting, "graph": app.panes[GraphScreen].waiting, **_shown(app)}
        if gate is not None:
            gate.set()
        await ready(pilot)
        await pilot.press("2")
        await pilot.pause()
        assert not app.panes[MapScreen].waiting and not app.panes[GraphScreen].waiting
        return waiting, _shown(app)


async def test_a_big_graph_is_shown_as_made_inline(trace: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    _, inline = await _visit(trace)
    monkeypatch.setattr(data, "INLINE_TENSORS", 0)   # every graph counts as big
    waiting, prepared = await _visit(trace, threading.Event())
    assert waiting["map"] and waiting["graph"], "both panes wait for the worker"
    assert "drawing its memory map" in waiting["head"] and waiting["buffer"] is None
    assert "listing its nodes" in waiting["graph info"] and waiting["graph rows"] == []
    assert inline["graph rows"], "the fixed trace's graph has nodes"
    assert prepared == inline


async def test_a_failing_worker_leaves_the_pane_to_make_it_once(trace: Trace,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, inline = await _visit(trace)
    monkeypatch.setattr(data, "INLINE_TENSORS", 0)
    calls: list[int] = []

    def broken(self: Any, binding_id: int) -> None:
        calls.append(binding_id)
        raise RuntimeError("the worker failed")

    monkeypatch.setattr(MapScreen, "prepare", broken)
    monkeypatch.setattr(GraphScreen, "prepare", broken)
    with anyio.fail_after(60):   # a pane that asked the worker again and again would hang here
        _, shown = await _visit(trace)
    assert shown == inline
    # each request (the selection when the analysis came, the visits to the map and the
    # graph) has both panes try the binding and its two neighbours: a few dozen calls at most
    assert 0 < len(calls) <= 4 * 2 * 3, calls
