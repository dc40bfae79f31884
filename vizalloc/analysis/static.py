"""The hazards seen at bindings (overlapping roots that are both live, dangling roots, plans
reused for another graph) and the re-plan counts; see ``hazards.py`` for the kinds.

The overlapping pairs come from ``rects.intersecting_pairs`` (a sweep over live time
with the live roots kept in byte-axis structures): its cost follows the answer, not the
number of roots sharing low offsets in a packed plan.

A binding whose graph has the same structure and the same byte layout as one already
found clean is not checked again (a decode loop binds the same plan thousands of times).

    >>> from vizalloc.analysis.model import build_model
    >>> from vizalloc.analysis.hazards import Collector
    >>> col = Collector(); check_bindings(build_model([]), col); col.n_findings
    0
"""

from __future__ import annotations

from typing import Any

from vizalloc.analysis import liveness
from vizalloc.analysis import rects as rects_mod
from vizalloc.analysis.hazards import (
    Collector,
    Hazard,
    HazardKind,
    TensorRef,
    merge_ranges,
    qlabel,
    tensor_ref,
)
from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.records import (
    NEVER,
    BindingInfo,
    GraphSnapshot,
    Placement,
    PlacementState,
    TensorInfo,
)
from vizalloc.trace import events as ev

# -- at a binding: overlaps of roots that are both live ------------------------------------

def _check_binding(model: TraceModel, b: BindingInfo, col: Collector) -> None:
    graph = b.graph
    if graph is None:
        return
    seq = b.end_seq if b.end_seq != NEVER else b.begin_seq
    spans = liveness.graph_spans(model, graph)
    by_buffer: dict[int, list[tuple[int, int, int, Placement]]] = {}
    for root, span in spans.items():
        p = model.placement_at(root, seq)
        if p is None:
            continue
        state = model.placement_state(p, seq)
        if state is PlacementState.DANGLING:
            key = (HazardKind.DANGLING, root, -1, p.buffer_id, "kept")
            if not col.bump(key, seq, b.binding_id):
                def kept(p: Placement = p, root: int = root) -> Hazard:  # made at the end: bind the loop's values
                    return Hazard(
                        HazardKind.DANGLING, seq, tensor_ref(model, root, p), None, p.buffer_id, ((p.offset, p.end),),
                        access=f"kept in graph #{b.graph_id} by binding #{b.binding_id} (galloc #{b.galloc_id})",
                        access_loc=b.loc, other_seq=model.buffers[p.buffer_id].freed_seq,
                        other_loc=model.buffers[p.buffer_id].freed_loc,
                        detail=f"buffer #{p.buffer_id} was freed at seq {model.buffers[p.buffer_id].freed_seq}"
                               f" ({model.buffers[p.buffer_id].free_cause or 'no cause given'})",
                        binding_id=b.binding_id)
                col.add(key, kept, b.binding_id, seq)
        # stale roots in a freed buffer still overlap each other there (golden: same instance)
        if p.nbytes > 0:
            by_buffer.setdefault(p.buffer_id, []).append((p.offset, p.end, root, p))
    for items in by_buffer.values():
        # sorted by position; pairs come back in the order a sweep over bytes would meet them
        items.sort(key=lambda x: (x[0], x[1], x[2]))
        rects = []
        for start, end, root, _ in items:
            first, last = spans[root]
            rects.append((start, end, first, first if last is None else last))
        for i, j in rects_mod.intersecting_pairs(rects):
            _overlap(model, b, col, spans, items[i], items[j], seq)


def _overlap(model: TraceModel, b: BindingInfo, col: Collector, spans: dict[int, liveness.Span],
             x: tuple[int, int, int, Placement], y: tuple[int, int, int, Placement], seq: int) -> None:
    sx, sy = spans[x[2]], spans[y[2]]
    if not liveness.both_live(sx, sy):
        return
    px, py = x[3], y[3]
    x_stale = px.stale_seq <= seq
    y_stale = py.stale_seq <= seq
    # the victim is the root written first: its pending reader sees the other's write
    if (sx[0], x[2]) > (sy[0], y[2]):
        x, y, px, py, sx, sy, x_stale, y_stale = y, x, py, px, sy, sx, y_stale, x_stale
    lo, hi = max(px.offset, py.offset), min(px.end, py.end)
    kind = HazardKind.STALE_OVERLAP if x_stale or y_stale else HazardKind.USE_AFTER_REUSE
    key = (kind, x[2], y[2], px.buffer_id)

    def make() -> Hazard:
        if kind is HazardKind.STALE_OVERLAP:
            detail = (f"{_stale_text(model, b, px, py, x_stale, y_stale)}; both are live in graph #{b.graph_id} "
                      f"(first write, last read by node index): {qlabel(model, x[2])} {_span(sx)}, "
                      f"{qlabel(model, y[2])} {_span(sy)}")
        else:
            detail = (f"predicted from the plan: both roots are live in graph #{b.graph_id} "
                      f"({qlabel(model, x[2])} {_span(sx)}, {qlabel(model, y[2])} {_span(sy)}) but share bytes")
        return Hazard(
            kind, seq, tensor_ref(model, x[2], px), tensor_ref(model, y[2], py), px.buffer_id, ((lo, hi),),
            access=f"binding #{b.binding_id} of graph #{b.graph_id} (galloc #{b.galloc_id}, plan #{b.plan_id})",
            access_loc=b.loc, other_seq=py.seq, other_loc=py.loc, detail=detail, binding_id=b.binding_id)

    if kind is HazardKind.USE_AFTER_REUSE:
        # a compute of this plan that shows it reports it with the real steps (Collector.predict)
        col.predict(key, make, b.binding_id, seq)
        return
    if col.bump(key, seq, b.binding_id):
        return
    col.add(key, make, b.binding_id, seq)


def _stale_text(model: TraceModel, b: BindingInfo, px: Placement, py: Placement, x_stale: bool,
                y_stale: bool) -> str:
    """How a stale-overlap pair came to share bytes: one stale placement under a new one, or
    two stale ones an earlier plan packed together."""
    def why(p: Placement, whose: str = "its") -> str:
        return f"stale since {whose} allocator was {p.stale_reason} at seq {p.stale_seq}"

    x, y = qlabel(model, px.tensor_id), qlabel(model, py.tensor_id)
    if x_stale and y_stale:
        if px.binding_id == py.binding_id:
            return (f"{x} and {y} both keep their placements from binding #{px.binding_id}, whose plan packed "
                    f"them together (their lives did not meet in that graph), {why(px, 'their')}")
        return (f"{x} keeps its placement from binding #{px.binding_id} ({why(px)}), {y} its placement from "
                f"binding #{py.binding_id} ({why(py)})")
    stale, fresh = (px, py) if x_stale else (py, px)
    by = (f"was placed over it by this binding (#{b.binding_id}), whose plan never saw its bytes"
          if fresh.binding_id == b.binding_id else
          f"is placed there by {ev.enum_text(fresh.by)}"
          + (f" binding #{fresh.binding_id}" if fresh.binding_id >= 0 else ""))
    return (f"{qlabel(model, stale.tensor_id)} keeps its placement from binding #{stale.binding_id} "
            f"({why(stale)}); {qlabel(model, fresh.tensor_id)} {by}")


def _span(s: liveness.Span) -> str:
    last = "-" if s[1] is None else str(s[1])
    return f"[{s[0]}, {last}]"


# -- plan reuse for another graph ------------------------------------------------------------

_OUTSIDE = -1  # a source that is neither a node nor a leaf of the graph


def graph_signature(model: TraceModel, graph: GraphSnapshot) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Per-position signatures of a graph's nodes and leafs.

    A signature is what a plan entry depends on besides the size: op, type, flags, and
    where the view source and the sources sit in the graph (node ``i`` is ``i``, leaf
    ``j`` is ``-2 - j``, outside the graph ``-1``). Shapes are left out on purpose: a plan
    reserved for the largest batch and applied to a smaller graph of the same structure
    is ggml's intended use (the liveness is the same and every size fits), so only a
    change of structure is a mismatch. Names are left out too: ggml never looks at them,
    and a graph rebuilt with other names is planned exactly alike.
    """
    nodes, leafs = graph.nodes, graph.leafs
    pos = {t: -2 - j for j, t in enumerate(leafs)}
    pos.update({t: i for i, t in enumerate(nodes)})
    return (_signatures(model, pos, nodes), _signatures(model, pos, leafs))


def _signatures(model: TraceModel, pos: dict[int, int], ts: list[int]) -> tuple[Any, ...]:
    """``graph_signature``'s per-position tuples of ``ts`` (one loop, no call per tensor: this
    runs for every tensor of every binding)."""
    tget = model.tensors.get
    get = pos.get
    out: list[tuple[Any, ...]] = []
    append = out.append
    for t in ts:
        info = tget(t)
        if info is None:
            append((t,))
            continue
        vs = info.view_src
        srcs = info.srcs
        n = len(srcs)
        # the usual source counts unrolled (a comprehension costs a frame in this Python)
        if n == 0:
            where: tuple[Any, ...] = ()
        elif n == 1:
            s0 = srcs[0]
            where = (get(s0, _OUTSIDE) if s0 >= 0 else None,)
        elif n == 2:
            s0, s1 = srcs
            where = (get(s0, _OUTSIDE) if s0 >= 0 else None, get(s1, _OUTSIDE) if s1 >= 0 else None)
        else:
            where = tuple([get(s, _OUTSIDE) if s >= 0 else None for s in srcs])
        append((info.op, info.dtype, info.flags & 15, get(vs, _OUTSIDE) if vs >= 0 else None, where))
    return tuple(out)


class _Signatures:
    """Signatures of graphs, cached per plan (plan graphs are compared again and again).

    ``watch`` maps each tensor the cached signatures were made of to their plans; while
    streaming, a change to one of them (``forget``) drops the signatures made of it.
    """

    def __init__(self, model: TraceModel) -> None:
        self.model = model
        self.by_plan: dict[int, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
        self.watch: dict[int, list[int]] = {}

    def of_plan(self, plan_id: int, graph: GraphSnapshot) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        sig = self.by_plan.get(plan_id)
        if sig is None:
            sig = self.by_plan[plan_id] = graph_signature(self.model, graph)
            for t in (*graph.nodes, *graph.leafs):
                self.watch.setdefault(t, []).append(plan_id)
        return sig

    def forget(self, tensor_id: int) -> None:
        """A tensor changed: the signatures made of it are made again when next asked for."""
        for plan_id in self.watch.pop(tensor_id, ()):
            self.by_plan.pop(plan_id, None)


class BindingChecks:
    """The binding-time checks, one binding at a time (``check``), in binding order, with
    the model as it stands right after that binding (or complete)."""

    def __init__(self, model: TraceModel, col: Collector) -> None:
        self.model = model
        self.col = col
        self.sigs = _Signatures(model)
        self.clean: set[Any] = set()

    def check(self, b: BindingInfo) -> None:
        """Overlaps, dangling roots, a plan mismatch and plan overflows of one binding (nothing
        unless it succeeded)."""
        if not b.ok or b.graph is None:
            return
        model, col = self.model, self.col
        sig = graph_signature(model, b.graph)
        _check_plan_match(model, b, col, sig, self.sigs)
        _check_leaf_entries(model, b, col)
        key = _layout_key(model, b, sig)
        if key is not None and key in self.clean:
            return
        before = col.n_findings
        _check_binding(model, b, col)
        if key is not None and col.n_findings == before:
            self.clean.add(key)


def check_bindings(model: TraceModel, col: Collector) -> None:
    """Overlaps, dangling roots and plan mismatches of every successful binding, in order."""
    checks = BindingChecks(model, col)
    for b in sorted(model.bindings.values(), key=lambda b: b.begin_seq):
        checks.check(b)


def _layout_key(model: TraceModel, b: BindingInfo, sig: tuple[Any, ...]) -> Any:
    """Structure plus, per position, where its root's bytes are and whether they are stale:
    two bindings with equal keys have the same overlaps and liveness. None: not cacheable."""
    assert b.graph is not None
    # roots reached only as a source from outside the graph make the signature ambiguous
    for s in sig[0]:
        if len(s) > 4 and _OUTSIDE in s[4]:
            return None
    seq = b.end_seq if b.end_seq != NEVER else b.begin_seq
    tget = model.tensors.get
    placements = model.placements
    layout: list[Any] = []
    append = layout.append
    used: set[int] = set()
    for t in (*b.graph.nodes, *b.graph.leafs):
        info = tget(t)
        if info is None:
            return None
        vs = info.view_src
        rinfo = tget(vs) if vs >= 0 else info
        p = None
        if rinfo is not None and rinfo.placements:
            last = placements[rinfo.placements[-1]]
            p = last if last.seq <= seq < last.end_seq else model.placement_at(vs if vs >= 0 else t, seq)
        if p is None:
            append(None)
        else:
            append((p.buffer_id, p.offset, p.nbytes, p.stale_seq <= seq))
            used.add(p.buffer_id)
    freed = tuple(sorted(x for x in used if x in model.buffers and model.buffers[x].freed_seq <= seq))
    return (sig, tuple(layout), freed)


def _check_plan_match(model: TraceModel, b: BindingInfo, col: Collector, sig: tuple[Any, ...],
                      sigs: _Signatures) -> None:
    plan = model.plans.get(b.plan_id)
    if plan is None or plan.graph is None or b.graph is None:
        return
    pg, bg = plan.graph, b.graph
    p_nodes, b_nodes = pg.nodes, bg.nodes
    p_leafs, b_leafs = pg.leafs, bg.leafs
    if p_nodes == b_nodes and p_leafs == b_leafs:
        return
    psig = sigs.of_plan(plan.plan_id, pg)
    if psig == sig:
        return
    # every position that differs: (what, position, plan's tensor, graph's tensor, what changed)
    diffs: list[tuple[str, int, int, int, str]] = []
    for what, a, c, sa, sc in (("node", p_nodes, b_nodes, psig[0], sig[0]), ("leaf", p_leafs, b_leafs, psig[1],
                                                                              sig[1])):
        for i in range(min(len(a), len(c))):
            if sa[i] != sc[i]:
                diffs.append((what, i, a[i], c[i], _sig_change(sa[i], sc[i])))
        if len(a) != len(c):
            diffs.append((what + " count", min(len(a), len(c)), -1, -1, ""))
    if not diffs:
        return
    what, pos, was, now, _ = diffs[0]
    key = (HazardKind.PLAN_MISMATCH, now, was, b.galloc_id)
    if col.bump(key, b.begin_seq, b.binding_id):
        return

    def make() -> Hazard:
        lines = [f"{len(diffs)} position(s) differ; the size-only check let the old offsets through:"]
        for w, i, p_t, b_t, change in diffs:
            if p_t < 0:
                lines.append(f"  {w}: plan #{plan.plan_id} has {len(p_nodes)} nodes / {len(p_leafs)} leafs, "
                             f"the graph {len(b_nodes)} / {len(b_leafs)}")
            else:
                lines.append(f"  {w} {i}: the plan was made for {_sig_text(model, p_t)}, "
                             f"the graph has {_sig_text(model, b_t)} ({change})")
        return Hazard(
            HazardKind.PLAN_MISMATCH, b.begin_seq, tensor_ref(model, now, model.placement_at(now, b.end_seq))
            if now >= 0 else None, tensor_ref(model, was) if was >= 0 else None, -1, (),
            access=f"binding #{b.binding_id} of graph #{b.graph_id} reused plan #{plan.plan_id} "
                   f"(made for graph #{plan.graph_id} at seq {plan.begin_seq})",
            access_loc=b.loc, other_seq=plan.begin_seq, other_loc=plan.loc, detail="\n".join(lines),
            binding_id=b.binding_id, node_index=pos)

    col.add(key, make, b.binding_id, b.begin_seq)


def _check_leaf_entries(model: TraceModel, b: BindingInfo, col: Collector) -> None:
    """A reused plan's leaf entries against the leafs bound through them.

    ggml's re-validation (``ggml_gallocr_needs_realloc``) compares the node and source
    entries with the tensors now at those positions, but never a leaf entry: a leaf that
    no node consumes and that is larger than the plan's leaf at its position is bound at
    that entry's offset, and its extra bytes cover whatever the plan put after it.
    """
    plan = model.plans.get(b.plan_id)
    if plan is None or plan.graph is None or b.graph is None:
        return
    p_leafs, b_leafs = plan.graph.leafs, b.graph.leafs
    if p_leafs == b_leafs:
        return
    tget = model.tensors.get
    seq = b.end_seq if b.end_seq != NEVER else b.begin_seq
    for j, (was, now) in enumerate(zip(p_leafs, b_leafs)):
        if was == now:
            continue
        w_info, n_info = tget(was), tget(now)
        if w_info is None or n_info is None or n_info.is_view or n_info.nbytes <= w_info.nbytes:
            continue
        p = model.placement_at(now, seq)
        if p is None or p.binding_id != b.binding_id or p.by != ev.PlacedBy.GALLOCR:
            continue  # not bound through the entry (it had data already)
        entry_end = p.offset + w_info.nbytes
        covered = _covered(model, b, p, entry_end, seq)
        if not covered:
            continue  # the extra bytes fall on nothing the graph uses
        key = (HazardKind.PLAN_OVERFLOW, b.galloc_id, plan.plan_id, j)
        if col.bump(key, b.begin_seq, b.binding_id):
            continue
        def overflow(j: int = j, was: int = was, now: int = now, w_info: TensorInfo = w_info, p: Placement = p,
                     entry_end: int = entry_end, covered: list[tuple[int, Placement]] = covered) -> Hazard:
            return Hazard(
                HazardKind.PLAN_OVERFLOW, b.begin_seq, tensor_ref(model, now, p), tensor_ref(model, covered[0][0],
                                                                                          covered[0][1]),
                p.buffer_id, tuple(merge_ranges([(max(q.offset, entry_end), min(q.end, p.end)) for _, q in covered])),
                access=f"binding #{b.binding_id} of graph #{b.graph_id} (galloc #{b.galloc_id}) placed leaf {j} "
                       f"{qlabel(model, now)} ({p.nbytes} bytes) at the offset of plan #{plan.plan_id}'s entry for "
                       f"{qlabel(model, was)} ({w_info.nbytes} bytes, graph #{plan.graph_id})",
                access_loc=b.loc, other_seq=covered[0][1].seq, other_loc=covered[0][1].loc,
                detail=f"{p.end - entry_end} bytes past the entry, [{entry_end}, {p.end}), cover "
                       + ", ".join(f"{qlabel(model, t)} [{q.offset}, {q.end})" for t, q in covered)
                       + "; no re-validation looked at the leaf entry, so nothing re-planned",
                binding_id=b.binding_id, node_index=j)
        col.add(key, overflow, b.binding_id, b.begin_seq)


def _covered(model: TraceModel, b: BindingInfo, p: Placement, start: int, seq: int) -> list[tuple[int, Placement]]:
    """Roots of the bound graph (other than ``p``'s) whose bytes meet ``[start, p.end)`` of its buffer."""
    assert b.graph is not None
    out = []
    seen = {p.tensor_id}
    for t in (*b.graph.leafs, *b.graph.nodes):
        info = model.tensors.get(t)
        r = info.root if info is not None else t
        if r in seen:
            continue
        seen.add(r)
        q = model.placement_at(r, seq)
        if q is not None and q.buffer_id == p.buffer_id and q.offset < p.end and start < q.end and q.nbytes > 0:
            out.append((r, q))
    out.sort(key=lambda x: (x[1].offset, x[0]))
    return out


def _sig_change(was: tuple[Any, ...], now: tuple[Any, ...]) -> str:
    """What differs between two position signatures (``_signatures``' tuples), in words."""
    if len(was) != len(now) or len(was) < 5:
        return "another tensor"
    out = []
    for field_name, a, c in zip(("op", "type", "flags", "view source", "sources"), was, now):
        if a != c:
            out.append(f"{field_name} {_where(a) if field_name in ('view source', 'sources') else a} -> "
                       f"{_where(c) if field_name in ('view source', 'sources') else c}")
    return "; ".join(out)


def _where(pos: Any) -> str:
    """A source position of ``_signatures`` as words: node i, leaf j, outside, none."""
    if isinstance(pos, tuple):
        return "(" + ", ".join(_where(p) for p in pos) + ")"
    if pos is None:
        return "none"
    if pos == _OUTSIDE:
        return "outside"
    return f"node {pos}" if pos >= 0 else f"leaf {-2 - pos}"


def _sig_text(model: TraceModel, t: int) -> str:
    info = model.tensors.get(t)
    if info is None:
        return f"#{t}"
    shape = ",".join(str(n) for n in info.ne)
    return f"{info.label!r} ({info.op} {info.dtype}[{shape}])"


# -- re-plans --------------------------------------------------------------------------------

#: what the churn report advises for graphs that share tensors, by fix strategy name
#: (``vizalloc.scenarios.shared_tensors``); each one is proven in that loop by
#: ``tests/analysis/test_churn_advice.py``, as is that the advice left out does not help
CHURN_FIXES: dict[str, str] = {
    "dup": "bind a deep copy of the graph each time (what ggml-opt's dup_graph makes)",
    "clear": "clear the shared tensors' data and buffer pointers after each reset",
    "static": "keep the shared tensors in a static buffer allocated once",
}

#: the churn report's text
CHURN_ADVICE = (
    "a re-plan before (nearly) every alloc_graph: planning cost on every step, and every tensor placed by the "
    "previous binding goes stale. Where the graphs share tensors, each new plan is made over the stale ones' "
    "bytes; what makes that safe: " + "; or ".join(CHURN_FIXES.values()) + ". One allocator per graph, a "
    "fresh allocator per alloc_graph or reserving the largest graph once do not: the shared tensors keep "
    "the bytes a plan for another graph gave them"
)

class ReplanChecks:
    """Re-plan findings as a stream: ``plan``, ``binding`` and ``replan`` in event order, then
    ``finish``. The first plan of an allocator is no re-plan, whatever asked for it (a
    reserve, say): a ``Replan`` before its allocator's first plan is dropped, one of an
    allocator that never plans is counted at ``finish``."""

    def __init__(self, model: TraceModel, col: Collector) -> None:
        self.model = model
        self.col = col
        self.planned: set[int] = set()                    # gallocs with a plan so far
        self.waiting: dict[int, list[ev.Replan]] = {}      # galloc -> re-plans before its first plan
        self.per_galloc: dict[int, int] = {}               # galloc -> re-plans counted
        self.bindings: dict[int, list[Any]] = {}           # galloc -> [count, first binding id, its seq]

    def plan(self, galloc_id: int) -> None:
        """A plan of ``galloc_id`` began."""
        self.planned.add(galloc_id)
        self.waiting.pop(galloc_id, None)

    def binding(self, galloc_id: int, binding_id: int, seq: int) -> None:
        """A binding of ``galloc_id`` began (ok or not)."""
        entry = self.bindings.get(galloc_id)
        if entry is None:
            self.bindings[galloc_id] = [1, binding_id, seq]
        else:
            entry[0] += 1
            if seq < entry[2]:
                entry[1], entry[2] = binding_id, seq

    def replan(self, r: ev.Replan) -> None:
        if r.cause == "first":
            return
        if r.galloc_id not in self.planned:
            self.waiting.setdefault(r.galloc_id, []).append(r)
            return
        self._count(r)

    def _count(self, r: ev.Replan) -> None:
        model, col = self.model, self.col
        cause = ev.enum_text(r.cause)
        self.per_galloc[r.galloc_id] = self.per_galloc.get(r.galloc_id, 0) + 1
        key = (HazardKind.REPLAN, r.galloc_id, cause)
        if col.bump(key, r.seq, -1):
            return
        where = f" at node {r.node_index}" if r.node_index >= 0 else ""
        def replanned(r: ev.Replan = r, cause: str = cause, where: str = where) -> Hazard:
            return Hazard(
                HazardKind.REPLAN, r.seq, tensor_ref(model, r.tensor_id) if r.tensor_id >= 0 else None,
                access=f"galloc #{r.galloc_id} planned again: {cause}{where}", access_loc=r.loc,
                detail=r.detail, cause=cause)
        col.add(key, replanned, -1, r.seq)

    def finish(self) -> None:
        """Count the re-plans of allocators that never planned, then report churn."""
        waiting = sorted((r for rs in self.waiting.values() for r in rs), key=lambda r: r.seq)
        self.waiting = {}
        for r in waiting:
            self._count(r)
        model, col = self.model, self.col
        for galloc, n_replans in self.per_galloc.items():
            entry = self.bindings.get(galloc)
            if entry is None:
                continue
            n_bindings, first_id, _ = entry
            if n_bindings >= 3 and n_replans >= n_bindings - 1:
                first = model.bindings[first_id]
                key = (HazardKind.REPLAN, galloc, "churn")
                def churn(first: BindingInfo = first, n: int = n_replans, nb: int = n_bindings,
                          g: int = galloc) -> Hazard:
                    return Hazard(
                        HazardKind.REPLAN, first.begin_seq,
                        access=f"galloc #{g} re-planned {n} times for {nb} bindings",
                        access_loc=first.loc, cause="churn", detail=CHURN_ADVICE)
                col.add(key, churn, -1, first.begin_seq)


def check_replans(model: TraceModel, col: Collector) -> None:
    """Every re-plan (not an allocator's first plan), merged per allocator and cause, and churn."""
    checks = ReplanChecks(model, col)
    steps: list[tuple[int, int, Any]] = [(p.begin_seq, 0, p) for p in model.plans.values()]
    steps += [(b.begin_seq, 1, b) for b in model.bindings.values()]
    steps += [(r.seq, 2, r) for r in model.replans]
    for _, what, x in sorted(steps, key=lambda s: (s[0], s[1])):
        if what == 0:
            checks.plan(x.galloc_id)
        elif what == 1:
            checks.binding(x.galloc_id, x.binding_id, x.begin_seq)
        else:
            checks.replan(x)
    checks.finish()


def check_replay(model: TraceModel, col: Collector) -> None:
    """``replay-mismatch``: every difference between a captured process and vizalloc's replay
    of it (``ReplayMismatch`` events), one hazard per kind of difference, call and tensor."""
    for e in model.replay_mismatches:
        key = (HazardKind.REPLAY_MISMATCH, e.what, e.call, e.tensor_id)
        if col.bump(key, e.seq, -1):
            continue
        tensor = tensor_ref(model, e.tensor_id, None) if e.tensor_id in model.tensors else None
        what = {"offset": "placed", "buffer_size": "sized a buffer", "result": "returned",
                "buffers": "made buffers"}.get(e.what, e.what)
        detail = (f"ggml {e.ggml_version}'s {e.call} {what}: {e.observed}; vizalloc's replay: {e.replayed}. "
                  "The trace keeps what the process did; report this difference (with the ggml version) as a "
                  "vizalloc bug, or a ggml whose allocator rules vizalloc does not model yet")

        def make(e: ev.ReplayMismatch = e, tensor: TensorRef | None = tensor, detail: str = detail) -> Hazard:
            return Hazard(HazardKind.REPLAY_MISMATCH, e.seq, tensor, access=f"{e.call} ({e.what})",
                          access_loc=e.loc, detail=detail, cause=e.what)

        col.add(key, make, -1, e.seq)
    check_incomplete(model, col)


def incomplete_notice(model: TraceModel) -> str:
    """The line ``summary`` and ``explain`` print first when a captured process is not all in
    the trace ("" when it is, or the trace was not captured)."""
    if not model.capture_incomplete:
        return ""
    e = model.capture_incomplete[0]
    more = f" (and {len(model.capture_incomplete) - 1} more)" if len(model.capture_incomplete) > 1 else ""
    return f"INCOMPLETE TRACE: {e.reason}{more}; what follows covers only the part that was captured"


def check_incomplete(model: TraceModel, col: Collector) -> None:
    """``incomplete-capture``: where the import of a captured process stopped, or that it
    captured nothing (``CaptureIncomplete`` events); run with the replay's differences."""
    for e in model.capture_incomplete:
        key = (HazardKind.INCOMPLETE_CAPTURE, e.record, e.call, e.reason)
        if col.bump(key, e.seq, -1):
            continue
        where = (f"at record {e.record:,} of {e.n_records:,}" if e.n_records else "nothing was captured")
        detail = (f"{e.reason}. The trace holds the process up to that point ({where}); nothing after it was "
                  "checked" if e.n_records else f"{e.reason}. The trace holds no graph of the process")

        def make(e: ev.CaptureIncomplete = e, detail: str = detail) -> Hazard:
            return Hazard(HazardKind.INCOMPLETE_CAPTURE, e.seq, None, access=e.call or "the capture",
                          access_loc=e.loc, detail=detail, cause=e.missing)

        col.add(key, make, -1, e.seq)
