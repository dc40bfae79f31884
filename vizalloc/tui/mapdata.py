"""What the memory map draws: the roots of one bound graph in one buffer, as blocks.

A block is a memory root's bytes ``[offset, end)`` over its live range in the graph
(``first``..``last``, node indices; -1 is "before the first node", ``n`` "kept to the
end"), from :func:`vizalloc.analysis.liveness.graph_spans` (the rule checked against
real ggml), collected by :func:`vizalloc.analysis.placed.placed_roots` as for the SVG
layout diagram. Placements are taken right after the binding. A block is *stale* when the
plan skipped it as external while its placement was left over from an earlier binding,
*dangling* when its buffer was freed. Two blocks *overlap* when they share bytes and
are both live (ggml's ``both_live``): with a correct plan that never happens, so every
overlap is drawn as a collision.

    >>> from vizalloc.analysis.model import build_model
    >>> build_binding_map(build_model([]), 0)
    Traceback (most recent call last):
    ...
    KeyError: 0
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.placed import BufferFigures, PlacedRoot, buffer_figures, placed_roots, plan_roots
from vizalloc.analysis.records import NEVER
from vizalloc.analysis.rects import intersecting_pairs
from vizalloc.export.units import buffer_title
from vizalloc.trace.events import enum_text
from vizalloc.tui.tensorrows import shape_text


@dataclass(frozen=True, slots=True)
class Block:
    """One root in one buffer over its live range."""

    tensor_id: int
    name: str
    op: str
    dtype: str
    shape: str
    offset: int
    nbytes: int
    first: int
    last: int
    stale: str        # "" when live; else why (stale / dangling)
    placed_by: str
    binding_id: int
    planned: bool     # given bytes by this binding's plan

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    def live_at(self, step: int) -> bool:
        return self.first <= step <= self.last


@dataclass(slots=True)
class Panel:
    """One buffer of one binding: its blocks by offset, the colliding pairs, and its figures
    (:func:`vizalloc.analysis.placed.buffer_figures`, as the layout diagram shows them)."""

    buffer_id: int
    title: str
    nbytes: int
    n_steps: int
    blocks: list[Block]
    figures: BufferFigures | None = None
    overlaps: list[tuple[int, int]] = field(default_factory=list)  # indices into blocks
    _offsets: list[int] = field(default_factory=list)
    _max_nbytes: int = 0
    top: int = 0
    """The highest byte drawn (the buffer, or the highest block if it is larger)."""

    def __post_init__(self) -> None:
        self.blocks.sort(key=lambda b: (b.offset, b.first, b.tensor_id))
        self._offsets = [b.offset for b in self.blocks]
        self._max_nbytes = max((b.nbytes for b in self.blocks), default=0)
        self.top = max(self.nbytes, max((b.end for b in self.blocks), default=0))

    def blocks_in(self, lo: int, hi: int) -> list[Block]:
        """Blocks whose bytes intersect ``[lo, hi)``, by offset."""
        start = bisect_left(self._offsets, lo - self._max_nbytes)
        stop = bisect_left(self._offsets, hi)
        return [b for b in self.blocks[start:stop] if b.end > lo and b.nbytes > 0]

    def index_of(self, tensor_id: int) -> int:
        for i, b in enumerate(self.blocks):
            if b.tensor_id == tensor_id:
                return i
        return -1

    def overlapping(self, block: Block) -> list[Block]:
        """Blocks that collide with ``block`` (share bytes while both live)."""
        i = self.blocks.index(block)
        return [self.blocks[b if a == i else a] for a, b in self.overlaps if i in (a, b)]


class MapKey(NamedTuple):
    """Which memory map: a binding's (``plan_id`` -1), or a plan never bound (``binding_id`` -1)."""

    binding_id: int
    plan_id: int


@dataclass(slots=True)
class BindingMap:
    """All panels of one binding, or of a plan never bound (``binding_id`` -1: a worst-case
    reserve, drawn at its offsets; see :func:`build_plan_map`)."""

    binding_id: int
    graph_id: int
    plan_id: int
    n_steps: int
    panels: list[Panel]
    cut_seq: int

    @property
    def planned(self) -> bool:
        return self.binding_id < 0

    @property
    def key(self) -> MapKey:
        return MapKey(self.binding_id, self.plan_id if self.planned else -1)

    @property
    def title(self) -> str:
        """``binding #3`` or ``plan #2 (never bound)``."""
        return f"plan #{self.plan_id} (never bound)" if self.planned else f"binding #{self.binding_id}"

    def panel(self, buffer_id: int) -> Panel | None:
        return next((p for p in self.panels if p.buffer_id == buffer_id), None)


def find_overlaps(blocks: Sequence[Block]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)`` (i < j, blocks sorted by offset) sharing bytes while both live, by
    :func:`vizalloc.analysis.rects.intersecting_pairs` (live ranges ``[first, last)``: ggml's
    both_live), in the order a sweep over the blocks meets them."""
    return intersecting_pairs([(b.offset, b.end, b.first, b.last) for b in blocks])


def build_binding_map(model: TraceModel, binding_id: int) -> BindingMap:
    """The blocks of every buffer the graph of ``binding_id`` uses, right after the binding.

    Raises:
        KeyError: no such binding.
    """
    b = model.bindings[binding_id]
    cut = b.end_seq if b.end_seq != NEVER else model.last_seq
    snap = b.graph if b.graph is not None else model.graphs[b.graph_id].snapshot()
    by_buffer = placed_roots(model, snap, b.plan_id, cut)
    return BindingMap(binding_id, b.graph_id, b.plan_id, snap.n_nodes,
                      _panels(model, by_buffer, b.plan_id, cut, snap.n_nodes, ""), cut)


def build_plan_map(model: TraceModel, plan_id: int) -> BindingMap:
    """The blocks of a plan's own graph at the plan's offsets
    (:func:`vizalloc.analysis.placed.plan_roots`): a worst-case reserve, planned and never
    bound. The buffers the plan sized come first.

    Raises:
        KeyError: no such plan.
    """
    plan = model.plans[plan_id]
    if plan.graph is None:
        raise KeyError(plan_id)
    by_buffer, cut = plan_roots(model, plan_id)
    n = plan.graph.n_nodes
    panels = _panels(model, by_buffer, plan_id, cut, n, f"plan #{plan_id}")
    panels.sort(key=lambda p: not any(b.planned for b in p.blocks))
    return BindingMap(-1, plan.graph_id, plan_id, n, panels, cut)


def _panels(model: TraceModel, by_buffer: dict[int, list[PlacedRoot]], plan_id: int, cut: int, n: int,
            planned_by: str) -> list[Panel]:
    panels = []
    for buffer_id in sorted(by_buffer):
        buf = model.buffers.get(buffer_id)
        title = buffer_title(buffer_id, buf.backend, buf.buft, buf.usage, None) if buf is not None \
            else buffer_title(buffer_id, None, None, None, None)
        blocks = [Block(r.tensor_id, r.info.label, r.info.op, r.info.dtype, shape_text(r.info.ne), r.placement.offset,
                        r.placement.nbytes, r.first, r.last, r.stale_note(),
                        planned_by if planned_by and r.planned else enum_text(r.placement.by),
                        r.placement.binding_id, r.planned)
                  for r in by_buffer[buffer_id]]
        panel = Panel(buffer_id, title, buf.nbytes if buf is not None else 0, n, blocks,
                      buffer_figures(model, buffer_id, by_buffer[buffer_id], plan_id, cut))
        panel.overlaps = find_overlaps(panel.blocks)
        panels.append(panel)
    return panels


def default_panel(bmap: BindingMap, prefer: Iterable[int] = ()) -> Panel | None:
    """The panel to show first: one holding a preferred tensor, else the one with collisions,
    else the one with the most blocks."""
    wanted = set(prefer)
    for p in bmap.panels:
        if any(b.tensor_id in wanted for b in p.blocks):
            return p
    if not bmap.panels:
        return None
    if bmap.planned:   # the buffer the plan sized
        return bmap.panels[0]
    return max(bmap.panels, key=lambda p: (len(p.overlaps), sum(1 for b in p.blocks if b.stale), len(p.blocks)))


