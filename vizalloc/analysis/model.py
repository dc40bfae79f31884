"""The model of a trace: tensors with their history, buffers, graphs, plans, bindings,
scheduler steps, computes with live ranges, and the memory map of any buffer at any step.

``build_model`` makes one linear pass over the events and keeps integer ids, lists and
small records; nothing here imports the runtime. A "step" is an event's ``seq``: the
memory map at seq ``s`` is the state right after the event numbered ``s``.

    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.analysis.model import build_model
    >>> m = build_model([
    ...     ev.BufferAllocated(1, 0, None, 7, "CPU", "CPU", 65536, 1024, 32, "compute", -1, -1, -1, ""),
    ...     ev.TensorCreated(2, 0, None, 3, 0, "x", "f32", (16, 1, 1, 1), (4, 64, 64, 64), "NONE",
    ...                      (), (), -1, 0, 0, -1),
    ...     ev.TensorPlaced(3, 0, None, 3, 7, 0, 64, ev.PlacedBy.USER, -1),
    ... ])
    >>> [(e.name, e.offset, e.nbytes, e.state.value) for e in m.memory_map(7, 3)]
    [('x', 0, 64, 'live')]

Staleness (architecture.md, "stale"): a placement made by a graph allocator binding
becomes stale when that allocator plans again (``PlanBegin``), when the scheduler that
drives it is reset (``SchedReset``), or when its buffer is freed (``BufferFreed``).
The placement itself lasts until the tensor's pointers are cleared or it is placed
again; a placement into a freed buffer is *dangling* from the free on.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vizalloc.trace import events as ev

#: "never" for end / stale / freed sequence numbers.
NEVER = 1 << 62

#: ggml's type sizes by label (block size 1); the analysis must not import the runtime.
TYPE_SIZES: dict[str, int] = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i16": 2, "i8": 1, "f64": 8, "i64": 8}

#: Ops whose result only looks at the source's bytes (and NONE): they compute nothing.
VIEW_OPS = frozenset({"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})

FLAG_INPUT, FLAG_OUTPUT, FLAG_PARAM, FLAG_LOSS = 1, 2, 4, 8


def nbytes_of(dtype: str, ne: Sequence[int], nb: Sequence[int]) -> int:
    """``ggml_nbytes`` for block size 1: the type size plus the strided span."""
    if len(ne) == 4 and len(nb) == 4:
        n0, n1, n2, n3 = ne
        if n0 <= 0 or n1 <= 0 or n2 <= 0 or n3 <= 0:
            return 0
        return (TYPE_SIZES.get(dtype, nb[0]) + (n0 - 1) * nb[0] + (n1 - 1) * nb[1] + (n2 - 1) * nb[2]
                + (n3 - 1) * nb[3])
    if any(n <= 0 for n in ne):
        return 0
    size = TYPE_SIZES.get(dtype, nb[0] if nb else 1)
    for n, stride in zip(ne, nb):
        size += (n - 1) * stride
    return size


class HistoryKind(str, enum.Enum):
    """What happened to a tensor (one entry of ``TensorInfo.history``)."""

    CREATED = "created"
    NAMED = "named"
    FLAGS = "flags"
    SRC_SET = "src_set"
    PLACED = "placed"
    CLEARED = "cleared"
    READ = "read"          # read by a node of a compute
    WRITTEN = "written"    # written by its own node in a compute
    SET = "set"            # user tensor_set / memset
    GET = "get"            # user tensor_get
    COPIED = "copied"      # TensorCopy into this tensor
    COPY_READ = "copy_read"  # TensorCopy out of this tensor
    FREED = "freed"        # its buffer was freed while it pointed there
    SNAPSHOT = "snapshot"  # a captured value


class PlacementState(str, enum.Enum):
    """How a placement stands at a given step."""

    LIVE = "live"          # the placement is current and its buffer exists
    STALE = "stale"        # left over from a binding whose allocator re-planned / was reset
    DANGLING = "dangling"  # its buffer has been freed


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One thing that happened to a tensor, with where in the user's code."""

    seq: int
    kind: HistoryKind
    loc: ev.Location | None
    event: ev.Event


@dataclass(slots=True)
class TensorInfo:
    """A tensor as the trace knows it (read-only once the model is built).

    ``root`` is ``view_src`` or the tensor itself; ``nbytes`` is ``ggml_nbytes``;
    ``history`` holds indices into ``TraceModel.events`` (see ``TraceModel.history``);
    ``placements`` holds indices into ``TraceModel.placements`` in order.
    """

    tensor_id: int
    ctx_id: int
    name: str
    dtype: str
    ne: tuple[int, ...]
    nb: tuple[int, ...]
    op: str
    op_params: tuple[Any, ...]
    srcs: tuple[int, ...]
    view_src: int
    view_offs: int
    flags: int
    copy_of: int
    nbytes: int
    created_seq: int
    created_loc: ev.Location | None
    history: list[int] = field(default_factory=list)
    placements: list[int] = field(default_factory=list)

    @property
    def root(self) -> int:
        return self.view_src if self.view_src >= 0 else self.tensor_id

    @property
    def is_view(self) -> bool:
        return self.view_src >= 0

    @property
    def label(self) -> str:
        """The name (inert text), or ``#id`` when unnamed."""
        return self.name if self.name else f"#{self.tensor_id}"


@dataclass(slots=True)
class Placement:
    """A tensor got bytes ``[offset, offset + nbytes)`` of a buffer at ``seq``.

    The placement lasts until ``end_seq`` (exclusive: cleared or placed again; ``NEVER``
    when it lasts to the end of the trace). ``stale_seq`` is when it became stale
    (``stale_reason``: re-planned, reset, freed), ``NEVER`` if it never did. ``offset``
    includes ``view_offs`` for views. ``galloc_id`` names the graph allocator whose
    binding made it (-1 outside a binding).
    """

    index: int
    tensor_id: int
    buffer_id: int
    offset: int
    nbytes: int
    by: ev.PlacedBy
    binding_id: int
    galloc_id: int
    seq: int
    loc: ev.Location | None
    end_seq: int = NEVER
    end_reason: str = ""
    stale_seq: int = NEVER
    stale_reason: str = ""
    #: the alias key: tensors sharing bytes on purpose share it (a view has its root's, a deep
    #: copy placed on an allocated original has the original's); the tensor id otherwise
    alias: int = -1
    #: placed by a graph allocator binding (or a view of such a tensor)
    pool: bool = False

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    def alive_at(self, seq: int) -> bool:
        return self.seq <= seq < self.end_seq


@dataclass(slots=True)
class BufferInfo:
    """A backend buffer: one byte array. ``pool_id`` is the graph allocator owning it (-1 none)."""

    buffer_id: int
    backend: str
    buft: str
    base: int
    nbytes: int
    alignment: int
    usage: str
    pool_id: int
    slot: int
    chunk: int
    cause: str
    alloc_seq: int
    alloc_loc: ev.Location | None
    freed_seq: int = NEVER
    free_cause: str = ""
    cleared_seqs: list[int] = field(default_factory=list)
    placements: list[int] = field(default_factory=list)

    def alive_at(self, seq: int) -> bool:
        return self.alloc_seq <= seq < self.freed_seq


@dataclass(slots=True)
class GraphInfo:
    """A graph object. ``nodes``/``leafs`` grow with ``GraphExpanded``; a graph recreated
    with the same id (a clear) starts new lists, so earlier snapshots keep theirs."""

    graph_id: int
    size: int
    kind: str
    source_graph: int
    created_seq: int
    created_loc: ev.Location | None
    nodes: list[int] = field(default_factory=list)
    leafs: list[int] = field(default_factory=list)

    def snapshot(self) -> GraphSnapshot:
        return GraphSnapshot(self.graph_id, self.nodes, len(self.nodes), self.leafs, len(self.leafs))


@dataclass(frozen=True, slots=True)
class GraphSnapshot:
    """A graph's nodes and leafs as they were at one moment (a plan, a binding, a compute)."""

    graph_id: int
    _nodes: list[int]
    n_nodes: int
    _leafs: list[int]
    n_leafs: int

    @property
    def nodes(self) -> list[int]:
        return self._nodes[: self.n_nodes]

    @property
    def leafs(self) -> list[int]:
        return self._leafs[: self.n_leafs]


@dataclass(slots=True)
class PlanInfo:
    """One planning pass of a graph allocator (``PlanBegin`` .. ``PlanEnd``) with every decision.

    ``decisions`` keeps the planner's events in order (PlanAlloc, PlanInplace, PlanRefused,
    PlanFree, PlanExternal); ``replans`` are the ``Replan`` events that led to this plan.
    """

    plan_id: int
    galloc_id: int
    graph_id: int
    n_nodes: int
    n_leafs: int
    alignments: tuple[int, ...]
    begin_seq: int
    loc: ev.Location | None
    graph: GraphSnapshot | None
    end_seq: int = NEVER
    chunk_sizes: tuple[tuple[int, ...], ...] = ()
    decisions: list[ev.Event] = field(default_factory=list)
    replans: list[ev.Replan] = field(default_factory=list)

    @property
    def allocs(self) -> list[ev.PlanAlloc]:
        return [d for d in self.decisions if isinstance(d, ev.PlanAlloc)]

    @property
    def inplace(self) -> list[ev.PlanInplace]:
        return [d for d in self.decisions if isinstance(d, ev.PlanInplace)]

    @property
    def refused(self) -> list[ev.PlanRefused]:
        return [d for d in self.decisions if isinstance(d, ev.PlanRefused)]

    @property
    def frees(self) -> list[ev.PlanFree]:
        return [d for d in self.decisions if isinstance(d, ev.PlanFree)]

    @property
    def externals(self) -> list[ev.PlanExternal]:
        return [d for d in self.decisions if isinstance(d, ev.PlanExternal)]

    @property
    def buffer_bytes(self) -> int:
        """Sum of the chunk high-water marks over all slots."""
        return sum(sum(sizes) for sizes in self.chunk_sizes)


@dataclass(slots=True)
class BindingInfo:
    """One ``alloc_graph``: a plan applied to a graph's tensors. ``placements`` are the
    indices of the placements it made; ``graph`` the graph as it was bound."""

    binding_id: int
    galloc_id: int
    plan_id: int
    graph_id: int
    begin_seq: int
    loc: ev.Location | None
    graph: GraphSnapshot | None
    sched_id: int = -1
    end_seq: int = NEVER
    ok: bool = False
    placements: list[int] = field(default_factory=list)


@dataclass(slots=True)
class SchedInfo:
    """A backend scheduler: its resets, splits, input copies and allocations (events in order)."""

    sched_id: int
    resets: list[int] = field(default_factory=list)
    splits: list[ev.SchedSplit] = field(default_factory=list)
    copies: list[ev.SchedCopy] = field(default_factory=list)
    allocs: list[ev.SchedAlloc] = field(default_factory=list)
    gallocs: set[int] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class LiveRange:
    """Within one compute: first write (-1: live from the start) .. last read (``n_nodes``: to the end)."""

    tensor_id: int
    first: int
    last: int

    def intersects(self, other: LiveRange) -> bool:
        """ggml's both_live rule: one is written while the other still has a pending reader."""
        return max(self.first, other.first) < min(self.last, other.last)


@dataclass(slots=True)
class ComputeInfo:
    """One graph compute: ``nodes`` are its ``NodeCompute`` events in order."""

    compute_id: int
    graph_id: int
    backend: str
    n_nodes: int
    begin_seq: int
    loc: ev.Location | None
    graph: GraphSnapshot | None
    end_seq: int = NEVER
    wall_ns: int = 0
    nodes: list[ev.NodeCompute] = field(default_factory=list)
    _ranges: dict[int, LiveRange] | None = None

    def live_ranges(self, model: TraceModel, *, by_root: bool = False) -> dict[int, LiveRange]:
        """Live ranges of every tensor this compute touches (of their roots with ``by_root``).

        A tensor written by node ``i`` is live from ``i``; one read before any write
        (inputs, weights, stale tensors) from -1. It lives to its last read, or to the
        end (``len(nodes)``) when it is flagged OUTPUT or written and never read.
        """
        if not by_root and self._ranges is not None:
            return self._ranges
        tensors = model.tensors
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        end = len(self.nodes)

        def key(t: int) -> int:
            if not by_root:
                return t
            info = tensors.get(t)
            return info.root if info is not None else t

        was_read: set[int] = set()
        for i, node in enumerate(self.nodes):
            for r in node.reads:
                k = key(r)
                if k not in first:
                    first[k] = -1
                last[k] = i
                was_read.add(k)
            k = key(node.tensor_id)
            if k not in first:
                first[k] = i
            if last.get(k, -2) < i:
                last[k] = i
        ranges = {}
        for k, f in first.items():
            info = tensors.get(k)
            lst = last[k]
            if (info is not None and info.flags & FLAG_OUTPUT) or k not in was_read:
                lst = end
            ranges[k] = LiveRange(k, f, lst)
        if not by_root:
            self._ranges = ranges
        return ranges


@dataclass(frozen=True, slots=True)
class MapEntry:
    """One tensor's bytes in a buffer at a step (a row of the memory map)."""

    tensor_id: int
    name: str
    offset: int
    nbytes: int
    state: PlacementState
    is_view: bool
    placement: int  # index into TraceModel.placements

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


@dataclass(slots=True)
class TraceModel:
    """Everything the analysis knows about a trace. Build it with ``build_model``."""

    events: list[ev.Event]
    tensors: dict[int, TensorInfo] = field(default_factory=dict)
    buffers: dict[int, BufferInfo] = field(default_factory=dict)
    graphs: dict[int, GraphInfo] = field(default_factory=dict)
    plans: dict[int, PlanInfo] = field(default_factory=dict)
    bindings: dict[int, BindingInfo] = field(default_factory=dict)
    scheds: dict[int, SchedInfo] = field(default_factory=dict)
    computes: dict[int, ComputeInfo] = field(default_factory=dict)
    placements: list[Placement] = field(default_factory=list)
    replans: list[ev.Replan] = field(default_factory=list)
    copies: list[ev.TensorCopy] = field(default_factory=list)
    snapshots: list[ev.ValueSnapshot] = field(default_factory=list)
    markers: list[ev.Marker] = field(default_factory=list)
    contexts: dict[int, ev.ContextCreated] = field(default_factory=dict)
    _seq_index: dict[int, int] | None = None

    @property
    def seq_index(self) -> dict[int, int]:
        """Position in ``events`` of each seq (built on first use)."""
        if self._seq_index is None:
            self._seq_index = {e.seq: i for i, e in enumerate(self.events)}
        return self._seq_index

    # -- tensors --------------------------------------------------------------
    def tensor(self, tensor_id: int) -> TensorInfo:
        return self.tensors[tensor_id]

    def label(self, tensor_id: int) -> str:
        info = self.tensors.get(tensor_id)
        return info.label if info is not None else f"#{tensor_id}"

    def root(self, tensor_id: int) -> int:
        info = self.tensors.get(tensor_id)
        return info.root if info is not None else tensor_id

    def history(self, tensor_id: int) -> list[HistoryEntry]:
        """Everything that happened to a tensor, in order, with source lines."""
        info = self.tensors[tensor_id]
        out = []
        for idx in info.history:
            e = self.events[idx]
            out.append(HistoryEntry(e.seq, _history_kind(e, tensor_id), e.loc, e))
        return out

    def placement_at(self, tensor_id: int, seq: int) -> Placement | None:
        """The placement a tensor carries right after event ``seq`` (None: no data)."""
        info = self.tensors.get(tensor_id)
        if info is None:
            return None
        for idx in reversed(info.placements):
            p = self.placements[idx]
            if p.seq <= seq:
                return p if seq < p.end_seq else None
        return None

    def placement_state(self, p: Placement, seq: int) -> PlacementState:
        buf = self.buffers.get(p.buffer_id)
        if buf is not None and buf.freed_seq <= seq:
            return PlacementState.DANGLING
        if p.stale_seq <= seq:
            return PlacementState.STALE
        return PlacementState.LIVE

    # -- memory maps ----------------------------------------------------------
    def memory_map(self, buffer_id: int, seq: int, *, views: bool = True) -> list[MapEntry]:
        """Which tensors hold which bytes of a buffer right after event ``seq``, by offset.

        Roots own bytes; views are listed too unless ``views=False``. Overlapping rows are
        normal for in-place reuse and views; a STALE or DANGLING row overlapping a LIVE one
        is what the hazards look at.
        """
        buf = self.buffers[buffer_id]
        rows = []
        for idx in buf.placements:
            p = self.placements[idx]
            if p.seq <= seq < p.end_seq:
                info = self.tensors.get(p.tensor_id)
                is_view = info.is_view if info is not None else False
                if is_view and not views:
                    continue
                rows.append(MapEntry(p.tensor_id, self.label(p.tensor_id), p.offset, p.nbytes,
                                     self.placement_state(p, seq), is_view, idx))
        rows.sort(key=lambda r: (r.offset, r.is_view, r.tensor_id))
        return rows

    def buffers_at(self, seq: int) -> list[BufferInfo]:
        """Buffers allocated and not freed right after event ``seq``."""
        return [b for b in self.buffers.values() if b.alive_at(seq)]

    # -- steps ----------------------------------------------------------------
    def event_at(self, seq: int) -> ev.Event:
        return self.events[self.seq_index[seq]]

    def node_seq(self, compute_id: int, index: int) -> int:
        """The seq of node ``index`` of a compute."""
        return self.computes[compute_id].nodes[index].seq

    def bindings_of(self, galloc_id: int) -> list[BindingInfo]:
        return [b for b in self.bindings.values() if b.galloc_id == galloc_id]

    def plans_of(self, galloc_id: int) -> list[PlanInfo]:
        return [p for p in self.plans.values() if p.galloc_id == galloc_id]

    @property
    def n_events(self) -> int:
        return len(self.events)


def _history_kind(e: ev.Event, tensor_id: int) -> HistoryKind:
    if isinstance(e, ev.NodeCompute):
        return HistoryKind.WRITTEN if e.tensor_id == tensor_id else HistoryKind.READ
    if isinstance(e, ev.TensorCopy):
        return HistoryKind.COPIED if e.dst_id == tensor_id else HistoryKind.COPY_READ
    return _HISTORY_KINDS.get(type(e), HistoryKind.FREED)


_HISTORY_KINDS: dict[type, HistoryKind] = {
    ev.TensorCreated: HistoryKind.CREATED,
    ev.TensorNamed: HistoryKind.NAMED,
    ev.TensorFlagsSet: HistoryKind.FLAGS,
    ev.TensorSrcSet: HistoryKind.SRC_SET,
    ev.TensorPlaced: HistoryKind.PLACED,
    ev.TensorCleared: HistoryKind.CLEARED,
    ev.TensorSet: HistoryKind.SET,
    ev.TensorGet: HistoryKind.GET,
    ev.ValueSnapshot: HistoryKind.SNAPSHOT,
    ev.BufferFreed: HistoryKind.FREED,
}


def events_of(trace: Any) -> list[ev.Event]:
    """The events of a ``Trace``, a recorder, or any iterable of events, as a list."""
    evs = getattr(trace, "events", trace)
    return evs if isinstance(evs, list) else list(evs)


def build_model(trace: Any, *, progress: Callable[[int, int], None] | None = None) -> TraceModel:
    """Build the model of a trace in one pass (a ``Trace``, anything with ``.events``, or events).

    ``progress(done, total)`` is called every 65536 events when given.
    """
    return _Builder(events_of(trace)).run(progress)


class _Builder:
    """The one pass. Handlers are looked up by event class; unknown kinds are kept but ignored."""

    def __init__(self, events: list[ev.Event]) -> None:
        self.m = TraceModel(events)
        self.current: dict[int, int] = {}          # tensor -> current placement index
        self.alias_of: dict[int, int] = {}         # tensor -> alias key of its latest placement
        self.pool_of: dict[int, bool] = {}         # tensor -> latest placement made by a graph allocator
        self.galloc_bound: dict[int, list[int]] = {}  # galloc -> placements its bindings made
        self.galloc_sched: dict[int, int] = {}     # galloc -> sched that drives it
        self.open_sched = -1                       # the scheduler whose alloc_graph is under way
        self.open_plan: PlanInfo | None = None
        self.open_bindings: dict[int, BindingInfo] = {}
        self.open_compute: ComputeInfo | None = None
        self.pending_replans: dict[int, list[ev.Replan]] = {}
        self.i = 0

    def run(self, progress: Callable[[int, int], None] | None = None) -> TraceModel:
        m = self.m
        if progress is not None:
            # report in slices so the hot loop stays free of the callback
            total = len(m.events)
            step = 1 << 16
            full = m.events
            for lo in range(0, total, step):
                self._run(full, lo, min(lo + step, total))
                progress(min(lo + step, total), total)
            return m
        self._run(m.events, 0, len(m.events))
        return m

    def _run(self, events: list[ev.Event], lo: int, hi: int) -> None:
        m = self.m
        handlers = {cls: getattr(self, "_" + name) for name, cls in ev.KINDS.items() if hasattr(self, "_" + name)}
        tensors = m.tensors
        tget = tensors.get
        get = handlers.get
        node_compute = ev.NodeCompute
        tensor_named = ev.TensorNamed
        compute_edges = (ev.ComputeBegin, ev.ComputeEnd)
        c = self.open_compute
        add_node = c.nodes.append if c is not None else None
        for i in range(lo, hi):
            e = events[i]
            cls = type(e)
            if cls is node_compute:
                # the hot path, inlined: a node's reads and write
                if add_node is not None:
                    add_node(e)
                info = tget(e.tensor_id)  # type: ignore[attr-defined]
                if info is not None:
                    info.history.append(i)
                for r in e.reads:  # type: ignore[attr-defined]
                    info = tget(r)
                    if info is not None:
                        info.history.append(i)
                continue
            if cls is tensor_named:
                info = tget(e.tensor_id)  # type: ignore[attr-defined]
                if info is not None:
                    info.name = e.name  # type: ignore[attr-defined]
                    info.history.append(i)
                continue
            h = get(cls)
            if h is not None:
                self.i = i
                h(e)
                if cls in compute_edges:
                    c = self.open_compute
                    add_node = c.nodes.append if c is not None else None

    # -- helpers ------------------------------------------------------------------
    def _touch(self, tensor_id: int) -> None:
        info = self.m.tensors.get(tensor_id)
        if info is not None:
            info.history.append(self.i)

    def _end_placement(self, tensor_id: int, seq: int, reason: str) -> None:
        idx = self.current.pop(tensor_id, None)
        if idx is not None:
            p = self.m.placements[idx]
            p.end_seq = seq
            p.end_reason = reason

    def _make_stale(self, galloc_id: int, seq: int, reason: str) -> None:
        bound = self.galloc_bound.get(galloc_id)
        if not bound:
            return
        placements = self.m.placements
        for idx in bound:
            p = placements[idx]
            if p.end_seq == NEVER and p.stale_seq == NEVER:
                p.stale_seq = seq
                p.stale_reason = reason
        self.galloc_bound[galloc_id] = []

    # -- contexts and tensors ------------------------------------------------------
    def _ContextCreated(self, e: ev.ContextCreated) -> None:
        self.m.contexts[e.ctx_id] = e

    def _TensorCreated(self, e: ev.TensorCreated) -> None:
        info = TensorInfo(
            e.tensor_id, e.ctx_id, e.name, e.dtype, e.ne, e.nb, e.op, e.op_params,
            e.srcs, e.view_src, e.view_offs, e.flags, e.copy_of, nbytes_of(e.dtype, e.ne, e.nb),
            e.seq, e.loc, [self.i],
        )
        self.m.tensors[e.tensor_id] = info

    def _TensorNamed(self, e: ev.TensorNamed) -> None:
        info = self.m.tensors.get(e.tensor_id)
        if info is not None:
            info.name = e.name
            info.history.append(self.i)

    def _TensorFlagsSet(self, e: ev.TensorFlagsSet) -> None:
        info = self.m.tensors.get(e.tensor_id)
        if info is not None:
            info.flags = e.flags
            info.history.append(self.i)

    def _TensorSrcSet(self, e: ev.TensorSrcSet) -> None:
        info = self.m.tensors.get(e.tensor_id)
        if info is not None:
            srcs = list(info.srcs)
            while len(srcs) <= e.slot:
                srcs.append(-1)
            srcs[e.slot] = e.src_id
            info.srcs = tuple(srcs)
            info.history.append(self.i)

    # -- buffers and placements ---------------------------------------------------
    def _BufferAllocated(self, e: ev.BufferAllocated) -> None:
        self.m.buffers[e.buffer_id] = BufferInfo(
            e.buffer_id, e.backend, e.buft, e.base, e.nbytes, e.alignment, e.usage, e.pool_id, e.slot,
            e.chunk, e.cause, e.seq, e.loc,
        )

    def _BufferFreed(self, e: ev.BufferFreed) -> None:
        buf = self.m.buffers.get(e.buffer_id)
        if buf is None:
            return
        buf.freed_seq = e.seq
        buf.free_cause = e.cause
        placements = self.m.placements
        tensors = self.m.tensors
        for idx in buf.placements:
            p = placements[idx]
            if p.end_seq == NEVER:
                if p.stale_seq == NEVER and p.galloc_id >= 0:
                    p.stale_seq = e.seq
                    p.stale_reason = "freed"
                info = tensors.get(p.tensor_id)
                if info is not None:
                    info.history.append(self.i)

    def _BufferCleared(self, e: ev.BufferCleared) -> None:
        buf = self.m.buffers.get(e.buffer_id)
        if buf is not None:
            buf.cleared_seqs.append(e.seq)

    def _TensorPlaced(self, e: ev.TensorPlaced) -> None:
        m = self.m
        t = e.tensor_id
        by = e.by
        if t in self.current:
            self._end_placement(t, e.seq, "replaced")
        binding = m.bindings.get(e.binding_id) if e.binding_id >= 0 else None
        galloc = binding.galloc_id if binding is not None else -1
        info = m.tensors.get(t)
        alias_of = self.alias_of
        pool_of = self.pool_of
        # string comparison: works for enum members and for plain strings alike
        by_pool = by == "gallocr" or by == "view_init"
        if info is None:
            alias, pool = t, by_pool
        elif by == "copy" and info.copy_of >= 0 and info.copy_of in alias_of:
            alias, pool = alias_of[info.copy_of], pool_of[info.copy_of]
        elif info.view_src >= 0:
            alias, pool = alias_of.get(info.view_src, info.view_src), pool_of.get(info.view_src, by_pool)
        else:
            alias, pool = t, by_pool
        alias_of[t] = alias
        pool_of[t] = pool
        idx = len(m.placements)
        p = Placement(idx, t, e.buffer_id, e.offset, e.nbytes, by, e.binding_id, galloc, e.seq, e.loc,
                      NEVER, "", NEVER, "", alias, pool)
        m.placements.append(p)
        self.current[t] = idx
        if info is not None:
            info.placements.append(idx)
            info.history.append(self.i)
        buf = m.buffers.get(e.buffer_id)
        if buf is not None:
            buf.placements.append(idx)
            if buf.freed_seq <= e.seq and galloc >= 0:
                p.stale_seq, p.stale_reason = e.seq, "freed"
        if binding is not None:
            binding.placements.append(idx)
            if by_pool:
                self.galloc_bound.setdefault(galloc, []).append(idx)

    def _TensorCleared(self, e: ev.TensorCleared) -> None:
        self._end_placement(e.tensor_id, e.seq, f"cleared by {e.by}")
        self._touch(e.tensor_id)

    # -- graphs ---------------------------------------------------------------------
    def _GraphCreated(self, e: ev.GraphCreated) -> None:
        self.m.graphs[e.graph_id] = GraphInfo(e.graph_id, e.size, e.kind, e.source_graph, e.seq, e.loc)

    def _GraphExpanded(self, e: ev.GraphExpanded) -> None:
        g = self.m.graphs.get(e.graph_id)
        if g is None:
            g = self.m.graphs[e.graph_id] = GraphInfo(e.graph_id, 0, "unknown", -1, e.seq, e.loc)
        g.nodes.extend(e.nodes)
        g.leafs.extend(e.leafs)

    def _snapshot(self, graph_id: int) -> GraphSnapshot | None:
        g = self.m.graphs.get(graph_id)
        return g.snapshot() if g is not None else None

    # -- planning and binding ---------------------------------------------------------
    def _Replan(self, e: ev.Replan) -> None:
        self.m.replans.append(e)
        self.pending_replans.setdefault(e.galloc_id, []).append(e)

    def _PlanBegin(self, e: ev.PlanBegin) -> None:
        if self.open_sched >= 0:
            self._associate(e.galloc_id, self.open_sched)
        self._make_stale(e.galloc_id, e.seq, "re-planned")
        plan = PlanInfo(e.plan_id, e.galloc_id, e.graph_id, e.n_nodes, e.n_leafs, tuple(e.alignments), e.seq,
                        e.loc, self._snapshot(e.graph_id))
        plan.replans = self.pending_replans.pop(e.galloc_id, [])
        self.m.plans[e.plan_id] = plan
        self.open_plan = plan

    def _decision(self, e: Any) -> None:
        plan = self.open_plan
        if plan is None or plan.plan_id != e.plan_id:
            plan = self.m.plans.get(e.plan_id)
        if plan is not None:
            plan.decisions.append(e)

    _PlanAlloc = _PlanInplace = _PlanRefused = _PlanFree = _PlanExternal = _decision

    def _PlanEnd(self, e: ev.PlanEnd) -> None:
        plan = self.m.plans.get(e.plan_id)
        if plan is not None:
            plan.end_seq = e.seq
            plan.chunk_sizes = tuple(tuple(c) for c in e.chunk_sizes)
        self.open_plan = None

    def _BindingBegin(self, e: ev.BindingBegin) -> None:
        if self.open_sched >= 0:
            self._associate(e.galloc_id, self.open_sched)
        b = BindingInfo(e.binding_id, e.galloc_id, e.plan_id, e.graph_id, e.seq, e.loc, self._snapshot(e.graph_id),
                        self.galloc_sched.get(e.galloc_id, -1))
        self.m.bindings[e.binding_id] = b

    def _BindingEnd(self, e: ev.BindingEnd) -> None:
        b = self.m.bindings.get(e.binding_id)
        if b is not None:
            b.end_seq = e.seq
            b.ok = e.ok

    # -- scheduler ----------------------------------------------------------------------
    def _sched(self, sched_id: int) -> SchedInfo:
        s = self.m.scheds.get(sched_id)
        if s is None:
            s = self.m.scheds[sched_id] = SchedInfo(sched_id)
        return s

    def _associate(self, galloc_id: int, sched_id: int) -> None:
        self.galloc_sched[galloc_id] = sched_id
        self._sched(sched_id).gallocs.add(galloc_id)

    def _SchedReset(self, e: ev.SchedReset) -> None:
        s = self._sched(e.sched_id)
        s.resets.append(e.seq)
        for g in s.gallocs:
            self._make_stale(g, e.seq, "reset")
        self.open_sched = -1

    def _SchedSplit(self, e: ev.SchedSplit) -> None:
        self._sched(e.sched_id).splits.append(e)
        self.open_sched = e.sched_id

    def _SchedCopy(self, e: ev.SchedCopy) -> None:
        self._sched(e.sched_id).copies.append(e)
        self.open_sched = e.sched_id

    def _SchedAlloc(self, e: ev.SchedAlloc) -> None:
        self._sched(e.sched_id).allocs.append(e)
        self.open_sched = -1

    # -- compute ----------------------------------------------------------------------
    def _ComputeBegin(self, e: ev.ComputeBegin) -> None:
        c = ComputeInfo(e.compute_id, e.graph_id, e.backend, e.n_nodes, e.seq, e.loc, self._snapshot(e.graph_id))
        self.m.computes[e.compute_id] = c
        self.open_compute = c

    def _ComputeEnd(self, e: ev.ComputeEnd) -> None:
        c = self.m.computes.get(e.compute_id)
        if c is not None:
            c.end_seq = e.seq
            c.wall_ns = e.wall_ns
        self.open_compute = None

    def _TensorCopy(self, e: ev.TensorCopy) -> None:
        self.m.copies.append(e)
        self._touch(e.src_id)
        if e.dst_id != e.src_id:
            self._touch(e.dst_id)

    # -- user I/O ---------------------------------------------------------------------------
    def _TensorSet(self, e: ev.TensorSet) -> None:
        self._touch(e.tensor_id)

    _TensorGet = _TensorSet

    def _ValueSnapshot(self, e: ev.ValueSnapshot) -> None:
        self.m.snapshots.append(e)
        self._touch(e.tensor_id)

    def _Marker(self, e: ev.Marker) -> None:
        self.m.markers.append(e)


def iter_events(model: TraceModel, kinds: Iterable[type[ev.Event]]) -> Iterable[ev.Event]:
    """The model's events of the given kinds, in order."""
    wanted = tuple(kinds)
    return (e for e in model.events if isinstance(e, wanted))
