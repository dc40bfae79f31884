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

from collections.abc import Mapping, Sequence

from vizalloc.analysis import liveness
from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.quality import buffer_lower_bound
from vizalloc.analysis.records import NEVER, BindingInfo, GraphSnapshot, Placement, PlacementState, TensorInfo
from vizalloc.trace import events as ev


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


def analysed_bindings(model: TraceModel) -> Mapping[int, BindingInfo]:
    """The bindings analysed one by one: of a streamed model (``analysis.stream``), those not
    in a skipped repetition, whose records would be made one by one if read. A skipped step
    binds the graph its template bound (same id), or one made in that step: no other plan's."""
    return getattr(model.bindings, "live", model.bindings)


def reserve_plans(model: TraceModel) -> list[int]:
    """The plans made for a graph that no binding ever bound, in trace order: worst-case
    reserves (``ggml_gallocr_reserve``, ``ggml_backend_sched_reserve``) whose offsets were
    planned but never applied to their own graph (bindings of other graphs may reuse them)."""
    bound = {b.graph_id for b in analysed_bindings(model).values()}
    return [p.plan_id for p in sorted(model.plans.values(), key=lambda q: q.begin_seq)
            if p.graph_id not in bound and p.graph is not None and p.chunk_sizes]


def sizing_plans(model: TraceModel) -> dict[tuple[int, int], int]:
    """``(galloc, slot) -> plan``: for every buffer slot of every graph allocator, the plan
    that needed the most bytes there (the latest of equals), the one that set the size of
    the buffer ggml allocates for it: the plan ``vizalloc.analysis.explain`` explains."""
    best: dict[tuple[int, int], tuple[int, int, int]] = {}   # key -> (bytes, begin_seq, plan)
    for plan in model.plans.values():
        for slot, sizes in enumerate(plan.chunk_sizes):
            key = (plan.galloc_id, slot)
            cand = (sum(sizes), plan.begin_seq, plan.plan_id)
            if key not in best or cand[:2] >= best[key][:2]:
                best[key] = cand
    return {k: v[2] for k, v in best.items() if v[0] > 0}


def sizing_reserve(model: TraceModel) -> tuple[int, int] | None:
    """``(plan, bytes)``: the worst-case reserve that set the size of the largest buffer a
    graph allocator sized, when that plan is a reserve (:func:`reserve_plans`); else None.
    For a llama.cpp run it is what ``sched_reserve`` planned: what fills the compute buffer."""
    reserves = set(reserve_plans(model))
    found: tuple[int, int] | None = None
    for (_, slot), plan_id in sizing_plans(model).items():
        size = sum(model.plans[plan_id].chunk_sizes[slot])
        if found is None or size > found[1]:
            found = (plan_id, size)
    return found if found is not None and found[0] in reserves else None


def plan_buffers(model: TraceModel, plan_id: int) -> tuple[dict[tuple[int, int], int], int]:
    """``((slot, chunk) -> buffer id, cut)``: the buffers of the graph allocator that hold a
    plan's offsets, and the event right after which they all exist. ggml allocates (or keeps)
    them right after planning; a slot whose buffer the trace never shows maps to none."""
    plan = model.plans[plan_id]
    later = [p.begin_seq for p in model.plans.values() if p.galloc_id == plan.galloc_id and p.begin_seq > plan.begin_seq]
    later += [b.begin_seq for b in analysed_bindings(model).values() if b.galloc_id == plan.galloc_id
              and b.begin_seq > plan.begin_seq]
    until = min(later, default=model.last_seq + 1)
    end = plan.end_seq if plan.end_seq != NEVER else plan.begin_seq
    pool = [b for b in model.buffers.values() if b.pool_id == plan.galloc_id]
    cut = max([end] + [b.alloc_seq for b in pool if end < b.alloc_seq < until])
    found: dict[tuple[int, int], int] = {}
    for b in sorted(pool, key=lambda x: x.alloc_seq):
        if b.alive_at(cut):
            found[(b.slot, b.chunk)] = b.buffer_id
    return found, cut


def plan_placements(model: TraceModel, plan_id: int) -> dict[int, Placement]:
    """``tensor -> Placement`` at a plan's offsets for every tensor it gave bytes
    (``PlanAlloc``, ``PlanInplace``), in the buffers of :func:`plan_buffers`; ``index`` and
    ``binding_id`` are -1 (no binding made them), a slot without a known buffer is ``-1 - slot``."""
    plan = model.plans[plan_id]
    buffers, cut = plan_buffers(model, plan_id)
    out: dict[int, Placement] = {}
    for d in plan.decisions:
        if type(d) is ev.PlanAlloc or type(d) is ev.PlanInplace:
            info = model.tensors.get(d.tensor_id)
            out[d.tensor_id] = Placement(-1, d.tensor_id, buffers.get((d.slot, d.chunk), -1 - d.slot), d.offset,
                                         info.nbytes if info is not None else 0, ev.PlacedBy.GALLOCR, -1,
                                         plan.galloc_id, cut, None)
    return out


def plan_roots(model: TraceModel, plan_id: int) -> tuple[dict[int, list[PlacedRoot]], int]:
    """``(roots by buffer id, cut)``, as :func:`placed_roots` gives them for a binding, for a
    plan's own graph at the plan's offsets: a reserve's tensors were given offsets
    (``PlanAlloc``, ``PlanInplace``) but never bytes. The tensors the plan skipped (weights,
    KV cache, inputs) are where they sit right after the plan's buffers exist (``cut``). A
    planned root's placement has ``index`` -1 and ``binding_id`` -1; a slot without a known
    buffer is keyed ``-1 - slot``. A planned root the planner never freed (no consumer's last
    use let it go) holds its bytes to the end (``out``): in a plan, the drawn bytes are the
    bytes the buffer had to hold."""
    plan = model.plans[plan_id]
    assert plan.graph is not None, "a plan without its graph has nothing to draw"
    cut = plan_buffers(model, plan_id)[1]
    where = plan_placements(model, plan_id)
    let_go: set[int] = set()   # freed by the planner, or taken over in place by a consumer
    for d in plan.decisions:
        if type(d) is ev.PlanFree:
            let_go.add(d.tensor_id)
        elif type(d) is ev.PlanInplace:
            let_go.add(d.parent_id)
    n = plan.graph.n_nodes
    by_buffer: dict[int, list[PlacedRoot]] = {}
    for root, (first, last) in liveness.graph_spans(model, plan.graph).items():
        info = model.tensors.get(root)
        if info is None:
            continue
        spot = where.get(root)
        if spot is not None:
            p, state, planned = spot, PlacementState.LIVE, True
            if root not in let_go:
                # the planner never gave these bytes back (nothing consumed the tensor, so no
                # last consumer freed it): they are taken to the end of the plan
                last = n
        else:
            found = model.placement_at(root, cut)
            if found is None:
                continue
            p, state, planned = found, model.placement_state(found, cut), False
        by_buffer.setdefault(p.buffer_id, []).append(PlacedRoot(info, p, first, first if last is None else last,
                                                                state, planned))
    return by_buffer, cut


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
