"""The graph diagram as data: nodes, edges, clusters and a legend, before any DOT text.

:func:`build_graph_model` collects one graph as it stood right after a binding (or at
the end of the trace when it was never bound): one node per tensor with its name, op,
shape, type, buffer and byte range; data, view, in-place and copy edges; scheduler
splits as clusters holding their copy nodes; stale tensors and hazard pairs marked
with their reason. Big graphs are then made readable by :mod:`vizalloc.export.graph_fold`.
:mod:`vizalloc.export.dot` turns the model into text.

    >>> from vizalloc.export.graph_model import build_graph_model
    >>> model = build_graph_model(build_model(events))   # doctest: +SKIP
    >>> [n.name for n in model.nodes]               # doctest: +SKIP
    ['a', 'b', 'c']

Facts come from the analysis model (``vizalloc.analysis.model``). A tensor is marked
stale when, right after the binding, its placement is dangling (freed buffer), or is
stale in the model's sense (its allocator re-planned or was reset) *and* the binding's
plan skipped it as external: a stale tensor whose bytes the plan still assigns to it
(same plan re-bound after a reset) is not flagged, since nothing else is put there.
Hazard *pairs* come from ``vizalloc.analysis.hazards`` through :class:`Highlight`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.placed import plan_placements
from vizalloc.analysis.records import Placement, PlacementState
from vizalloc.export.findings import Highlight
from vizalloc.export.selection import Selection, select
from vizalloc.export.units import trimmed_shape
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


def build_graph_model(model: TraceModel, *, graph_id: int | None = None, binding_id: int | None = None,
                      highlights: Sequence[Highlight] = (), prefer_bindings: Sequence[int] = ()) -> GraphModel:
    """Collect the diagram of one graph (see the module docstring).

    Args:
        model: the analysis model of the trace.
        graph_id: the graph to draw (its latest binding).
        binding_id: the binding to draw (wins over ``graph_id``).
        highlights: findings from the analysis to mark (hazard pairs).
        prefer_bindings: bindings to choose when neither id is given (those with findings).

    Raises:
        UsageError: the graph or binding is not in the trace.
    """
    sel = select(model, graph_id=graph_id, binding_id=binding_id, prefer=prefer_bindings)
    cut = sel.cut_seq
    # findings of another binding do not belong on this one; re-plans name no tensor
    highlights = [h for h in highlights if h.tensor_id >= 0
                  and (h.binding_id < 0 or sel.binding_id < 0 or h.binding_id == sel.binding_id)]
    binding = model.bindings.get(sel.binding_id)
    snap = binding.graph if binding is not None and binding.graph is not None else model.graphs[sel.graph_id].snapshot()
    plan = model.plans.get(sel.plan_id)

    # 1. the tensors to draw: leafs, nodes, split copies, then whatever they reference
    roles: dict[TensorId, NodeRole] = {}
    for t in snap.leafs:
        roles.setdefault(t, NodeRole.LEAF)
    for t in snap.nodes:
        roles.setdefault(t, NodeRole.NODE)
    splits = _splits_at(model, {sel.graph_id, sel.user_graph_id}, cut)
    split_of: dict[TensorId, int] = {}
    for split, copies in splits:
        for t in split.nodes:
            split_of.setdefault(t, split.split_index)
        for c in copies:
            split_of[c.copy_id] = split.split_index
            roles[c.copy_id] = NodeRole.COPY
    srcs_of = {tid: _srcs_at(model, tid, cut) for tid in roles}
    for tid in list(roles):
        info = model.tensors.get(tid)
        for ref in [*srcs_of[tid], info.view_src if info is not None else -1]:
            if ref >= 0 and ref not in roles:
                roles[ref] = NodeRole.EXTRA
                srcs_of[ref] = _srcs_at(model, ref, cut)

    # 2. findings per tensor: stale (model + plan) and hazards (from the analysis)
    externals = {d.tensor_id for d in plan.externals} if plan is not None else set()
    lines_of: dict[TensorId, list[str]] = {}
    for h in highlights:
        for tid, other in ((h.tensor_id, h.other_id), (h.other_id, h.tensor_id)):
            if tid in roles:
                with_other = f" with {model.label(other)}" if other >= 0 else ""
                lines_of.setdefault(tid, []).append(f"{h.kind}{with_other}: {h.reason}")

    # 3. nodes
    # a graph planned and never bound: its tensors at the plan's offsets (views at their root's)
    planned = plan_placements(model, sel.plan_id) if sel.planned else {}
    nodes = [_node(model, tid, role, cut, tid in externals or plan is None, tuple(lines_of.get(tid, ())),
                   split_of.get(tid, -1), planned)
             for tid, role in roles.items()]

    # 4. edges: data, view (merged with the source slot that is the view root), in-place, copy, hazard
    edges: list[GEdge] = []
    inplace = {d.tensor_id: d.parent_id for d in plan.inplace} if plan is not None else {}
    seen: set[tuple[str, str, EdgeKind]] = set()

    def add(src: TensorId, dst: TensorId, kind: EdgeKind, label: str = "") -> None:
        key = (tensor_key(src), tensor_key(dst), kind)
        if key not in seen and src in roles and dst in roles:
            seen.add(key)
            edges.append(GEdge(key[0], key[1], kind, label))

    for tid in roles:
        info = model.tensors.get(tid)
        if info is None:
            continue
        srcs = srcs_of[tid]
        parent = inplace.get(tid, -1)
        view_label = f"view +{info.view_offs}" if info.view_offs else "view"
        for slot, s in enumerate(srcs):
            if s < 0:
                continue
            if s == info.view_src:
                add(s, tid, EdgeKind.VIEW, view_label)
            elif s == parent:
                add(s, tid, EdgeKind.INPLACE, "in-place")
            else:
                add(s, tid, EdgeKind.DATA, f"src{slot}" if slot else "")
        if info.view_src >= 0 and info.view_src not in srcs:
            add(info.view_src, tid, EdgeKind.VIEW, view_label)
        if parent >= 0 and parent not in srcs:
            add(parent, tid, EdgeKind.INPLACE, "in-place")
    for split, copies in splits:
        for c in copies:
            add(c.src_id, c.copy_id, EdgeKind.COPY, f"copy to {split.backend}")
    for h in highlights:
        if h.other_id >= 0:
            add(h.other_id, h.tensor_id, EdgeKind.HAZARD, h.kind)

    # 5. clusters (scheduler splits) and the legend's buffers
    clusters = tuple(
        GCluster(f"cluster_split{split.split_index}", f"split {split.split_index}: {split.backend}", split.backend,
                 tuple(n.key for n in nodes if n.split == split.split_index))
        for split, _ in splits
    )
    buffers = []
    for b in sorted({n.buffer_id for n in nodes if n.buffer_id >= 0}):
        info_b = model.buffers.get(b)
        if info_b is None:
            buffers.append(BufferKey(b, "?", "?", 0, "?", False))
        else:
            buffers.append(BufferKey(b, info_b.backend, info_b.buft, info_b.nbytes, info_b.usage,
                                     info_b.freed_seq <= cut))
    notes = [sel.note] if sel.note else []
    n_stale = sum(1 for n in nodes if n.stale)
    if n_stale:
        notes.append(f"{n_stale} stale tensor(s)")
    shown = [h for h in highlights if h.tensor_id in roles]
    if shown:
        notes.append(f"{len(shown)} finding(s)")
    return GraphModel(sel.title, sel, tuple(nodes), tuple(edges), clusters, tuple(buffers), tuple(notes))


def _srcs_at(model: TraceModel, tid: TensorId, cut: int) -> list[int]:
    """A tensor's source slots as they were at ``cut`` (the scheduler rewrites them later)."""
    info = model.tensors.get(tid)
    if info is None:
        return []
    srcs: list[int] | None = None
    for idx in info.history:
        e = model.events[idx]
        if e.seq > cut:
            break
        if isinstance(e, ev.TensorCreated) and e.tensor_id == tid:
            srcs = list(e.srcs)
        elif isinstance(e, ev.TensorSrcSet) and e.tensor_id == tid:
            srcs = srcs if srcs is not None else list(info.srcs)
            while len(srcs) <= e.slot:
                srcs.append(-1)
            srcs[e.slot] = e.src_id
    return srcs if srcs is not None else list(info.srcs)


def _splits_at(model: TraceModel, graph_ids: set[int], cut: int) -> list[tuple[ev.SchedSplit, list[ev.SchedCopy]]]:
    """The latest split pass of one of ``graph_ids`` up to ``cut``, each split with its copies."""
    best: tuple[int, int] | None = None  # (seq of split 0, sched id)
    for s in model.scheds.values():
        for sp in s.splits:
            if sp.seq <= cut and sp.split_index == 0 and sp.graph_id in graph_ids:
                if best is None or sp.seq > best[0]:
                    best = (sp.seq, s.sched_id)
    if best is None:
        return []
    start, sched_id = best
    sched = model.scheds[sched_id]
    # a pass emits its copies first (while splitting), then its splits, then SchedAlloc
    before = [sp.seq for sp in sched.splits if sp.seq < start] + [a.seq for a in sched.allocs if a.seq < start] \
        + [r for r in sched.resets if r < start]
    copies_from = max(before, default=-1)
    later = [sp.seq for sp in sched.splits if sp.split_index == 0 and sp.seq > start]
    end = min([cut + 1, *later])
    out: list[tuple[ev.SchedSplit, list[ev.SchedCopy]]] = []
    by_index: dict[int, list[ev.SchedCopy]] = {}
    for sp in sched.splits:
        if start <= sp.seq < end:
            copies: list[ev.SchedCopy] = []
            by_index[sp.split_index] = copies
            out.append((sp, copies))
    for c in sched.copies:
        if copies_from < c.seq < end and c.split_index in by_index:
            by_index[c.split_index].append(c)
    return out


def _node(model: TraceModel, tid: TensorId, role: NodeRole, cut: int, skipped: bool, hazards: tuple[str, ...],
          split: int, planned: Mapping[TensorId, Placement] | None = None) -> GNode:
    info = model.tensors.get(tid)
    p = model.placement_at(tid, cut)
    if p is None and planned:
        p = planned.get(tid)
        root = planned.get(info.view_src) if p is None and info is not None and info.view_src >= 0 else None
        if root is not None and info is not None:
            p = replace(root, tensor_id=tid, offset=root.offset + info.view_offs, nbytes=info.nbytes)
    buf = model.buffers.get(p.buffer_id) if p is not None else None
    stale = ""
    if p is not None:
        state = model.placement_state(p, cut)
        origin = f"binding #{p.binding_id}" if p.binding_id >= 0 else ev.enum_text(p.by)
        if state is PlacementState.DANGLING:
            stale = f"dangling: buffer #{p.buffer_id} freed (placed by {origin})"
        elif state is PlacementState.STALE and skipped:
            stale = f"from {origin} ({p.stale_reason or 'stale'}), skipped as external"
    return GNode(
        key=tensor_key(tid), tensor_id=tid, name=info.label if info is not None else f"#{tid}",
        op=info.op if info is not None else "?", dtype=info.dtype if info is not None else "?",
        shape=trimmed_shape(info.ne) if info is not None else (), role=role,
        buffer_id=p.buffer_id if p is not None else -1,
        backend=buf.backend if buf is not None else "",
        offset=p.offset if p is not None else -1, nbytes=p.nbytes if p is not None else 0,
        placed_by=ev.enum_text(p.by) if p is not None else "", placed_binding=p.binding_id if p is not None else -1,
        flags=info.flags if info is not None else 0, stale=stale, hazards=hazards, split=split,
    )
