"""The records of a trace model: what the analysis knows about each tensor, placement,
buffer, graph, plan, binding, scheduler and compute, and the constants they use.

Records hold ids, numbers, names and small lists, never a live runtime object; a
``TraceModel`` (``model.py``) holds them and answers the queries over them. A "step"
is an event's ``seq``.

    >>> Placement(0, 3, 7, 64, 32, ev.PlacedBy.USER, -1, -1, 5, None).end
    96
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vizalloc.trace import events as ev
from vizalloc.trace.events import GGML_TYPE_SIZES, ggml_nbytes

#: "never" for end / stale / freed sequence numbers.
NEVER = 1 << 62

#: Bytes per element of ggml's types that are not in blocks, by label (the quantized types
#: have none: their bytes come per block, see ``GGML_TYPE_SIZES``); the analysis must not
#: import the runtime.
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


def cpy_destination(tensor_id: int, srcs: Sequence[int]) -> int:
    """The source of ``CPY`` node ``tensor_id`` that is its destination (written, not read):
    ``ggml_cpy(a, b)`` lists ``b`` (whose bytes the result views) as its second source; a
    cast lists itself."""
    return srcs[1] if len(srcs) > 1 else tensor_id


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
        """How reports name it (``tensor_label``; raw data: show it through ``vizalloc.text.inert``)."""
        return tensor_label(self.tensor_id, self.name, self.op, self.ne, self.dtype)


#: the names ggml gives a graph's nameless tensors (``ggml_visit_parents``), not the program's
_GGML_NAME = re.compile(r"(?:node|leaf)_\d+")


def tensor_label(tensor_id: int, name: str, op: str, ne: Sequence[int], dtype: str) -> str:
    """How every report names a tensor: its name; when it has none of its own (empty, or the
    ``node_N``/``leaf_N`` ggml made up for it: whisper.cpp names few tensors), its op and shape;
    a tensor with neither is ``#id``.

        >>> tensor_label(191, "node_191", "MUL_MAT", (1500, 384, 1, 1), "f32")
        'mul_mat 1500×384'
        >>> tensor_label(3, "leaf_3", "NONE", (384, 1, 1, 1), "f16"), tensor_label(4, "kq-5", "MUL_MAT", (8,), "f32")
        ('f16 384', 'kq-5')
        >>> tensor_label(7, "", "", (), "")
        '#7'
    """
    if name and not _GGML_NAME.fullmatch(name):
        return name
    dims = list(ne)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    what = op.lower() if op and op != "NONE" else dtype
    if not what or not dims:
        return name or f"#{tensor_id}"
    return f"{what} {'×'.join(str(d) for d in dims)}"


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
    freed_loc: ev.Location | None = None
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
