"""The memory map: offset down the side, node steps across, one block per tensor.

Drawn with the Line API: ``render_line`` builds only the rows on screen, from the pure
functions in :mod:`vizalloc.tui.render`. The cursor moves by step (left/right) and by
row of bytes (up/down); ``+``/``-`` zoom the offsets, ``>``/``<`` the steps. Each move
posts :class:`MemoryMap.CursorMoved` with the blocks under the cursor.

    mmap = MemoryMap(id="map")
    mmap.show(panel, offset=128, step=3, selected=frozenset({6, 11}))
"""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from vizalloc.tui.mapdata import Block, Panel
from vizalloc.tui.render import (
    GUTTER, STYLE_HEADER, Collision, MapGeometry, Run, cell_blocks, collisions, fit_bytes_per_row, fit_step_width,
    gutter, header_row, map_cells, merge_runs, parsed_style, with_cursor,
)

class MemoryMap(Widget, can_focus=True):
    """A zoomable offset x step grid of one buffer of one bound graph."""

    DEFAULT_CSS = """
    MemoryMap { height: 1fr; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left,h", "move(0, -1)", "Step left", show=False),
        Binding("right,l", "move(0, 1)", "Step right", show=False),
        Binding("up,k", "move(-1, 0)", "Offset up", show=False),
        Binding("down,j", "move(1, 0)", "Offset down", show=False),
        Binding("pageup", "move(-10, 0)", "Page up", show=False),
        Binding("pagedown", "move(10, 0)", "Page down", show=False),
        Binding("home", "move(-1000000000, 0)", "Offset 0", show=False),
        Binding("plus,equals_sign", "zoom_bytes(0.5)", "Zoom in"),
        Binding("minus", "zoom_bytes(2)", "Zoom out"),
        Binding("greater_than_sign,full_stop", "zoom_steps(1)", "Wider steps", show=False),
        Binding("less_than_sign,comma", "zoom_steps(0)", "Narrower steps", show=False),
    ]
    """| Key | Action |
    | :- | :- |
    | left/h, right/l | cursor one column (step) left/right |
    | up/k, down/j, pageup, pagedown | cursor one row (or ten) of bytes up/down |
    | + / - | fewer / more bytes per row |
    | > / < | wider / narrower steps |
    """

    class CursorMoved(Message):
        """The cursor moved; ``blocks`` are under it (``on_memory_map_cursor_moved``)."""

        def __init__(self, mmap: MemoryMap, blocks: list[Block], offset: int, steps: tuple[int, int]) -> None:
            super().__init__()
            self.mmap = mmap
            self.blocks = blocks
            self.offset = offset
            self.steps = steps

        @property
        def control(self) -> MemoryMap:
            return self.mmap

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.panel: Panel | None = None
        self.geom = MapGeometry(0, 1)
        self.cursor_row = 0
        self.cursor_col = 0
        self.top = 0
        self.left = 0
        self.selected: frozenset[int] = frozenset()
        self._collisions: list[Collision] = []
        self._fitted_size = (0, 0)
        self._auto_fit = True
        self._drawn_key: tuple[object, ...] = ()
        self._drawn_panel: Panel | None = None
        self._drawn: dict[int, tuple[list[Run], Strip]] = {}

    # -- data -------------------------------------------------------------------------
    def show(self, panel: Panel | None, *, offset: int | None = None, step: int | None = None,
             selected: frozenset[int] = frozenset(), keep_zoom: bool = False) -> None:
        """Draw ``panel``; put the cursor at ``offset``/``step`` when given."""
        self.panel = panel
        self.selected = selected
        self._collisions = collisions(panel) if panel is not None else []
        if panel is None:
            self.refresh()
            return
        if not keep_zoom or self.geom.n_steps != panel.n_steps:
            self._auto_fit = True
            self._fit()
        if offset is not None:
            self.cursor_row = self.geom.row_of(offset)
        if step is not None:
            self.cursor_col = self.geom.col_of(step)
        self._clamp()
        self._follow()
        self.refresh()
        self._moved()

    def _fit(self) -> None:
        assert self.panel is not None, "no panel to fit"
        rows = max(self.size.height - 1, 8)
        cols = max(self.size.width - GUTTER, 16)
        g = fit_step_width(self.panel.n_steps, cols)
        self.geom = MapGeometry(self.panel.n_steps, fit_bytes_per_row(self.panel.top, rows), g.step_width,
                                g.steps_per_col)
        self._fitted_size = (self.size.width, self.size.height)

    def on_resize(self) -> None:
        # until the user zooms, the whole buffer and graph are fitted to the widget's size
        if self.panel is not None and self._auto_fit and self._fitted_size != (self.size.width, self.size.height):
            offset = self.cursor_row * self.geom.bytes_per_row
            step = self.geom.steps_of(self.cursor_col)[0]
            old, scrolled = self.geom, (self.top, self.left)
            self._fit()
            if self.geom == old:
                # a line more or less that fits the same grid (the loading bar went away): the
                # cursor stays on the same cell, so the pane needs no second round of updates
                self.top = self.left = 0
                self._clamp()
                self._follow()
                if (self.top, self.left) != scrolled:
                    self.refresh()
                return
            self.cursor_row = self.geom.row_of(offset)
            self.cursor_col = self.geom.col_of(step)
            self.top = self.left = 0
            self._clamp()
            self._follow()
            self.refresh()
            self._moved()
        else:
            self._clamp()
            self._follow()

    def cursor_blocks(self) -> list[Block]:
        if self.panel is None:
            return []
        return cell_blocks(self.panel, self.geom, self.cursor_row, self.cursor_col)

    def cursor_state(self) -> tuple[list[Block], int, tuple[int, int]]:
        """What :class:`CursorMoved` tells: the blocks under the cursor, its offset, its steps."""
        return self.cursor_blocks(), self.cursor_row * self.geom.bytes_per_row, self.geom.steps_of(self.cursor_col)

    def _moved(self) -> None:
        self.post_message(self.CursorMoved(self, *self.cursor_state()))

    # -- movement ---------------------------------------------------------------------
    def _clamp(self) -> None:
        top = self.panel.top if self.panel is not None else 1
        self.cursor_row = min(max(self.cursor_row, 0), self.geom.n_rows(top) - 1)
        self.cursor_col = min(max(self.cursor_col, 0), max(self.geom.n_cols - 1, 0))

    def _follow(self) -> None:
        rows = max(self.size.height - 1, 1)
        cols = max(self.size.width - GUTTER, 1)
        if self.cursor_row < self.top:
            self.top = self.cursor_row
        elif self.cursor_row >= self.top + rows:
            self.top = self.cursor_row - rows + 1
        if self.cursor_col < self.left:
            self.left = self.cursor_col
        elif self.cursor_col >= self.left + cols:
            self.left = self.cursor_col - cols + 1

    def action_move(self, rows: int, cols: int) -> None:
        if self.panel is None:
            return
        # a step is step_width columns wide: move by whole steps
        self.cursor_col += cols * (self.geom.step_width if self.geom.steps_per_col == 1 else 1)
        if cols and self.geom.steps_per_col == 1:
            self.cursor_col -= self.cursor_col % self.geom.step_width
        self.cursor_row += rows
        self._clamp()
        self._follow()
        self.refresh()
        self._moved()

    def _rezoom(self, geom: MapGeometry) -> None:
        self._auto_fit = False
        offset = self.cursor_row * self.geom.bytes_per_row
        step = self.geom.steps_of(self.cursor_col)[0]
        self.geom = geom
        self.cursor_row = geom.row_of(offset)
        self.cursor_col = geom.col_of(step)
        self._clamp()
        # keep the cursor where it was on screen when possible
        self.top = max(0, self.cursor_row - max(self.size.height - 1, 1) // 2)
        self.left = max(0, self.cursor_col - max(self.size.width - GUTTER, 1) // 2)
        self._follow()
        self.refresh()
        self._moved()

    def action_zoom_bytes(self, factor: float) -> None:
        if self.panel is not None:
            self._rezoom(self.geom.zoom_bytes(factor))

    def action_zoom_steps(self, zoom_in: int) -> None:
        if self.panel is not None:
            self._rezoom(self.geom.zoom_steps(bool(zoom_in)))

    # -- mouse --------------------------------------------------------------------------
    def on_click(self, event: events.Click) -> None:
        if self.panel is None or event.y < 1 or event.x < GUTTER:
            return
        self.cursor_row = self.top + event.y - 1
        self.cursor_col = self.left + event.x - GUTTER
        self._clamp()
        self.refresh()
        self._moved()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.action_move(3, 0)
        event.stop()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.action_move(-3, 0)
        event.stop()

    # -- drawing ------------------------------------------------------------------------
    def _row_cache(self, width: int) -> dict[int, tuple[list[Run], Strip]]:
        """Drawn rows (cells without the cursor, and their strip) for what is shown now.

        A cursor move or a new frame redraws every line; only the cursor's rows change, so
        the others come from here (drawing every row of a wide map again is slow).
        """
        key = (self.geom, self.left, width, self.selected, id(self._collisions))
        if key != self._drawn_key or self._drawn_panel is not self.panel:
            self._drawn_key, self._drawn_panel = key, self.panel
            self._drawn = {}
        return self._drawn

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        panel = self.panel
        if panel is None:
            return Strip.blank(width)
        ncols = max(width - GUTTER, 0)
        if y == 0:
            text = " " * GUTTER + header_row(self.geom, self.left, ncols)
            return Strip([Segment(text, parsed_style(STYLE_HEADER))], width)
        row = self.top + y - 1
        if row >= self.geom.n_rows(panel.top):
            return Strip.blank(width)
        drawn = self._row_cache(width)
        got = drawn.get(row)
        if got is None:
            cells = map_cells(panel, self.geom, row, self.left, min(ncols, max(self.geom.n_cols - self.left, 0)),
                              selected=self.selected, collision_list=self._collisions)
            got = drawn[row] = (cells, self._strip(panel, row, merge_runs(cells), width))
        cells, strip = got
        if row != self.cursor_row:
            return strip
        return self._strip(panel, row, merge_runs(with_cursor(cells, row, self.left,
                                                              (self.cursor_row, self.cursor_col))), width)

    def _strip(self, panel: Panel, row: int, runs: list[Run], width: int) -> Strip:
        segments = [Segment(gutter(self.geom, row, panel.top), parsed_style(STYLE_HEADER))]
        segments.extend(Segment(text, parsed_style(style)) for text, style in runs)
        return Strip(segments).adjust_cell_length(width)
