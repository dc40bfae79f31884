"""The graph pane: the nodes of the selected step's graph in execution order, with their
sources and their view and in-place relations; layers (``blk.N``) are folded into one
row each (enter unfolds one, ``z`` all). Enter on a node opens the tensor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.widget import Widget

from vizalloc.tui.graphrows import LAYER_PATTERN, GraphRow, graph_rows
from vizalloc.tui.inert import inert
from vizalloc.tui.screens.base import PaneScreen
from vizalloc.tui.widgets.table import Column, VirtualTable


def graph_columns(needs: Sequence[int] = (0, 0, 0, 0)) -> tuple[Column, ...]:
    """The graph table's columns: name, op, sources and relation share the free width by
    what they need (an op like CROSS_ENTROPY_LOSS_BACK was cut to 12 cells beside a half
    empty name column)."""
    name, op, sources, relation = needs
    return (
        Column("node", 6, True), Column("name", 0, natural=name), Column("op", 0, natural=op), Column("shape", 14),
        Column("sources", 0, natural=sources), Column("relation", 0, natural=relation),
    )


class GraphSource:
    columns: Sequence[Column] = graph_columns()

    def __init__(self, rows: list[GraphRow]) -> None:
        self.rows = rows
        if rows:
            cells = [self.cells(i) for i in range(len(rows))]
            self.columns = graph_columns([max(max(len(c[k]) for c in cells), 4) for k in (1, 2, 4, 5)])

    def __len__(self) -> int:
        return len(self.rows)

    def cells(self, i: int) -> Sequence[str]:
        r = self.rows[i]
        index = "leaf" if r.kind == "leaf" else str(r.index)
        name = " " * r.indent + inert(r.name, 200)
        if r.kind == "layer":
            return (index, f"{name} ({r.members} nodes)", "", "", r.sources, "")
        return (index, name, inert(r.op, 40), r.shape, r.sources, r.relation)

    def style(self, i: int) -> str:
        r = self.rows[i]
        if r.kind == "layer":
            return "bold #87afd7"
        if r.kind == "leaf":
            return "#8a8a8a"
        return "#d7af5f" if r.relation else ""


class GraphScreen(PaneScreen):
    """Nodes of one graph."""

    PANE = "Graph"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("z", "fold_all", "Fold/unfold all"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.expanded: frozenset[str] = frozenset()
        self.shown_binding = -2
        self.rows: list[GraphRow] = []

    def compose_body(self) -> Iterable[Widget]:
        yield VirtualTable(id="graph", classes="body")

    @property
    def table(self) -> VirtualTable:
        return self.query_one("#graph", VirtualTable)

    def on_mount(self) -> None:
        super().on_mount()
        self.table.focus()
        if self.vz.analysis is None:
            self.set_info("the graph appears when the analysis is done")

    def on_screen_resume(self) -> None:
        super().on_screen_resume()
        if self.vz.analysis is not None and self.shown_binding != self.vz.selected_binding:
            self._rebuild()

    def data_changed(self) -> None:
        self._rebuild()

    def _rebuild(self, cursor: int | None = 0) -> None:
        a = self.vz.analysis
        if a is None:
            return
        b = a.model.bindings.get(self.vz.selected_binding)
        self.shown_binding = self.vz.selected_binding
        if b is None:
            self.table.set_source(GraphSource([]))
            self.set_info("no bound graph selected (pick a step in the timeline)")
            return
        snap = b.graph if b.graph is not None else a.model.graphs[b.graph_id].snapshot()
        tensors = a.model.tensors
        needle = self.filter_text.lower()
        rows = graph_rows(nodes=snap.nodes, leafs=snap.leafs, info=tensors.get, inplace=a.inplace_upto(b.plan_id),
                          expanded=self.expanded, fold=None if needle else LAYER_PATTERN)
        if needle:
            rows = [r for r in rows if needle in r.name.lower()]
        self.rows = rows
        self.table.set_source(GraphSource(rows), cursor=cursor)
        layers = sum(1 for r in rows if r.kind == "layer")
        info = Text()
        info.append(f"graph #{b.graph_id} as bound by binding #{b.binding_id}", style="bold")
        info.append(f": {snap.n_nodes} nodes, {snap.n_leafs} leafs")
        if layers:
            info.append(f", {layers} layers folded (enter on one unfolds it, z all)")
        if needle:
            info.append(f", names like {inert(self.filter_text, 40)!r}")
        self.set_info(info)

    @on(VirtualTable.Selected, "#graph")
    def _selected(self, event: VirtualTable.Selected) -> None:
        if not self.rows:
            return
        r = self.rows[event.row]
        if r.kind == "layer":
            self.expanded = self.expanded ^ {r.group}
            self._rebuild(cursor=event.row)
        elif r.tensor_id >= 0:
            self.vz.show_tensor(r.tensor_id)

    def action_fold_all(self) -> None:
        groups = {r.group for r in self.rows if r.kind == "layer"}
        self.expanded = frozenset() if self.expanded else frozenset(groups)
        self._rebuild(cursor=None)

    def apply_search(self, text: str) -> None:
        self._rebuild()

    def export_request(self) -> tuple[str, int] | None:
        from vizalloc.export.dot import find_dot

        b = self.vz.selected_binding
        if b < 0:
            return None
        return ("svg" if find_dot() is not None else "dot", b)

