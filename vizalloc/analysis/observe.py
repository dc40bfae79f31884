"""What one step of the stream analysis reads of the state it found: the proof that steps are independent.

The stream analysis (``stream.py``) may analyse a repeated step once and count it again
(``runs.py``) only if each repetition would see exactly what the one before saw. To know
what a step sees, it is analysed with every container of the model, the model builder
and the access pass replaced by a *view* that notes each read of an entry the step did not
write itself: the entry and a digest of its value (``Observation``). The code of the
passes does not change; the views look like the dicts, lists and byte maps they wrap.

Byte maps are seen through a view whose interval lists are empty, which sends the access
pass down its general path (``ByteMap.scan`` and ``write``, with the same findings as its
fast path): there the view notes which bytes a read found written before the step.

    >>> obs = Observation()
    >>> d = {1: 10}
    >>> v = DictView(d, "x", obs)
    >>> v.get(1), v.get(2)
    (10, None)
    >>> v[2] = 5
    >>> v.get(2), [(name, key, value) for name, key, value in obs.log]
    (5, [('x', 1, 10), ('x', 2, '-')])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from vizalloc.analysis.bytemap import ByteMap
from vizalloc.analysis.records import (
    BindingInfo,
    BufferInfo,
    ComputeInfo,
    GraphInfo,
    GraphSnapshot,
    Placement,
    PlanInfo,
    SchedInfo,
    TensorInfo,
)

#: the digest of an entry that is not there
ABSENT = "-"
_MISSING = object()


class Observation:
    """The reads one step made of entries it had not written, in order: ``(container, key, digest)``."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any, Any]] = []
        self.seen: set[tuple[str, Any]] = set()       # entries read or written in the step
        self.written_bytes: dict[int, list[tuple[int, int]]] = {}  # buffer -> ranges the step wrote
        self.writes: set[tuple[str, Any]] = set()     # entries written in the step
        self.seqs = (0, -1)                           # the step's first and last seq

    def read(self, name: str, key: Any, value: Any) -> None:
        k = (name, key)
        if k not in self.seen:
            self.seen.add(k)
            self.log.append((name, key, digest(value)))

    def wrote(self, name: str, key: Any) -> None:
        self.seen.add((name, key))
        self.writes.add((name, key))


def digest(v: Any) -> Any:
    """A comparable summary of an entry's value: everything a pass may act on, nothing that only
    grows (a buffer's placement list, a graph allocator's bound list)."""
    if v is _MISSING or v is None:
        return ABSENT if v is _MISSING else None
    t = type(v)
    if t is int or t is bool or t is str or t is float:
        return v
    if t is TensorInfo:
        return (v.tensor_id, v.ctx_id, v.name, v.dtype, v.ne, v.nb, v.op, v.op_params, v.srcs, v.view_src,
                v.view_offs, v.flags, v.copy_of, v.nbytes, v.created_seq, v.created_loc, tuple(v.placements))
    if t is Placement:
        return (v.index, v.tensor_id, v.buffer_id, v.offset, v.nbytes, v.by, v.binding_id, v.galloc_id, v.seq,
                v.loc, v.end_seq, v.end_reason, v.stale_seq, v.stale_reason, v.alias, v.pool)
    if t is tuple:
        return tuple(digest(x) if not isinstance(x, ByteMap) else "bytemap" for x in v)
    if t is BufferInfo:
        return (v.buffer_id, v.backend, v.buft, v.base, v.nbytes, v.alignment, v.usage, v.pool_id, v.slot,
                v.chunk, v.cause, v.alloc_seq, v.freed_seq, v.free_cause)
    if t is GraphInfo:
        return (v.graph_id, v.size, v.kind, v.source_graph, v.created_seq, tuple(v.nodes), tuple(v.leafs),
                tuple(v.cleared_seqs))
    if t is GraphSnapshot:
        return (v.graph_id, tuple(v.nodes), tuple(v.leafs))
    if t is PlanInfo:
        return (v.plan_id, v.galloc_id, v.graph_id, v.n_nodes, v.n_leafs, v.alignments, v.begin_seq, v.end_seq,
                v.chunk_sizes, digest(v.graph), len(v.decisions), len(v.replans))
    if t is BindingInfo:
        return (v.binding_id, v.galloc_id, v.plan_id, v.graph_id, v.begin_seq, digest(v.graph), v.sched_id,
                v.end_seq, v.ok)
    if t is ComputeInfo:
        return (v.compute_id, v.graph_id, v.backend, v.n_nodes, v.begin_seq, digest(v.graph), v.end_seq)
    if t is SchedInfo:
        return (v.sched_id, tuple(sorted(v.gallocs)))
    if t is list:
        return "list"   # a graph allocator's bound placements: only ever appended to
    if isinstance(v, ByteMap):
        return "bytemap"
    return repr(v)


class DictView:
    """A dict as a step sees it: reads of entries the step did not write are noted."""

    __slots__ = ("d", "name", "obs", "wrap")

    def __init__(self, d: dict[Any, Any], name: str, obs: Observation, wrap: Any = None) -> None:
        self.d = d
        self.name = name
        self.obs = obs
        self.wrap = wrap   # wrap(key, value) for values handed out (byte maps become views)

    def _value(self, k: Any, v: Any) -> Any:
        return v if self.wrap is None or v is None else self.wrap(k, v)

    def get(self, k: Any, default: Any = None) -> Any:
        v = self.d.get(k, _MISSING)
        self.obs.read(self.name, k, v)
        return default if v is _MISSING else self._value(k, v)

    def __getitem__(self, k: Any) -> Any:
        v = self.d.get(k, _MISSING)
        self.obs.read(self.name, k, v)
        if v is _MISSING:
            raise KeyError(k)
        return self._value(k, v)

    def __contains__(self, k: Any) -> bool:
        v = self.d.get(k, _MISSING)
        self.obs.read(self.name, k, v)
        return v is not _MISSING

    def __setitem__(self, k: Any, v: Any) -> None:
        self.obs.wrote(self.name, k)
        self.d[k] = _unwrap(v)

    def pop(self, k: Any, default: Any = _MISSING) -> Any:
        v = self.d.get(k, _MISSING)
        self.obs.read(self.name, k, v)
        self.obs.wrote(self.name, k)
        if v is _MISSING:
            if default is _MISSING:
                raise KeyError(k)
            return default
        del self.d[k]
        return self._value(k, v)

    def setdefault(self, k: Any, default: Any = None) -> Any:
        v = self.d.get(k, _MISSING)
        self.obs.read(self.name, k, v)
        if v is _MISSING:
            self.obs.wrote(self.name, k)
            self.d[k] = default
            return default
        return self._value(k, v)

    def __len__(self) -> int:
        return len(self.d)

    def _everything(self) -> None:
        self.obs.read(self.name, "*", tuple(sorted((repr(k), digest(v)) for k, v in self.d.items())))

    def __iter__(self) -> Iterator[Any]:
        self._everything()
        return iter(self.d)

    def values(self) -> Any:
        self._everything()
        return self.d.values()

    def items(self) -> Any:
        self._everything()
        return self.d.items()

    def keys(self) -> Any:
        self._everything()
        return self.d.keys()


class ListView:
    """The model's placement list as a step sees it: reads of entries from before the step are noted."""

    __slots__ = ("before", "items", "name", "obs")

    def __init__(self, items: list[Any], name: str, obs: Observation) -> None:
        self.items = items
        self.name = name
        self.obs = obs
        self.before = len(items)

    def __getitem__(self, i: int) -> Any:
        v = self.items[i]
        if 0 <= i < self.before:
            self.obs.read(self.name, i, v)
        return v

    def append(self, v: Any) -> None:
        self.items.append(v)

    def __len__(self) -> int:
        return len(self.items)


class SetView:
    """A set as a step sees it (``TraceModel.input_copies``)."""

    __slots__ = ("name", "obs", "s")

    def __init__(self, s: set[Any], name: str, obs: Observation) -> None:
        self.s = s
        self.name = name
        self.obs = obs

    def __contains__(self, k: Any) -> bool:
        inside = k in self.s
        self.obs.read(self.name, k, inside)
        return inside

    def add(self, k: Any) -> None:
        self.obs.wrote(self.name, k)
        self.s.add(k)


class ByteMapView:
    """A buffer's last-writer map as a step sees it. Its interval lists are empty, so the access
    pass takes its general path; ``scan`` notes the pieces of a read that the step had not
    written itself (their last writer's key, tensor and seq)."""

    __slots__ = ("bm", "buffer_id", "obs")
    # empty, and never written to: the access pass's inlined fast paths find nothing here
    starts: ClassVar[list[int]] = []
    ends: ClassVar[list[int]] = []
    recs: ClassVar[list[Any]] = []

    def __init__(self, bm: ByteMap, buffer_id: int, obs: Observation) -> None:
        self.bm = bm
        self.buffer_id = buffer_id
        self.obs = obs

    def write(self, a: int, b: int, rec: Any) -> None:
        self.obs.written_bytes.setdefault(self.buffer_id, []).append((a, b))
        self.bm.write(a, b, rec)

    def scan(self, a: int, b: int) -> list[tuple[int, int, Any]]:
        pieces = self.bm.scan(a, b)
        written = self.obs.written_bytes.get(self.buffer_id, ())
        for s, e, rec in pieces:
            for gs, ge in _uncovered(s, e, written):
                key = (self.buffer_id, gs, ge)
                self.obs.log.append(("bytes", key, None if rec is None else rec[:3]))
                self.obs.seen.add(("bytes", key))
        return pieces

    def covering(self, a: int, b: int) -> Any:
        pieces = self.scan(a, b)
        return pieces[0][2] if len(pieces) == 1 else None

    def __len__(self) -> int:
        return len(self.bm)


def _uncovered(s: int, e: int, written: Any) -> list[tuple[int, int]]:
    """The parts of ``[s, e)`` no range in ``written`` covers."""
    out = [(s, e)]
    for ws, we in written:
        nxt = []
        for a, b in out:
            if we <= a or ws >= b:
                nxt.append((a, b))
                continue
            if a < ws:
                nxt.append((a, ws))
            if we < b:
                nxt.append((we, b))
        out = nxt
        if not out:
            break
    return out


def _unwrap(v: Any) -> Any:
    """What a view stores: byte map views and tuples holding them go back to the real maps."""
    if type(v) is ByteMapView:
        return v.bm
    if type(v) is tuple and v and any(type(x) is ByteMapView for x in v):
        return tuple(x.bm if type(x) is ByteMapView else x for x in v)
    return v
