"""The help screen: every key of the pane below it and of the app, with what it does.

Its table is built once per screen below and drawn once per width (see :class:`_Memo`).
"""

from __future__ import annotations

from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

_NAV = [("arrows / h j k l", "move (in the memory map: left/right by step, up/down by offset)"),
        ("pageup / pagedown, home / end", "move by a page, to the first / last row"),
        ("enter, double click", "follow: open the step, the hazard's place, the tensor"),
        ("tab / shift+tab, 1-5", "next / previous pane, pane by number"),
        ("/", "search or filter (enter applies, escape closes)"),
        ("mouse", "click moves the cursor, the wheel scrolls")]


def _key(b: Binding) -> str:
    return ", ".join(k.replace("question_mark", "?").replace("slash", "/").replace("plus", "+")
                     .replace("minus", "-").replace("greater_than_sign", ">").replace("less_than_sign", "<")
                     .replace("equals_sign", "=").replace("full_stop", ".").replace("comma", ",")
                     for k in b.key.split(","))


class _Memo:
    """A renderable drawn once per width: Textual renders a ``Static``'s content twice on
    show (its height, then its lines), and laying out the keys table is most of the help
    screen's cost. The segments are the table's own, so it looks exactly the same."""

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable
        self._segments: dict[tuple[Any, ...], list[Segment]] = {}

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        key = (options.max_width, options.min_width, options.justify, options.overflow, options.no_wrap,
               options.highlight, options.markup, options.ascii_only, options.legacy_windows, options.encoding)
        segments = self._segments.get(key)
        if segments is None:
            segments = self._segments[key] = list(console.render(self.renderable, options))
        return segments

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.renderable)


#: ``below screen -> (binding sources, rows, table)``: built on a screen's first help, kept
#: while the screen lives (the panes: the whole session)
_CONTENT: WeakKeyDictionary[Screen[Any], tuple[tuple[type, ...], list[tuple[str, str]], _Memo]] = \
    WeakKeyDictionary()


def _content(below: Screen[Any], app: Any) -> tuple[list[tuple[str, str]], _Memo]:
    """The help's rows and table for the screen ``below`` (cached; rebuilt when the widgets
    with keys of that screen changed, e.g. once its search box was mounted)."""
    sources: list[Any] = [below]
    sources.extend(w for w in below.query("*") if getattr(w, "BINDINGS", None))
    sources.append(app)
    signature = tuple(type(w) for w in sources)
    got = _CONTENT.get(below)
    if got is not None and got[0] == signature:
        return got[1], got[2]
    table = Table(title="vizalloc keys", show_header=True, header_style="bold", expand=True)
    table.add_column("key", no_wrap=True)
    table.add_column("what it does")
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    for source in sources:
        # BINDINGS of the class and of its bases (a pane inherits the shared keys); only
        # vizalloc's own: Textual's defaults (focus moves, "Copy selected text", its
        # command palette) are not what these keys do here
        inherited = [b for cls in type(source).__mro__ if cls.__module__.startswith("vizalloc.")
                     for b in cls.__dict__.get("BINDINGS", [])]
        for b in inherited:
            if not isinstance(b, Binding) or b.key in seen:
                continue
            seen.add(b.key)
            rows.append((_key(b), b.tooltip or b.description or b.action))
            table.add_row(Text(rows[-1][0]), Text(rows[-1][1]))
    for key, what in _NAV:
        table.add_row(Text(key, style="dim"), Text(what, style="dim"))
    memo = _Memo(table)
    _CONTENT[below] = (signature, rows, memo)
    return rows, memo


class HelpScreen(ModalScreen[None]):
    """Keys, for the screen that was showing."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "app.pop_screen", "Close"),
    ]

    def __init__(self, below: Screen[Any]) -> None:
        super().__init__()
        self.below = below
        #: (key, what it does) as shown
        self.rows: list[tuple[str, str]] = []

    def compose(self) -> ComposeResult:
        self.rows, table = _content(self.below, self.app)
        with VerticalScroll(id="help-box"):
            yield Static(table)
            yield Static(Text("escape closes this help", style="dim"))
