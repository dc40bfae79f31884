"""What the exporters need to know about a trace at one moment, in one pass over its events.

The graph diagram shows a graph *as bound*: which tensors it holds, which bytes each
one had right after the binding, which plan did it, how the scheduler split it. This
module replays the events up to a cut (a sequence number) and keeps exactly that:
tensor records (with later renames, flag and source rewrites applied), graphs,
buffers, the current placement of every tensor, bindings, plans, scheduler splits
and copies. It is the "collect" half of the exporters; it reads events only.

    >>> from vizalloc.export.trace_index import index_events
    >>> index_events([]).tensors
    {}
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from vizalloc.errors import UsageError
from vizalloc.trace import events as ev

TensorId = int


@dataclass
class TensorInfo:
    """A tensor as of the cut: its creation record with later renames and rewrites applied."""

    tensor_id: TensorId
    name: str
    dtype: str
    ne: tuple[int, ...]
    op: str
    srcs: list[int]
    view_src: int
    view_offs: int
    flags: int
    copy_of: int
    created_seq: int


@dataclass
class GraphInfo:
    graph_id: int
    kind: str
    source_graph: int
    nodes: list[TensorId] = field(default_factory=list)
    leafs: list[TensorId] = field(default_factory=list)


@dataclass
class BindingInfo:
    binding_id: int
    galloc_id: int
    plan_id: int
    graph_id: int
    begin_seq: int
    end_seq: int = -1
    ok: bool = True


@dataclass
class PlanInfo:
    plan_id: int
    galloc_id: int
    graph_id: int
    begin_seq: int
    inplace: dict[TensorId, TensorId] = field(default_factory=dict)  # child -> parent
    externals: set[TensorId] = field(default_factory=set)


@dataclass
class SplitInfo:
    split_index: int
    backend: str
    nodes: tuple[TensorId, ...]
    inputs: tuple[TensorId, ...]
    copies: list[ev.SchedCopy] = field(default_factory=list)


@dataclass
class TraceIndex:
    """The state of a trace at ``cut_seq`` (every event with ``seq <= cut_seq`` applied)."""

    cut_seq: int
    tensors: dict[TensorId, TensorInfo] = field(default_factory=dict)
    graphs: dict[int, GraphInfo] = field(default_factory=dict)
    buffers: dict[int, ev.BufferAllocated] = field(default_factory=dict)
    freed_buffers: set[int] = field(default_factory=set)
    placements: dict[TensorId, ev.TensorPlaced] = field(default_factory=dict)
    bindings: dict[int, BindingInfo] = field(default_factory=dict)
    plans: dict[int, PlanInfo] = field(default_factory=dict)
    #: graph id -> its splits from the latest split pass (user graph and scheduler graph ids both).
    splits: dict[int, list[SplitInfo]] = field(default_factory=dict)
    #: user graph id -> the scheduler graph that was bound for it (latest).
    sched_graph_of: dict[int, int] = field(default_factory=dict)


def index_events(events: Iterable[ev.Event], cut_seq: int | None = None) -> TraceIndex:
    """Replay ``events`` up to and including ``cut_seq`` (all of them when None)."""
    idx = TraceIndex(cut_seq=-1 if cut_seq is None else cut_seq)
    # (sched_id, split_index) -> the split of the latest pass, for the copies that follow it
    open_splits: dict[tuple[int, int], SplitInfo] = {}
    last_seq = -1
    for e in events:
        if cut_seq is not None and e.seq > cut_seq:
            break
        last_seq = e.seq
        if isinstance(e, ev.TensorCreated):
            idx.tensors[e.tensor_id] = TensorInfo(
                e.tensor_id, e.name, e.dtype, tuple(e.ne), e.op, list(e.srcs), e.view_src, e.view_offs,
                e.flags, e.copy_of, e.seq,
            )
        elif isinstance(e, ev.TensorPlaced):
            idx.placements[e.tensor_id] = e
        elif isinstance(e, ev.TensorCleared):
            idx.placements.pop(e.tensor_id, None)
        elif isinstance(e, ev.TensorNamed):
            t = idx.tensors.get(e.tensor_id)
            if t is not None:
                t.name = e.name
        elif isinstance(e, ev.TensorFlagsSet):
            t = idx.tensors.get(e.tensor_id)
            if t is not None:
                t.flags = e.flags
        elif isinstance(e, ev.TensorSrcSet):
            t = idx.tensors.get(e.tensor_id)
            if t is not None:
                while len(t.srcs) <= e.slot:
                    t.srcs.append(-1)
                t.srcs[e.slot] = e.src_id
        elif isinstance(e, ev.BufferAllocated):
            idx.buffers[e.buffer_id] = e
            idx.freed_buffers.discard(e.buffer_id)
        elif isinstance(e, ev.BufferFreed):
            idx.freed_buffers.add(e.buffer_id)
        elif isinstance(e, ev.GraphCreated):
            idx.graphs[e.graph_id] = GraphInfo(e.graph_id, e.kind, e.source_graph)
        elif isinstance(e, ev.GraphExpanded):
            g = idx.graphs.setdefault(e.graph_id, GraphInfo(e.graph_id, "new", -1))
            g.nodes.extend(e.nodes)
            g.leafs.extend(e.leafs)
        elif isinstance(e, ev.PlanBegin):
            idx.plans[e.plan_id] = PlanInfo(e.plan_id, e.galloc_id, e.graph_id, e.seq)
        elif isinstance(e, ev.PlanInplace):
            p = idx.plans.get(e.plan_id)
            if p is not None:
                p.inplace[e.tensor_id] = e.parent_id
        elif isinstance(e, ev.PlanExternal):
            p = idx.plans.get(e.plan_id)
            if p is not None:
                p.externals.add(e.tensor_id)
        elif isinstance(e, ev.BindingBegin):
            idx.bindings[e.binding_id] = BindingInfo(e.binding_id, e.galloc_id, e.plan_id, e.graph_id, e.seq)
        elif isinstance(e, ev.BindingEnd):
            b = idx.bindings.get(e.binding_id)
            if b is not None:
                b.end_seq = e.seq
                b.ok = e.ok
        elif isinstance(e, ev.SchedSplit):
            split = SplitInfo(e.split_index, e.backend, tuple(e.nodes), tuple(e.inputs))
            lst = idx.splits.setdefault(e.graph_id, [])
            if e.split_index == 0:
                lst.clear()  # a new split pass replaces the previous one
            lst.append(split)
            open_splits[(e.sched_id, e.split_index)] = split
        elif isinstance(e, ev.SchedCopy):
            split = open_splits.get((e.sched_id, e.split_index))
            if split is not None:
                split.copies.append(e)
        elif isinstance(e, ev.SchedAlloc):
            idx.sched_graph_of[e.graph_id] = e.sched_graph_id
            if e.graph_id in idx.splits:
                idx.splits[e.sched_graph_id] = idx.splits[e.graph_id]
    if cut_seq is None:
        idx.cut_seq = last_seq
    return idx


# -- choosing what to draw ------------------------------------------------------

@dataclass(frozen=True)
class Selection:
    """One graph as it stood at one moment: after a binding, or at the end of the trace."""

    graph_id: int          # the graph whose nodes are drawn (the scheduler's graph when it bound one)
    user_graph_id: int     # the graph the user asked for (same as graph_id without a scheduler)
    binding_id: int        # -1: the graph was never bound
    plan_id: int
    galloc_id: int
    cut_seq: int

    @property
    def title(self) -> str:
        parts = [f"graph #{self.user_graph_id}"]
        if self.graph_id != self.user_graph_id:
            parts.append(f"(scheduler graph #{self.graph_id})")
        if self.binding_id >= 0:
            parts.append(f"binding #{self.binding_id}, plan #{self.plan_id}")
        else:
            parts.append("(not bound)")
        return " ".join(parts)


def select(events: Sequence[ev.Event], *, graph_id: int | None = None, binding_id: int | None = None,
           prefer: Iterable[int] = ()) -> Selection:
    """Pick the graph and moment to draw.

    Args:
        events: the trace.
        graph_id: a graph (user or scheduler graph); its latest binding is used.
        binding_id: one binding; the state right after it.
        prefer: binding ids to choose by default (those with hazards), first wins.

    Raises:
        UsageError: the binding or graph is not in the trace, or the trace has no graph.
    """
    full = index_events(events)
    end = full.cut_seq
    if binding_id is not None:
        b = full.bindings.get(binding_id)
        if b is None:
            known = ", ".join(str(k) for k in sorted(full.bindings)) or "none"
            raise UsageError(f"binding #{binding_id} is not in the trace (bindings: {known})")
        user = next((u for u, s in full.sched_graph_of.items() if s == b.graph_id), b.graph_id)
        return Selection(b.graph_id, user, b.binding_id, b.plan_id, b.galloc_id, _end_of(b, end))
    if graph_id is not None:
        if graph_id not in full.graphs:
            known = ", ".join(str(k) for k in sorted(full.graphs)) or "none"
            raise UsageError(f"graph #{graph_id} is not in the trace (graphs: {known})")
        target = full.sched_graph_of.get(graph_id, graph_id)
        bound = [b for b in full.bindings.values() if b.graph_id == target]
        if bound:
            b = max(bound, key=lambda x: x.binding_id)
            return Selection(target, graph_id, b.binding_id, b.plan_id, b.galloc_id, _end_of(b, end))
        return Selection(graph_id, graph_id, -1, -1, -1, end)
    for pid in prefer:
        if pid in full.bindings:
            return select(events, binding_id=pid)
    if full.bindings:
        return select(events, binding_id=max(full.bindings))
    graphs = [g for g in full.graphs.values() if g.nodes or g.leafs]
    if not graphs:
        raise UsageError("the trace holds no graph to draw (no GraphExpanded event); trace a run that builds one")
    g = max(graphs, key=lambda x: (len(x.nodes), x.graph_id))
    return Selection(g.graph_id, g.graph_id, -1, -1, -1, end)


def _end_of(b: BindingInfo, end: int) -> int:
    return b.end_seq if b.end_seq >= 0 else end
