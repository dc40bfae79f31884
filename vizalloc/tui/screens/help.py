"""The help screen: every key of the pane below it and of the app, with what it does."""

from __future__ import annotations

from typing import Any, ClassVar

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
        table = Table(title="vizalloc keys", show_header=True, header_style="bold", expand=True)
        table.add_column("key", no_wrap=True)
        table.add_column("what it does")
        seen: set[str] = set()
        sources: list[Any] = [self.below]
        sources.extend(w for w in self.below.query("*") if getattr(w, "BINDINGS", None))
        sources.append(self.app)
        for source in sources:
            # BINDINGS of the class and of its bases (a pane inherits the shared keys)
            inherited = [b for cls in type(source).__mro__ for b in cls.__dict__.get("BINDINGS", [])]
            for b in inherited:
                if not isinstance(b, Binding) or b.key in seen:
                    continue
                seen.add(b.key)
                self.rows.append((_key(b), b.description or b.action))
                table.add_row(Text(self.rows[-1][0]), Text(self.rows[-1][1]))
        for key, what in _NAV:
            table.add_row(Text(key, style="dim"), Text(what, style="dim"))
        with VerticalScroll(id="help-box"):
            yield Static(table)
            yield Static(Text("escape closes this help", style="dim"))
