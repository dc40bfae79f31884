"""A table that draws only its visible rows (the Line API), for lists of any length.

Rows come from a :class:`TableSource`: a length, the cells of row ``i`` (already inert
strings) and an optional style per row. Nothing is copied into the widget, so a table
over 500,000 tensors costs what its 40 visible rows cost.

    table = VirtualTable(id="tensors")
    table.set_source(my_source)        # anything with columns, __len__, cells(i), style(i)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from rich.segment import Segment
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from vizalloc.tui.render import fit_cell, parsed_style


@dataclass(frozen=True, slots=True)
class Column:
    """A column: its header, width in cells (0: share what is left) and alignment.

    ``natural`` (for a shared column): the most cells its cells need. The space left is
    shared so that no such column takes more than it needs while another is cut; what
    remains goes to the first shared column.
    """

    label: str
    width: int
    right: bool = False
    natural: int = 0


def share_widths(columns: Sequence[Column], width: int) -> list[int]:
    """Cells per column for a table ``width`` cells wide (one space between columns).

        >>> cols = (Column("id", 4), Column("name", 0, natural=10), Column("op", 0, natural=20))
        >>> share_widths(cols, 40)       # 33 cells to share: op gets its 20, name the rest
        [4, 13, 20]
        >>> share_widths(cols, 24)       # 17 to share: neither gets what it needs
        [4, 9, 8]
    """
    fixed = sum(c.width + 1 for c in columns if c.width)
    flex = [i for i, c in enumerate(columns) if not c.width]
    rest = max(width - fixed - len(flex), 8)
    widths = [c.width for c in columns]
    # water-filling: the column needing least gets what it needs while that is under a fair share
    open_ = sorted(flex, key=lambda i: columns[i].natural or 1 << 30)
    while open_:
        share = rest // len(open_)
        i = open_[0]
        need = columns[i].natural
        if need and need <= share:
            widths[i] = max(need, 4)
            rest -= widths[i]
            open_.pop(0)
            continue
        for k, j in enumerate(open_):
            widths[j] = max(share + (1 if k < rest % len(open_) else 0), 4)
        rest = 0
        break
    if rest > 0 and flex:   # every shared column got what it needs: the first takes the rest
        widths[flex[0]] += rest
    return widths


class TableSource(Protocol):
    columns: Sequence[Column]

    def __len__(self) -> int: ...

    def cells(self, i: int) -> Sequence[str]: ...

    def style(self, i: int) -> str: ...


class EmptySource:
    columns: Sequence[Column] = (Column("", 0),)

    def __len__(self) -> int:
        return 0

    def cells(self, i: int) -> Sequence[str]:
        return ("",)

    def style(self, i: int) -> str:
        return ""


class RowMessage(Message):
    """A message about one row of a table (the base of :class:`VirtualTable`'s messages)."""

    def __init__(self, table: VirtualTable, row: int) -> None:
        super().__init__()
        self.table = table
        self.row = row

    @property
    def control(self) -> VirtualTable:
        return self.table


class VirtualTable(Widget, can_focus=True):
    """A scrolling table with a row cursor; enter or a double click selects the row."""

    DEFAULT_CSS = """
    VirtualTable { height: 1fr; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "jump(0)", "First", show=False),
        Binding("end,G", "jump(-1)", "Last", show=False),
        Binding("enter", "select", "Open"),
    ]
    """| Key | Action |
    | :- | :- |
    | up/k, down/j | move the cursor |
    | pageup, pagedown | move by a page |
    | home/g, end/G | first / last row |
    | enter | post :class:`VirtualTable.Selected` |
    """

    cursor: reactive[int] = reactive(0, init=False, always_update=True)
    """The row under the cursor (0 when the table is empty)."""

    class Highlighted(RowMessage):
        """The cursor moved to ``row`` (handled as ``on_virtual_table_highlighted``)."""

    class Selected(RowMessage):
        """Enter or a double click on ``row`` (handled as ``on_virtual_table_selected``)."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.source: TableSource = EmptySource()
        self.top = 0

    # -- data ---------------------------------------------------------------------
    def set_source(self, source: TableSource, *, cursor: int | None = 0) -> None:
        """Show ``source``; the cursor goes to ``cursor`` (None: stays where it is, clamped)."""
        self.source = source
        n = len(source)
        row = self.cursor if cursor is None else cursor
        self.set_cursor(min(max(row, 0), max(n - 1, 0)))
        self.refresh()

    def set_cursor(self, row: int) -> None:
        n = len(self.source)
        row = min(max(row, 0), max(n - 1, 0))
        self._scroll_to_row(row)
        self.cursor = row

    def _page(self) -> int:
        return max(1, self.size.height - 1)

    def _scroll_to_row(self, row: int) -> None:
        page = self._page()
        if row < self.top:
            self.top = row
        elif row >= self.top + page:
            self.top = row - page + 1
        self.top = max(0, min(self.top, max(len(self.source) - page, 0)))

    def watch_cursor(self, row: int) -> None:
        self.refresh()
        self.post_message(self.Highlighted(self, row))

    # -- actions ------------------------------------------------------------------
    def action_move(self, delta: int) -> None:
        self.set_cursor(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.set_cursor(self.cursor + direction * self._page())

    def action_jump(self, row: int) -> None:
        self.set_cursor(row if row >= 0 else len(self.source) - 1)

    def action_select(self) -> None:
        if len(self.source):
            self.post_message(self.Selected(self, self.cursor))

    # -- mouse --------------------------------------------------------------------
    def on_click(self, event: events.Click) -> None:
        if event.y < 1:
            return
        row = self.top + event.y - 1
        if row < len(self.source):
            self.set_cursor(row)
            if event.chain >= 2:
                self.post_message(self.Selected(self, row))

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._scroll_by(3)
        event.stop()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._scroll_by(-3)
        event.stop()

    def _scroll_by(self, rows: int) -> None:
        page = self._page()
        self.top = max(0, min(self.top + rows, max(len(self.source) - page, 0)))
        if not self.top <= self.cursor < self.top + page:
            self.cursor = min(max(self.cursor, self.top), self.top + page - 1, max(len(self.source) - 1, 0))
        self.refresh()

    def on_resize(self) -> None:
        self._scroll_to_row(self.cursor)

    # -- drawing ------------------------------------------------------------------
    def _widths(self, width: int) -> list[int]:
        return share_widths(self.source.columns, width)

    def _line(self, cells: Sequence[str], widths: list[int], width: int) -> str:
        cols = self.source.columns
        text = " ".join(fit_cell(str(v), w, c.right) for v, w, c in zip(cells, widths, cols))
        return fit_cell(text, width)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        widths = self._widths(width)
        if y == 0:
            header = self._line([c.label for c in self.source.columns], widths, width)
            return Strip([Segment(header, parsed_style("bold reverse"))], width)
        row = self.top + y - 1
        n = len(self.source)
        if row >= n:
            if n == 0 and y == 1:
                return Strip([Segment(fit_cell("  (nothing to show)", width), parsed_style("dim"))], width)
            return Strip.blank(width)
        text = self._line(self.source.cells(row), widths, width)
        style = self.source.style(row)
        if row == self.cursor:
            style = (style + (" reverse bold" if self.has_focus else " on #303030")).strip()
        return Strip([Segment(text, parsed_style(style))], width)
