"""A tensor's whole life as lines of text: created, placed, cleared, read, written, freed.

    >>> from vizalloc.analysis.model import build_model
    >>> from vizalloc.trace import events as ev
    >>> m = build_model([ev.TensorCreated(1, 0, None, 3, 0, "x", "f32", (4, 1, 1, 1), (4, 16, 16, 16),
    ...                                   "NONE", (), (), -1, 0, 0, -1)])
    >>> [(r.kind, r.what) for r in history_rows(m, 3)]
    [('created', 'f32[4] op NONE')]
"""

from __future__ import annotations

from dataclasses import dataclass

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.records import NEVER, HistoryKind, history_kind
from vizalloc.trace import events as ev
from vizalloc.tui.inert import inert
from vizalloc.tui.render import loc_text
from vizalloc.tui.tensorrows import shape_text


@dataclass(frozen=True, slots=True)
class HistoryRow:
    seq: int
    kind: str
    what: str
    where: str


def _what(model: TraceModel, e: ev.Event, kind: HistoryKind, tensor_id: int) -> str:
    lab = model.label
    if isinstance(e, ev.TensorCreated):
        srcs = ", ".join(inert(lab(s), 30) for s in e.srcs if s >= 0)
        view = f", view of {inert(lab(e.view_src), 30)} +{e.view_offs}" if e.view_src >= 0 else ""
        return f"{e.dtype}{shape_text(e.ne)} op {e.op}" + (f" of {srcs}" if srcs else "") + view
    if isinstance(e, ev.TensorNamed):
        return f"named {inert(e.name, 60)!r}"
    if isinstance(e, ev.TensorFlagsSet):
        return f"flags = {e.flags}"
    if isinstance(e, ev.TensorSrcSet):
        return f"source {e.slot} := {inert(lab(e.src_id), 30)}"
    if isinstance(e, ev.TensorPlaced):
        where = f" in binding #{e.binding_id}" if e.binding_id >= 0 else ""
        return f"placed in buffer #{e.buffer_id} [{e.offset}, {e.offset + e.nbytes}) by {ev.enum_text(e.by)}{where}"
    if isinstance(e, ev.TensorCleared):
        return f"pointers cleared by {inert(e.by)}"
    if isinstance(e, ev.NodeCompute):
        if kind is HistoryKind.WRITTEN:
            return f"written by node {e.index} of compute #{e.compute_id} on {inert(e.backend)}"
        return f"read by node {e.index} ({inert(lab(e.tensor_id), 30)}) of compute #{e.compute_id}"
    if isinstance(e, ev.TensorCopy):
        if kind is HistoryKind.COPIED:
            return f"copied from {inert(lab(e.src_id), 30)} ({e.nbytes} B)"
        return f"copied into {inert(lab(e.dst_id), 30)} ({e.nbytes} B)"
    if isinstance(e, (ev.TensorSet, ev.TensorGet)):
        verb = "set by the user" if isinstance(e, ev.TensorSet) else "read by the user"
        return f"{verb}: bytes [{e.offset}, {e.offset + e.nbytes})"
    if isinstance(e, ev.BufferFreed):
        return f"its buffer #{e.buffer_id} was freed ({inert(e.cause)}) while it pointed there"
    if isinstance(e, ev.ValueSnapshot):
        return f"value captured at {e.when} of compute #{e.compute_id}"
    return type(e).__name__


class HistoryView:
    """A tensor's history as rows made on demand (a weight read by every token of a long
    trace has thousands; only the visible ones are described).

    The rows are the model's history entries plus the two moments that explain stale
    tensors: when a placement went stale, and every plan that skipped the tensor as
    external (planning other tensors over its bytes), all in seq order.
    """

    def __init__(self, model: TraceModel, tensor_id: int) -> None:
        self.model = model
        self.tensor_id = tensor_id
        info = model.tensors[tensor_id]
        extra: list[HistoryRow] = []
        for idx in info.placements:
            p = model.placements[idx]
            if p.stale_seq != NEVER and p.stale_seq < p.end_seq:
                extra.append(HistoryRow(p.stale_seq, "stale", f"its placement [{p.offset}, {p.end}) in buffer "
                                        f"#{p.buffer_id} from binding #{p.binding_id} went stale: "
                                        f"{p.stale_reason or 'stale'}", "-"))
        for plan in model.plans.values():
            for d in plan.decisions:
                if type(d) is ev.PlanExternal and d.tensor_id == tensor_id:
                    at = model.placement_at(tensor_id, d.seq)
                    why = " while its placement was stale" if at is not None and at.stale_seq <= d.seq else ""
                    extra.append(HistoryRow(d.seq, "external", f"skipped as external by plan #{plan.plan_id} "
                                            f"(galloc #{plan.galloc_id}, {model.graph_name(plan.graph_id)}){why}",
                                            loc_text(d.loc)))
        extra.sort(key=lambda r: r.seq)
        # merge: ints are indices into model.events, rows are the extra entries
        events = model.events
        self.items: list[int | HistoryRow] = []
        k = 0
        for idx in info.history:
            seq = events[idx].seq
            while k < len(extra) and extra[k].seq <= seq:
                self.items.append(extra[k])
                k += 1
            self.items.append(idx)
        self.items.extend(extra[k:])
        self._made: dict[int, HistoryRow] = {}

    def __len__(self) -> int:
        return len(self.items)

    def row(self, i: int) -> HistoryRow:
        item = self.items[i]
        if isinstance(item, HistoryRow):
            return item
        got = self._made.get(i)
        if got is None:
            e = self.model.events[item]
            kind = history_kind(e, self.tensor_id)
            got = self._made[i] = HistoryRow(e.seq, kind.value, _what(self.model, e, kind, self.tensor_id),
                                             loc_text(e.loc))
        return got


def history_rows(model: TraceModel, tensor_id: int) -> list[HistoryRow]:
    """Every row of :class:`HistoryView` (for tests and small tensors)."""
    view = HistoryView(model, tensor_id)
    return [view.row(i) for i in range(len(view))]
