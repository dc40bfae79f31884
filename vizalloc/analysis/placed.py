"""Where the memory roots of a bound graph sit: bytes, live range and state, by buffer.

The layout diagram (``vizalloc.export.layout``) and the TUI's memory map
(``vizalloc.tui.mapdata``) draw the same thing: every root of a graph, at the placement
it carries at a cut (right after a binding), over its live range from
:func:`vizalloc.analysis.liveness.graph_spans`. This module collects those roots once;
each view turns them into its own blocks.

A root is shown *dangling* when its buffer was freed, and *stale* when its placement is
left over from an earlier binding and the plan skipped it as external (or there is no
plan to say); only those are marked (a stale placement of a root the plan did not skip
is shown as live).

    by_buffer = placed_roots(model, binding.graph, binding.plan_id, binding.end_seq)
    for buffer_id, roots in by_buffer.items():
        for r in roots:
            print(buffer_id, r.info.label, r.placement.offset, r.first, r.last, r.stale_note())
"""

from __future__ import annotations

from dataclasses import dataclass

from vizalloc.analysis import liveness
from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.records import GraphSnapshot, Placement, PlacementState, TensorInfo


@dataclass(frozen=True, slots=True)
class PlacedRoot:
    """One root of the graph: its placement at the cut and its live range ``[first, last]``."""

    info: TensorInfo
    placement: Placement
    first: int
    last: int            # the last read; ``first`` when nothing reads the root
    state: PlacementState  # DANGLING, STALE (skipped as external, or no plan), else LIVE
    planned: bool        # given bytes by the plan, and neither stale nor dangling

    @property
    def tensor_id(self) -> int:
        return self.info.tensor_id

    def stale_note(self) -> str:
        """Why the root is stale or dangling, for a tooltip ("" when it is live)."""
        p = self.placement
        if self.state is PlacementState.DANGLING:
            return f"dangling: buffer #{p.buffer_id} was freed"
        if self.state is PlacementState.STALE:
            return f"stale: placed by binding #{p.binding_id}, then {p.stale_reason or 'stale'}"
        return ""


def placed_roots(model: TraceModel, graph: GraphSnapshot, plan_id: int, cut: int) -> dict[int, list[PlacedRoot]]:
    """The roots of ``graph`` where they sit right after event ``cut``, by buffer id (in the
    graph's order within a buffer); ``plan_id`` is the plan the graph was bound with (-1: none)."""
    plan = model.plans.get(plan_id)
    planned = {d.tensor_id for d in plan.allocs} if plan is not None else set()
    externals = {d.tensor_id for d in plan.externals} if plan is not None else set()
    by_buffer: dict[int, list[PlacedRoot]] = {}
    for root, (first, last) in liveness.graph_spans(model, graph).items():
        p = model.placement_at(root, cut)
        info = model.tensors.get(root)
        if p is None or info is None:
            continue
        state = model.placement_state(p, cut)
        if state is PlacementState.STALE and not (root in externals or plan is None):
            state = PlacementState.LIVE
        by_buffer.setdefault(p.buffer_id, []).append(PlacedRoot(
            info, p, first, first if last is None else last, state,
            root in planned and state is PlacementState.LIVE))
    return by_buffer
