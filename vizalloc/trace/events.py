"""The event records: everything the runtime reports, one frozen class per kind.

Events hold values only (ids, names, numbers, tuples of ids), never a live tensor
or buffer, so a trace can be written, read back, compared and diffed. Every event
carries ``seq`` (strictly increasing within a process), ``t_ns`` (a monotonic clock,
``time.perf_counter_ns``) and ``loc``, the user's source line that caused it (the
first frame outside vizalloc) or ``None``.

Ids are process-wide counters: ``tensor_id``, ``buffer_id``, ``ctx_id``,
``graph_id``, ``galloc_id`` (one graph allocator), ``plan_id`` (one planning pass),
``binding_id`` (one ``alloc_graph`` that applies a plan), ``sched_id``,
``compute_id``. ``-1`` stands for "none" wherever an id is optional.

    >>> from vizalloc.trace.events import TensorPlaced, KINDS
    >>> TensorPlaced.__name__ in KINDS
    True
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from collections.abc import Sequence
from typing import Union

NO_ID = -1


@dataclass(frozen=True, slots=True)
class Location:
    """A source line: the first frame outside vizalloc when the event happened."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


def enum_text(value: enum.Enum | str) -> str:
    """The text of an enum field: the member's value, or ``unknown (TEXT)`` for a value this
    vizalloc's enum lacks (a trace written by a newer vizalloc: the reader keeps it as its
    string, and it must never pass for a known value)."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    return f"unknown ({value})"


class PlacedBy(str, enum.Enum):
    """Who gave a tensor its bytes."""

    TALLOCR = "tallocr"          # the linear allocator (alloc_ctx_tensors, TensorAllocator)
    GALLOCR = "gallocr"          # a graph allocator binding a plan
    VIEW_INIT = "view_init"      # a view bound to its root's bytes (ggml_backend_view_init)
    VIEW_CREATE = "view_create"  # a view made of a root that already had data
    CONTEXT = "context"          # a context that allocates its own memory (no_alloc=False)
    COPY = "copy"                # a deep copy of an allocated tensor aliases its bytes
    USER = "user"                # placed by hand
    OBSERVED = "observed"        # a real process had it there; how it got there was not seen (capture)


class RefuseReason(str, enum.Enum):
    """Why the graph allocator did not let a node take over a parent's bytes."""

    EXTERNAL = "external"      # the parent has data it did not plan (weights, inputs, stale tensors)
    NOT_OWN = "not_own"        # the parent is not (or no longer) held by this planner
    VIEW = "view"              # the parent is a view; views are never owned
    OUTPUT = "output"          # the parent is an output
    LAYOUT = "layout"          # type, shape or strides differ
    CONSUMERS = "consumers"    # the parent has other consumers or views still to run


class ReplanCause(str, enum.Enum):
    """Why a graph allocator planned again (``ggml_gallocr_needs_realloc`` and friends)."""

    FIRST = "first"                  # nothing was planned yet
    EXPLICIT = "explicit"            # reserve()/reserve_n() called by the user or scheduler
    N_NODES = "n_nodes"              # the graph has another node count
    N_LEAFS = "n_leafs"              # the graph has another leaf count
    NODE_SIZE = "node_size"          # a node no longer fits its recorded size
    SRC_SIZE = "src_size"            # a source no longer fits its recorded size
    LOST_DATA = "lost_data"          # a tensor had data at reserve time and lost it
    BACKEND_CHANGED = "backend_changed"  # the scheduler moved a position to another buffer type


@dataclass(frozen=True, slots=True)
class Event:
    """Fields common to every event."""

    seq: int
    t_ns: int
    loc: Location | None


# -- contexts and tensors ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ContextCreated(Event):
    ctx_id: int
    name: str
    no_alloc: bool


@dataclass(frozen=True, slots=True)
class ContextFreed(Event):
    ctx_id: int


@dataclass(frozen=True, slots=True)
class TensorCreated(Event):
    """A tensor came to be. ``op`` is the Op name; ``srcs`` are ids per slot, -1 for an empty slot."""

    tensor_id: int
    ctx_id: int
    name: str
    dtype: str
    ne: tuple[int, ...]
    nb: tuple[int, ...]
    op: str
    op_params: tuple[Union[int, float, str], ...]
    srcs: tuple[int, ...]
    view_src: int
    view_offs: int
    flags: int
    copy_of: int  # deep copies (graph_deep_copy, graph_copy): the tensor this one copies


@dataclass(frozen=True, slots=True)
class TensorNamed(Event):
    tensor_id: int
    name: str


@dataclass(frozen=True, slots=True)
class TensorFlagsSet(Event):
    """The tensor's whole flag word after a change (INPUT=1, OUTPUT=2, PARAM=4, LOSS=8)."""

    tensor_id: int
    flags: int


@dataclass(frozen=True, slots=True)
class TensorSrcSet(Event):
    """A source slot was rewritten after creation (the scheduler does this for input copies)."""

    tensor_id: int
    slot: int
    src_id: int


# -- buffers and placements ---------------------------------------------------

@dataclass(frozen=True, slots=True)
class BufferAllocated(Event):
    """A backend buffer: one real byte array. ``pool_id`` is the graph allocator owning it (-1 if none)."""

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


@dataclass(frozen=True, slots=True)
class BufferFreed(Event):
    buffer_id: int
    cause: str


@dataclass(frozen=True, slots=True)
class BufferCleared(Event):
    buffer_id: int
    value: int


@dataclass(frozen=True, slots=True)
class TensorPlaced(Event):
    """A tensor got a data pointer: bytes ``[offset, offset + nbytes)`` of ``buffer_id``.

    For a view, ``offset`` already includes ``view_offs``. ``binding_id`` names the
    ``alloc_graph`` that did it (-1 outside a binding).
    """

    tensor_id: int
    buffer_id: int
    offset: int
    nbytes: int
    by: PlacedBy
    binding_id: int


@dataclass(frozen=True, slots=True)
class TensorCleared(Event):
    """``data``, ``buffer`` and ``extra`` were set to none. ``by`` says who did it (a fix strategy, the user)."""

    tensor_id: int
    by: str


# -- graphs -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class GraphCreated(Event):
    """A graph object. ``kind``: new, shallow_copy, deep_copy, view, sched (the scheduler's own graph)."""

    graph_id: int
    size: int
    kind: str
    source_graph: int


@dataclass(frozen=True, slots=True)
class GraphExpanded(Event):
    """Nodes and leafs appended to a graph, in ggml's order."""

    graph_id: int
    nodes: tuple[int, ...]
    leafs: tuple[int, ...]


# -- the graph allocator's decisions -------------------------------------------

@dataclass(frozen=True, slots=True)
class Replan(Event):
    """A graph allocator must plan again; ``node_index``/``tensor_id`` name the position that failed (-1 if none)."""

    galloc_id: int
    cause: ReplanCause
    detail: str
    node_index: int
    tensor_id: int


@dataclass(frozen=True, slots=True)
class PlanBegin(Event):
    galloc_id: int
    plan_id: int
    graph_id: int
    n_nodes: int
    n_leafs: int
    alignments: tuple[int, ...]  # per slot


@dataclass(frozen=True, slots=True)
class PlanAlloc(Event):
    """The planner gave ``tensor_id`` bytes: ``block`` is the free block index taken (-1: a new chunk)."""

    plan_id: int
    tensor_id: int
    slot: int
    chunk: int
    offset: int
    nbytes: int  # padded to the alignment
    phase: int
    block: int


@dataclass(frozen=True, slots=True)
class PlanInplace(Event):
    """``tensor_id`` took over ``parent_id``'s bytes."""

    plan_id: int
    tensor_id: int
    parent_id: int
    slot: int
    chunk: int
    offset: int


@dataclass(frozen=True, slots=True)
class PlanRefused(Event):
    """``tensor_id`` could not take over ``parent_id`` in place."""

    plan_id: int
    tensor_id: int
    parent_id: int
    reason: RefuseReason


@dataclass(frozen=True, slots=True)
class PlanFree(Event):
    plan_id: int
    tensor_id: int
    slot: int
    chunk: int
    offset: int
    nbytes: int  # padded


@dataclass(frozen=True, slots=True)
class PlanExternal(Event):
    """A tensor of the graph already had data, so the planner skipped it (weights, inputs, or stale tensors)."""

    plan_id: int
    tensor_id: int


@dataclass(frozen=True, slots=True)
class PlanEnd(Event):
    """Chunk high-water marks per slot: ``chunk_sizes[slot][chunk]`` (slots sharing a buffer type repeat)."""

    plan_id: int
    chunk_sizes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class BindingBegin(Event):
    galloc_id: int
    binding_id: int
    plan_id: int
    graph_id: int


@dataclass(frozen=True, slots=True)
class BindingEnd(Event):
    binding_id: int
    ok: bool


# -- the backend scheduler ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class SchedReset(Event):
    sched_id: int


@dataclass(frozen=True, slots=True)
class SchedSplit(Event):
    """One split of a graph: the nodes a backend runs in a row, and the inputs copied to it."""

    sched_id: int
    graph_id: int
    split_index: int
    backend: str
    nodes: tuple[int, ...]
    inputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SchedCopy(Event):
    """An input copy: ``copy_id`` holds ``src_id``'s value for split ``split_index`` (copy slot ``copy_index``)."""

    sched_id: int
    split_index: int
    src_id: int
    copy_id: int
    copy_index: int
    backend: str


@dataclass(frozen=True, slots=True)
class SchedAlloc(Event):
    sched_id: int
    graph_id: int
    sched_graph_id: int
    ok: bool


# -- compute -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ComputeBegin(Event):
    compute_id: int
    graph_id: int
    backend: str
    n_nodes: int


@dataclass(frozen=True, slots=True)
class NodeCompute(Event):
    """Node ``index`` of the computing graph wrote ``tensor_id`` after reading ``reads``."""

    compute_id: int
    index: int
    tensor_id: int
    backend: str
    reads: tuple[int, ...]
    wall_ns: int


@dataclass(frozen=True, slots=True)
class ComputeEnd(Event):
    compute_id: int
    wall_ns: int


@dataclass(frozen=True, slots=True)
class TensorCopy(Event):
    """Bytes of ``src_id`` copied into ``dst_id`` (scheduler input copies, graph copies)."""

    src_id: int
    dst_id: int
    nbytes: int


# -- user I/O and annotations -------------------------------------------------

@dataclass(frozen=True, slots=True)
class TensorSet(Event):
    tensor_id: int
    offset: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class TensorGet(Event):
    tensor_id: int
    offset: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class ValueSnapshot(Event):
    """Captured tensor contents (``capture_values=True``): ``when`` is ``begin`` or ``end`` of ``compute_id``."""

    tensor_id: int
    compute_id: int
    when: str
    dtype: str
    ne: tuple[int, ...]
    data: bytes


@dataclass(frozen=True, slots=True)
class Marker(Event):
    """A user annotation (``vizalloc.mark("epoch 2")``)."""

    text: str


# -- appended kinds (the trace format numbers kinds by their order in ``AnyEvent``) ---

@dataclass(frozen=True, slots=True)
class GraphCleared(Event):
    """A graph lost every node and leaf (``ggml_graph_clear``, or ``ggml_graph_cpy`` into it,
    before the copy's ``GraphExpanded``): later expansions start new lists."""

    graph_id: int


# -- a real ggml process, captured (vizalloc.capture) ---------------------------------

@dataclass(frozen=True, slots=True)
class ProcessCaptured(Event):
    """The trace was imported from a real ggml process: which program, which ggml, and the
    allocator rules its graphs were replayed with (``rules_version``; equal to
    ``ggml_version`` unless that version is not one vizalloc knows)."""

    program: str
    pid: int
    ggml_version: str
    ggml_path: str
    rules_version: str
    note: str


@dataclass(frozen=True, slots=True)
class ReplayMismatch(Event):
    """The replay through vizalloc's allocator disagreed with what the real process did.

    ``what``: ``offset`` (a tensor's placement), ``buffer_size``, ``result`` (a call's
    return value) or ``buffers`` (how many buffers a plan made). ``tensor_id`` is -1 when
    the difference is not about one tensor. ``observed`` and ``replayed`` are the two
    values as text (``buffer #3 + 4096``).
    """

    what: str
    tensor_id: int
    observed: str
    replayed: str
    call: str
    ggml_version: str


@dataclass(frozen=True, slots=True)
class CaptureIncomplete(Event):
    """A captured process is not all in the trace: its import stopped at record ``record`` of
    ``n_records`` (what follows is missing), or nothing was captured (``n_records`` 0: ggml
    linked statically, or no ggml at all). ``call`` is the ggml call being imported (""
    between calls), ``tensor_name`` the tensor concerned ("" if none), ``missing`` what the
    capture lacked, ``reason`` the whole explanation. ``check`` reports it as an
    ``incomplete-capture`` finding: a trace that holds part of a process is never clean."""

    record: int
    n_records: int
    call: str
    tensor_name: str
    missing: str
    reason: str


AnyEvent = Union[
    ContextCreated, ContextFreed, TensorCreated, TensorNamed, TensorFlagsSet, TensorSrcSet,
    BufferAllocated, BufferFreed, BufferCleared, TensorPlaced, TensorCleared,
    GraphCreated, GraphExpanded, Replan, PlanBegin, PlanAlloc, PlanInplace, PlanRefused,
    PlanFree, PlanExternal, PlanEnd, BindingBegin, BindingEnd, SchedReset, SchedSplit,
    SchedCopy, SchedAlloc, ComputeBegin, NodeCompute, ComputeEnd, TensorCopy, TensorSet,
    TensorGet, ValueSnapshot, Marker, GraphCleared, ProcessCaptured, ReplayMismatch,
    CaptureIncomplete,
]

#: Every event class by name, in a fixed order (the trace file numbers kinds by this order).
KINDS: dict[str, type[Event]] = {cls.__name__: cls for cls in AnyEvent.__args__}  # type: ignore[attr-defined]


#: The id each id-valued field holds, by field name (for tuples: every item). The same work
#: done again (the next token of a decode loop) differs from the first time only in these ids,
#: in ``seq`` and in the times (``TIME_FIELDS``); ``vizalloc.analysis.repeat`` relies on it. A
#: field missing here is compared as a plain value, which is always safe.
ID_FIELDS: dict[str, str] = {
    "tensor_id": "tensor", "src_id": "tensor", "dst_id": "tensor", "copy_id": "tensor", "parent_id": "tensor",
    "view_src": "tensor", "copy_of": "tensor", "srcs": "tensor", "nodes": "tensor", "leafs": "tensor",
    "reads": "tensor", "inputs": "tensor",
    "ctx_id": "context", "buffer_id": "buffer", "pool_id": "galloc", "galloc_id": "galloc",
    "graph_id": "graph", "source_graph": "graph", "sched_graph_id": "graph",
    "plan_id": "plan", "binding_id": "binding", "sched_id": "sched", "compute_id": "compute",
}

#: Payload fields that measure time: different every time the same work is done (``t_ns`` of
#: every event too).
TIME_FIELDS: frozenset[tuple[str, str]] = frozenset({("NodeCompute", "wall_ns"), ("ComputeEnd", "wall_ns")})


def payload_fields(cls: type[Event]) -> tuple[str, ...]:
    """The names of a kind's own fields (after seq, t_ns, loc)."""
    return tuple(f.name for f in fields(cls))[3:]


#: Every element type ggml 0.26.0 knows, by the name ``ggml_type_name`` prints (the label a
#: trace stores): (bytes per block, elements per block) from ``src/ggml.c``'s type_traits.
#: The one table: the runtime's ``DType`` takes its sizes from it, and the analysis sizes a
#: traced tensor of any type (quantized weights of a captured process too) with it.
GGML_TYPE_SIZES: dict[str, tuple[int, int]] = {
    "f32": (4, 1), "f16": (2, 1), "i32": (4, 1), "i8": (1, 1), "i16": (2, 1), "i64": (8, 1), "f64": (8, 1),
    "bf16": (2, 1),
    "q4_0": (18, 32), "q4_1": (20, 32), "q5_0": (22, 32), "q5_1": (24, 32), "q8_0": (34, 32), "q8_1": (36, 32),
    "q2_K": (84, 256), "q3_K": (110, 256), "q4_K": (144, 256), "q5_K": (176, 256), "q6_K": (210, 256),
    "q8_K": (292, 256),
    "iq2_xxs": (66, 256), "iq2_xs": (74, 256), "iq3_xxs": (98, 256), "iq1_s": (50, 256), "iq4_nl": (18, 32),
    "iq3_s": (110, 256), "iq2_s": (82, 256), "iq4_xs": (136, 256), "iq1_m": (56, 256),
    "tq1_0": (54, 256), "tq2_0": (66, 256), "mxfp4": (17, 32), "nvfp4": (36, 64), "q1_0": (18, 128),
    "q2_0": (18, 64),
}


def ggml_nbytes(type_size: int, blck_size: int, ne: Sequence[int], nb: Sequence[int]) -> int:
    """``ggml_nbytes``: the bytes a tensor's strides span (0 for an empty tensor), for
    ``type_size`` bytes per block of ``blck_size`` elements.

    The one definition: the runtime sizes its tensors with it, and the analysis sizes the
    tensor a ``TensorCreated`` describes, so both agree. ggml has 4 dimensions; a trace
    file may describe others, which are summed the same way.

        >>> ggml_nbytes(4, 1, (4, 3, 1, 1), (4, 16, 48, 48))   # rows padded to 16 bytes
        48
    """
    if len(ne) == 4 and len(nb) == 4:  # unrolled: the planner sizes every tensor of a graph
        ne0, ne1, ne2, ne3 = ne
        if ne0 <= 0 or ne1 <= 0 or ne2 <= 0 or ne3 <= 0:
            return 0
        nb0, nb1, nb2, nb3 = nb
        span = (ne1 - 1) * nb1 + (ne2 - 1) * nb2 + (ne3 - 1) * nb3
        if blck_size == 1:
            return type_size + (ne0 - 1) * nb0 + span
        return ne0 * nb0 // blck_size + span
    if any(n <= 0 for n in ne):
        return 0
    if not ne or not nb:
        return type_size
    span = sum((n - 1) * s for n, s in zip(ne[1:], nb[1:]))
    if blck_size == 1:
        return type_size + (ne[0] - 1) * nb[0] + span
    return ne[0] * nb[0] // blck_size + span
