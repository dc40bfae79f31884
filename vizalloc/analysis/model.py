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

from vizalloc.gcpause import gc_paused
from vizalloc.trace import events as ev
from vizalloc.trace.events import GGML_TYPE_SIZES, ggml_nbytes

#: "never" for end / stale / freed sequence numbers.
NEVER = 1 << 62

#: Bytes per element of ggml's types that are not in blocks, by label (the quantized types
#: have none: their bytes come per block, see ``GGML_TYPE_SIZES``).
TYPE_SIZES: dict[str, int] = {label: size for label, (size, block) in GGML_TYPE_SIZES.items() if block == 1}

#: Ops whose node writes no bytes of its own: NONE (leafs) and the view ops, whose result
#: is the source's bytes. (The runtime's ``VIEW_OPS`` is the view ops alone.)
NON_WRITING_OPS = frozenset({"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})

FLAG_INPUT, FLAG_OUTPUT, FLAG_PARAM, FLAG_LOSS = 1, 2, 4, 8


def nbytes_of(dtype: str, ne: Sequence[int], nb: Sequence[int]) -> int:
    """``ggml_nbytes`` of a traced tensor, by its type's label (the analysis sees no DType); a
    type this version does not know is taken as one element of ``nb[0]`` bytes."""
    type_size, blck_size = GGML_TYPE_SIZES.get(dtype) or (nb[0] if nb else 1, 1)
    return ggml_nbytes(type_size, blck_size, ne, nb)


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
        """The name as recorded (raw data: show it through ``vizalloc.text.inert``), or ``#id`` when unnamed."""
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
    """A graph object. ``nodes``/``leafs`` grow with ``GraphExpanded``; a ``GraphCleared``
    (``ggml_graph_clear``, or ``ggml_graph_cpy`` into it) or a graph recreated with the
    same id starts new lists, so earlier snapshots keep theirs. ``cleared_seqs``: when it
    was cleared."""

    graph_id: int
    size: int
    kind: str
    source_graph: int
    created_seq: int
    created_loc: ev.Location | None
    nodes: list[int] = field(default_factory=list)
    leafs: list[int] = field(default_factory=list)
    cleared_seqs: list[int] = field(default_factory=list)

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
    #: tensors the scheduler made to hold an input copy for a split (``SchedCopy.copy_id``)
    input_copies: set[int] = field(default_factory=set)
    #: the real process this trace was captured from (``vizalloc.capture``), if any
    captured: list[ev.ProcessCaptured] = field(default_factory=list)
    #: where vizalloc's replay of a captured process disagreed with it
    replay_mismatches: list[ev.ReplayMismatch] = field(default_factory=list)
    _seq_index: dict[int, int] | None = None
    _map_index: dict[int, Any] | None = None

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
            out.append(HistoryEntry(e.seq, history_kind(e, tensor_id), e.loc, e))
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
        rows = []
        for idx in self.placements_alive(buffer_id, seq):
            p = self.placements[idx]
            info = self.tensors.get(p.tensor_id)
            is_view = info.is_view if info is not None else False
            if is_view and not views:
                continue
            rows.append(MapEntry(p.tensor_id, self.label(p.tensor_id), p.offset, p.nbytes,
                                 self.placement_state(p, seq), is_view, idx))
        rows.sort(key=lambda r: (r.offset, r.is_view, r.tensor_id))
        return rows

    def placements_alive(self, buffer_id: int, seq: int) -> list[int]:
        """Indices of the placements in a buffer that exist right after event ``seq``.

        Uses per-buffer numpy arrays of start/end seqs (built on first use), so a query
        costs one vectorised comparison, not a Python loop over the buffer's history.
        """
        if self._map_index is None:
            self._map_index = {}
        index = self._map_index.get(buffer_id)
        if index is None:
            import numpy as np

            ids = self.buffers[buffer_id].placements
            starts = np.fromiter((self.placements[i].seq for i in ids), dtype=np.int64, count=len(ids))
            ends = np.fromiter((self.placements[i].end_seq for i in ids), dtype=np.int64, count=len(ids))
            index = self._map_index[buffer_id] = (np.asarray(ids, dtype=np.int64), starts, ends)
        ids_a, starts, ends = index
        live: list[int] = ids_a[(starts <= seq) & (seq < ends)].tolist()
        return live

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


def history_kind(e: ev.Event, tensor_id: int) -> HistoryKind:
    """What event ``e`` (from the tensor's history) did to tensor ``tensor_id``."""
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
    from vizalloc.analysis.build import Builder

    with gc_paused():
        return Builder(events_of(trace)).run(progress)


def iter_events(model: TraceModel, kinds: Iterable[type[ev.Event]]) -> Iterable[ev.Event]:
    """The model's events of the given kinds, in order."""
    wanted = tuple(kinds)
    return (e for e in model.events if isinstance(e, wanted))
