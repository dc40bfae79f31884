"""The tensor detail screen: a tensor's whole history (created, placed, cleared, read,
written, freed) with source lines; the row under the cursor is shown whole below the
table. ``m`` opens the memory map where it was last placed by a graph allocator;
escape goes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, cast

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Static

from vizalloc.export.units import fmt_bytes
from vizalloc.trace import events as ev
from vizalloc.tui.widgets.keys_bar import KeysBar
from vizalloc.tui.history import HistoryView
from vizalloc.tui.inert import inert
from vizalloc.tui.render import loc_text
from vizalloc.tui.tensorrows import shape_text
from vizalloc.tui.widgets.table import Column, VirtualTable

if TYPE_CHECKING:
    from vizalloc.tui.app import VizallocApp

_KIND_STYLE = {"stale": "bold #ff8787", "external": "#d7af5f", "placed": "#87afd7", "cleared": "#d7af5f",
               "freed": "bold #ff8787", "written": "#87d787",
               "read": "", "created": "bold"}


class HistorySource:
    columns: Sequence[Column] = (Column("seq", 9, True), Column("what", 9), Column("detail", 0),
                                 Column("source line", 0))

    def __init__(self, view: HistoryView) -> None:
        self.view = view

    def __len__(self) -> int:
        return len(self.view)

    def cells(self, i: int) -> Sequence[str]:
        r = self.view.row(i)
        return (str(r.seq), r.kind, r.what, r.where)

    def style(self, i: int) -> str:
        return _KIND_STYLE.get(self.view.row(i).kind, "")


class DetailScreen(Screen[None]):
    """One tensor's history."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("m", "map", "Memory map"),
    ]

    def __init__(self, tensor_id: int) -> None:
        super().__init__()
        self.tensor_id = tensor_id

    @property
    def vz(self) -> VizallocApp:
        return cast("VizallocApp", self.app)

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="tensorhead")
        yield VirtualTable(id="history", classes="body")
        yield Static(id="info")   # the row under the cursor, whole (the table cuts long cells)
        yield KeysBar()

    def on_mount(self) -> None:
        a = self.vz.analysis
        assert a is not None, "detail screen without analysis"
        info = a.model.tensors[self.tensor_id]
        title = Text()
        title.append(" Tensor ", style="bold reverse")
        title.append(" ")
        title.append(inert(info.name or f"#{info.tensor_id}", 100), style="bold")
        title.append(f"  (#{info.tensor_id})  escape: back")
        self.query_one("#title", Static).update(title)
        head = Text()
        head.append(f"{inert(info.dtype)}{shape_text(info.ne)} op {inert(info.op)}  {fmt_bytes(info.nbytes)}")
        srcs = [s for s in info.srcs if s >= 0]
        if srcs:
            head.append("  sources: " + ", ".join(inert(a.model.label(s), 30) for s in srcs))
        if info.view_src >= 0:
            head.append(f"  view of {inert(a.model.label(info.view_src), 30)} +{info.view_offs}")
        row = a.tensors.row_of.get(self.tensor_id)
        if row is not None:
            head.append(f"  state: {a.tensors.states[row].value}", style="bold")
        head.append(f"\ncreated at {loc_text(info.created_loc)}", style="dim")
        self.query_one("#tensorhead", Static).update(head)
        table = self.query_one("#history", VirtualTable)
        table.set_source(HistorySource(HistoryView(a.model, self.tensor_id)))
        table.focus()
        self._show_row(table.cursor)

    @on(VirtualTable.Highlighted, "#history")
    def _highlighted(self, event: VirtualTable.Highlighted) -> None:
        self._show_row(event.row)

    def _show_row(self, i: int) -> None:
        """The history row under the cursor, whole and wrapped: its seq, what happened and the
        full source line."""
        table = self.query_one("#history", VirtualTable)
        src = table.source
        info = self.query_one("#info", Static)
        if not isinstance(src, HistorySource) or not len(src):
            info.update("")
            return
        r = src.view.row(i)
        text = Text()
        text.append(f"seq {r.seq} {r.kind}: ", style="bold")
        text.append(r.what)
        text.append(f"\nat {r.where}", style="dim")
        info.update(text)

    def action_map(self) -> None:
        from vizalloc.tui.app import MapTarget

        a = self.vz.analysis
        if a is None:
            return
        info = a.model.tensors[self.tensor_id]
        for idx in reversed(info.placements):
            p = a.model.placements[idx]
            if p.binding_id >= 0:
                self.app.pop_screen()
                self.vz.show_map(MapTarget(p.binding_id, p.buffer_id, selected=frozenset({info.root})))
                return
        for plan_id in reversed(a.reserve_ids):   # planned by a reserve, never placed: the plan's map
            if any(d.tensor_id == info.root for d in a.model.plans[plan_id].decisions
                   if isinstance(d, (ev.PlanAlloc, ev.PlanInplace))):
                self.app.pop_screen()
                self.vz.show_map(MapTarget(-1, selected=frozenset({info.root}), plan_id=plan_id))
                return
        self.notify("no graph allocator ever placed this tensor: it has no memory map", markup=False)
