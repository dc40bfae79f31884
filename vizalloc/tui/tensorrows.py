"""The tensors table's data (the pane that shows it is ``tui.screens.tensors``): its rows,
as columns (one list per field) so 100k+ tensors stay cheap.

A tensor's *state* sums up how it got its bytes (the last placement decides, a stale
one wins): ``stale`` (it was skipped as external by a plan while its placement was
left over from an earlier binding: the seed bug), ``view`` (it aliases its root),
``in-place`` (a plan let it take over a parent's bytes), ``external`` (its bytes came
from outside any graph allocator: weights, inputs), ``fresh`` (planned by a graph
allocator), ``none`` (it never had bytes, e.g. the originals of a deep-copied graph).
*First/last use* are the seqs of the first and last node computes that read or wrote
it (-1: never used by a compute).

    >>> from vizalloc.analysis.model import build_model
    >>> len(build_tensor_rows(build_model([])))
    0
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from vizalloc.analysis.model import TraceModel
from vizalloc.export.units import fmt_shape, trimmed_shape
from vizalloc.trace import events as ev


class TensorState(str, enum.Enum):
    STALE = "stale"
    VIEW = "view"
    INPLACE = "in-place"
    EXTERNAL = "external"
    FRESH = "fresh"
    NONE = "none"


_POOL = frozenset({ev.PlacedBy.GALLOCR, ev.PlacedBy.VIEW_INIT})


@dataclass
class TensorRows:
    """Column lists, one entry per tensor, in tensor-id order."""

    ids: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    shapes: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    buffers: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    first_use: list[int] = field(default_factory=list)
    last_use: list[int] = field(default_factory=list)
    states: list[TensorState] = field(default_factory=list)
    #: ``tensor_id -> row``
    row_of: dict[int, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def column(self, key: str) -> Sequence[object]:
        return getattr(self, SORT_KEYS[key])


#: sort key (as the bindings name it) -> column attribute
SORT_KEYS = {
    "id": "ids", "name": "names", "op": "ops", "dtype": "dtypes", "buffer": "buffers", "offset": "offsets",
    "nbytes": "nbytes", "first": "first_use", "last": "last_use", "state": "states",
}


def shape_text(ne: Sequence[int]) -> str:
    """``[16, 8]``: the shape without trailing 1s."""
    return fmt_shape(trimmed_shape(ne))


def stale_tensors(model: TraceModel) -> set[int]:
    """Tensors a plan skipped as external while their placement was stale (or dangling)."""
    out: set[int] = set()
    for plan in model.plans.values():
        for d in plan.decisions:
            if type(d) is ev.PlanExternal:
                p = model.placement_at(d.tensor_id, plan.begin_seq)
                if p is not None and (p.stale_seq <= plan.begin_seq
                                      or model.buffers.get(p.buffer_id) is not None
                                      and model.buffers[p.buffer_id].freed_seq <= plan.begin_seq):
                    out.add(d.tensor_id)
    return out


def build_tensor_rows(model: TraceModel, *, progress: Callable[[int, int], None] | None = None) -> TensorRows:
    """One row per tensor of the model (see the module docstring for the columns)."""
    stale = stale_tensors(model)
    inplace = {d.tensor_id for plan in model.plans.values() for d in plan.decisions if type(d) is ev.PlanInplace}
    rows = TensorRows()
    events = model.events
    placements = model.placements
    node_compute = ev.NodeCompute
    total = len(model.tensors)
    tensors = model.tensors
    # ids, not (id, info) pairs: ints that are nearly in order sort much faster (the sort
    # holds the GIL)
    for k, tid in enumerate(sorted(tensors)):
        info = tensors[tid]
        rows.row_of[tid] = len(rows.ids)
        rows.ids.append(tid)
        rows.names.append(info.name)
        rows.ops.append(info.op)
        rows.shapes.append(shape_text(info.ne))
        rows.dtypes.append(info.dtype)
        if info.placements:
            p = placements[info.placements[-1]]
            rows.buffers.append(p.buffer_id)
            rows.offsets.append(p.offset)
            by_pool = any(placements[i].by in _POOL for i in info.placements)
        else:
            rows.buffers.append(-1)
            rows.offsets.append(-1)
            by_pool = False
        rows.nbytes.append(info.nbytes)
        # history is in event order: the first and last compute touching it are near the ends
        first = last = -1
        hist = info.history
        for idx in hist:
            e = events[idx]
            if type(e) is node_compute:
                first = e.seq
                break
        if first >= 0:
            for idx in reversed(hist):
                e = events[idx]
                if type(e) is node_compute:
                    last = e.seq
                    break
        rows.first_use.append(first)
        rows.last_use.append(last)
        if tid in stale:
            state = TensorState.STALE
        elif info.is_view:
            state = TensorState.VIEW
        elif tid in inplace:
            state = TensorState.INPLACE
        elif not info.placements:
            state = TensorState.NONE
        elif by_pool:
            state = TensorState.FRESH
        else:
            state = TensorState.EXTERNAL
        rows.states.append(state)
        if progress is not None and k % 65536 == 65535:
            progress(k + 1, total)
    return rows


#: Lists are turned into numpy arrays this many items at a time (see :func:`_array`).
ARRAY_CHUNK = 16384


def _array(items: Sequence[object], dtype: type) -> np.ndarray:
    """``np.array(items, dtype)`` (for ``int`` or ``str`` items), filled in chunks with a GIL
    switch between them.

    Converting a Python list holds the GIL throughout; in the loading worker that froze
    the UI as long. The array is allocated once (for strings, as wide as the longest) and
    filled 16,384 items at a time.
    """
    if len(items) <= ARRAY_CHUNK:
        return np.array(items, dtype=dtype)
    if dtype is str:
        names = cast("Sequence[str]", items)
        width = max(max(map(len, names[lo:lo + ARRAY_CHUNK])) for lo in range(0, len(names), ARRAY_CHUNK))
        out = np.empty(len(items), dtype=f"<U{max(width, 1)}")
    else:
        out = np.empty(len(items), dtype=dtype)
    for lo in range(0, len(items), ARRAY_CHUNK):
        out[lo:lo + ARRAY_CHUNK] = items[lo:lo + ARRAY_CHUNK]
        time.sleep(0)  # let the UI thread run between chunks
    return out


# numpy >= 2 has the string ufuncs in np.strings; numpy 1.x only np.char (slower, same result)
_find = getattr(np, "strings", np.char).find


class TensorOrder:
    """Sort permutations (one per column, cached) and filters over :class:`TensorRows`.

    ``warm()`` computes the slow ones (names) ahead, in the loading worker, so a sort key
    answers at once even for 500,000 tensors.
    """

    def __init__(self, rows: TensorRows) -> None:
        self.rows = rows
        self._perms: dict[str, np.ndarray] = {}
        self._lower: np.ndarray | None = None
        self._state_codes: np.ndarray | None = None

    def warm(self) -> TensorOrder:
        for key in ("name", "op", "nbytes", "first", "state"):
            self.perm(key)
        self.lower_names()
        return self

    def perm(self, key: str) -> np.ndarray:
        p = self._perms.get(key)
        if p is None:
            r = self.rows
            if key == "id":
                p = np.arange(len(r))
            elif key == "state":
                p = np.argsort(self.state_codes(), kind="stable")
            elif key in ("name", "op"):
                col = r.names if key == "name" else r.ops
                # numpy sorts strings without the GIL (sorted() with a key holds it throughout);
                # same order as Python's (code points, stable) except that a trailing NUL
                # is not significant
                p = np.argsort(_array(col, str), kind="stable").astype(np.int64, copy=False)
            else:
                p = np.argsort(_array(r.column(key), np.int64), kind="stable")
            self._perms[key] = p
        return p

    def state_codes(self) -> np.ndarray:
        if self._state_codes is None:
            code = {s: i for i, s in enumerate(TensorState)}
            self._state_codes = np.fromiter((code[s] for s in self.rows.states), dtype=np.int8,
                                            count=len(self.rows))
        return self._state_codes

    def lower_names(self) -> np.ndarray:
        if self._lower is None:
            self._lower = _array([n.lower() for n in self.rows.names] or [""], str)[: len(self.rows)]
        return self._lower

    def order(self, key: str, reverse: bool, needle: str, state: TensorState | None) -> np.ndarray:
        """Row indices sorted by ``key`` (reversed), keeping names containing ``needle`` and ``state``."""
        p = self.perm(key)
        if reverse:
            p = p[::-1]
        if not needle and state is None:
            return p
        mask = np.ones(len(self.rows), dtype=bool)
        if state is not None:
            mask &= self.state_codes() == list(TensorState).index(state)
        if needle:
            mask &= _find(self.lower_names(), needle.lower()) >= 0
        return p[mask[p]]
