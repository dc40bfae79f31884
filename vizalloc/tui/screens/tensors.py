"""The tensors pane: every tensor of the trace in a sortable, filterable table.

The table is virtual (only visible rows are drawn) and sorting uses a permutation made
once per column with numpy, so hundreds of thousands of tensors sort and filter quickly.
``/`` filters by name, ``f`` by state; ``n`` ``b`` ``o`` ``u`` ``l`` ``s`` ``i`` sort by
name, bytes, offset, first use, last use, state, id; ``r`` reverses; enter opens one.
The "first seq" and "last seq" columns are the events (the timeline's seq) of the
tensor's first and last use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np
from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.widget import Widget

from vizalloc.tui.inert import inert
from vizalloc.tui.screens.base import PaneScreen
from vizalloc.tui.tensorrows import RepeatedRows, TensorOrder, TensorRows, TensorState
from vizalloc.tui.widgets.table import Column, VirtualTable

_STATE_STYLE = {TensorState.STALE: "bold #ff8787", TensorState.VIEW: "#87afd7", TensorState.INPLACE: "#d7af5f",
                TensorState.EXTERNAL: "#8a8a8a", TensorState.FRESH: "", TensorState.PLANNED: "#5fafaf",
                TensorState.NONE: "#6c6c6c"}
STATE_FILTERS: tuple[TensorState | None, ...] = (None, *TensorState)
SORT_LABELS = {"id": "id", "name": "name", "nbytes": "bytes", "offset": "offset", "first": "first use",
               "last": "last use", "state": "state", "op": "op"}


def tensor_columns(name_cells: int = 0, op_cells: int = 0) -> tuple[Column, ...]:
    """The tensors table's columns; name and op share the free width by what they need.
    "first seq"/"last seq" are the events (the timeline's seq) of the first and last use."""
    return (
        Column("id", 7, True), Column("name", 0, natural=name_cells), Column("op", 0, natural=op_cells),
        Column("shape", 14), Column("type", 5), Column("buf", 4, True), Column("offset", 9, True),
        Column("bytes", 9, True), Column("first seq", 9, True), Column("last seq", 9, True), Column("state", 8),
    )


class TensorsSource:
    columns: Sequence[Column] = tensor_columns()

    def __init__(self, rows: TensorRows | RepeatedRows, order: Sequence[int] | np.ndarray,
                 columns: Sequence[Column] | None = None) -> None:
        self.rows = rows
        self.order = order
        if columns is not None:
            self.columns = columns

    def __len__(self) -> int:
        return len(self.order)

    def tensor_id(self, i: int) -> int:
        return self.rows.ids[int(self.order[i])]

    def cells(self, i: int) -> Sequence[str]:
        r = self.rows
        k = int(self.order[i])
        buf = r.buffers[k]
        return (str(r.ids[k]), inert(r.names[k], 200) or f"#{r.ids[k]}", inert(r.ops[k], 40), r.shapes[k],
                inert(r.dtypes[k], 8), f"#{buf}" if buf >= 0 else "", str(r.offsets[k]) if buf >= 0 else "",
                str(r.nbytes[k]), str(r.first_use[k]) if r.first_use[k] >= 0 else "",
                str(r.last_use[k]) if r.last_use[k] >= 0 else "", r.states[k].value)

    def style(self, i: int) -> str:
        return _STATE_STYLE[self.rows.states[int(self.order[i])]]


class TensorsScreen(PaneScreen):
    """All tensors."""

    PANE = "Tensors"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "sort('name')", "Name", tooltip="sort by name (again: reversed)"),
        Binding("b", "sort('nbytes')", "Bytes", tooltip="sort by bytes, largest first (again: reversed)"),
        Binding("o", "sort('offset')", "Offset", show=False, tooltip="sort by offset (again: reversed)"),
        Binding("u", "sort('first')", "First use", show=False, tooltip="sort by first use (first seq)"),
        Binding("l", "sort('last')", "Last use", show=False, tooltip="sort by last use (last seq)"),
        Binding("s", "sort('state')", "State", show=False, tooltip="sort by state"),
        Binding("i", "sort('id')", "Id", show=False, tooltip="sort by id (creation order)"),
        Binding("r", "reverse", "Reverse", tooltip="reverse the order"),
        Binding("f", "state_filter", "State filter", tooltip="show one state only (again: the next state, then all)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort_key = "id"
        self.reverse = False
        self.state_filter: TensorState | None = None
        self.orders: TensorOrder | None = None
        self.columns: Sequence[Column] = tensor_columns()

    def compose_body(self) -> Iterable[Widget]:
        yield VirtualTable(id="tensors", classes="body")

    @property
    def table(self) -> VirtualTable:
        return self.query_one("#tensors", VirtualTable)

    def on_mount(self) -> None:
        super().on_mount()
        self.table.focus()
        if self.vz.analysis is None:
            self.set_info("the tensors appear when the analysis is done")

    def data_changed(self) -> None:
        a = self.vz.analysis
        if a is None:
            return
        self.orders = a.tensor_order
        rows = a.tensors
        # the widest cells, as drawn (inert, at most 200 / 40 characters), so the name column
        # takes no more than its longest name and the op is not cut for it (a table made from
        # prototypes has no other names than theirs)
        distinct = getattr(rows, "protos", rows)
        self.columns = tensor_columns(max((len(inert(n, 200)) for n in distinct.names), default=4),
                                      max((len(inert(o, 40)) for o in distinct.ops), default=2))
        self._rebuild()

    def _rebuild(self, keep: bool = False) -> None:
        a = self.vz.analysis
        if a is None or self.orders is None:
            return
        current = self._current_id() if keep else None
        order = self.orders.order(self.sort_key, self.reverse, self.filter_text, self.state_filter)
        src = TensorsSource(a.tensors, order, self.columns)
        cursor = 0
        if current is not None:
            row = a.tensors.row_of.get(current)
            hits = np.nonzero(order == row)[0] if row is not None else None
            cursor = int(hits[0]) if hits is not None and len(hits) else 0
        self.table.set_source(src, cursor=cursor)
        self._info()

    def _current_id(self) -> int | None:
        src = self.table.source
        if isinstance(src, TensorsSource) and len(src):
            return src.tensor_id(self.table.cursor)
        return None

    def _info(self) -> None:
        a = self.vz.analysis
        if a is None:
            return
        n = len(self.table.source)
        text = Text(f"{n:,} of {len(a.tensors):,} tensors, sorted by {SORT_LABELS[self.sort_key]}"
                    + (" (reversed)" if self.reverse else ""))
        if self.filter_text:
            text.append(" named like ")
            text.append(inert(self.filter_text, 40), style="bold")
        if self.state_filter is not None:
            text.append(f", state {self.state_filter.value}")
        # every state named (80 columns hold it in the pane's four lines)
        text.append("  first/last seq: events of first, last use · stale: skipped, its bytes re-planned "
                    "· fresh: placed by a graph allocator · in-place: took a parent's bytes · view: "
                    "its root's bytes · external: weights, inputs · planned: offset in a reserve never bound · "
                    "none: no bytes", style="dim")
        self.set_info(text)

    def action_sort(self, key: str) -> None:
        if key == self.sort_key:
            self.reverse = not self.reverse
        else:
            self.sort_key, self.reverse = key, key in ("nbytes",)
        self._rebuild()   # from the top: a sort is asked for its first rows (the largest tensors)

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._rebuild()

    def action_state_filter(self) -> None:
        i = STATE_FILTERS.index(self.state_filter)
        self.state_filter = STATE_FILTERS[(i + 1) % len(STATE_FILTERS)]
        self._rebuild()

    def apply_search(self, text: str) -> None:
        self._rebuild()

    @on(VirtualTable.Selected, "#tensors")
    def _selected(self, event: VirtualTable.Selected) -> None:
        tid = self._current_id()
        if tid is not None:
            self.vz.show_tensor(tid)

    @on(VirtualTable.Highlighted, "#tensors")
    def _highlighted(self, event: VirtualTable.Highlighted) -> None:
        pass

    def export_request(self) -> tuple[str, int] | tuple[str, int, int] | None:
        a = self.vz.analysis
        tid = self._current_id()
        if a is not None and tid is not None:
            info = a.model.tensors[tid]
            for idx in reversed(info.placements):
                b = a.model.placements[idx].binding_id
                if b >= 0:
                    return ("layout", b)
        return super().export_request()
