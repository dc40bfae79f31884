"""The tensors table's data (the pane that shows it is ``tui.screens.tensors``): its rows,
as columns (one list per field) so 100k+ tensors stay cheap.

A tensor's *state* sums up how it got its bytes (the last placement decides, a stale
one wins): ``stale`` (it was skipped as external by a plan while its placement was
left over from an earlier binding: the seed bug), ``view`` (it aliases its root),
``in-place`` (a plan let it take over a parent's bytes), ``external`` (its bytes came
from outside any graph allocator: weights, inputs), ``fresh`` (planned by a graph
allocator), ``planned`` (a plan gave it an offset but no binding ever placed it: a tensor
of a worst-case reserve graph, shown at the plan's buffer and offset), ``none`` (it never
had bytes, e.g. the originals of a deep-copied graph).
*First/last use* are the seqs of the first and last node computes that read or wrote
it (-1: never used by a compute).

    >>> from vizalloc.analysis.model import build_model
    >>> len(build_tensor_rows(build_model([])))
    0
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.placed import plan_placements
from vizalloc.analysis.records import TensorInfo
from vizalloc.export.units import fmt_shape, trimmed_shape
from vizalloc.trace import events as ev


class TensorState(str, enum.Enum):
    STALE = "stale"
    VIEW = "view"
    INPLACE = "in-place"
    EXTERNAL = "external"
    FRESH = "fresh"
    PLANNED = "planned"
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


def inplace_tensors(model: TraceModel) -> set[int]:
    """Tensors a plan let take over a parent's bytes in place."""
    return {d.tensor_id for plan in model.plans.values() for d in plan.decisions if type(d) is ev.PlanInplace}


def planned_only(model: TraceModel) -> dict[int, tuple[int, int]]:
    """``tensor -> (buffer, offset)`` for the tensors that a plan gave an offset and nothing
    ever placed (a worst-case reserve's graph), from the latest such plan; the buffer is the
    one that held the plan's offsets (-1 - slot when the trace never showed it)."""
    tensors = model.tensors
    live = getattr(tensors, "live", tensors)
    out: dict[int, tuple[int, int]] = {}
    for plan in sorted(model.plans.values(), key=lambda p: p.begin_seq):
        if not any((type(d) is ev.PlanAlloc or type(d) is ev.PlanInplace)
                   and d.tensor_id in live and not live[d.tensor_id].placements for d in plan.decisions):
            continue
        for tid, p in plan_placements(model, plan.plan_id).items():
            if tid in live and not live[tid].placements:
                out[tid] = (p.buffer_id, p.offset)
    return out


def build_tensor_rows(model: TraceModel, *, progress: Callable[[int, int], None] | None = None) -> TensorRows:
    """One row per tensor of the model (see the module docstring for the columns)."""
    stale = stale_tensors(model)
    inplace = inplace_tensors(model)
    planned = planned_only(model)
    rows = TensorRows()
    total = len(model.tensors)
    tensors = model.tensors
    # ids, not (id, info) pairs: ints that are nearly in order sort much faster (the sort
    # holds the GIL)
    for k, tid in enumerate(sorted(tensors)):
        _add_row(rows, model, tid, tensors[tid], stale, inplace, planned)
        if progress is not None and k % 65536 == 65535:
            progress(k + 1, total)
    return rows


def _add_row(rows: TensorRows, model: TraceModel, tid: int, info: TensorInfo, stale: set[int],
             inplace: set[int], planned: dict[int, tuple[int, int]]) -> None:
    """Append tensor ``tid``'s row."""
    placements = model.placements
    events = model.events
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
        buffer_id, offset = planned.get(tid, (-1, -1))
        rows.buffers.append(buffer_id)
        rows.offsets.append(offset)
        by_pool = False
    rows.nbytes.append(info.nbytes)
    # history is in event order: the first and last compute touching it are near the ends
    first = last = -1
    hist = info.history
    node_compute = ev.NodeCompute
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
    elif not info.placements and tid in planned:
        state = TensorState.PLANNED
    elif tid in inplace:
        state = TensorState.INPLACE
    elif not info.placements:
        state = TensorState.NONE
    elif by_pool:
        state = TensorState.FRESH
    else:
        state = TensorState.EXTERNAL
    rows.states.append(state)


class _ProtoColumn(Sequence[Any]):
    """A column of :class:`RepeatedRows`: row k's value is its prototype's."""

    def __init__(self, values: Sequence[Any], proto: np.ndarray) -> None:
        self.values = values
        self.proto = proto

    def __len__(self) -> int:
        return len(self.proto)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self.values[int(p)] for p in self.proto[k]]
        return self.values[int(self.proto[k])]

    def __iter__(self) -> Iterator[Any]:
        values = self.values
        return (values[p] for p in self.proto.tolist())


class _RowOf:
    """``tensor_id -> row`` over sorted ids, as ``TensorRows.row_of`` is used (``get``, ``[]``)."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids

    def get(self, tid: int, default: Any = None) -> Any:
        i = int(np.searchsorted(self.ids, tid))
        return i if i < len(self.ids) and int(self.ids[i]) == tid else default

    def __getitem__(self, tid: int) -> int:
        i = self.get(tid)
        if i is None:
            raise KeyError(tid)
        return int(i)

    def __contains__(self, tid: object) -> bool:
        return isinstance(tid, int) and self.get(tid) is not None


class RepeatedRows:
    """The tensor table of a model whose repeated steps were counted, not analysed
    (``vizalloc.analysis.stream``): millions of rows, made from few *prototypes*. The tensors
    analysed one by one are their own prototypes; a repeated step's tensors share the rows of
    its template's tensors (name, op, shape, bytes, buffer, offset, state), only the id moves.
    First and last use are unknown (-1): a streamed model keeps no events.

    ``protos`` holds the prototype rows (a :class:`TensorRows`); ``ids`` every row's tensor id
    (sorted), ``proto`` its prototype. Same interface as ``TensorRows`` for the table.
    """

    def __init__(self, protos: TensorRows, ids: np.ndarray, proto: np.ndarray) -> None:
        self.protos = protos
        self.ids = ids
        self.proto = proto
        self.names: Sequence[str] = _ProtoColumn(protos.names, proto)
        self.ops: Sequence[str] = _ProtoColumn(protos.ops, proto)
        self.shapes: Sequence[str] = _ProtoColumn(protos.shapes, proto)
        self.dtypes: Sequence[str] = _ProtoColumn(protos.dtypes, proto)
        self.buffers: Sequence[int] = _ProtoColumn(protos.buffers, proto)
        self.offsets: Sequence[int] = _ProtoColumn(protos.offsets, proto)
        self.nbytes: Sequence[int] = _ProtoColumn(protos.nbytes, proto)
        self.first_use: Sequence[int] = _ProtoColumn(protos.first_use, proto)
        self.last_use: Sequence[int] = _ProtoColumn(protos.last_use, proto)
        self.states: Sequence[TensorState] = _ProtoColumn(protos.states, proto)
        self.row_of = _RowOf(ids)

    def __len__(self) -> int:
        return len(self.ids)

    def column(self, key: str) -> Sequence[object]:
        return getattr(self, SORT_KEYS[key])


def build_repeated_rows(model: TraceModel, runs: Sequence[Any]) -> RepeatedRows:
    """The rows of a streamed model (see :class:`RepeatedRows`); ``runs`` its ``runs.Run`` list."""
    stale = stale_tensors(model)
    inplace = inplace_tensors(model)
    planned = planned_only(model)
    tensors = model.tensors
    live = getattr(tensors, "live", tensors)
    protos = TensorRows()
    for tid in sorted(live):
        _add_row(protos, model, tid, live[tid], stale, inplace, planned)
    ids = [np.asarray(protos.ids, dtype=np.int64)]
    proto = [np.arange(len(protos.ids), dtype=np.int64)]
    templates: dict[int, np.ndarray] = {}   # id(template) -> its tensors' prototype rows
    for run in runs:
        tp = run.template
        r = run.ranges.get("tensor")
        if r is None or not run.count:
            continue
        t0s = sorted(tp.tensors)
        rows = templates.get(id(tp))
        if rows is None:
            first = len(protos.ids)
            for t0 in t0s:
                _add_row(protos, model, t0, tp.tensors[t0], stale, inplace, planned)
                protos.row_of.pop(t0, None)
            rows = templates[id(tp)] = np.arange(first, first + len(t0s), dtype=np.int64)
        move = r[1]
        ks = np.arange(run.first_k, run.first_k + run.count, dtype=np.int64)
        base = np.asarray(t0s, dtype=np.int64)
        these = (base[None, :] + move * ks[:, None]).reshape(-1)
        which = np.broadcast_to(rows[None, :], (len(ks), len(rows))).reshape(-1)
        made = [t for kind, t in run.made if kind == "tensor"]
        if made:   # made live later: they have rows of their own already
            keep = ~np.isin(these, np.asarray(made, dtype=np.int64))
            these, which = these[keep], which[keep]
        ids.append(these)
        proto.append(which)
    all_ids = np.concatenate(ids)
    all_proto = np.concatenate(proto)
    order = np.argsort(all_ids, kind="stable")
    return RepeatedRows(protos, all_ids[order], all_proto[order])


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
            mask &= self.name_mask(needle)
        return p[mask[p]]

    def name_mask(self, needle: str) -> np.ndarray:
        """Rows whose name contains ``needle`` (ignoring case)."""
        return _find(self.lower_names(), needle.lower()) >= 0


class RepeatedOrder(TensorOrder):
    """:class:`TensorOrder` over :class:`RepeatedRows`: every sort key and filter is worked out on
    the prototypes, then spread over the rows (a few numpy passes over millions of rows)."""

    def __init__(self, rows: RepeatedRows) -> None:
        super().__init__(rows)  # type: ignore[arg-type]
        self.rrows = rows

    def perm(self, key: str) -> np.ndarray:
        p = self._perms.get(key)
        if p is not None:
            return p
        r = self.rrows
        if key == "id":
            p = np.arange(len(r))
        else:
            # each prototype's key as a dense rank (equal keys, equal ranks), spread over the rows:
            # a stable sort then keeps rows of equal keys in id order, as TensorOrder does
            protos = r.protos
            if key == "state":
                keys: np.ndarray = TensorOrder(protos).state_codes()
            elif key in ("name", "op"):
                keys = _array(protos.names if key == "name" else protos.ops, str)
            else:
                keys = _array(protos.column(key), np.int64)
            if len(keys):
                rank = np.unique(keys, return_inverse=True)[1].reshape(-1)
                p = np.argsort(rank[r.proto], kind="stable")
            else:
                p = np.arange(0)
        self._perms[key] = p
        return p

    def state_codes(self) -> np.ndarray:
        if self._state_codes is None:
            self._state_codes = TensorOrder(self.rrows.protos).state_codes()[self.rrows.proto]
        return self._state_codes

    def lower_names(self) -> np.ndarray:
        # the prototypes' names only (``name_mask`` spreads the match over the rows); made
        # once, by ``warm``, not again at every filter
        if self._lower is None:
            self._lower = TensorOrder(self.rrows.protos).lower_names()
        return self._lower

    def name_mask(self, needle: str) -> np.ndarray:
        protos = _find(self.lower_names(), needle.lower()) >= 0
        return protos[self.rrows.proto]
