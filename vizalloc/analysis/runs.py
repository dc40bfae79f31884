"""Repeated steps analysed once: the records of the skipped repetitions, made on demand.

When the stream analysis (``stream.py``) has proven a repetition's steps independent
(``observe.py``), it analyses the first two steps and the last one, and *counts* the ones
in between: a ``Run``. Their tensors, placements, graphs, bindings and computes are the
second step's, moved by the repetition's ``Shift`` k times for the k-th skipped step; they
exist only as that template and are made when something asks for them:

* a later step of the trace names one of them (``RunTable.materialize``: the records and
  the analysis state of those objects go into the live containers, as if they had been
  analysed);
* a re-plan, scheduler reset or buffer free makes their placements stale
  (``make_stale``, ``buffer_freed``: noted once per run, not per placement);
* after the analysis, the model's containers show them (``VirtualMap``, ``VirtualList``,
  ``VirtualIds``): ``len``, lookups and iteration in creation order, records made when read.

Memory per run is one step's records; per skipped step, one ``int`` (its compute's time)
and a ``None`` slot per placement in the model's placement list (placement numbers are
positions in that list).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, overload

import numpy as np

from vizalloc.analysis.bytemap import ByteMap
from vizalloc.analysis.records import (
    NEVER,
    BindingInfo,
    ComputeInfo,
    GraphInfo,
    GraphSnapshot,
    Placement,
    TensorInfo,
)
from vizalloc.analysis.repeat import Shift


class TensorState(NamedTuple):
    """A template tensor's analysis state right after its step was analysed; None where absent."""

    current: int | None      # model builder: the number of its current placement
    alias_of: int | None     # model builder: the tensor whose bytes it shares
    pool_of: Any             # model builder: its pool
    cur: int | None          # access pass: the number of its current placement
    fast: bool               # access pass: whether it has a fast-path entry
    placed_seq: int | None   # access pass: when it was placed
    last_write: int | None   # access pass: the seq of its last write
    cpy_dst: int | None      # model builder: the tensor a CPY into it writes

    def moved(self, run: Run, j: int) -> TensorState:
        """The same state ``j`` steps of ``run`` later (placement numbers, ids and seqs moved)."""
        return self._replace(
            current=None if self.current is None else run.placement_no(self.current, j),
            alias_of=None if self.alias_of is None else run.id("tensor", self.alias_of, j),
            cur=None if self.cur is None else run.placement_no(self.cur, j),
            placed_seq=None if self.placed_seq is None else run.seq(self.placed_seq, j),
            last_write=None if self.last_write is None else run.seq(self.last_write, j),
            cpy_dst=None if self.cpy_dst is None else run.id("tensor", self.cpy_dst, j))


@dataclass
class Template:
    """The second analysed step of a repetition: its objects and their analysis state, as they
    stood when the skipped steps began (so later changes to these objects do not leak into them)."""

    tensors: dict[int, TensorInfo]
    # per tensor: its model builder and access pass state
    state: dict[int, TensorState]
    placements: list[Placement]          # in placement order
    first_placement: int                 # number of the first one
    graphs: dict[int, GraphInfo]
    bindings: dict[int, BindingInfo]
    computes: dict[int, ComputeInfo]
    # buffer -> positions (in ``placements``) of the placements made in it, in order
    by_buffer: dict[int, list[int]]
    # galloc -> positions of the placements its bindings bound, in order
    by_galloc: dict[int, list[int]]


@dataclass
class Run:
    """``count`` skipped steps, the k-th being ``template`` moved k times by ``shift``, for k from
    ``first_k`` on. Runs of the same step later in the trace share its template (``first_k``
    further on): one step's records per repeated step, however long the trace."""

    shift: Shift
    seq_move: int
    template: Template
    count: int
    n_events: int                         # events per step
    first_seq: int                        # seq of the template step's first event
    placement_move: int                   # placements per step
    wall_ns: np.ndarray                   # per skipped step: its compute's wall time (ComputeEnd order)
    # where the skipped steps' objects go in each container's creation order: container -> position
    insert_at: dict[str, int] = field(default_factory=dict)
    # made on demand: (kind, id) -> the live record
    made: dict[tuple[str, int], Any] = field(default_factory=dict)
    # template placement position -> (stale seq, reason) set by a later re-plan / reset / free
    stale: dict[int, tuple[int, str]] = field(default_factory=dict)
    gallocs_bound: set[int] = field(default_factory=set)  # gallocs whose bound lists still hold them
    first_k: int = 1
    #: the template step's columns (to tell the same step in a later batch), what the step
    #: observed as proof of independence, and which instance that observation was of
    columns: Any = None
    observed: Any = None
    observed_at: int = 0
    #: the observed step read what the step before it wrote (``stream._independent``)
    relative: bool = False

    def moves_like(self, shift: Shift) -> bool:
        """Whether steps moved by ``shift`` move as this run's do (same amounts per id kind and seq)."""
        return (shift.seq == self.seq_move and shift.ids.keys() == self.shift.ids.keys()
                and all(shift.ids[k][1] == self.shift.ids[k][1] for k in shift.ids))

    # -- ids ------------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        tp = self.template
        #: per id kind: (first template id, step move, template ids) when the template made such objects
        self.ranges: dict[str, tuple[int, int, Any]] = {}
        for kind, ids in (("tensor", tp.tensors), ("graph", tp.graphs), ("binding", tp.bindings),
                          ("compute", tp.computes)):
            rule = self.shift.ids.get(kind)
            if rule is not None and ids:
                self.ranges[kind] = (min(ids), rule[1], ids)
        self._compute_order = {c: n for n, c in enumerate(tp.computes)}

    def span(self, kind: str) -> tuple[int, int] | None:
        """``[first, end)``: the ids of ``kind`` the skipped steps' objects may have."""
        r = self.ranges.get(kind)
        if r is None:
            return None
        lo, move, _ = r
        return lo + move * self.first_k, lo + move * (self.first_k + self.count)

    def instance(self, kind: str, value: int) -> tuple[int, int] | None:
        """``(k, template id)`` when ``value`` is the id of an object of the k-th skipped step."""
        r = self.ranges.get(kind)
        if r is None:
            return None
        lo, move, ids = r
        d = value - lo
        if d < move:
            return None
        k, rest = divmod(d, move)
        if k < self.first_k or k >= self.first_k + self.count:
            return None
        t = lo + rest
        return (k, t) if t in ids else None

    def _template_ids(self, kind: str) -> Any:
        tp = self.template
        return {"tensor": tp.tensors, "graph": tp.graphs, "binding": tp.bindings, "compute": tp.computes}[kind]

    def ids(self, kind: str) -> Iterator[int]:
        """Ids of the skipped steps' objects of ``kind``, in creation order."""
        r = self.ranges.get(kind)
        if r is None:
            return iter(())
        move, ids = r[1], list(r[2])
        return (t + move * k for k in range(self.first_k, self.first_k + self.count) for t in ids)

    def n(self, kind: str) -> int:
        return self.count * len(self._template_ids(kind))

    # -- moving values --------------------------------------------------------------------------
    def id(self, kind: str, value: int, k: int) -> int:
        return self.shift.id(kind, value, k)

    def seq(self, value: int, k: int) -> int:
        return value + self.seq_move * k if self.first_seq <= value < NEVER else value

    def placement_no(self, value: int, k: int) -> int:
        return value + self.placement_move * k if value >= self.template.first_placement else value

    def tensor_info(self, t0: int, k: int) -> TensorInfo:
        info = self.template.tensors[t0]
        i = self.id
        return TensorInfo(i("tensor", info.tensor_id, k), i("context", info.ctx_id, k), info.name, info.dtype,
                          info.ne, info.nb, info.op, info.op_params, tuple(self.tensor_ids(info.srcs, k)),
                          i("tensor", info.view_src, k), info.view_offs, info.flags, i("tensor", info.copy_of, k),
                          info.nbytes, self.seq(info.created_seq, k), info.created_loc, info.history,
                          [self.placement_no(j, k) for j in info.placements])

    def placement(self, pos: int, k: int) -> Placement:
        p = self.template.placements[pos]
        stale_seq, stale_reason = p.stale_seq, p.stale_reason
        if stale_seq == NEVER and p.end_seq == NEVER and pos in self.stale:
            stale_seq, stale_reason = self.stale[pos]
        elif stale_seq != NEVER:
            stale_seq = self.seq(stale_seq, k)
        i = self.id
        return Placement(self.placement_no(p.index, k), i("tensor", p.tensor_id, k), i("buffer", p.buffer_id, k),
                         p.offset, p.nbytes, p.by, i("binding", p.binding_id, k), i("galloc", p.galloc_id, k),
                         self.seq(p.seq, k), p.loc, self.seq(p.end_seq, k), p.end_reason, stale_seq, stale_reason,
                         i("tensor", p.alias, k), p.pool)

    def tensor_ids(self, ids: Sequence[int], k: int) -> list[int]:
        """A list of tensor ids moved k steps."""
        rule = self.shift.ids.get("tensor")
        if rule is None:
            return list(ids)
        lo, d = rule[0], rule[1] * k
        return [t + d if t >= lo else t for t in ids]

    def _snapshot(self, g: GraphSnapshot | None, k: int) -> GraphSnapshot | None:
        if g is None:
            return None
        nodes = self.tensor_ids(g.nodes, k)
        leafs = self.tensor_ids(g.leafs, k)
        return GraphSnapshot(self.id("graph", g.graph_id, k), nodes, len(nodes), leafs, len(leafs))

    def graph(self, g0: int, k: int) -> GraphInfo:
        g = self.template.graphs[g0]
        return GraphInfo(self.id("graph", g.graph_id, k), g.size, g.kind, self.id("graph", g.source_graph, k),
                         self.seq(g.created_seq, k), g.created_loc, self.tensor_ids(g.nodes, k),
                         self.tensor_ids(g.leafs, k), [self.seq(s, k) for s in g.cleared_seqs])

    def binding(self, b0: int, k: int) -> BindingInfo:
        b = self.template.bindings[b0]
        i = self.id
        return BindingInfo(i("binding", b.binding_id, k), i("galloc", b.galloc_id, k), i("plan", b.plan_id, k),
                           i("graph", b.graph_id, k), self.seq(b.begin_seq, k), b.loc, self._snapshot(b.graph, k),
                           i("sched", b.sched_id, k), self.seq(b.end_seq, k), b.ok,
                           [self.placement_no(j, k) for j in b.placements])

    def compute(self, c0: int, k: int) -> ComputeInfo:
        per = len(self.template.computes)
        return self._moved_compute(c0, k, int(self.wall_ns[(k - self.first_k) * per + self._compute_order[c0]]))

    def _moved_compute(self, c0: int, k: int, wall_ns: int = 0) -> ComputeInfo:
        """Template compute ``c0`` moved ``k`` steps, its time ``wall_ns`` (a skipped step's own, or 0)."""
        c = self.template.computes[c0]
        return ComputeInfo(self.id("compute", c.compute_id, k), self.id("graph", c.graph_id, k), c.backend,
                           c.n_nodes, self.seq(c.begin_seq, k), c.loc, self._snapshot(c.graph, k),
                           self.seq(c.end_seq, k), wall_ns, c.nodes)

    def record(self, kind: str, value: int) -> Any:
        """The record of a skipped step's object (None when ``value`` is not one)."""
        made = self.made.get((kind, value))
        if made is not None:
            return made
        hit = self.instance(kind, value)
        if hit is None:
            return None
        k, t0 = hit
        return {"tensor": self.tensor_info, "graph": self.graph, "binding": self.binding,
                "compute": self.compute}[kind](t0, k)


def continues(run: Run, template: Template, shift: Shift, placement_move: int, first_seq: int) -> int | None:
    """How many steps after ``run``'s template a new template is, when it is that template moved
    that many steps (same step, same moves, every record alike): the new run can share it."""
    old = run.template
    if not run.moves_like(shift) or placement_move != run.placement_move or shift.seq <= 0:
        return None
    j, rest = divmod(first_seq - run.first_seq, shift.seq)
    if rest or j <= 0 or len(template.tensors) != len(old.tensors) or len(template.placements) != len(
            old.placements) or len(template.graphs) != len(old.graphs) or len(template.bindings) != len(
            old.bindings) or len(template.computes) != len(old.computes):
        return None
    if template.first_placement != run.placement_no(old.first_placement, j):
        return None
    fresh = replace(run, stale={}, made={})
    for t0 in old.tensors:
        t = fresh.id("tensor", t0, j)
        if template.tensors.get(t) != fresh.tensor_info(t0, j):
            return None
        if template.state.get(t) != old.state[t0].moved(fresh, j):
            return None
    for pos in range(len(old.placements)):
        if template.placements[pos] != fresh.placement(pos, j):
            return None
    for g0 in old.graphs:
        if template.graphs.get(fresh.id("graph", g0, j)) != fresh.graph(g0, j):
            return None
    for b0 in old.bindings:
        if template.bindings.get(fresh.id("binding", b0, j)) != fresh.binding(b0, j):
            return None
    for c0 in old.computes:
        c = template.computes.get(fresh.id("compute", c0, j))
        if c is None or replace(c, wall_ns=0) != fresh._moved_compute(c0, j):
            return None
    if template.by_buffer != old.by_buffer or template.by_galloc != old.by_galloc:
        return None
    return j


class RunTable:
    """Every run of the analysis; what the builder asks about skipped steps goes through here."""

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self._placement_starts: list[int] = []   # first skipped placement number of each run, ascending

    def add(self, run: Run) -> None:
        self.runs.append(run)
        self._placement_starts.append(run.template.first_placement + run.placement_move * run.first_k)

    def find(self, kind: str, value: int) -> tuple[Run, int, int] | None:
        for run in self.runs:
            hit = run.instance(kind, value)
            if hit is not None:
                return run, hit[0], hit[1]
        return None

    def candidates(self, kind: str, values: np.ndarray) -> list[int]:
        """The values that fall in some run's id span of ``kind`` (the only ones that may name a
        skipped step's object)."""
        spans = [sp for sp in (run.span(kind) for run in self.runs) if sp is not None]
        if not spans or not len(values):
            return []
        lo = np.array([a for a, _ in spans], dtype=np.int64)
        hi = np.array([b for _, b in spans], dtype=np.int64)
        order = np.argsort(lo)
        lo, hi = lo[order], hi[order]
        i = np.searchsorted(lo, values, side="right") - 1
        inside = (i >= 0) & (values < hi[np.maximum(i, 0)])
        # spans may overlap when ids do not grow steadily: fall back to every span then
        if len(lo) > 1 and (lo[1:] < np.maximum.accumulate(hi)[:-1]).any():
            inside = np.zeros(len(values), dtype=bool)
            for a, b in spans:
                inside |= (values >= a) & (values < b)
        out: list[int] = values[inside].tolist()
        return out

    def find_placement(self, index: int) -> tuple[Run, int, int] | None:
        """(run, k, template position) of a skipped placement number."""
        i = bisect.bisect_right(self._placement_starts, index) - 1
        if i < 0:
            return None
        run = self.runs[i]
        d = index - self._placement_starts[i]
        if run.placement_move and 0 <= d < run.placement_move * run.count:
            k, pos = divmod(d, run.placement_move)
            return run, k + run.first_k, pos
        return None

    # -- the builder's bulk operations --------------------------------------------------------
    def make_stale(self, galloc_id: int, seq: int, reason: str, placements: list[Any]) -> None:
        """A re-plan or reset of ``galloc_id``: the skipped placements its bindings bound go stale."""
        for run in self.runs:
            if galloc_id not in run.gallocs_bound:
                continue
            run.gallocs_bound.discard(galloc_id)
            for pos in run.template.by_galloc.get(galloc_id, ()):
                p0 = run.template.placements[pos]
                if p0.end_seq == NEVER and p0.stale_seq == NEVER and pos not in run.stale:
                    run.stale[pos] = (seq, reason)
                self._made_placements(run, pos, placements, lambda p: (p.end_seq == NEVER and p.stale_seq == NEVER,
                                                                      seq, reason))

    def buffer_freed(self, buffer_id: int, seq: int, placements: list[Any]) -> None:
        """A buffer was freed: skipped placements in it go stale ("freed") as in ``Builder._BufferFreed``."""
        for run in self.runs:
            for pos in run.template.by_buffer.get(buffer_id, ()):
                p0 = run.template.placements[pos]
                if p0.end_seq == NEVER and p0.stale_seq == NEVER and p0.galloc_id >= 0 and pos not in run.stale:
                    run.stale[pos] = (seq, "freed")
                self._made_placements(run, pos, placements, lambda p: (
                    p.end_seq == NEVER and p.stale_seq == NEVER and p.galloc_id >= 0, seq, "freed"))

    def _made_placements(self, run: Run, pos: int, placements: list[Any], rule: Any) -> None:
        """Apply a staleness rule to the placements of template position ``pos`` already made."""
        for k in range(run.first_k, run.first_k + run.count):
            idx = run.placement_no(run.template.placements[pos].index, k)
            p = placements[idx]
            if p is None:
                continue
            ok, seq, reason = rule(p)
            if ok:
                p.stale_seq, p.stale_reason = seq, reason


def capture(tensors: Sequence[int], graphs: Sequence[int], bindings: Sequence[int], computes: Sequence[int],
            first_placement: int, n_placements: int, model: Any, builder: Any, scan: Any) -> Template:
    """Copy the template step's objects and their analysis state (right after it was analysed)."""
    placements = [replace(model.placements[i]) for i in range(first_placement, first_placement + n_placements)]
    by_buffer: dict[int, list[int]] = {}
    for pos, p in enumerate(placements):
        by_buffer.setdefault(p.buffer_id, []).append(pos)
    by_galloc: dict[int, list[int]] = {}
    for g, bound in builder.galloc_bound.items():
        for idx in bound:
            if idx >= first_placement:
                by_galloc.setdefault(g, []).append(idx - first_placement)
    infos: dict[int, TensorInfo] = {}
    state: dict[int, TensorState] = {}
    for t in tensors:
        info = model.tensors[t]
        infos[t] = replace(info, placements=list(info.placements))
        cur = scan.cur.get(t)
        state[t] = TensorState(builder.current.get(t), builder.alias_of.get(t), builder.pool_of.get(t),
                               None if cur is None else cur.index, t in scan.fast, scan.placed_seq.get(t),
                               scan.last_write.get(t), builder.cpy_dst.get(t))
    gs = {g: replace(model.graphs[g], nodes=list(model.graphs[g].nodes), leafs=list(model.graphs[g].leafs),
                     cleared_seqs=list(model.graphs[g].cleared_seqs)) for g in graphs}
    bs = {b: replace(model.bindings[b], placements=list(model.bindings[b].placements), graph=_copy_snapshot(
        model.bindings[b].graph)) for b in bindings}
    cs = {c: replace(model.computes[c], graph=_copy_snapshot(model.computes[c].graph)) for c in computes}
    return Template(infos, state, placements, first_placement, gs, bs, cs, by_buffer, by_galloc)


def _copy_snapshot(g: GraphSnapshot | None) -> GraphSnapshot | None:
    if g is None:
        return None
    return GraphSnapshot(g.graph_id, list(g.nodes), g.n_nodes, list(g.leafs), g.n_leafs)


def materialize(table: RunTable, kind: str, value: int, model: Any, builder: Any, scan: Any) -> Any:
    """Make a skipped step's object live (records and analysis state), once; returns its record
    (None when ``value`` is no such object). Tensors bring their placements."""
    hit = table.find(kind, value)
    if hit is None:
        return None
    run, k, t0 = hit
    made = run.made.get((kind, value))
    if made is not None:
        return made
    if kind == "tensor":
        info = run.tensor_info(t0, k)
        run.made[(kind, value)] = info
        model.tensors[value] = info
        for idx in info.placements:
            _make_placement(table, idx, model)
        st = run.template.state[t0].moved(run, k)
        if st.current is not None:
            builder.current[value] = st.current
        if st.alias_of is not None:
            builder.alias_of[value] = st.alias_of
        if st.pool_of is not None:
            builder.pool_of[value] = st.pool_of
        if st.cpy_dst is not None:
            builder.cpy_dst[value] = st.cpy_dst
        if st.cur is not None:
            p = model.placements[st.cur]
            scan.cur[value] = p
            if st.fast:
                pm = scan.maps.get(p.buffer_id)
                if pm is None:
                    pm = scan.maps[p.buffer_id] = ByteMap()
                scan.fast[value] = (p.buffer_id, p.offset, p.offset + p.nbytes, p.alias, pm, p)
        if st.placed_seq is not None:
            scan.placed_seq[value] = st.placed_seq
        if st.last_write is not None:
            scan.last_write[value] = st.last_write
        return info
    record = run.record(kind, value)
    run.made[(kind, value)] = record
    getattr(model, {"graph": "graphs", "binding": "bindings", "compute": "computes"}[kind])[value] = record
    return record


def _make_placement(table: RunTable, idx: int, model: Any) -> None:
    if model.placements[idx] is not None:
        return
    hit = table.find_placement(idx)
    if hit is None:
        return
    run, k, pos = hit
    model.placements[idx] = run.placement(pos, k)


# -- the model's containers, skipped steps included -------------------------------------------

def _key(k: object) -> int | None:
    """An integer key as an ``int`` (numpy integers too); None for anything else (never found)."""
    if isinstance(k, int):
        return k
    try:
        return operator.index(k)  # type: ignore[arg-type]
    except TypeError:
        return None


def _position(i: object, n: int) -> int:
    """Index ``i`` of a sequence of ``n`` as a position in ``0..n-1`` (negative counts from the end)."""
    try:
        k = operator.index(i)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"indices must be integers or slices, not {type(i).__name__}") from None
    if k < 0:
        k += n
    if not 0 <= k < n:
        raise IndexError(i)
    return k


class VirtualMap(Mapping[int, Any]):
    """A model dict (``tensors``, ``graphs``, ``bindings``, ``computes``) with the skipped steps'
    objects in it, in creation order; their records are made when read. Read-only (the
    analysis that fills ``live`` is over when it is made)."""

    def __init__(self, live: dict[int, Any], runs: list[Run], kind: str, container: str) -> None:
        self.live = live
        self.kind = kind
        self.runs = [r for r in runs if r.n(kind)]
        self.container = container
        self.made = {key[1] for r in self.runs for key in r.made if key[0] == kind}

    def get(self, k: object, default: Any = None) -> Any:
        key = _key(k)
        if key is None:
            return default
        v = self.live.get(key)
        if v is not None:
            return v
        for run in self.runs:
            v = run.record(self.kind, key)
            if v is not None:
                return v
        return default

    def __getitem__(self, k: object) -> Any:
        v = self.get(k)
        if v is None:
            raise KeyError(k)
        return v

    def __contains__(self, k: object) -> bool:
        return self.get(k) is not None

    def __len__(self) -> int:
        return len(self.live) - len(self.made) + sum(r.n(self.kind) for r in self.runs)

    def __iter__(self) -> Iterator[int]:
        inserts = sorted(((r.insert_at.get(self.container, 0), i) for i, r in enumerate(self.runs)))
        j = 0
        for pos, key in enumerate(self.live):
            while j < len(inserts) and inserts[j][0] <= pos:
                yield from self.runs[inserts[j][1]].ids(self.kind)
                j += 1
            if key not in self.made:
                yield key
        for _, i in inserts[j:]:
            yield from self.runs[i].ids(self.kind)


class VirtualList(Sequence[Any]):
    """The model's placement list with the skipped steps' placements made when read
    (``live`` holds None at their positions)."""

    def __init__(self, live: list[Any], table: RunTable) -> None:
        self.live = live
        self.table = table

    def __len__(self) -> int:
        return len(self.live)

    def _at(self, k: int) -> Any:
        v = self.live[k]
        if v is None:
            hit = self.table.find_placement(k)
            if hit is None:
                raise IndexError(k)
            run, step, pos = hit
            return run.placement(pos, step)
        return v

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._at(k) for k in range(*i.indices(len(self.live)))]
        return self._at(_position(i, len(self.live)))

    def __iter__(self) -> Iterator[Any]:
        for k in range(len(self.live)):
            yield self._at(k)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (list, VirtualList)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


class VirtualIds(Sequence[int]):
    """A buffer's placement numbers with the skipped steps' ones in place (``BufferInfo.placements``):
    ``live`` the numbers of the steps analysed, and for each run of skipped steps the position
    in ``live`` where its numbers go. An index is found by bisection over the pieces."""

    def __init__(self, live: list[int], extra: list[tuple[int, Run, list[int]]]) -> None:
        self.live = list(live)
        # (position in ``live`` where the run's placements go, run, template positions in this buffer)
        self.extra = sorted(extra, key=lambda x: x[0])
        #: the pieces in order: (first index, live position or -1 - extra number, length)
        self._pieces: list[tuple[int, int, int]] = []
        at = done = 0
        for n, (pos, run, positions) in enumerate(self.extra):
            pos = min(pos, len(self.live))
            if pos > done:
                self._pieces.append((at, done, pos - done))
                at += pos - done
                done = pos
            size = run.count * len(positions)
            if size:
                self._pieces.append((at, -1 - n, size))
                at += size
        if done < len(self.live):
            self._pieces.append((at, done, len(self.live) - done))
            at += len(self.live) - done
        self._starts = [p[0] for p in self._pieces]
        self._len = at

    def __len__(self) -> int:
        return self._len

    def _at(self, i: int) -> int:
        start, where, _ = self._pieces[bisect.bisect_right(self._starts, i) - 1]
        off = i - start
        if where >= 0:
            return self.live[where + off]
        _, run, positions = self.extra[-1 - where]
        step, p = divmod(off, len(positions))
        return run.placement_no(run.template.placements[positions[p]].index, run.first_k + step)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._at(k) for k in range(*i.indices(self._len))]
        return self._at(_position(i, self._len))

    def __iter__(self) -> Iterator[int]:
        for start, where, size in self._pieces:
            if where >= 0:
                yield from self.live[where:where + size]
            else:
                _, run, positions = self.extra[-1 - where]
                indices = [run.template.placements[p].index for p in positions]
                for k in range(run.first_k, run.first_k + run.count):
                    for idx in indices:
                        yield run.placement_no(idx, k)

    def __contains__(self, x: object) -> bool:
        key = _key(x)
        return key is not None and any(v == key for v in self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (list, VirtualIds)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


__all__ = ["Run", "RunTable", "Template", "VirtualIds", "VirtualList", "VirtualMap", "capture", "materialize"]
