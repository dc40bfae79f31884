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

:func:`buffer_figures` gives the numbers both views print for a buffer (its size, the
highest byte used, the most bytes live at once, the plan's lower bound), each defined
there once.

    by_buffer = placed_roots(model, binding.graph, binding.plan_id, binding.end_seq)
    for buffer_id, roots in by_buffer.items():
        for r in roots:
            print(buffer_id, r.info.label, r.placement.offset, r.first, r.last, r.stale_note())
"""

from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Sequence

from vizalloc.analysis import liveness
from vizalloc.analysis.model import NEVER, GraphSnapshot, Placement, PlacementState, TensorInfo, TraceModel
from vizalloc.analysis.quality import buffer_lower_bound


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


@dataclass(frozen=True, slots=True)
class BufferFigures:
    """The numbers a view shows for one buffer of a bound graph, each defined here once.

    A root holds bytes ``[offset, offset + size padded to the buffer's alignment)`` (what an
    allocator reserves for it) on every step from its first write to its last read, both
    included: at node ``i`` the sources it reads and the result it writes are all there.
    So ``max_live <= highest <= size`` always, and ``lower_bound <= max_live`` whenever the
    planner's lifetimes (:mod:`vizalloc.analysis.quality`) fit in the drawn ones, as they
    do when every planned tensor is read (an unused leaf keeps its planned bytes to the end
    but is drawn at ``in`` only); tests/analysis/test_figures.py checks all of it on every
    sample program.
    """

    buffer_id: int
    size: int                # the buffer's bytes (the highest root's end when the buffer is unknown)
    highest: int             # the end of the highest root of the graph in the buffer ("peak"), padded
    max_live: int            # the most distinct bytes the graph's roots hold at one step (shared bytes
    #                          counted once, never more than the buffer); stale and dangling roots too
    max_live_step: int       # the first step where (-1: before the first node; -2: nothing is live)
    lower_bound: int | None  # the plan's lower bound for this buffer (quality.buffer_lower_bound);
    #                          None when the binding's plan placed nothing here
    freed_seq: int           # when the buffer was freed, if it was by the cut (else NEVER)
    free_cause: str

    @property
    def freed(self) -> bool:
        return self.freed_seq != NEVER


def _pad(n: int, alignment: int) -> int:
    return n if alignment <= 1 else (n + alignment - 1) // alignment * alignment


def max_live_bytes(extents: Sequence[tuple[int, int, int, int]]) -> tuple[int, int]:
    """``(bytes, step)``: over extents ``(lo, hi, first, last)`` (bytes ``[lo, hi)`` held on
    steps ``first..last``), the most distinct bytes held at one step and the first step
    where (``(0, -2)`` when none holds any). Bytes two extents share count once.

    A sweep over the steps with a segment tree of cover counts over the byte boundaries
    (the measure of a union of intervals under insertions and removals): n log n.

        >>> max_live_bytes([(0, 100, 0, 2), (50, 150, 1, 3), (0, 10, 3, 4)])
        (150, 1)
    """
    live = [e for e in extents if e[1] > e[0] and e[3] >= e[2]]
    if not live:
        return 0, -2
    xs = sorted({v for e in live for v in (e[0], e[1])})
    index = {x: i for i, x in enumerate(xs)}
    n_seg = len(xs) - 1
    size = 1
    while size < n_seg:
        size *= 2
    count = [0] * (2 * size)
    covered = [0] * (2 * size)
    span_lo = [0] * (2 * size)
    span_hi = [0] * (2 * size)
    for i in range(size):
        lo = xs[i] if i < n_seg else xs[-1]
        hi = xs[i + 1] if i < n_seg else xs[-1]
        span_lo[size + i], span_hi[size + i] = lo, hi
    for node in range(size - 1, 0, -1):
        span_lo[node], span_hi[node] = span_lo[2 * node], span_hi[2 * node + 1]

    def update(node: int, nlo: int, nhi: int, lo: int, hi: int, delta: int) -> None:
        if hi <= nlo or nhi <= lo:
            return
        if lo <= nlo and nhi <= hi:
            count[node] += delta
        else:
            mid = (nlo + nhi) // 2
            update(2 * node, nlo, mid, lo, hi, delta)
            update(2 * node + 1, mid, nhi, lo, hi, delta)
        if count[node] > 0:
            covered[node] = span_hi[node] - span_lo[node]
        elif node >= size:
            covered[node] = 0
        else:
            covered[node] = covered[2 * node] + covered[2 * node + 1]

    starts: dict[int, list[tuple[int, int]]] = {}
    ends: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, first, last in live:
        seg = (index[lo], index[hi])
        starts.setdefault(first, []).append(seg)
        ends.setdefault(last + 1, []).append(seg)
    best, at = 0, -2
    for s in sorted(set(starts) | set(ends)):
        for lo, hi in ends.get(s, ()):
            update(1, 0, size, lo, hi, -1)
        for lo, hi in starts.get(s, ()):
            update(1, 0, size, lo, hi, 1)
        if covered[1] > best:
            best, at = covered[1], s
    return best, at


def buffer_figures(model: TraceModel, buffer_id: int, roots: Sequence[PlacedRoot], plan_id: int,
                   cut: int) -> BufferFigures:
    """The figures of one buffer holding ``roots`` (from :func:`placed_roots`) right after
    event ``cut``, for a graph bound with ``plan_id``."""
    buf = model.buffers.get(buffer_id)
    end = max((r.placement.offset + r.placement.nbytes for r in roots), default=0)
    size = buf.nbytes if buf is not None else end
    alignment = buf.alignment if buf is not None else 1
    # padding never reaches past the buffer (a root that does is shown as it is)
    extents = [(r.placement.offset, min(r.placement.offset + _pad(r.placement.nbytes, alignment), max(size, end)),
                r.first, r.last) for r in roots]
    highest = max((e[1] for e in extents), default=0)
    live, step = max_live_bytes(extents)
    bound = None
    if buf is not None and any(r.planned for r in roots):
        bound = buffer_lower_bound(model, plan_id, buf.slot, buf.chunk)
    freed = buf is not None and buf.freed_seq <= cut
    return BufferFigures(buffer_id, size, highest, live, step, bound,
                         buf.freed_seq if freed and buf is not None else NEVER,
                         buf.free_cause if freed and buf is not None else "")
