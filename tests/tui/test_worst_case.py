"""The TUI on a run whose compute buffer was sized by a worst-case reserve (a llama.cpp
context): the memory map opens on that plan at its offsets, ``n``/``p`` walk it with the
bindings, the tensors table shows its tensors as ``planned`` with buffer and offset; and the
frictions of a real model's map: labels of narrow neighbours never run into each other,
sorting goes to the top, the footer keeps ``? Help`` at 80 columns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from textual.pilot import Pilot

from tests.export.scenarios import reserve_then_tokens
from tests.tui.conftest import ready
from vizalloc.trace import events as ev
from vizalloc.trace.value import Trace, TraceHeader
from vizalloc.tui.app import VizallocApp
from vizalloc.tui.mapdata import Block, Panel
from vizalloc.tui.render import MapGeometry, map_row
from vizalloc.tui.screens.detail import DetailScreen
from vizalloc.tui.screens.memory_map import MapScreen
from vizalloc.tui.screens.tensors import TensorsScreen
from vizalloc.tui.widgets.keys_bar import KeysBar
from vizalloc.tui.widgets.table import VirtualTable


@pytest.fixture
def reserved() -> Trace:
    return Trace(TraceHeader.new(), tuple(reserve_then_tokens(free_at_end=False)))


@asynccontextmanager
async def running(source: Trace, size: tuple[int, int] = (120, 40), **kw: Any) \
        -> AsyncIterator[tuple[VizallocApp, Pilot[None]]]:
    app = VizallocApp(source, **kw)
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        yield app, pilot


def _plan(trace: Trace) -> ev.PlanBegin:
    (plan,) = [e for e in trace.events if isinstance(e, ev.PlanBegin)]
    return plan


def _head(app: VizallocApp) -> str:
    return str(app.screen.query_one("#maphead").render())


@pytest.mark.anyio
async def test_the_map_opens_on_the_reserve_and_walks_to_the_bindings(reserved: Trace) -> None:
    plan = _plan(reserved)
    bindings = sorted(e.binding_id for e in reserved.events if isinstance(e, ev.BindingBegin))
    async with running(reserved) as (app, pilot):
        await pilot.press("2")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MapScreen) and screen.bmap is not None and screen.panel is not None
        head = _head(app)
        assert f"plan #{plan.plan_id} of graph #{plan.graph_id} (a reserve, never bound" in head, head
        assert "CPU compute" in head and "peak 20.0 KiB" in head, head
        assert any(b.name == "kq-2" and b.planned for b in screen.panel.blocks)
        # the reserve comes first in trace order: n goes to the first binding, p back to it
        await pilot.press("n")
        await pilot.pause()
        assert screen.bmap.binding_id == bindings[0] and f"binding #{bindings[0]}" in _head(app)
        await pilot.press("p")
        await pilot.pause()
        assert screen.bmap.planned and screen.bmap.plan_id == plan.plan_id
        # the timeline's selection is kept: another pane and back shows the reserve still
        await pilot.press("3")
        await pilot.press("2")
        await pilot.pause()
        assert screen.bmap.planned


@pytest.mark.anyio
async def test_a_reserves_tensors_have_their_planned_buffer_and_offset(reserved: Trace) -> None:
    plan = _plan(reserved)
    offsets = {e.tensor_id: e.offset for e in reserved.events if isinstance(e, ev.PlanAlloc)}
    names = {e.tensor_id: e.name for e in reserved.events if isinstance(e, (ev.TensorCreated, ev.TensorNamed))}
    (kq,) = [t for t in offsets if names.get(t) == "kq-1"]
    async with running(reserved) as (app, pilot):
        a = app.analysis
        assert a is not None
        rows = a.tensors
        k = rows.row_of[kq]
        compute = next(b for b in a.model.buffers.values() if b.usage == "compute")
        assert (rows.buffers[k], rows.offsets[k], rows.states[k].value) == (compute.buffer_id, offsets[kq], "planned")
        # its detail's m opens the reserve's map with it selected
        app.show_tensor(kq)
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        await pilot.press("m")
        await pilot.pause()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MapScreen) and screen.bmap is not None and screen.bmap.plan_id == plan.plan_id
        assert screen.mmap.selected == frozenset({kq})


@pytest.mark.anyio
async def test_sorting_goes_to_the_top(reserved: Trace) -> None:
    async with running(reserved) as (app, pilot):
        await pilot.press("3")
        await pilot.pause()
        assert isinstance(app.screen, TensorsScreen)
        table = app.screen.query_one("#tensors", VirtualTable)
        await pilot.press("pagedown", "pagedown", "down")
        await pilot.pause()
        assert table.cursor > 40 and table.top > 0
        await pilot.press("b")
        await pilot.pause()
        assert (table.cursor, table.top) == (0, 0)
        a = app.analysis
        assert a is not None
        # the largest tensor first
        assert int(table.source.cells(0)[7]) == max(a.tensors.nbytes)


@pytest.mark.anyio
@pytest.mark.parametrize("pane", ["1", "2", "3", "4", "5"])
async def test_the_footer_keeps_help_at_80_columns(reserved: Trace, pane: str) -> None:
    async with running(reserved, size=(80, 24)) as (app, pilot):
        await pilot.press(pane)
        await pilot.pause()
        bar = str(app.screen.query_one(KeysBar).render())
        assert "?  Help" in bar and len(bar.rstrip()) <= 80, bar


def _block(tid: int, name: str, first: int, last: int) -> Block:
    return Block(tid, name, "ADD", "f32", "[4]", 0, 64, first, last, "", "gallocr", 0, True)


def test_labels_of_narrow_neighbours_never_run_into_each_other() -> None:
    """Blocks at one offset, each live over a few steps (a real model's per-layer tensors):
    a name is drawn whole, or cut with an ellipsis in at least four cells, or not at all."""
    blocks = [_block(1, "inp_scaled", -1, 0), _block(2, "ffn_out-0", 1, 2), _block(3, "l_out-0", 3, 5),
              _block(4, "norm-1", 6, 15), _block(5, "x", 16, 16)]
    panel = Panel(1, "b", 64, 17, blocks)
    text = "".join(t for t, _ in map_row(panel, MapGeometry(17, 64), 0, 0, 19))
    # in..0: 2 cells (no room), 1..2: 2 cells, 3..5: 3 cells, 6..15: 10 cells, 16: 1 cell ("x" fits)
    assert text[:7].strip() == "" and text[7:17] == "norm-1    " and text[17] == "x", repr(text)
    wide = Panel(1, "b", 64, 17, [_block(1, "attn_inp_kq_mask", -1, 4), _block(2, "kq-5", 5, 17)])
    text = "".join(t for t, _ in map_row(wide, MapGeometry(17, 64), 0, 0, 19))
    assert text.startswith("attn_\u2026kq-5"), repr(text)
