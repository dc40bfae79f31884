"""The memory map keeps drawn rows between frames: what it draws must equal a fresh drawing."""

from __future__ import annotations

import pytest

from vizalloc.trace.value import Trace
from vizalloc.tui.render import GUTTER, map_row
from vizalloc.tui.widgets.memory_map import MemoryMap

from tests.tui.test_app import running

pytestmark = pytest.mark.anyio


def _fresh(mmap: MemoryMap, y: int) -> str:
    """Line ``y`` of the map drawn from scratch (as render_line did before it kept rows)."""
    panel = mmap.panel
    assert panel is not None
    ncols = max(mmap.size.width - GUTTER, 0)
    row = mmap.top + y - 1
    runs = map_row(panel, mmap.geom, row, mmap.left, min(ncols, max(mmap.geom.n_cols - mmap.left, 0)),
                   cursor=(mmap.cursor_row, mmap.cursor_col), selected=mmap.selected,
                   collision_list=mmap._collisions)
    return "".join(text for text, _ in runs)


async def test_kept_rows_match_a_fresh_drawing(trace: Trace) -> None:
    async with running(trace) as (app, pilot):
        await pilot.press("2")
        mmap = app.screen.query_one(MemoryMap)
        n_rows = mmap.geom.n_rows(mmap.panel.top) if mmap.panel is not None else 0
        assert n_rows > 2
        for keys in ((), ("j", "j", "l"), ("k",), ("minus",), ("plus", "plus", "l"), ("greater_than_sign",), ("b",)):
            await pilot.press(*keys)
            await pilot.pause()
            for y in range(1, min(mmap.size.height, n_rows + 1)):
                drawn = mmap.render_line(y).text[GUTTER:].rstrip()
                assert drawn == _fresh(mmap, y).rstrip(), (keys, y)
            # the cursor's row is drawn with the cursor, every other row without
            cursor_y = mmap.cursor_row - mmap.top + 1
            assert 1 <= cursor_y < mmap.size.height
