"""Pilot tests: navigation, the jump from a hazard to the map, filtering, sorting, export."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from vizalloc.cli.tui import export_writer
from vizalloc.trace.api import save
from vizalloc.trace.value import Trace
from vizalloc.tui.app import VizallocApp
from vizalloc.tui.screens.detail import DetailScreen
from vizalloc.tui.screens.help import HelpScreen
from vizalloc.tui.screens.memory_map import MapScreen
from vizalloc.tui.screens.tensors import TensorsScreen
from vizalloc.tui.widgets.memory_map import MemoryMap
from vizalloc.tui.widgets.table import VirtualTable

from tests.tui.conftest import ready
from tests.tui.fixture_trace import G1, NAMES, W, X

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


@asynccontextmanager
async def running(source: Trace | str, **kw: Any) -> AsyncIterator[tuple[VizallocApp, Pilot[None]]]:
    """The app on ``source`` at ``SIZE``, once its trace is analysed."""
    app = VizallocApp(source, **kw)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        yield app, pilot


async def test_panes_by_tab_and_number(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        assert app.current_mode == "timeline"
        seen = []
        for _ in range(5):
            await pilot.press("tab")
            await pilot.pause()
            seen.append(app.current_mode)
        assert seen == ["map", "tensors", "hazards", "graph", "timeline"]
        await pilot.press("shift+tab")
        assert app.current_mode == "graph"
        await pilot.press("3")
        assert app.current_mode == "tensors"


async def test_timeline_cursor_and_enter_open_the_binding(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        table = app.screen.query_one("#steps", VirtualTable)
        assert len(table.source) == 10
        for _ in range(3):
            await pilot.press("j")
        assert table.cursor == 3 and app.selected_binding == 0   # the forward binding
        await pilot.press("down", "down", "down", "down", "down")
        assert app.selected_binding == 1
        await pilot.press("enter")
        await pilot.pause()
        assert app.current_mode == "map"
        screen = app.screen
        assert isinstance(screen, MapScreen) and screen.bmap is not None and screen.bmap.binding_id == 1


async def test_hazard_enter_jumps_to_the_collision(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("4")
        table = app.screen.query_one("#hazards", VirtualTable)
        kinds = [table.source.hazard(i).kind.value for i in range(len(table.source))]  # type: ignore[attr-defined]
        target = kinds.index("stale-overlap")
        for _ in range(target):
            await pilot.press("down")
        report = str(app.screen.query_one("#report").render())
        assert "stale-overlap" in report
        await pilot.press("enter")
        await pilot.pause()
        assert app.current_mode == "map"
        mmap = app.screen.query_one(MemoryMap)
        assert mmap.panel is not None and mmap.panel.buffer_id == 1
        assert mmap.selected == frozenset({X, G1})
        under = {b.tensor_id for b in mmap.cursor_blocks()}
        assert {X, G1} <= under, "the cursor sits where both tensors collide"
        info = str(app.screen.query_one("#info").render())
        assert "collides with" in info


async def test_map_cursor_zoom_and_buffers(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("2")
        mmap = app.screen.query_one(MemoryMap)
        bpr = mmap.geom.bytes_per_row
        await pilot.press("minus")
        assert mmap.geom.bytes_per_row == bpr * 2
        await pilot.press("plus", "plus")
        assert mmap.geom.bytes_per_row == bpr // 2
        width = mmap.geom.step_width
        await pilot.press("greater_than_sign")
        assert mmap.geom.step_width == min(width * 2, 32)
        col = mmap.cursor_col
        await pilot.press("l")
        assert mmap.geom.steps_of(mmap.cursor_col)[0] == mmap.geom.steps_of(col)[0] + 1
        row = mmap.cursor_row
        await pilot.press("j")
        assert mmap.cursor_row == row + 1
        first = mmap.panel.buffer_id if mmap.panel else None
        await pilot.press("b")
        assert mmap.panel is not None and mmap.panel.buffer_id != first
        await pilot.press("p")
        screen = app.screen
        assert isinstance(screen, MapScreen) and screen.bmap is not None and screen.bmap.binding_id == 0


async def test_tensor_filter_by_name_and_state(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("3")
        table = app.screen.query_one("#tensors", VirtualTable)
        assert len(table.source) == 9
        await pilot.press("slash", *"blk", "enter")
        await pilot.pause()
        assert len(table.source) == 2
        names = {table.source.cells(i)[1] for i in range(2)}
        assert names == {"blk.0.grad_y", "blk.0.grad_h"}
        assert table.has_focus
        await pilot.press("slash", "ctrl+u", "enter")   # clear the name filter
        await pilot.pause()
        assert len(table.source) == 9
        await pilot.press("f")                           # state: stale
        stale = {table.source.tensor_id(i) for i in range(len(table.source))}  # type: ignore[attr-defined]
        assert X in stale and W not in stale and G1 not in stale


async def test_tensor_sorting(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("3")
        screen = app.screen
        assert isinstance(screen, TensorsScreen)
        table = screen.query_one("#tensors", VirtualTable)
        await pilot.press("b")   # bytes, largest first
        sizes = [int(table.source.cells(i)[7]) for i in range(len(table.source))]
        assert sizes == sorted(sizes, reverse=True) and table.source.tensor_id(0) == W  # type: ignore[attr-defined]
        await pilot.press("r")
        sizes = [int(table.source.cells(i)[7]) for i in range(len(table.source))]
        assert sizes == sorted(sizes)
        await pilot.press("n")
        ids = [table.source.tensor_id(i) for i in range(len(table.source))]  # type: ignore[attr-defined]
        assert [NAMES[t] for t in ids] == sorted(NAMES[t] for t in ids)
        await pilot.press("n")
        ids_rev = [table.source.tensor_id(i) for i in range(len(table.source))]  # type: ignore[attr-defined]
        assert ids_rev == ids[::-1]


async def test_detail_and_help_screens(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("3", "enter")   # tensor #0: x
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen) and app.screen.tensor_id == X
        history = app.screen.query_one("#history", VirtualTable)
        kinds = [history.source.cells(i)[1] for i in range(len(history.source))]
        assert kinds[0] == "created" and "placed" in kinds and "read" in kinds
        await pilot.press("m")   # its memory map
        await pilot.pause()
        assert app.current_mode == "map" and app.screen.query_one(MemoryMap).selected == frozenset({X})
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        help_text = " ".join(what for _, what in app.screen.rows)
        for what in ("Next binding", "Zoom in", "Next pane", "Search", "Quit", "Export"):
            assert what in help_text, what
        await pilot.press("escape")
        assert isinstance(app.screen, MapScreen)


async def test_mouse_click_and_double_click(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("3")
        table = app.screen.query_one("#tensors", VirtualTable)
        await pilot.click("#tensors", offset=(3, 4))    # header is line 0: row 3
        assert table.cursor == 3
        await pilot.double_click("#tensors", offset=(3, 2))
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen) and app.screen.tensor_id == 1


async def test_export_from_the_map_and_the_graph(trace: Trace, tmp_path: Path) -> None:
    async with running(trace, export=export_writer(tmp_path, "fixed")) as (app, pilot):
        await pilot.press("2", "e")
        await app.workers.wait_for_complete()
        await pilot.press("5", "e")
        await app.workers.wait_for_complete()
        await pilot.press("5", "e")   # the same view again: a second file, nothing overwritten
        await app.workers.wait_for_complete()
        await pilot.pause()
    files = sorted(p.name for p in tmp_path.iterdir())
    layout = tmp_path / "fixed.b1.layout.svg"
    assert layout.exists() and layout.read_text().lstrip().startswith("<?xml")
    graph_files = [f for f in files if f.endswith((".dot", ".svg")) and "layout" not in f]
    assert len(graph_files) == 2, files
    text = (tmp_path / graph_files[0]).read_text()
    assert "\x1b" not in text and ("digraph" in text or "<svg" in text)


async def test_export_without_writer_says_so(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("e")
        await pilot.pause()
        assert any("not available" in str(n.message) for n in app._notifications)


async def test_load_from_file_and_names_stay_inert(trace: Trace, tmp_path: Path) -> None:
    path = tmp_path / "fixed.vztrace"
    save(trace, path)
    async with running(str(path)) as (app, pilot):
        assert len(app.scan.steps) == 10 and len(app.analysis.hazards) == 6  # type: ignore[union-attr]
        for key in ("3", "4", "5", "2"):
            await pilot.press(key)
            await pilot.pause()
            svg = app.export_screenshot()
            assert "\x1b" not in svg and "\u202e" not in svg
        await pilot.press("3")
        await pilot.pause()
        svg = app.export_screenshot()
        assert "[bold]h[/bold]" in svg.replace("&#160;", " ")
        assert "\\x1b[31my" in svg and "loss\\nnext" in svg


async def test_a_broken_file_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "bad.vztrace"
    path.write_bytes(b"not a trace at all")
    app = VizallocApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        assert "not a vizalloc trace" in app.load_error
        await pilot.press("3", "4", "2", "e")   # every pane copes with no analysis
        await pilot.pause()


def test_cli_refuses_missing_and_broken_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vizalloc.cli import main

    assert main(["tui", str(tmp_path / "nope.vztrace")]) == 2
    assert "no trace file at" in capsys.readouterr().err
    bad = tmp_path / "bad.vztrace"
    bad.write_bytes(b"garbage")
    assert main(["tui", str(bad)]) == 2
    assert "not a vizalloc trace" in capsys.readouterr().err
    assert main(["tui", str(tmp_path)]) == 2


def test_demo_and_run_open_the_tui_with_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import vizalloc.cli.tui as cli_tui
    from vizalloc.cli import main

    opened: list[str] = []
    monkeypatch.setattr(cli_tui, "open_tui", lambda path, export_dir=None: opened.append(path) or 0)
    assert main(["demo", "--strategies", "none", "--steps", "1", "--out-dir", str(tmp_path), "--json", "--tui"]) == 0
    assert opened == [str(tmp_path / "demo-none.vztrace")]
    script = tmp_path / "tiny.py"
    script.write_text("from vizalloc.runtime.context import Context\nContext(name='tiny')\n")
    out = tmp_path / "tiny.vztrace"
    assert main(["run", "-o", str(out), "--tui", str(script)]) == 0
    assert opened[-1] == str(out)


async def test_notifications_show_search_text_literally(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("2", "slash", *"[bold]zz", "enter")
        await pilot.pause()
        notes = list(app._notifications)
        assert notes and "[bold]zz" in notes[-1].message and not notes[-1].markup


async def test_map_mouse_click_and_wheel(trace: Trace) -> None:
    from vizalloc.tui.render import GUTTER

    async with running(trace) as (app, pilot):
        await pilot.press("2")
        mmap = app.screen.query_one(MemoryMap)
        await pilot.click(MemoryMap, offset=(GUTTER + 5, 3))   # line 0 is the step header
        assert (mmap.cursor_row, mmap.cursor_col) == (mmap.top + 2, mmap.left + 5)
        row = mmap.cursor_row
        from textual import events

        mmap.post_message(events.MouseScrollDown(mmap, GUTTER + 5, 3, 0, 0, 0, False, False, False))
        await pilot.pause()
        assert mmap.cursor_row == min(row + 3, mmap.geom.n_rows(mmap.panel.top) - 1)  # type: ignore[union-attr]


async def test_help_lists_only_vizalloc_keys_and_ctrl_c_quits(trace: Trace) -> None:
    """The help screen shows what the keys do here, not Textual's internals; Ctrl-C quits
    (Textual's default only said "press ctrl+q")."""
    async with running(trace) as (app, pilot):
        await pilot.press("3", "question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        rows = dict(app.screen.rows)
        whats = " ".join(rows.values())
        for internal in ("help_quit", "Copy selected text", "command_palette", "focus_next", "Palette"):
            assert internal not in whats, internal
        assert rows["ctrl+c, ctrl+q"] == "Quit" and rows["q"] == "Quit"
        assert rows["n"] == "sort by name (again: reversed)"
        await pilot.press("escape")
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0 and not app.is_running


async def test_history_row_is_readable_whole(trace: Trace) -> None:
    """The table cuts long cells; the row under the cursor is shown whole below it."""
    async with running(trace) as (app, pilot):
        await pilot.press("3", "enter")
        await pilot.pause()
        history = app.screen.query_one("#history", VirtualTable)
        info = app.screen.query_one("#info")
        for i in range(len(history.source)):
            history.set_cursor(i)
            await pilot.pause()
            row = history.source.view.row(i)
            shown = str(info.render())
            assert f"seq {row.seq} {row.kind}: " in shown and row.what in shown and row.where in shown


async def test_tensors_name_and_op_share_the_width(trace: Trace) -> None:
    """The name column takes what its names need, not everything: the op is never cut
    while the name column has room to spare."""
    from vizalloc.tui.widgets.table import share_widths

    async with running(trace) as (app, pilot):
        await pilot.press("3")
        await pilot.pause()
        table = app.screen.query_one("#tensors", VirtualTable)
        cols = list(table.source.columns)
        labels = [c.label for c in cols]
        assert "first seq" in labels and "last seq" in labels
        widths = dict(zip(labels, share_widths(cols, 160)))
        op_need = max(len(table.source.cells(i)[2]) for i in range(len(table.source)))
        assert widths["op"] >= op_need
        assert "first/last seq" in str(app.screen.query_one("#info").render())


async def test_map_head_gives_the_buffer_figures(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("2")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MapScreen) and screen.panel is not None and screen.panel.figures is not None
        fig = screen.panel.figures
        head = str(screen.query_one("#maphead").render())
        assert f"peak {fig.highest} B" in head and f"max live {fig.max_live} B" in head
        assert fig.max_live <= fig.highest <= fig.size
