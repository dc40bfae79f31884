"""Plan quality: how good is the memory plan a graph allocator made?

For every plan and buffer slot, from the planner's own decisions (``PlanAlloc``,
``PlanInplace``, ``PlanFree``, in order; a "step" is a decision's position):

* ``plan_bytes`` — the buffer the plan needs (sum of its chunk high-water marks);
* ``lower_bound_bytes`` — the most bytes live at any step (no packing can do better for
  these lifetimes; Pisarchyk & Lee 2020 use the same bound);
* ``greedy_bytes`` — "Greedy by Size for Offset Calculation" (Pisarchyk & Lee, 2020,
  *Efficient Memory Management for Deep Neural Net Inference*, arXiv:2001.03288),
  computed on the same lifetimes and padded sizes: largest first, each at the smallest
  gap among the already placed blocks whose lifetimes overlap it;
* ``fragmentation_bytes`` — at the peak step, free bytes below the highest live byte;
* ``padding_bytes`` — bytes lost to rounding sizes up to the alignment;
* ``live_at_peak`` — the blocks live at the peak, largest first. A block taken over in
  place is one block with several tensors, so reused bytes are counted once.

Chunks (buffer types with a ``max_size``) are added up per slot; the bound and the greedy
plan treat the slot as one arena.

    >>> from vizalloc.analysis.model import build_model
    >>> plan_quality(build_model([]))
    []
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vizalloc.analysis.model import PlanInfo, TraceModel
from vizalloc.trace import events as ev


@dataclass(frozen=True, slots=True)
class Block:
    """Bytes the planner handed out once, and every tensor that used them (in-place chain)."""

    tensor_ids: tuple[int, ...]
    names: tuple[str, ...]
    slot: int
    chunk: int
    offset: int
    nbytes: int
    start: int  # step allocated
    end: int    # step freed (exclusive); the number of steps when never freed
    #: the step at which each of ``tensor_ids`` took the bytes (``start`` for the first)
    joined: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SlotQuality:
    """One buffer slot of one plan (with the slots sharing its allocator, if any)."""

    slot: int
    plan_bytes: int
    lower_bound_bytes: int
    greedy_bytes: int
    peak_step: int
    fragmentation_bytes: int
    padding_bytes: int
    n_blocks: int
    live_at_peak: tuple[Block, ...]

    @property
    def vs_lower_bound(self) -> float:
        """plan bytes / lower bound (1.0 is optimal)."""
        return self.plan_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0

    @property
    def vs_greedy(self) -> float:
        return self.plan_bytes / self.greedy_bytes if self.greedy_bytes else 1.0


@dataclass(frozen=True, slots=True)
class PlanQuality:
    plan_id: int
    galloc_id: int
    graph_id: int
    slots: tuple[SlotQuality, ...]

    @property
    def plan_bytes(self) -> int:
        return sum(s.plan_bytes for s in self.slots)

    @property
    def lower_bound_bytes(self) -> int:
        return sum(s.lower_bound_bytes for s in self.slots)

    @property
    def greedy_bytes(self) -> int:
        return sum(s.greedy_bytes for s in self.slots)


def peak_live(ranges: Iterable[tuple[int, int, int]]) -> tuple[int, int | None]:
    """The most bytes live at once over live ranges ``(start, end, nbytes)``, each live on the
    steps ``start <= s < end``, and the first step where (``(0, None)``: nothing ever live).
    A range ending at the step where another starts is not live with it (ggml's both_live).

    One sweep over the steps where the live bytes change. No packing of the ranges into one
    buffer can use fewer bytes than the peak: it is the lower bound the plan views draw.

        >>> peak_live([(0, 2, 100), (1, 3, 50), (2, 4, 100)])
        (150, 1)
    """
    deltas: dict[int, int] = {}
    for start, end, nbytes in ranges:
        if nbytes and start < end:
            deltas[start] = deltas.get(start, 0) + nbytes
            deltas[end] = deltas.get(end, 0) - nbytes
    live = peak = 0
    peak_step: int | None = None
    for s in sorted(deltas):
        live += deltas[s]
        if live > peak:
            peak, peak_step = live, s
    return peak, peak_step


def plan_blocks(model: TraceModel, plan: PlanInfo) -> tuple[list[Block], int]:
    """The plan's blocks with their lifetimes, and the number of steps."""
    owner: dict[int, int] = {}             # tensor -> block index
    members: list[list[int]] = []
    joined: list[list[int]] = []           # per block: the step each member took the bytes
    fields: list[list[int]] = []           # slot, chunk, offset, nbytes, start, end
    step = 0
    for d in plan.decisions:
        if isinstance(d, ev.PlanAlloc):
            owner[d.tensor_id] = len(members)
            members.append([d.tensor_id])
            joined.append([step])
            fields.append([d.slot, d.chunk, d.offset, d.nbytes, step, -1])
        elif isinstance(d, ev.PlanInplace):
            b = owner.get(d.parent_id)
            if b is not None:
                owner[d.tensor_id] = b
                members[b].append(d.tensor_id)
                joined[b].append(step)
        elif isinstance(d, ev.PlanFree):
            b = owner.get(d.tensor_id)
            if b is not None and fields[b][5] < 0:
                fields[b][5] = step
        else:
            continue
        step += 1
    blocks = []
    for m, j, (slot, chunk, offset, nbytes, start, end) in zip(members, joined, fields):
        blocks.append(Block(tuple(m), tuple(model.label(t) for t in m), slot, chunk, offset, nbytes, start,
                            end if end >= 0 else step, tuple(j)))
    return blocks, step


def greedy_by_size(blocks: list[Block], alignment: int = 1) -> int:
    """Arena size of Pisarchyk & Lee's greedy-by-size offset calculation for these lifetimes."""
    order = sorted(range(len(blocks)), key=lambda i: (-blocks[i].nbytes, blocks[i].start, i))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end offset, start step, end step), by offset
    total = 0
    for i in order:
        b = blocks[i]
        size = b.nbytes
        best_off = -1
        best_gap = None
        prev_end = 0
        for off, off_end, s, e in placed:
            if s >= b.end or b.start >= e:
                continue  # lifetimes do not overlap
            gap = off - prev_end
            if gap >= size and (best_gap is None or gap < best_gap):
                best_gap, best_off = gap, prev_end
            prev_end = max(prev_end, off_end)
        if best_off < 0:
            best_off = prev_end
        if alignment > 1:
            best_off = (best_off + alignment - 1) // alignment * alignment
        insort(placed, (best_off, best_off + size, b.start, b.end))
        total = max(total, best_off + size)
    return total


def _shares_arena(a: list[Block], b: list[Block]) -> bool:
    """Whether two slots' blocks never overlap while both are live (one allocator behind both)."""
    for x in a:
        for y in b:
            if x.chunk == y.chunk and x.start < y.end and y.start < x.end \
                    and x.offset < y.offset + y.nbytes and y.offset < x.offset + x.nbytes:
                return False
    return True


def arenas(plan: PlanInfo, blocks: list[Block]) -> list[list[int]]:
    """Slots grouped by the allocator behind them. ``PlanEnd`` repeats the chunk sizes of slots
    that share a buffer type (``ggml_gallocr_new_n`` with the same buft twice); equal sizes
    alone could be a coincidence, so slots are merged only when their blocks also never
    overlap while live."""
    by_slot: dict[int, list[Block]] = {}
    for b in blocks:
        by_slot.setdefault(b.slot, []).append(b)
    slots = sorted(set(by_slot) | set(range(len(plan.chunk_sizes))))
    groups: list[list[int]] = []
    for s in slots:
        sizes = plan.chunk_sizes[s] if s < len(plan.chunk_sizes) else None
        for g in groups:
            g0 = g[0]
            if sizes and g0 < len(plan.chunk_sizes) and plan.chunk_sizes[g0] == sizes and all(
                    _shares_arena(by_slot.get(s, []), by_slot.get(o, [])) for o in g):
                g.append(s)
                break
        else:
            groups.append([s])
    return groups


def lower_bound(blocks: Iterable[Block]) -> tuple[int, int | None]:
    """The lower bound of a plan's blocks (all of a slot's, or one chunk's): the most bytes
    they need at once over the planner's own lifetimes, sizes as the planner padded them,
    and the first step where. This is the one definition every view shows (the summary per
    plan, the layout diagram and the TUI per buffer)."""
    return peak_live((b.start, b.end, b.nbytes) for b in blocks)


def buffer_lower_bound(model: TraceModel, plan_id: int, slot: int, chunk: int) -> int | None:
    """:func:`lower_bound` of the blocks a plan put in one buffer (its ``slot``, with the slots
    sharing that allocator, and ``chunk``); None when the plan has no such slot."""
    plan = model.plans.get(plan_id)
    if plan is None or slot < 0:
        return None
    blocks, _ = plan_blocks(model, plan)
    group = next((g for g in arenas(plan, blocks) if slot in g), None)
    if group is None:
        return None
    return lower_bound(b for b in blocks if b.slot in group and b.chunk == chunk)[0]


def _slot_quality(model: TraceModel, plan: PlanInfo, group: list[int], blocks: list[Block],
                  n_steps: int) -> SlotQuality:
    slot = group[0]
    mine = [b for b in blocks if b.slot in group]
    peak, at = lower_bound(mine)
    peak_step = at if at is not None else 0
    at_peak = tuple(sorted((b for b in mine if b.start <= peak_step < b.end), key=lambda b: (-b.nbytes, b.offset)))
    # fragmentation at the peak: holes below the highest live byte (per chunk)
    top: dict[int, int] = {}
    used: dict[int, int] = {}
    for b in at_peak:
        top[b.chunk] = max(top.get(b.chunk, 0), b.offset + b.nbytes)
        used[b.chunk] = used.get(b.chunk, 0) + b.nbytes
    frag = sum(top[c] - used[c] for c in top)
    padding = 0
    for b in mine:
        info = model.tensors.get(b.tensor_ids[0])
        if info is not None and b.nbytes >= info.nbytes:
            padding += b.nbytes - info.nbytes
    plan_bytes = sum(plan.chunk_sizes[slot]) if slot < len(plan.chunk_sizes) else \
        max((b.offset + b.nbytes for b in mine), default=0)
    align = plan.alignments[slot] if slot < len(plan.alignments) else 1
    return SlotQuality(slot, plan_bytes, peak, greedy_by_size(mine, align), peak_step, frag, padding, len(mine),
                       at_peak)


def plan_quality(model: TraceModel, plan_id: int | None = None) -> list[PlanQuality]:
    """Quality of every plan (or of one), in plan order."""
    plans = [model.plans[plan_id]] if plan_id is not None else sorted(model.plans.values(),
                                                                      key=lambda p: p.begin_seq)
    out = []
    # a loop that re-plans the same graphs again and again makes equal plans: the greedy
    # packing (quadratic in the blocks) is computed once per distinct shape of plan
    seen: dict[Any, tuple[SlotQuality, ...]] = {}
    for plan in plans:
        blocks, n_steps = plan_blocks(model, plan)
        key = (plan.chunk_sizes, plan.alignments, tuple((b.slot, b.chunk, b.offset, b.nbytes, b.start, b.end,
                                                         b.tensor_ids, _padding_key(model, b)) for b in blocks))
        slots = seen.get(key)
        if slots is None:
            slots = seen[key] = tuple(_slot_quality(model, plan, g, blocks, n_steps) for g in arenas(plan, blocks))
        out.append(PlanQuality(plan.plan_id, plan.galloc_id, plan.graph_id, slots))
    return out


def _padding_key(model: TraceModel, b: Block) -> int:
    info = model.tensors.get(b.tensor_ids[0])
    return info.nbytes if info is not None else -1
