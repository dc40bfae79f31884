"""Choosing what a diagram shows: one graph at one moment of a trace.

A graph is drawn *as bound*: right after a binding (``--binding N``), or after the
latest binding of a graph (``--graph N``; for a graph the scheduler allocated, the
scheduler's own graph with its copies), or at the end of the trace when it was never
bound. Without either, the first binding with findings is chosen, else the most
informative one (:func:`most_informative`: the most scheduler splits, then the most
bytes placed, then the most nodes; the latest of equals). ``Selection.reason`` says
which rule chose it, for the picture and the command line to say.

    >>> from vizalloc.analysis.model import build_model
    >>> from vizalloc.export.selection import select
    >>> select(build_model(events), binding_id=3).title        # doctest: +SKIP
    'graph #2 binding #3, plan #2'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.placed import analysed_bindings, plan_buffers, sizing_reserve
from vizalloc.analysis.records import NEVER, BindingInfo
from vizalloc.errors import UsageError


@dataclass(frozen=True)
class Selection:
    """One graph as it stood at one moment."""

    graph_id: int          # the graph whose nodes are drawn (the scheduler's graph when it bound one)
    user_graph_id: int     # the program's graph (``TraceModel.program_graph``; graph_id without a scheduler)
    graph_name: str        # how every report names the drawn graph (``TraceModel.graph_name``)
    binding_id: int        # -1: never bound
    plan_id: int
    galloc_id: int
    cut_seq: int           # the state right after this event is drawn
    reason: str = ""       # why this one was drawn ("the first binding with a finding", ...)
    choices: int = 0       # bindings in the trace

    @property
    def note(self) -> str:
        """"drawn: <reason>" for the picture, when the trace had something else to draw."""
        return f"drawn: {self.reason}" if self.reason and self.choices > 1 else ""

    @property
    def planned(self) -> bool:
        """Drawn at a plan's offsets: the graph was planned (a worst-case reserve) but never bound."""
        return self.binding_id < 0 and self.plan_id >= 0

    @property
    def title(self) -> str:
        parts = [self.graph_name]
        if self.binding_id >= 0:
            parts.append(f"binding #{self.binding_id}, plan #{self.plan_id}")
        elif self.planned:
            parts.append(f"plan #{self.plan_id} (never bound: the offsets as planned)")
        else:
            parts.append("(not bound)")
        return " ".join(parts)


def last_seq(model: TraceModel) -> int:
    return model.last_seq


def _sched_graph(model: TraceModel, graph_id: int) -> int:
    found = graph_id
    for s in model.scheds.values():
        for a in s.allocs:
            if a.graph_id == graph_id:
                found = a.sched_graph_id
    return found


def _binding_selection(model: TraceModel, binding_id: int, reason: str = "") -> Selection:
    b = model.bindings[binding_id]
    cut = b.end_seq if b.end_seq != NEVER else last_seq(model)
    return Selection(b.graph_id, model.program_graph(b.graph_id), model.graph_name(b.graph_id), b.binding_id,
                     b.plan_id, b.galloc_id, cut, reason, len(model.bindings))


def _plan_selection(model: TraceModel, plan_id: int, reason: str) -> Selection:
    plan = model.plans[plan_id]
    cut = plan_buffers(model, plan_id)[1]
    return Selection(plan.graph_id, model.program_graph(plan.graph_id), model.graph_name(plan.graph_id), -1, plan_id,
                     plan.galloc_id, cut, reason, len(model.bindings) + len(model.plans))


def n_splits(model: TraceModel, binding: BindingInfo) -> int:
    """How many splits the scheduler cut the binding's graph into (0 without a scheduler):
    the last run of ``SchedSplit`` events (split 0, 1, ...) of its graph before the binding."""
    sched = model.scheds.get(binding.sched_id)
    if sched is None:
        return 0
    user = model.program_graph(binding.graph_id)
    count = 0
    for split in sched.splits:
        if split.seq >= binding.begin_seq:
            break
        if split.graph_id == user:
            count = 1 if split.split_index == 0 else count + 1
    return count


def most_informative(model: TraceModel) -> int:
    """The binding a picture shows best when no finding points at one: the most scheduler
    splits (a graph spread over several backends, with its copies), then the most bytes
    placed, then the most nodes; the latest of equals."""
    def score(b: BindingInfo) -> tuple[int, int, int, int]:
        placed = sum(model.placements[i].nbytes for i in b.placements if 0 <= i < len(model.placements))
        nodes = b.graph.n_nodes if b.graph is not None else 0
        return (n_splits(model, b), placed, nodes, b.binding_id)

    return max(model.bindings.values(), key=score).binding_id


def select(model: TraceModel, *, graph_id: int | None = None, binding_id: int | None = None,
           plan_id: int | None = None, prefer: Iterable[int] = (), worst_case: bool = False) -> Selection:
    """Pick the graph and moment to draw.

    Args:
        model: the trace model.
        graph_id: a graph (user or scheduler graph); its latest binding is used, or, for a
            graph planned but never bound (a worst-case reserve), its latest plan's offsets.
        binding_id: one binding; the state right after it (wins over ``graph_id``).
        plan_id: one plan, drawn on the graph it was made for at its offsets (wins over both).
        prefer: bindings to choose when no id is given (those with findings), first wins.
        worst_case: with no id and no preferred binding, draw the worst-case reserve that set
            the size of the largest compute buffer (:func:`~vizalloc.analysis.placed.sizing_reserve`:
            what a llama.cpp context plans when it is created) when there is one.

    Raises:
        UsageError: the binding, plan or graph is not in the trace, or the trace has no graph.
    """
    if plan_id is not None:
        plan = model.plans.get(plan_id)
        if plan is None or plan.graph is None:
            known = ", ".join(str(k) for k, p in sorted(model.plans.items()) if p.graph is not None) or "none"
            raise UsageError(f"plan #{plan_id} is not in the trace (plans: {known}); see `vizalloc summary TRACE`")
        return _plan_selection(model, plan_id, f"plan #{plan_id} as asked")
    if binding_id is not None:
        if binding_id not in model.bindings:
            known = ", ".join(str(k) for k in sorted(model.bindings)) or "none"
            raise UsageError(f"binding #{binding_id} is not in the trace (bindings: {known}); "
                             "see `vizalloc summary TRACE`")
        return _binding_selection(model, binding_id, f"binding #{binding_id} as asked")
    if graph_id is not None:
        if graph_id not in model.graphs:
            known = ", ".join(str(k) for k in sorted(model.graphs)) or "none"
            raise UsageError(f"graph #{graph_id} is not in the trace (graphs: {known}); "
                             "see `vizalloc summary TRACE`")
        target = _sched_graph(model, graph_id)
        bound = [b for b in model.bindings.values() if b.graph_id == target]
        if bound:
            return _binding_selection(model, max(b.binding_id for b in bound),
                                      f"the latest binding of {model.graph_name(graph_id)}")
        planned = [p.plan_id for p in model.plans.values() if p.graph_id in (graph_id, target) and p.graph is not None]
        if planned:
            pid = max(planned, key=lambda k: model.plans[k].begin_seq)
            return _plan_selection(model, pid, f"{model.graph_name(graph_id)} as asked: never bound, drawn at the offsets "
                                               f"of its plan #{pid}")
        return Selection(graph_id, model.program_graph(graph_id), model.graph_name(graph_id), -1, -1, -1,
                         last_seq(model), f"{model.graph_name(graph_id)} as asked (never bound)", len(model.bindings))
    for bid in prefer:
        if bid in model.bindings:
            return _binding_selection(model, bid, "the first binding with a finding")
    reserve = sizing_reserve(model) if worst_case else None
    if reserve is not None:
        pid, size = reserve
        users = sorted(b.binding_id for b in analysed_bindings(model).values() if b.plan_id == pid)
        reuse = (f"; binding{'s' if len(users) > 1 else ''} {', '.join('#' + str(u) for u in users[:3])}"
                 f"{', ...' if len(users) > 3 else ''} reuse{'' if len(users) > 1 else 's'} its offsets" if users else "")
        return _plan_selection(model, pid, f"no finding; the worst-case reserve that set the compute buffer's "
                                           f"size ({size:,} B){reuse}")
    if len(model.bindings) == 1:
        return _binding_selection(model, next(iter(model.bindings)), "the only binding")
    if model.bindings:
        best = most_informative(model)
        splits = n_splits(model, model.bindings[best])
        why = (f"no finding; the binding with the most scheduler splits ({splits})" if splits > 1
               else "no finding; the binding that placed the most bytes")
        return _binding_selection(model, best, why)
    graphs = [g for g in model.graphs.values() if g.nodes or g.leafs]
    if not graphs:
        raise UsageError("the trace holds no graph to draw (no GraphExpanded event); trace a run that builds one")
    g = max(graphs, key=lambda x: (len(x.nodes), x.graph_id))
    return Selection(g.graph_id, model.program_graph(g.graph_id), model.graph_name(g.graph_id), -1, -1, -1,
                     last_seq(model), "no binding; the largest graph")
