"""The timeline pane: every plan, re-plan, binding, reset and compute, in order, with its
graph, buffer sizes and hazard count. Enter opens the step's memory map.

It is drawn from the pre-scan, so it shows while a big trace is still being analysed;
hazard counts appear when the analysis is done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.widget import Widget

from vizalloc.export.units import fmt_bytes
from vizalloc.tui.inert import inert
from vizalloc.tui.render import loc_text
from vizalloc.tui.screens.base import PaneScreen
from vizalloc.tui.steps import Step, StepKind
from vizalloc.tui.widgets.table import Column, VirtualTable

_STYLE = {StepKind.REPLAN: "#d7af5f", StepKind.RESET: "#8a8a8a", StepKind.PLAN: "#87afd7",
          StepKind.BINDING: "", StepKind.COMPUTE: "#87d787"}


class StepsSource:
    """The pre-scanned steps (a live list while loading), optionally filtered."""

    columns: Sequence[Column] = (
        Column("seq", 9, True), Column("step", 8), Column("id", 7, True), Column("graph", 7, True),
        Column("nodes", 6, True), Column("buffers", 10, True), Column("hazards", 7, True), Column("detail", 0),
    )

    def __init__(self, steps: list[Step], index: list[int] | None = None, analysed: bool = False,
                 graph_of: Callable[[int], int] | None = None) -> None:
        self.steps = steps
        self.index = index
        self.analysed = analysed
        #: the number every report gives a graph (``TraceModel.program_graph``), once analysed: a
        #: scheduler's copy and a split's view show as the program's graph
        self.graph_of = graph_of

    def __len__(self) -> int:
        return len(self.steps) if self.index is None else len(self.index)

    def step(self, i: int) -> Step:
        return self.steps[i if self.index is None else self.index[i]]

    def cells(self, i: int) -> Sequence[str]:
        s = self.step(i)
        sizes = " + ".join(fmt_bytes(sum(c)) for c in s.chunk_sizes if c) if s.chunk_sizes else ""
        graph = s.graph_id if self.graph_of is None or s.graph_id < 0 else self.graph_of(s.graph_id)
        return (str(s.seq), s.kind.value, f"#{s.step_id}", f"#{graph}" if graph >= 0 else "",
                str(s.n_nodes) if s.n_nodes else "", sizes,
                str(s.n_hazards) if self.analysed else "…", inert(s.detail, 200))

    def style(self, i: int) -> str:
        s = self.step(i)
        if s.n_hazards:
            return "bold #ff8787"
        return _STYLE[s.kind]


class TimelineScreen(PaneScreen):
    """Steps of the trace."""

    PANE = "Timeline"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "hazard_steps", "Only hazards"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.only_hazards = False

    def compose_body(self) -> Iterable[Widget]:
        yield VirtualTable(id="steps", classes="body")

    def on_mount(self) -> None:
        super().on_mount()
        self._rebuild()
        self.query_one("#steps", VirtualTable).focus()

    @property
    def table(self) -> VirtualTable:
        return self.query_one("#steps", VirtualTable)

    def _rebuild(self, cursor: int | None = None) -> None:
        steps = self.vz.scan.steps
        needle = self.filter_text.lower()
        index = None
        if self.only_hazards or needle:
            index = [i for i, s in enumerate(steps)
                     if (not self.only_hazards or s.n_hazards)
                     and (not needle or needle in f"{s.kind.value} #{s.step_id} {s.detail}".lower())]
        a = self.vz.analysis
        self.table.set_source(StepsSource(steps, index, a is not None, a.model.program_graph if a is not None else None),
                              cursor=cursor)
        self._describe()

    def steps_grew(self) -> None:
        if self.only_hazards or self.filter_text:
            return
        src = self.table.source
        if isinstance(src, StepsSource) and src.steps is not self.vz.scan.steps:
            self._rebuild(cursor=0)   # a new pre-scan: the trace is read again (a repetition's proof failed)
            return
        self.table.refresh()
        self._describe()

    def data_changed(self) -> None:
        self._rebuild(cursor=None)

    def apply_search(self, text: str) -> None:
        self._rebuild()

    def action_hazard_steps(self) -> None:
        self.only_hazards = not self.only_hazards
        self._rebuild()

    def _current(self) -> Step | None:
        src = self.table.source
        if isinstance(src, StepsSource) and len(src):
            return src.step(self.table.cursor)
        return None

    def _describe(self) -> None:
        s = self._current()
        n = len(self.vz.scan.steps)
        if s is None:
            self.set_info(Text(f"{n:,} steps" + (" (filtered: none match)" if n else "")))
            return
        line = Text()
        line.append(f"{s.kind.value} #{s.step_id}", style="bold")
        line.append(f" at seq {s.seq}")
        if s.binding_id >= 0:
            line.append(f"  memory map: binding #{s.binding_id}")
        if s.wall_ns:
            line.append(f"  {s.wall_ns / 1e6:.2f} ms")
        line.append(f"  at {loc_text(s.loc)}", style="dim")
        self.set_info(line)

    @on(VirtualTable.Highlighted, "#steps")
    def _highlighted(self, event: VirtualTable.Highlighted) -> None:
        s = self._current()
        if s is not None and s.binding_id >= 0:
            self.vz.selected_binding = s.binding_id
        self._describe()

    @on(VirtualTable.Selected, "#steps")
    def _selected(self, event: VirtualTable.Selected) -> None:
        from vizalloc.tui.app import MapTarget

        s = self._current()
        if s is None or s.binding_id < 0:
            self.notify("this step comes before any binding: no memory map yet", markup=False)
            return
        if self.vz.analysis is None:
            self.notify("the trace is still being analysed", markup=False)
            return
        step = None
        if s.kind is StepKind.COMPUTE:
            step = -1
        self.vz.show_map(MapTarget(s.binding_id, step=step))
