"""The graph diagram as data: nodes, edges, clusters and a legend, before any DOT text.

:func:`build_graph_model` collects one graph as it stood right after a binding (or at
the end of the trace when it was never bound): one node per tensor with its name, op,
shape, type, buffer and byte range; data, view, in-place and copy edges; scheduler
splits as clusters holding their copy nodes; stale tensors and hazard pairs marked
with their reason. Big graphs are then made readable by :mod:`vizalloc.export.graph_fold`.
:mod:`vizalloc.export.dot` turns the model into text.

    >>> from vizalloc.export.graph_model import build_graph_model
    >>> model = build_graph_model(events)           # doctest: +SKIP
    >>> [n.name for n in model.nodes]               # doctest: +SKIP
    ['a', 'b', 'c']

Stale tensors are found here from the events alone (no analysis needed): a tensor of
the bound graph whose current placement came from an *earlier* binding of the same
graph allocator under another plan, or lies in a freed buffer. Hazard *pairs* come
from the analysis (``vizalloc.analysis.hazards``) through :class:`Highlight`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from vizalloc.export.trace_index import Selection, TraceIndex, index_events, select
from vizalloc.trace import events as ev

TensorId = int
FLAG_INPUT, FLAG_OUTPUT, FLAG_PARAM, FLAG_LOSS = 1, 2, 4, 8


class EdgeKind(str, enum.Enum):
    """How two boxes are related; each kind has its own line style."""

    DATA = "data"        # a source slot: the node reads the tensor
    VIEW = "view"        # the node is a view of the tensor (shares its bytes)
    INPLACE = "inplace"  # the planner let the node take over its parent's bytes
    COPY = "copy"        # the scheduler copies the tensor into another split's memory
    HAZARD = "hazard"    # two tensors whose bytes collide (analysis finding)
    SUMMARY = "summary"  # an edge to or from a folded or hidden group


class NodeRole(str, enum.Enum):
    NODE = "node"        # a graph node (computed)
    LEAF = "leaf"        # a graph leaf (weights, inputs, constants)
    COPY = "copy"        # a scheduler input copy
    EXTRA = "extra"      # referenced by the graph but in neither list (a rewritten source)
    FOLD = "fold"        # a folded group of tensors (one layer)
    SUMMARY = "summary"  # everything --max-nodes left out


@dataclass(frozen=True)
class Highlight:
    """A finding to draw: a hazard between two tensors (or about one, ``other_id=-1``)."""

    tensor_id: TensorId
    other_id: TensorId
    kind: str     # the HazardKind value: stale-overlap, use-after-reuse, ...
    reason: str   # one short line: "bytes [0, 256) of buffer #1, steps 2..5"


@dataclass(frozen=True)
class GNode:
    key: str                      # the DOT id (never user text)
    tensor_id: TensorId           # -1 for folded / summary boxes
    name: str
    op: str
    dtype: str
    shape: tuple[int, ...]
    role: NodeRole
    buffer_id: int = -1
    backend: str = ""
    offset: int = -1
    nbytes: int = 0
    placed_by: str = ""
    placed_binding: int = -1
    flags: int = 0
    stale: str = ""               # why the tensor is stale ("" when it is not)
    hazards: tuple[str, ...] = ()  # one line per finding about this tensor
    split: int = -1
    members: int = 1              # tensors inside a fold / summary box
    details: tuple[str, ...] = ()  # extra lines for fold / summary boxes


@dataclass(frozen=True)
class GEdge:
    src: str
    dst: str
    kind: EdgeKind
    label: str = ""


@dataclass(frozen=True)
class GCluster:
    key: str
    label: str
    backend: str
    members: tuple[str, ...]


@dataclass(frozen=True)
class BufferKey:
    """A buffer in the legend."""

    buffer_id: int
    backend: str
    buft: str
    nbytes: int
    usage: str
    freed: bool


@dataclass(frozen=True)
class GraphModel:
    title: str
    selection: Selection
    nodes: tuple[GNode, ...]
    edges: tuple[GEdge, ...]
    clusters: tuple[GCluster, ...]
    buffers: tuple[BufferKey, ...]
    notes: tuple[str, ...] = field(default=())


def tensor_key(tensor_id: TensorId) -> str:
    return f"t{tensor_id}"


def build_graph_model(events: Sequence[ev.Event], *, graph_id: int | None = None,
                      binding_id: int | None = None, highlights: Sequence[Highlight] = (),
                      prefer_bindings: Sequence[int] = ()) -> GraphModel:
    """Collect the diagram of one graph (see the module docstring).

    Args:
        events: the trace's events in order.
        graph_id: the graph to draw (its latest binding).
        binding_id: the binding to draw (wins over ``graph_id``).
        highlights: findings from the analysis to mark (hazard pairs).
        prefer_bindings: bindings to choose when neither id is given (those with findings).

    Raises:
        UsageError: the graph or binding is not in the trace.
    """
    sel = select(events, graph_id=graph_id, binding_id=binding_id, prefer=prefer_bindings)
    idx = index_events(events, sel.cut_seq)
    graph = idx.graphs[sel.graph_id]
    plan = idx.plans.get(sel.plan_id)

    # 1. the tensors to draw: leafs, nodes, then whatever they reference that is in neither list
    roles: dict[TensorId, NodeRole] = {}
    for t in graph.leafs:
        roles.setdefault(t, NodeRole.LEAF)
    for t in graph.nodes:
        roles.setdefault(t, NodeRole.NODE)
    splits = idx.splits.get(sel.graph_id) or idx.splits.get(sel.user_graph_id) or []
    split_of: dict[TensorId, int] = {}
    for s in splits:
        for t in s.nodes:
            split_of.setdefault(t, s.split_index)
        for c in s.copies:
            split_of[c.copy_id] = s.split_index
            roles[c.copy_id] = NodeRole.COPY
    order = list(roles)
    for tid in list(order):
        info = idx.tensors.get(tid)
        if info is None:
            continue
        for ref in [*info.srcs, info.view_src]:
            if ref >= 0 and ref not in roles:
                roles[ref] = NodeRole.EXTRA
                order.append(ref)

    # 2. findings per tensor: stale (from events) and hazards (from the analysis)
    stale = _stale_reasons(idx, sel, roles)
    lines_of: dict[TensorId, list[str]] = {}
    for h in highlights:
        for tid, other in ((h.tensor_id, h.other_id), (h.other_id, h.tensor_id)):
            if tid in roles:
                with_other = f" with {_name(idx, other)}" if other >= 0 else ""
                lines_of.setdefault(tid, []).append(f"{h.kind}{with_other}: {h.reason}")

    # 3. nodes
    nodes: list[GNode] = []
    for tid in order:
        nodes.append(_node(idx, tid, roles[tid], stale.get(tid, ""), tuple(lines_of.get(tid, ())),
                           split_of.get(tid, -1)))

    # 4. edges: data, view (merged with src[0] when it is the view root), in-place, copy, hazard
    edges: list[GEdge] = []
    inplace = plan.inplace if plan is not None else {}
    seen: set[tuple[str, str, EdgeKind]] = set()

    def add(src: TensorId, dst: TensorId, kind: EdgeKind, label: str = "") -> None:
        key = (tensor_key(src), tensor_key(dst), kind)
        if key not in seen and src in roles and dst in roles:
            seen.add(key)
            edges.append(GEdge(key[0], key[1], kind, label))

    for tid in order:
        info = idx.tensors.get(tid)
        if info is None:
            continue
        parent = inplace.get(tid, -1)
        for slot, s in enumerate(info.srcs):
            if s < 0:
                continue
            if s == info.view_src:
                add(s, tid, EdgeKind.VIEW, f"view +{info.view_offs}" if info.view_offs else "view")
            elif s == parent:
                add(s, tid, EdgeKind.INPLACE, "in-place")
            else:
                add(s, tid, EdgeKind.DATA, f"src{slot}" if slot else "")
        if info.view_src >= 0 and info.view_src not in info.srcs:
            add(info.view_src, tid, EdgeKind.VIEW, f"view +{info.view_offs}" if info.view_offs else "view")
        if parent >= 0 and parent not in info.srcs:
            add(parent, tid, EdgeKind.INPLACE, "in-place")
    for s in splits:
        for c in s.copies:
            add(c.src_id, c.copy_id, EdgeKind.COPY, f"copy to {s.backend}")
    for h in highlights:
        if h.other_id >= 0:
            add(h.other_id, h.tensor_id, EdgeKind.HAZARD, h.kind)

    # 5. clusters (scheduler splits) and the legend's buffers
    clusters = tuple(
        GCluster(f"cluster_split{s.split_index}", f"split {s.split_index}: {s.backend}", s.backend,
                 tuple(n.key for n in nodes if n.split == s.split_index))
        for s in splits
    )
    used = sorted({n.buffer_id for n in nodes if n.buffer_id >= 0})
    buffers = tuple(
        BufferKey(b, idx.buffers[b].backend, idx.buffers[b].buft, idx.buffers[b].nbytes, idx.buffers[b].usage,
                  b in idx.freed_buffers)
        if b in idx.buffers else BufferKey(b, "?", "?", 0, "?", False)
        for b in used
    )
    notes = []
    n_stale = sum(1 for n in nodes if n.stale)
    if n_stale:
        notes.append(f"{n_stale} stale tensor(s)")
    if highlights:
        notes.append(f"{len(highlights)} finding(s)")
    return GraphModel(sel.title, sel, tuple(nodes), tuple(edges), clusters, buffers, tuple(notes))


def _name(idx: TraceIndex, tid: TensorId) -> str:
    info = idx.tensors.get(tid)
    return info.name if info is not None and info.name else f"#{tid}"


def _node(idx: TraceIndex, tid: TensorId, role: NodeRole, stale: str, hazards: tuple[str, ...],
          split: int) -> GNode:
    info = idx.tensors.get(tid)
    p = idx.placements.get(tid)
    buf = idx.buffers.get(p.buffer_id) if p is not None else None
    name = info.name if info is not None else ""
    return GNode(
        key=tensor_key(tid), tensor_id=tid, name=name or f"#{tid}",
        op=info.op if info is not None else "?", dtype=info.dtype if info is not None else "?",
        shape=_shape(info.ne) if info is not None else (), role=role,
        buffer_id=p.buffer_id if p is not None else -1,
        backend=buf.backend if buf is not None else "",
        offset=p.offset if p is not None else -1, nbytes=p.nbytes if p is not None else 0,
        placed_by=p.by.value if p is not None else "", placed_binding=p.binding_id if p is not None else -1,
        flags=info.flags if info is not None else 0, stale=stale, hazards=hazards, split=split,
    )


def _shape(ne: tuple[int, ...]) -> tuple[int, ...]:
    dims = list(ne)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return tuple(dims)


def _stale_reasons(idx: TraceIndex, sel: Selection, roles: dict[TensorId, NodeRole]) -> dict[TensorId, str]:
    """Tensors of the drawn graph whose bytes were handed out by an earlier plan, or freed."""
    out: dict[TensorId, str] = {}
    for tid in roles:
        p = idx.placements.get(tid)
        if p is None:
            continue
        if p.buffer_id in idx.freed_buffers:
            out[tid] = f"dangling: buffer #{p.buffer_id} was freed"
            continue
        if sel.binding_id < 0 or p.binding_id < 0 or p.binding_id == sel.binding_id:
            continue
        earlier = idx.bindings.get(p.binding_id)
        if earlier is None or earlier.galloc_id != sel.galloc_id or earlier.plan_id == sel.plan_id:
            continue
        out[tid] = (f"placed by binding #{p.binding_id} (plan #{earlier.plan_id}); "
                    f"plan #{sel.plan_id} skipped it as external")
    return out
