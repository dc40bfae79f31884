"""The timeline: plans, re-plans, bindings, resets and computes, found by a cheap pre-scan.

The pre-scan reads events once, in batches, as they come off the file, and keeps only
the steps. It needs no model, so the timeline can be shown while the full analysis of
a big trace is still running; hazard counts are filled in later (:func:`count_hazards`).

    >>> from vizalloc.trace import events as ev
    >>> scan = Prescan()
    >>> scan.feed([ev.SchedReset(1, 0, None, 0), ev.ComputeBegin(2, 0, None, 0, 3, "CPU", 5)])
    2
    >>> [(s.kind.value, s.graph_id, s.n_nodes) for s in scan.steps]
    [('reset', -1, 0), ('compute', 3, 5)]
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vizalloc.trace import events as ev


class StepKind(str, enum.Enum):
    """What happened at one step of the timeline."""

    REPLAN = "re-plan"
    PLAN = "plan"
    BINDING = "binding"
    RESET = "reset"
    COMPUTE = "compute"


@dataclass(slots=True)
class Step:
    """One row of the timeline. ``step_id`` is the plan, binding, scheduler or compute id.

    ``binding_id`` is the binding this step is drawn with in the memory map: its own,
    the one that applies its plan, or the latest one before it (-1: none yet).
    """

    seq: int
    kind: StepKind
    step_id: int
    graph_id: int = -1
    n_nodes: int = 0
    galloc_id: int = -1
    plan_id: int = -1
    binding_id: int = -1
    chunk_sizes: tuple[tuple[int, ...], ...] = ()
    detail: str = ""
    wall_ns: int = 0
    n_hazards: int = 0
    loc: ev.Location | None = None

    @property
    def buffer_bytes(self) -> int:
        return sum(sum(c) for c in self.chunk_sizes)


@dataclass
class Prescan:
    """Steps of a trace, built batch by batch with :meth:`feed`."""

    steps: list[Step] = field(default_factory=list)
    n_events: int = 0
    graph_nodes: dict[int, int] = field(default_factory=dict)
    _plans: dict[int, Step] = field(default_factory=dict)
    _computes: dict[int, Step] = field(default_factory=dict)
    _plan_sizes: dict[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    _last_binding: int = -1
    _waiting_plans: dict[int, list[Step]] = field(default_factory=dict)

    def feed(self, events: Sequence[Any]) -> int:
        """Scan a batch of events (in order); returns the number of steps found so far."""
        steps = self.steps
        graph_nodes = self.graph_nodes
        # exact class tests: the common kinds (NodeCompute, PlanAlloc ...) fall through fast
        t_plan, t_end, t_bind, t_reset, t_cb, t_ce, t_replan, t_gx, t_gc, t_gclear = (
            ev.PlanBegin, ev.PlanEnd, ev.BindingBegin, ev.SchedReset, ev.ComputeBegin, ev.ComputeEnd,
            ev.Replan, ev.GraphExpanded, ev.GraphCreated, ev.GraphCleared)
        interesting = {t_plan, t_end, t_bind, t_reset, t_cb, t_ce, t_replan, t_gx, t_gc, t_gclear}
        for e in events:
            cls = type(e)
            if cls not in interesting:
                continue
            if cls is t_gx:
                graph_nodes[e.graph_id] = graph_nodes.get(e.graph_id, 0) + len(e.nodes)
            elif cls is t_gc or cls is t_gclear:  # a cleared graph is refilled from zero
                graph_nodes[e.graph_id] = 0
            elif cls is t_cb:
                s = Step(e.seq, StepKind.COMPUTE, e.compute_id, e.graph_id, e.n_nodes,
                         binding_id=self._last_binding, detail=f"on {e.backend}", loc=e.loc)
                self._computes[e.compute_id] = s
                steps.append(s)
            elif cls is t_ce:
                compute = self._computes.get(e.compute_id)
                if compute is not None:
                    compute.wall_ns = e.wall_ns
            elif cls is t_bind:
                sizes = self._plan_sizes.get(e.plan_id, ())
                s = Step(e.seq, StepKind.BINDING, e.binding_id, e.graph_id, graph_nodes.get(e.graph_id, 0),
                         e.galloc_id, e.plan_id, e.binding_id, sizes, f"plan #{e.plan_id}", loc=e.loc)
                self._last_binding = e.binding_id
                for waiting in self._waiting_plans.pop(e.plan_id, []):
                    waiting.binding_id = e.binding_id
                steps.append(s)
            elif cls is t_plan:
                s = Step(e.seq, StepKind.PLAN, e.plan_id, e.graph_id, e.n_nodes, e.galloc_id, e.plan_id,
                         self._last_binding, loc=e.loc)
                self._plans[e.plan_id] = s
                self._waiting_plans.setdefault(e.plan_id, []).append(s)
                steps.append(s)
            elif cls is t_end:
                sizes = tuple(tuple(c) for c in e.chunk_sizes)
                self._plan_sizes[e.plan_id] = sizes
                plan = self._plans.get(e.plan_id)
                if plan is not None:
                    plan.chunk_sizes = sizes
            elif cls is t_replan:
                what = f": {e.detail}" if e.detail else ""
                steps.append(Step(e.seq, StepKind.REPLAN, e.galloc_id, galloc_id=e.galloc_id,
                                  binding_id=self._last_binding, detail=f"{ev.enum_text(e.cause)}{what}", loc=e.loc))
            else:  # SchedReset
                steps.append(Step(e.seq, StepKind.RESET, e.sched_id, binding_id=self._last_binding,
                                  detail=f"scheduler #{e.sched_id}", loc=e.loc))
        self.n_events += len(events)
        return len(steps)

    def feed_run(self, run: Any, k: int, count: int) -> int:
        """Steps ``k .. k + count - 1`` of a run of repeated steps (``vizalloc.analysis.runs.Run``)
        the stream analysis counted without analysing: their bindings and computes, as ``feed``
        would have found them in their events."""
        steps = self.steps
        tp = run.template
        moments: list[tuple[int, str, int]] = sorted(
            [(b.begin_seq, "binding", b0) for b0, b in tp.bindings.items()]
            + [(c.begin_seq, "compute", c0) for c0, c in tp.computes.items()])
        graph_nodes = {g0: len(g.nodes) for g0, g in tp.graphs.items()}
        for j in range(k, k + count):
            for _, what, x0 in moments:
                if what == "binding":
                    b = run.binding(x0, j)
                    n = graph_nodes.get(tp.bindings[x0].graph_id, self.graph_nodes.get(b.graph_id, 0))
                    s = Step(b.begin_seq, StepKind.BINDING, b.binding_id, b.graph_id, n, b.galloc_id, b.plan_id,
                             b.binding_id, self._plan_sizes.get(b.plan_id, ()), f"plan #{b.plan_id}", loc=b.loc)
                    self._last_binding = b.binding_id
                    steps.append(s)
                else:
                    c = run.compute(x0, j)
                    steps.append(Step(c.begin_seq, StepKind.COMPUTE, c.compute_id, c.graph_id, c.n_nodes,
                                      binding_id=self._last_binding, detail=f"on {c.backend}", wall_ns=c.wall_ns,
                                      loc=c.loc))
        self.n_events += count * run.n_events
        return len(steps)


def count_hazards(steps: Sequence[Step], hazards: Iterable[Any]) -> None:
    """Set ``n_hazards`` of each step.

    A merged hazard counts once at every binding (static kinds) or compute (dynamic kinds)
    its ``steps`` name; one with neither id (re-plans) counts at the last step at or
    before its seq.
    """
    by_binding = {s.step_id: s for s in steps if s.kind is StepKind.BINDING}
    by_compute = {s.step_id: s for s in steps if s.kind is StepKind.COMPUTE}
    seqs = [s.seq for s in steps]
    for s in steps:
        s.n_hazards = 0
    for h in hazards:
        table = by_binding if h.binding_id >= 0 else by_compute if h.compute_id >= 0 else None
        if table is not None:
            ids = tuple(h.steps) or (h.binding_id if h.binding_id >= 0 else h.compute_id,)
            hit = [table[i] for i in ids if i in table]
            if hit:
                for target in hit:
                    target.n_hazards += 1
                continue
        i = bisect_right(seqs, h.seq) - 1
        if i >= 0:
            steps[i].n_hazards += 1
