"""The hazards pane: every finding, with its sanitizer-style report below. Enter jumps to
the memory map at the place, with both tensors selected; ``t`` opens the tensor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from vizalloc.analysis.hazards import Hazard, HazardKind
from vizalloc.tui.inert import inert
from vizalloc.tui.screens.base import PaneScreen
from vizalloc.tui.widgets.table import Column, VirtualTable


def hazard_columns(tensor_cells: int = 0, other_cells: int = 0, where_cells: int = 14) -> tuple[Column, ...]:
    """The hazards table's columns: "where" as wide as its longest cell (up to 24: "compute
    #1 host" was cut to "compute #1 ho…" in a fixed 14), the two tensors share the rest by
    what they need."""
    return (
        Column("kind", 15), Column("seq", 6, True), Column("tensor", 0, natural=tensor_cells),
        Column("other", 0, natural=other_cells), Column("buf", 4, True), Column("bytes", 12),
        Column("times", 5, True), Column("where", min(max(where_cells, 5), 24)),
    )


class HazardsSource:
    columns: Sequence[Column] = hazard_columns()

    def __init__(self, hazards: list[Hazard], index: list[int]) -> None:
        self.hazards = hazards
        self.index = index
        if index:
            rows = [self.cells(i) for i in range(len(index))]
            self.columns = hazard_columns(*(max(max((len(r[k]) for r in rows), default=0), 5) for k in (2, 3, 7)))

    def __len__(self) -> int:
        return len(self.index)

    def hazard(self, i: int) -> Hazard:
        return self.hazards[self.index[i]]

    def cells(self, i: int) -> Sequence[str]:
        h = self.hazard(i)
        ranges = ", ".join(f"[{a}, {b})" for a, b in h.ranges[:2]) + (" …" if len(h.ranges) > 2 else "")
        where = (f"binding #{h.binding_id}" if h.binding_id >= 0
                 else f"compute #{h.compute_id}" + (f" n{h.node_index}" if h.node_index >= 0 else " host")
                 if h.compute_id >= 0 else h.cause)
        return (h.kind.value, str(h.seq), inert(h.tensor.label, 120) if h.tensor else "",
                inert(h.other.label, 120) if h.other else "", f"#{h.buffer_id}" if h.buffer_id >= 0 else "",
                ranges, str(h.occurrences), inert(where, 40))

    def style(self, i: int) -> str:
        return "#d7af5f" if self.hazard(i).kind.value == "replan" else "#ff8787"


class HazardsScreen(PaneScreen):
    """All hazards."""

    PANE = "Hazards"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "tensor", "Tensor"),
    ]

    def compose_body(self) -> Iterable[Widget]:
        yield VirtualTable(id="hazards", classes="body")
        with VerticalScroll(id="report-box"):
            yield Static(id="report")

    @property
    def table(self) -> VirtualTable:
        return self.query_one("#hazards", VirtualTable)

    def on_mount(self) -> None:
        super().on_mount()
        self.table.focus()
        if self.vz.analysis is None:
            self.set_info("the hazards appear when the analysis is done")

    def data_changed(self) -> None:
        self._rebuild()

    def _rebuild(self) -> None:
        a = self.vz.analysis
        if a is None:
            return
        needle = self.filter_text.lower()
        index = [i for i, h in enumerate(a.hazards)
                 if not needle or needle in " ".join((h.kind.value, h.tensor.name if h.tensor else "",
                                                      h.other.name if h.other else "", h.cause)).lower()]
        # errors first, then warnings (re-plans), each group in the analysis' order, as `vizalloc check` prints them
        index.sort(key=lambda i: a.hazards[i].kind is HazardKind.REPLAN)
        self.table.set_source(HazardsSource(a.hazards, index))
        kinds: dict[str, int] = {}
        for h in a.hazards:
            kinds[h.kind.value] = kinds.get(h.kind.value, 0) + 1
        summary = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "no hazards"
        self.set_info(Text(f"{len(index)} of {len(a.hazards)} hazards ({summary}); enter: show it in the memory map"))
        self._report()

    def _current(self) -> Hazard | None:
        src = self.table.source
        if isinstance(src, HazardsSource) and len(src):
            return src.hazard(self.table.cursor)
        return None

    def _report(self) -> None:
        h = self._current()
        text = Text()
        if h is not None:
            for line in h.report().splitlines():
                style = "bold #ff8787" if line.startswith("==vizalloc==") else ""
                text.append(inert(line, 400) + "\n", style=style)
        self.query_one("#report", Static).update(text)

    @on(VirtualTable.Highlighted, "#hazards")
    def _highlighted(self, event: VirtualTable.Highlighted) -> None:
        self._report()

    @on(VirtualTable.Selected, "#hazards")
    def _selected(self, event: VirtualTable.Selected) -> None:
        from vizalloc.tui.app import MapTarget

        a = self.vz.analysis
        h = self._current()
        if a is None or h is None:
            return
        binding = a.hazard_binding(h)
        if binding < 0:
            self.notify("this hazard has no binding to show", markup=False)
            return
        selected = frozenset(a.model.root(t) for t in (h.tensor_id, h.other_id) if t >= 0)
        step = h.node_index if h.node_index >= 0 else None
        offset = h.ranges[0][0] if h.ranges else None
        if step is None:
            offset = None  # let the map find the collision of the two tensors
        self.vz.show_map(MapTarget(binding, h.buffer_id, offset, step, selected))

    def action_tensor(self) -> None:
        h = self._current()
        if h is not None and h.tensor_id >= 0:
            self.vz.show_tensor(h.tensor_id)

    def apply_search(self, text: str) -> None:
        self._rebuild()

    def export_request(self) -> tuple[str, int] | tuple[str, int, int] | None:
        a = self.vz.analysis
        h = self._current()
        if a is not None and h is not None and a.hazard_binding(h) >= 0:
            return ("layout", a.hazard_binding(h))
        return super().export_request()
