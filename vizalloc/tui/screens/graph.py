"""The graph pane: the nodes of the selected step's graph in execution order, with their
sources and their view and in-place relations; layers (``blk.N``) are folded into one
row each (enter unfolds one, ``z`` all). Enter on a node opens the tensor.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
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

#: bindings whose node lists the pane keeps as ``prepare`` made them
PREPARED_GRAPHS = 16


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

    def __init__(self, rows: list[GraphRow], n_nodes: int = 0, n_leafs: int = 0) -> None:
        self.rows = rows
        #: the graph's node and leaf counts (its rows may be folded or filtered)
        self.n_nodes = n_nodes
        self.n_leafs = n_leafs
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
        #: bindings' node lists as first shown (layers folded, no search), made by ``prepare``
        self._prepared: OrderedDict[int, GraphSource] = OrderedDict()
        self._prepared_lock = threading.Lock()
        #: the binding whose node list a worker is making while the pane says so
        self._waiting = -1

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

    def catch_up(self) -> None:
        super().catch_up()
        if self.vz.analysis is not None and self.shown_binding != self.vz.selected_binding:
            self._rebuild()

    def data_changed(self) -> None:
        self._rebuild()

    def _source(self, binding_id: int, expanded: frozenset[str], needle: str) -> GraphSource:
        """The node list of a binding's graph (``needle``: only nodes named like it, unfolded)."""
        a = self.vz.analysis
        assert a is not None, "no analysis yet"
        b = a.model.bindings[binding_id]
        snap = b.graph if b.graph is not None else a.model.graphs[b.graph_id].snapshot()
        rows = graph_rows(nodes=snap.nodes, leafs=snap.leafs, info=a.model.tensors.get, inplace=a.inplace_upto(b.plan_id),
                          expanded=expanded, fold=None if needle else LAYER_PATTERN)
        if needle:
            rows = [r for r in rows if needle in r.name.lower()]
        return GraphSource(rows, snap.n_nodes, snap.n_leafs)

    @property
    def waiting(self) -> bool:
        return self._waiting >= 0

    def prepare(self, binding_id: int) -> None:
        a = self.vz.analysis
        if a is None or binding_id not in a.model.bindings:
            return
        with self._prepared_lock:
            if binding_id in self._prepared:
                return
        src = self._source(binding_id, frozenset(), "")
        with self._prepared_lock:
            self._prepared[binding_id] = src
            while len(self._prepared) > PREPARED_GRAPHS:
                self._prepared.popitem(last=False)

    def binding_prepared(self, binding_id: int) -> None:
        if self._waiting == binding_id and self.vz.selected_binding == binding_id:
            self._rebuild(wait=False)

    def _rebuild(self, cursor: int | None = 0, *, wait: bool = True) -> None:
        """Show the selected binding's node list; ``wait``: a big graph's is made in a worker
        (False: here, as when the worker made it and it was dropped or failed meanwhile)."""
        a = self.vz.analysis
        if a is None:
            return
        binding_id = self.vz.selected_binding
        b = a.model.bindings.get(binding_id)
        self.shown_binding = binding_id
        self._waiting = -1
        if b is None:
            self.table.set_source(GraphSource([]))
            self.set_info("no bound graph selected (pick a step in the timeline)")
            return
        needle = self.filter_text.lower()
        src = None
        if not self.expanded and not needle:
            with self._prepared_lock:
                src = self._prepared.get(binding_id)
            if src is None and wait and not a.cheap(binding_id):
                # a big graph: a worker makes its node list (VizallocApp.prepare_binding, asked
                # for by selecting the binding); the pane says so and shows it when it is ready
                self._waiting = binding_id
                self.rows = []
                self.table.set_source(GraphSource([]))
                self.set_info(Text(f"{a.model.graph_name(b.graph_id)} as bound by binding #{binding_id}: listing its nodes\u2026",
                                   style="bold"))
                self.vz.prepare_binding(binding_id, settle=False)
                return
        if src is None:
            src = self._source(binding_id, self.expanded, needle)
        rows = src.rows
        self.rows = rows
        self.table.set_source(src, cursor=cursor)
        layers = sum(1 for r in rows if r.kind == "layer")
        info = Text()
        info.append(f"{a.model.graph_name(b.graph_id)} as bound by binding #{b.binding_id}", style="bold")
        info.append(f": {src.n_nodes} nodes, {src.n_leafs} leafs")
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

    def export_request(self) -> tuple[str, int] | tuple[str, int, int] | None:
        from vizalloc.export.dot import find_dot

        b = self.vz.selected_binding
        if b < 0:
            return None
        return ("svg" if find_dot() is not None else "dot", b)

