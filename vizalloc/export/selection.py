"""Choosing what a diagram shows: one graph at one moment of a trace.

A graph is drawn *as bound*: right after a binding (``--binding N``), or after the
latest binding of a graph (``--graph N``; for a graph the scheduler allocated, the
scheduler's own graph with its copies), or at the end of the trace when it was never
bound. Without either, the first binding with findings is chosen, else the last one.

    >>> from vizalloc.analysis.model import build_model
    >>> from vizalloc.export.selection import select
    >>> select(build_model(events), binding_id=3).title        # doctest: +SKIP
    'graph #2 binding #3, plan #2'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.records import NEVER
from vizalloc.errors import UsageError


@dataclass(frozen=True)
class Selection:
    """One graph as it stood at one moment."""

    graph_id: int          # the graph whose nodes are drawn (the scheduler's graph when it bound one)
    user_graph_id: int     # the graph asked for (same as graph_id without a scheduler)
    binding_id: int        # -1: never bound
    plan_id: int
    galloc_id: int
    cut_seq: int           # the state right after this event is drawn

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


def last_seq(model: TraceModel) -> int:
    return model.events[-1].seq if model.events else 0


def _user_graph(model: TraceModel, graph_id: int) -> int:
    for s in model.scheds.values():
        for a in s.allocs:
            if a.sched_graph_id == graph_id:
                return a.graph_id
    return graph_id


def _sched_graph(model: TraceModel, graph_id: int) -> int:
    found = graph_id
    for s in model.scheds.values():
        for a in s.allocs:
            if a.graph_id == graph_id:
                found = a.sched_graph_id
    return found


def _binding_selection(model: TraceModel, binding_id: int) -> Selection:
    b = model.bindings[binding_id]
    cut = b.end_seq if b.end_seq != NEVER else last_seq(model)
    return Selection(b.graph_id, _user_graph(model, b.graph_id), b.binding_id, b.plan_id, b.galloc_id, cut)


def select(model: TraceModel, *, graph_id: int | None = None, binding_id: int | None = None,
           prefer: Iterable[int] = ()) -> Selection:
    """Pick the graph and moment to draw.

    Args:
        model: the trace model.
        graph_id: a graph (user or scheduler graph); its latest binding is used.
        binding_id: one binding; the state right after it (wins over ``graph_id``).
        prefer: bindings to choose when neither id is given (those with findings), first wins.

    Raises:
        UsageError: the binding or graph is not in the trace, or the trace has no graph.
    """
    if binding_id is not None:
        if binding_id not in model.bindings:
            known = ", ".join(str(k) for k in sorted(model.bindings)) or "none"
            raise UsageError(f"binding #{binding_id} is not in the trace (bindings: {known}); "
                             "see `vizalloc summary TRACE`")
        return _binding_selection(model, binding_id)
    if graph_id is not None:
        if graph_id not in model.graphs:
            known = ", ".join(str(k) for k in sorted(model.graphs)) or "none"
            raise UsageError(f"graph #{graph_id} is not in the trace (graphs: {known}); "
                             "see `vizalloc summary TRACE`")
        target = _sched_graph(model, graph_id)
        bound = [b for b in model.bindings.values() if b.graph_id == target]
        if bound:
            sel = _binding_selection(model, max(b.binding_id for b in bound))
            return Selection(sel.graph_id, graph_id, sel.binding_id, sel.plan_id, sel.galloc_id, sel.cut_seq)
        return Selection(graph_id, graph_id, -1, -1, -1, last_seq(model))
    for bid in prefer:
        if bid in model.bindings:
            return _binding_selection(model, bid)
    if model.bindings:
        return _binding_selection(model, max(model.bindings))
    graphs = [g for g in model.graphs.values() if g.nodes or g.leafs]
    if not graphs:
        raise UsageError("the trace holds no graph to draw (no GraphExpanded event); trace a run that builds one")
    g = max(graphs, key=lambda x: (len(x.nodes), x.graph_id))
    return Selection(g.graph_id, g.graph_id, -1, -1, -1, last_seq(model))
