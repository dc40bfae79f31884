"""Differences between two traces (or two plans): tensors whose offset or size changed,
plans' buffer sizes, hazards added or removed, peak buffer bytes.

Tensor ids differ between runs, so tensors are matched by **name and position**: the
k-th tensor named ``n`` that a plan allocates in A is matched with the k-th one named
``n`` in B. Plans are matched per graph allocator, in order (the i-th allocator to plan
in A with the i-th in B; its j-th plan with the j-th). Hazards are matched by kind,
tensor names and cause.

    >>> from vizalloc.analysis.model import build_model
    >>> d = diff_models(build_model([]), build_model([]))
    >>> d.is_empty
    True
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from vizalloc.analysis.hazards import Hazard, find_hazards
from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.records import PlanInfo
from vizalloc.trace import events as ev


@dataclass(frozen=True, slots=True)
class TensorChange:
    """A tensor planned in A and/or B; -1 offsets/sizes where it is missing on one side."""

    name: str
    position: int  # the k-th tensor of that name in the plan
    slot_a: int
    offset_a: int
    nbytes_a: int
    slot_b: int
    offset_b: int
    nbytes_b: int

    @property
    def status(self) -> str:
        if self.offset_a < 0:
            return "added"
        if self.offset_b < 0:
            return "removed"
        return "changed"

    @property
    def delta(self) -> int:
        """What it adds to B's plan over A's: its bytes when added, minus them when removed."""
        return max(self.nbytes_b, 0) - max(self.nbytes_a, 0)

    def explains(self) -> tuple[int, int, str, int]:
        """Sort key: what explains a plan's size first (the most bytes removed, added or resized),
        moves of the same bytes last."""
        return (-abs(self.delta), _STATUS_ORDER[self.change], self.name, self.position)

    @property
    def change(self) -> str:
        """``status``, with a change told apart as ``resized`` or ``moved`` (same bytes elsewhere)."""
        if self.status != "changed":
            return self.status
        return "resized" if self.nbytes_a != self.nbytes_b else "moved"


_STATUS_ORDER = {"removed": 0, "added": 1, "resized": 2, "moved": 3}


@dataclass(frozen=True, slots=True)
class PlanDiff:
    plan_a: int
    plan_b: int
    bytes_a: tuple[int, ...]  # per slot
    bytes_b: tuple[int, ...]
    tensors: tuple[TensorChange, ...]

    @property
    def size_delta(self) -> int:
        return sum(self.bytes_b) - sum(self.bytes_a)

    @property
    def is_empty(self) -> bool:
        return not self.tensors and self.bytes_a == self.bytes_b

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per change kind: (tensors, bytes they add to B's plan)."""
        out: dict[str, tuple[int, int]] = {}
        for t in self.tensors:
            n, b = out.get(t.change, (0, 0))
            out[t.change] = (n + 1, b + t.delta)
        return {k: out[k] for k in _STATUS_ORDER if k in out}


@dataclass(frozen=True, slots=True)
class TraceDiff:
    plans: tuple[PlanDiff, ...]
    unmatched_plans_a: tuple[int, ...]
    unmatched_plans_b: tuple[int, ...]
    hazards_added: tuple[Hazard, ...]
    hazards_removed: tuple[Hazard, ...]
    peak_buffer_bytes_a: int
    peak_buffer_bytes_b: int
    #: the runs' settings that differ (``settings_diff``): (setting, A's value, B's value)
    settings: tuple[tuple[str, str | None, str | None], ...] = ()

    @property
    def is_empty(self) -> bool:
        return (all(p.is_empty for p in self.plans) and not self.unmatched_plans_a and not self.unmatched_plans_b
                and not self.hazards_added and not self.hazards_removed
                and self.peak_buffer_bytes_a == self.peak_buffer_bytes_b)


def _allocations(model: TraceModel, plan: PlanInfo) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(name, k) -> (slot, offset, padded bytes) of every tensor the plan placed (in-place ones too)."""
    seen: Counter[str] = Counter()
    out: dict[tuple[str, int], tuple[int, int, int]] = {}
    where: dict[int, tuple[int, int, int]] = {}
    for d in plan.decisions:
        if isinstance(d, ev.PlanAlloc):
            where[d.tensor_id] = (d.slot, d.offset, d.nbytes)
        elif isinstance(d, ev.PlanInplace):
            parent = where.get(d.parent_id)
            where[d.tensor_id] = (d.slot, d.offset, parent[2] if parent else 0)
        else:
            continue
        name = model.label(d.tensor_id)
        key = (name, seen[name])
        seen[name] += 1
        out[key] = where[d.tensor_id]
    return out


def diff_plans(a: TraceModel, plan_a: PlanInfo, b: TraceModel, plan_b: PlanInfo) -> PlanDiff:
    """Tensors whose slot, offset or size differ between two plans, and the buffer sizes."""
    alloc_a, alloc_b = _allocations(a, plan_a), _allocations(b, plan_b)
    changes = []
    for key in set(alloc_a) | set(alloc_b):
        sa, oa, na = alloc_a.get(key, (-1, -1, -1))
        sb, ob, nb = alloc_b.get(key, (-1, -1, -1))
        if (sa, oa, na) != (sb, ob, nb):
            changes.append(TensorChange(key[0], key[1], sa, oa, na, sb, ob, nb))
    changes.sort(key=TensorChange.explains)
    return PlanDiff(plan_a.plan_id, plan_b.plan_id, tuple(sum(c) for c in plan_a.chunk_sizes),
                    tuple(sum(c) for c in plan_b.chunk_sizes), tuple(changes))


def _plans_by_allocator(model: TraceModel) -> list[list[PlanInfo]]:
    order: dict[int, list[PlanInfo]] = {}
    for p in sorted(model.plans.values(), key=lambda p: p.begin_seq):
        order.setdefault(p.galloc_id, []).append(p)
    return list(order.values())


def peak_buffer_bytes(model: TraceModel) -> int:
    """The most bytes held in buffers at once over the trace."""
    deltas: list[tuple[int, int]] = []
    for buf in model.buffers.values():
        deltas.append((buf.alloc_seq, buf.nbytes))
        if buf.freed_seq < (1 << 62):
            deltas.append((buf.freed_seq, -buf.nbytes))
    live = peak = 0
    for _, d in sorted(deltas):
        live += d
        peak = max(peak, live)
    return peak


def run_settings(model: TraceModel, argv: Sequence[str] = ()) -> dict[str, str]:
    """The settings a run was made with, as its command line gave them: ``--name value`` (or
    ``--name=value``; a flag alone has the value ``""``), and the other words by position
    (``#1``, ...). The command of the captured process (``ProcessCaptured.program``) where the
    trace has one, else ``argv`` (the trace header's).

        >>> run_settings(TraceModel([]), ["x.py", "--ctx", "6144", "-v", "--fa=on"])
        {'#0': 'x.py', '--ctx': '6144', '-v': '', '--fa': 'on'}
    """
    words: Sequence[str] = argv
    if model.captured:
        try:
            words = shlex.split(model.captured[0].program)
        except ValueError:
            words = model.captured[0].program.split()
    out: dict[str, str] = {}
    i = n = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-") and len(w) > 1:
            name, eq, value = w.partition("=")
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value = words[i + 1]
                i += 1
            out[name] = value
        else:
            out[f"#{n}"] = w
            n += 1
        i += 1
    if model.captured and model.captured[0].ggml_version:
        out["ggml"] = model.captured[0].ggml_version
    return out


def settings_diff(a: dict[str, str], b: dict[str, str]) -> tuple[tuple[str, str | None, str | None], ...]:
    """The settings whose values differ (None: not given), in A's order then B's.

        >>> settings_diff({"--ctx": "4096", "--generate": "8"}, {"--generate": "16", "--ubatch": "96"})
        (('--ctx', '4096', None), ('--generate', '8', '16'), ('--ubatch', None, '96'))
    """
    keys = list(dict.fromkeys([*a, *b]))
    return tuple((k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k))


def _hazard_key(model: TraceModel, h: Hazard) -> tuple[str, str, str, str]:
    return (h.kind.value, h.tensor.name if h.tensor else "", h.other.name if h.other else "", h.cause)


def diff_models(a: TraceModel, b: TraceModel, *, hazards_a: list[Hazard] | None = None,
                hazards_b: list[Hazard] | None = None, argv_a: Sequence[str] = (),
                argv_b: Sequence[str] = ()) -> TraceDiff:
    """Everything that differs between two traces' models (``argv_*``: the command lines their
    headers record, for traces not captured from a process)."""
    plans = []
    un_a: list[int] = []
    un_b: list[int] = []
    ga, gb = _plans_by_allocator(a), _plans_by_allocator(b)
    for i in range(max(len(ga), len(gb))):
        pa = ga[i] if i < len(ga) else []
        pb = gb[i] if i < len(gb) else []
        for j in range(max(len(pa), len(pb))):
            if j < len(pa) and j < len(pb):
                plans.append(diff_plans(a, pa[j], b, pb[j]))
            elif j < len(pa):
                un_a.append(pa[j].plan_id)
            else:
                un_b.append(pb[j].plan_id)
    ha = find_hazards(a) if hazards_a is None else hazards_a
    hb = find_hazards(b) if hazards_b is None else hazards_b
    count_a = Counter(_hazard_key(a, h) for h in ha)
    count_b = Counter(_hazard_key(b, h) for h in hb)
    added = []
    removed = []
    left_b = count_b - count_a
    left_a = count_a - count_b
    for h in hb:
        k = _hazard_key(b, h)
        if left_b[k] > 0:
            left_b[k] -= 1
            added.append(h)
    for h in ha:
        k = _hazard_key(a, h)
        if left_a[k] > 0:
            left_a[k] -= 1
            removed.append(h)
    return TraceDiff(tuple(plans), tuple(un_a), tuple(un_b), tuple(added), tuple(removed),
                     peak_buffer_bytes(a), peak_buffer_bytes(b),
                     settings_diff(run_settings(a, argv_a), run_settings(b, argv_b)))
