"""Hazards: what went wrong with the bytes, found from the model of a trace.

The kinds and their definitions are architecture.md's "Hazards" table:

* ``stale-overlap`` — at a binding, a stale root's bytes overlap another root of the
  graph and both are live in that graph (ggml's ``both_live`` rule, ``liveness.py``);
* ``use-after-reuse`` — a node (or a copy) reads tensor T, but T's bytes were last
  written by a tensor of another memory root since T was written (the per-byte-range
  last-writer map of ``dynamic.py``); at a binding, two freshly planned roots that share
  bytes while both live are reported as a *predicted* use-after-reuse when no compute
  of that binding shows it;
* ``dangling`` — a tensor is read, written or kept in a bound graph while its buffer is freed;
* ``uninitialized-read`` — a graph-allocated tensor is read before anything wrote its bytes;
* ``clobbered-output`` — the user reads (``tensor_get``) a tensor whose bytes were
  overwritten after it was computed;
* ``plan-mismatch`` — a binding applied a plan made for a graph whose node (or leaf) at
  some position had another name, op, type or shape;
* ``replan`` — every re-plan with its cause (not the first plan); a re-plan before
  (nearly) every binding of an allocator is reported once more as churn.

Equal findings (same kind, tensors and buffer) are merged into one ``Hazard`` whose
``occurrences`` counts them and whose ``steps`` names the bindings or computes.

    >>> from vizalloc.analysis.model import build_model
    >>> find_hazards(build_model([]))
    []
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vizalloc.analysis.model import (
    NEVER, BindingInfo, Placement, PlacementState, TraceModel,
)
from vizalloc.analysis import liveness
from vizalloc.trace import events as ev

#: at most this many step ids are kept per merged hazard (``occurrences`` stays exact)
MAX_STEPS = 32


class HazardKind(str, enum.Enum):
    """The kinds of hazard (values as the CLI and JSON write them)."""

    STALE_OVERLAP = "stale-overlap"
    USE_AFTER_REUSE = "use-after-reuse"
    DANGLING = "dangling"
    UNINITIALIZED_READ = "uninitialized-read"
    CLOBBERED_OUTPUT = "clobbered-output"
    PLAN_MISMATCH = "plan-mismatch"
    REPLAN = "replan"


_KIND_ORDER = {k: i for i, k in enumerate(HazardKind)}


@dataclass(frozen=True, slots=True)
class TensorRef:
    """One tensor as a report shows it: where it was created and where it was placed."""

    tensor_id: int
    name: str
    dtype: str
    ne: tuple[int, ...]
    op: str
    created_loc: ev.Location | None
    buffer_id: int = -1
    offset: int = -1
    nbytes: int = 0
    placed_by: str = ""
    placed_seq: int = -1
    placed_loc: ev.Location | None = None
    binding_id: int = -1
    stale_reason: str = ""

    @property
    def label(self) -> str:
        return f"'{_inert(self.name)}' (#{self.tensor_id})" if self.name else f"#{self.tensor_id}"

    def describe(self) -> list[str]:
        shape = ",".join(str(n) for n in self.ne)
        lines = [f"{self.label} {self.dtype}[{shape}] op {self.op}, created at {_loc(self.created_loc)}"]
        if self.buffer_id >= 0:
            how = f"by {self.placed_by}" + (f" binding #{self.binding_id}" if self.binding_id >= 0 else "")
            lines.append(f"    placed in buffer #{self.buffer_id} [{self.offset}, {self.offset + self.nbytes}) "
                         f"{how} at seq {self.placed_seq}, at {_loc(self.placed_loc)}")
            if self.stale_reason:
                lines.append(f"    stale since its allocator was {self.stale_reason}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor_id": self.tensor_id, "name": self.name, "dtype": self.dtype, "ne": list(self.ne),
            "op": self.op, "created_at": _loc_dict(self.created_loc), "buffer_id": self.buffer_id,
            "offset": self.offset, "nbytes": self.nbytes, "placed_by": self.placed_by,
            "placed_seq": self.placed_seq, "placed_at": _loc_dict(self.placed_loc),
            "binding_id": self.binding_id, "stale_reason": self.stale_reason,
        }


@dataclass(frozen=True, slots=True)
class Hazard:
    """One finding. ``tensor`` is the victim (the one accessed), ``other`` the conflicting one.

    ``ranges`` are the conflicting byte ranges ``[start, end)`` in ``buffer_id``;
    ``seq`` the step where it was first seen (``last_seq`` the last), ``access`` what
    happened there and ``access_loc`` the user's line; ``other_seq``/``other_loc`` when
    the conflicting tensor wrote (or was placed). ``steps`` are binding ids (static
    kinds) or compute ids (dynamic kinds), ``cause`` a re-plan cause or ``churn``.
    """

    kind: HazardKind
    seq: int
    tensor: TensorRef | None = None
    other: TensorRef | None = None
    buffer_id: int = -1
    ranges: tuple[tuple[int, int], ...] = ()
    access: str = ""
    access_loc: ev.Location | None = None
    other_seq: int = -1
    other_loc: ev.Location | None = None
    detail: str = ""
    cause: str = ""
    binding_id: int = -1
    compute_id: int = -1
    node_index: int = -1
    occurrences: int = 1
    last_seq: int = -1
    steps: tuple[int, ...] = ()

    @property
    def tensor_id(self) -> int:
        return self.tensor.tensor_id if self.tensor is not None else -1

    @property
    def other_id(self) -> int:
        return self.other.tensor_id if self.other is not None else -1

    def sort_key(self) -> tuple[int, int, int, int, int]:
        return (self.seq, _KIND_ORDER[self.kind], self.tensor_id, self.other_id, self.buffer_id)

    def report(self) -> str:
        """The sanitizer-style text: header, access, conflict, bytes, steps, source lines, summary."""
        from vizalloc.analysis.report import format_report

        return format_report(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value, "seq": self.seq, "last_seq": self.last_seq,
            "occurrences": self.occurrences, "steps": list(self.steps),
            "tensor": self.tensor.to_dict() if self.tensor is not None else None,
            "other": self.other.to_dict() if self.other is not None else None,
            "buffer_id": self.buffer_id, "ranges": [list(r) for r in self.ranges],
            "access": self.access, "access_at": _loc_dict(self.access_loc),
            "other_seq": self.other_seq, "other_at": _loc_dict(self.other_loc),
            "detail": self.detail, "cause": self.cause, "binding_id": self.binding_id,
            "compute_id": self.compute_id, "node_index": self.node_index,
        }


def _inert(text: str) -> str:
    """A name as inert printable text (control characters escaped)."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def qlabel(model: TraceModel, tensor_id: int) -> str:
    """A tensor's name quoted and inert (``'h_pre'``), or ``#id`` when it has none."""
    info = model.tensors.get(tensor_id)
    if info is None or not info.name:
        return f"#{tensor_id}"
    return f"'{_inert(info.name)}'"


def _loc(loc: ev.Location | None) -> str:
    return str(loc) if loc is not None else "<unknown>"


def _loc_dict(loc: ev.Location | None) -> dict[str, Any] | None:
    return None if loc is None else {"file": loc.file, "line": loc.line, "function": loc.function}


def tensor_ref(model: TraceModel, tensor_id: int, placement: Placement | None = None) -> TensorRef:
    """A ``TensorRef`` for a tensor, with a placement's details when given."""
    info = model.tensors.get(tensor_id)
    if info is None:
        base = TensorRef(tensor_id, "", "?", (), "?", None)
    else:
        base = TensorRef(tensor_id, info.name, info.dtype, info.ne, info.op, info.created_loc)
    if placement is None:
        return base
    return TensorRef(
        base.tensor_id, base.name, base.dtype, base.ne, base.op, base.created_loc, placement.buffer_id,
        placement.offset, placement.nbytes, placement.by.value if isinstance(placement.by, ev.PlacedBy)
        else str(placement.by), placement.seq, placement.loc, placement.binding_id, placement.stale_reason,
    )


@dataclass
class Collector:
    """Merges equal findings: the first occurrence is kept, later ones are counted."""

    found: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    def seen(self, key: tuple[Any, ...]) -> bool:
        return key in self.found

    def bump(self, key: tuple[Any, ...], seq: int, step: int) -> bool:
        """Count another occurrence; False when the key is new (the caller must ``add``)."""
        entry = self.found.get(key)
        if entry is None:
            return False
        entry["occurrences"] += 1
        entry["last_seq"] = max(entry["last_seq"], seq)
        steps = entry["steps"]
        if step >= 0 and len(steps) < MAX_STEPS and (not steps or steps[-1] != step):
            steps.append(step)
        return True

    def add(self, key: tuple[Any, ...], make: Callable[[], Hazard], step: int) -> None:
        h = make()
        self.found[key] = {"hazard": h, "occurrences": 1, "last_seq": h.seq, "steps": [step] if step >= 0 else []}

    def hazards(self) -> list[Hazard]:
        out = []
        for entry in self.found.values():
            h: Hazard = entry["hazard"]
            out.append(_replace(h, occurrences=entry["occurrences"], last_seq=entry["last_seq"],
                                steps=tuple(entry["steps"])))
        return out


def _replace(h: Hazard, **changes: Any) -> Hazard:
    from dataclasses import replace

    return replace(h, **changes)


def find_hazards(model: TraceModel, *, progress: Callable[[int, int], None] | None = None) -> list[Hazard]:
    """Every hazard in the trace, sorted by first step, kind, tensor ids and buffer.

    ``progress(done, total)`` is called now and then during the byte-map pass (events done).
    """
    from vizalloc.analysis.dynamic import scan_accesses

    col = Collector()
    scan_accesses(model, col, progress=progress)
    for b in sorted(model.bindings.values(), key=lambda b: b.begin_seq):
        if b.ok:
            _check_binding(model, b, col)
            _check_plan_match(model, b, col)
    _check_replans(model, col)
    hazards = col.hazards()
    hazards.sort(key=Hazard.sort_key)
    return hazards


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
                col.add(key, lambda p=p, root=root: Hazard(
                    HazardKind.DANGLING, seq, tensor_ref(model, root, p), None, p.buffer_id, ((p.offset, p.end),),
                    access=f"kept in graph #{b.graph_id} by binding #{b.binding_id} (galloc #{b.galloc_id})",
                    access_loc=b.loc, other_seq=model.buffers[p.buffer_id].freed_seq,
                    other_loc=model.event_at(model.buffers[p.buffer_id].freed_seq).loc,
                    detail=f"buffer #{p.buffer_id} was freed at seq {model.buffers[p.buffer_id].freed_seq}"
                           f" ({model.buffers[p.buffer_id].free_cause or 'no cause given'})",
                    binding_id=b.binding_id), b.binding_id)
        # stale roots in a freed buffer still overlap each other there (golden: same instance)
        if p.nbytes > 0:
            by_buffer.setdefault(p.buffer_id, []).append((p.offset, p.end, root, p))
    for buf_id, items in by_buffer.items():
        items.sort(key=lambda x: (x[0], x[1], x[2]))
        active: list[tuple[int, int, int, Placement]] = []
        for item in items:
            start = item[0]
            active = [a for a in active if a[1] > start]
            for a in active:
                _overlap(model, b, col, spans, a, item, seq)
            active.append(item)


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
    if x_stale or y_stale:
        kind = HazardKind.STALE_OVERLAP
        stale = px if x_stale else py
        detail = (f"{qlabel(model, stale.tensor_id)} keeps its placement from binding #{stale.binding_id}, "
                  f"made stale when its allocator was {stale.stale_reason} (seq {stale.stale_seq}); "
                  f"live ranges in graph #{b.graph_id}: {qlabel(model, x[2])} {_span(sx)}, "
                  f"{qlabel(model, y[2])} {_span(sy)}")
    else:
        kind = HazardKind.USE_AFTER_REUSE
        # a compute of this plan that shows it already reported it, with the real steps
        if col.seen((kind, x[2], y[2], px.buffer_id)) or col.seen((kind, y[2], x[2], px.buffer_id)):
            return
        detail = (f"predicted from the plan: both roots are live in graph #{b.graph_id} "
                  f"({qlabel(model, x[2])} {_span(sx)}, {qlabel(model, y[2])} {_span(sy)}) but share bytes")
    key = (kind, x[2], y[2], px.buffer_id)
    if col.bump(key, seq, b.binding_id):
        return
    col.add(key, lambda: Hazard(
        kind, seq, tensor_ref(model, x[2], px), tensor_ref(model, y[2], py), px.buffer_id, ((lo, hi),),
        access=f"binding #{b.binding_id} of graph #{b.graph_id} (galloc #{b.galloc_id}, plan #{b.plan_id})",
        access_loc=b.loc, other_seq=py.seq, other_loc=py.loc, detail=detail, binding_id=b.binding_id,
    ), b.binding_id)


def _span(s: liveness.Span) -> str:
    last = "-" if s[1] is None else str(s[1])
    return f"[{s[0]}, {last}]"


# -- plan reuse for another graph ------------------------------------------------------------

def _positions(nodes: list[int], leafs: list[int]) -> dict[int, tuple[str, int]]:
    pos = {t: ("leaf", i) for i, t in enumerate(leafs)}
    pos.update({t: ("node", i) for i, t in enumerate(nodes)})
    return pos


def _signature(model: TraceModel, t: int, pos: dict[int, tuple[str, int]]) -> tuple[Any, ...]:
    """What a plan entry depends on besides the size: name, op, type, view-ness and where the
    sources sit in the graph. Shapes are left out on purpose: a plan reserved for the largest
    batch and applied to a smaller graph of the same structure is ggml's intended use (the
    liveness is the same and every size fits), so only a change of structure is a mismatch."""
    info = model.tensors.get(t)
    if info is None:
        return (t,)
    srcs = tuple(pos.get(s, ("outside", -1)) if s >= 0 else None for s in info.srcs)
    view = pos.get(info.view_src, ("outside", 0)) if info.view_src >= 0 else None
    return (info.name, info.op, info.dtype, view, srcs)


def _check_plan_match(model: TraceModel, b: BindingInfo, col: Collector) -> None:
    plan = model.plans.get(b.plan_id)
    if plan is None or plan.graph is None or b.graph is None:
        return
    pg, bg = plan.graph, b.graph
    p_nodes, b_nodes = pg.nodes, bg.nodes
    p_leafs, b_leafs = pg.leafs, bg.leafs
    if p_nodes == b_nodes and p_leafs == b_leafs:
        return
    p_pos, b_pos = _positions(p_nodes, p_leafs), _positions(b_nodes, b_leafs)
    diffs: list[tuple[str, int, int, int]] = []
    for what, a, c in (("node", p_nodes, b_nodes), ("leaf", p_leafs, b_leafs)):
        for i in range(min(len(a), len(c))):
            if a[i] != c[i] and _signature(model, a[i], p_pos) != _signature(model, c[i], b_pos):
                diffs.append((what, i, a[i], c[i]))
        if len(a) != len(c):
            diffs.append((what + " count", min(len(a), len(c)), -1, -1))
    if not diffs:
        return
    what, pos, was, now = diffs[0]
    key = (HazardKind.PLAN_MISMATCH, now, was, b.galloc_id)
    if col.bump(key, b.begin_seq, b.binding_id):
        return
    if now < 0:
        detail = (f"plan #{plan.plan_id} has {len(p_nodes)} nodes / {len(p_leafs)} leafs, "
                  f"the graph {len(b_nodes)} / {len(b_leafs)}")
    else:
        detail = (f"{what} {pos}: the plan was made for {_sig_text(model, was)}, the graph has {_sig_text(model, now)}"
                  f" ({len(diffs)} position(s) differ); the size-only check let the old offsets through")
    col.add(key, lambda: Hazard(
        HazardKind.PLAN_MISMATCH, b.begin_seq, tensor_ref(model, now, model.placement_at(now, b.end_seq))
        if now >= 0 else None, tensor_ref(model, was) if was >= 0 else None, -1, (),
        access=f"binding #{b.binding_id} of graph #{b.graph_id} reused plan #{plan.plan_id} "
               f"(made for graph #{plan.graph_id} at seq {plan.begin_seq})",
        access_loc=b.loc, other_seq=plan.begin_seq, other_loc=plan.loc, detail=detail, binding_id=b.binding_id,
        node_index=pos,
    ), b.binding_id)


def _sig_text(model: TraceModel, t: int) -> str:
    info = model.tensors.get(t)
    if info is None:
        return f"#{t}"
    shape = ",".join(str(n) for n in info.ne)
    return f"{info.label!r} ({info.op} {info.dtype}[{shape}])"


# -- re-plans --------------------------------------------------------------------------------

def _check_replans(model: TraceModel, col: Collector) -> None:
    per_galloc: dict[int, int] = {}
    for r in model.replans:
        if r.cause is ev.ReplanCause.FIRST or r.cause == "first":
            continue
        cause = r.cause.value if isinstance(r.cause, ev.ReplanCause) else str(r.cause)
        per_galloc[r.galloc_id] = per_galloc.get(r.galloc_id, 0) + 1
        key = (HazardKind.REPLAN, r.galloc_id, cause)
        if col.bump(key, r.seq, -1):
            continue
        where = f" at node {r.node_index}" if r.node_index >= 0 else ""
        col.add(key, lambda r=r, cause=cause, where=where: Hazard(
            HazardKind.REPLAN, r.seq, tensor_ref(model, r.tensor_id) if r.tensor_id >= 0 else None,
            access=f"galloc #{r.galloc_id} planned again: {cause}{where}", access_loc=r.loc,
            detail=r.detail, cause=cause), -1)
    for galloc, n_replans in per_galloc.items():
        bindings = [b for b in model.bindings.values() if b.galloc_id == galloc]
        if len(bindings) >= 3 and n_replans >= len(bindings) - 1:
            first = min(bindings, key=lambda b: b.begin_seq)
            key = (HazardKind.REPLAN, galloc, "churn")
            col.add(key, lambda first=first, n=n_replans, nb=len(bindings), g=galloc: Hazard(
                HazardKind.REPLAN, first.begin_seq, access=f"galloc #{g} re-planned {n} times for {nb} bindings",
                access_loc=first.loc, cause="churn",
                detail="a re-plan before (nearly) every alloc_graph: planning cost on every step, and every "
                       "tensor placed by the previous binding goes stale; reserve the largest graph once, or "
                       "use one allocator per graph"), -1)
