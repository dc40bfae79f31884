"""What every pane shares: a title line, the body, an info line, a search box, the
loading bar and the footer; ``/`` search, escape, and the data-arrived hook.

    class MyScreen(PaneScreen):
        def compose_body(self): yield VirtualTable(id="table")
        def data_changed(self): ...
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar, cast

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widget import Widget

from vizalloc.tui.widgets.keys_bar import KeysBar
from textual.widgets import Input, Static

if TYPE_CHECKING:
    from vizalloc.tui.app import VizallocApp


#: ``Static.update`` takes ``layout`` since Textual 1.x; before, every update laid out
_UPDATE_HAS_LAYOUT = "layout" in inspect.signature(Static.update).parameters


def set_static(static: Static, content: Text | str, *, layout: bool) -> None:
    """``static.update(content)``, without a layout pass when ``layout`` is False.

    For lines of a fixed height (the title, the loading bar, the map's head): a layout
    pass costs a whole extra frame after a key.
    """
    if _UPDATE_HAS_LAYOUT:
        static.update(content, layout=layout)
    else:
        static.update(content)


def _rows(text: Text | str, width: int) -> int | None:
    """Lines ``text`` takes at ``width`` cells, or None when one would wrap (unknown)."""
    lines = (text.plain if isinstance(text, Text) else text).split("\n")
    return None if any(cell_len(line) > width for line in lines) else len(lines)


class PaneScreen(Screen[None]):
    """Base of the panes (timeline, map, tensors, hazards, graph)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "app.pane(1)", "Next pane"),
        Binding("shift+tab", "app.pane(-1)", "Previous pane", show=False),
        Binding("slash", "search", "Search"),
        Binding("escape", "close_search", "Close search", show=False),
    ]

    #: the pane's name in the title line
    PANE = ""
    #: lines the info area always takes (None: as many as its text needs, at most four); a
    #: pane whose body is fitted to its height (the memory map) keeps it fixed, or the body
    #: would be fitted anew whenever the info text grew or shrank by a line
    INFO_ROWS: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self._seen_version = -1
        self.filter_text = ""
        self._info_shown: Text | str | None = None
        self._info_shown_rows: int | None = None

    @property
    def vz(self) -> VizallocApp:
        return cast("VizallocApp", self.app)

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield from self.compose_body()
        yield Static(id="info")
        yield Static(id="loadbar")
        yield KeysBar()

    def compose_body(self) -> Iterable[Widget]:
        return ()

    def on_mount(self) -> None:
        self.vz.panes[type(self)] = self
        if self.INFO_ROWS is not None:
            self.query_one("#info", Static).styles.height = self.INFO_ROWS
        self.update_title()
        self.vz.refresh_loadbar(self)
        app = self.app
        if self is not app.screen and hasattr(self, "_css_update_count"):
            # Mounted behind the current pane (VizallocApp.prepare_panes): style it now, as
            # App.refresh_css does for the screens of the current stack, and mark it done, or
            # the first switch to it would re-parse the whole stylesheet again.
            # Without that private counter (another Textual) the switch just costs that time.
            app.stylesheet.update(self, animate=False)
            self._css_update_count = app._css_update_count

    def on_screen_resume(self) -> None:
        self.catch_up()
        self.update_title()

    def catch_up(self) -> None:
        """Show what the app holds now (the analysis, once it arrived; the selected binding).

        The app calls it before it switches to the pane (``VizallocApp.switch_mode``), so the
        switch's first frame already shows the pane up to date; on resume it then finds
        nothing to do.
        """
        self.vz.refresh_loadbar(self)
        if self._seen_version != self.vz.version:
            self._seen_version = self.vz.version
            self.data_changed()

    def update_title(self) -> None:
        tabs = Text()
        for i, (mode, label) in enumerate(self.vz.PANES):
            style = "bold reverse" if label == self.PANE else "dim"
            tabs.append(f" {i + 1} {label} ", style=style)
            tabs.append(" ")
        tabs.append_text(self.vz.source_label)
        set_static(self.query_one("#title", Static), tabs, layout=False)

    def set_info(self, text: Text | str) -> None:
        """Show ``text`` in the info lines; laid out again only if it may take more or fewer lines."""
        info = self.query_one("#info", Static)
        if self._info_shown == text:
            return
        width = info.content_region.width
        rows = _rows(text, width) if width > 0 else None
        set_static(info, text, layout=self.INFO_ROWS is None and (rows is None or rows != self._info_shown_rows))
        self._info_shown, self._info_shown_rows = text, rows

    # -- hooks for subclasses -----------------------------------------------------
    def data_changed(self) -> None:
        """The analysis arrived (or the steps grew); redraw from ``self.vz``."""

    @property
    def waiting(self) -> bool:
        """Whether the pane shows that it waits for a worker (its views of a binding, say)."""
        return False

    def prepare(self, binding_id: int) -> None:
        """Make what the pane will show of a binding (called in a worker thread: compute and
        keep, never touch a widget)."""

    def binding_prepared(self, binding_id: int) -> None:
        """What ``prepare`` made for a binding is ready (on the UI thread)."""

    def steps_grew(self) -> None:
        """More steps were pre-scanned (only the timeline cares)."""

    def apply_search(self, text: str) -> None:
        """Filter or jump by ``text`` (empty: clear)."""

    def export_request(self) -> tuple[str, int] | tuple[str, int, int] | None:
        """``(format, binding_id)`` that ``e`` exports from this pane (``(format, -1, plan_id)``: a
        plan never bound), None if nothing."""
        b = self.vz.selected_binding
        return ("layout", b) if b >= 0 else None

    # -- search -----------------------------------------------------------------------
    def action_search(self) -> None:
        # the box is mounted on first use: one widget less to build per pane
        boxes = self.query("#search")
        if boxes:
            box = boxes.first(Input)
        else:
            box = Input(placeholder="search (enter to apply, escape to close)", id="search")
            self.mount(box, before=self.query_one("#loadbar"))
        box.value = self.filter_text
        box.add_class("-open")
        box.focus()

    def action_close_search(self) -> None:
        boxes = self.query("#search")
        if not boxes:
            return
        box = boxes.first(Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.focus_body()

    def focus_body(self) -> None:
        body = self.query(".body").first() if self.query(".body") else None
        if body is not None:
            body.focus()

    @on(Input.Submitted, "#search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.filter_text = event.value
        self.apply_search(event.value)
        self.action_close_search()
