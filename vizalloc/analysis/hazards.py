"""Hazards: what went wrong with the bytes, found from the model of a trace.

Each kind has one definition, ``DEFINITIONS`` below: every report states it, and the
README's hazards table says the same words (``tests/analysis/test_definitions.py``
holds them equal).
Where they are found:

* ``stale-overlap`` — at bindings (``static.py``), with ggml's ``both_live`` rule
  (``liveness.py``);
* ``use-after-reuse`` — from the per-byte-range last-writer map of the computes
  (``dynamic.py``); at a binding, two freshly planned roots that share bytes while both
  live are reported as a *predicted* use-after-reuse when no compute of it shows it;
* ``dangling`` — reads and writes (``dynamic.py``) and roots kept by a binding
  (``static.py``); accesses are still tracked: vizalloc keeps freed bytes reachable, as a
  quarantine does;
* ``uninitialized-read``, ``clobbered-output`` — ``dynamic.py``;
* ``plan-mismatch`` — ``static.graph_signature`` per position, ``plan-overflow`` — the
  leaf entries of a reused plan, ``replan`` — the ``Replan`` events (``static.py``);
* ``replay-mismatch`` — the ``ReplayMismatch`` events of a captured process (``static.py``);
* ``incomplete-capture`` — the ``CaptureIncomplete`` events of a captured process (``static.py``).

Equal findings (same kind, tensors and buffer) are merged into one ``Hazard`` whose
``occurrences`` counts them and whose ``steps`` names the bindings or computes.

    >>> from vizalloc.analysis.model import build_model
    >>> find_hazards(build_model([]))
    []
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.records import Placement
from vizalloc.gcpause import gc_paused
from vizalloc.text import inert
from vizalloc.trace import events as ev

#: at most this many step ids are kept per merged hazard (``occurrences`` stays exact)
MAX_STEPS = 32

#: the step id of an occurrence that belongs to the compute that comes next (a host access
#: that prepares it); ``Collector.settle`` replaces it once that compute begins
NEXT_STEP = -3


class HazardKind(str, enum.Enum):
    """The kinds of hazard (values as the CLI and JSON write them)."""

    STALE_OVERLAP = "stale-overlap"
    USE_AFTER_REUSE = "use-after-reuse"
    DANGLING = "dangling"
    UNINITIALIZED_READ = "uninitialized-read"
    CLOBBERED_OUTPUT = "clobbered-output"
    PLAN_MISMATCH = "plan-mismatch"
    PLAN_OVERFLOW = "plan-overflow"
    REPLAY_MISMATCH = "replay-mismatch"
    INCOMPLETE_CAPTURE = "incomplete-capture"
    REPLAN = "replan"


_KIND_ORDER = {k: i for i, k in enumerate(HazardKind)}

#: what each kind means: one definition, stated in every report and in the README's table
DEFINITIONS: dict[HazardKind, str] = {
    HazardKind.STALE_OVERLAP:
        "at a binding, two memory roots of the bound graph share bytes while both are live in it (one is "
        "written while the other still has a reader to come), and at least one of them keeps a stale "
        "placement from an earlier binding (its allocator has re-planned, been reset or freed its buffer "
        "since), whose bytes the new plan never saw; the other is placed by this binding, or is stale too "
        "(an earlier plan packed both for a graph in which their lives did not meet) — the seed bug",
    HazardKind.USE_AFTER_REUSE:
        "a node (or a copy) reads a tensor whose bytes were last written by a tensor of another memory root "
        "since it was written (found from the byte-range last-writer map during compute, or predicted at a "
        "binding from two freshly placed roots that share bytes while both live)",
    HazardKind.DANGLING:
        "a tensor is read, written or kept in a bound graph while its buffer has been freed (or replaced by "
        "a larger one)",
    HazardKind.UNINITIALIZED_READ:
        "a node reads bytes of a graph-allocated tensor that nothing wrote since the tensor was placed",
    HazardKind.CLOBBERED_OUTPUT:
        "the user reads (tensor_get) a tensor whose bytes another tensor overwrote after it was written",
    HazardKind.PLAN_MISMATCH:
        "a binding applied a plan made for another graph whose node or leaf at some position has another "
        "op, type, flags or source positions (names and shapes do not count: ggml checks sizes only); the "
        "report lists every position that differs",
    HazardKind.PLAN_OVERFLOW:
        "a binding placed a tensor at its plan entry's offset although it is larger than the entry: ggml "
        "re-validates node and source entries only, so a leaf that no node consumes can outgrow its entry, "
        "and its extra bytes overlap the tensors the plan put after it, whether or not anyone reads them",
    HazardKind.REPLAY_MISMATCH:
        "in a trace captured from a real ggml process, vizalloc's replay of one of its allocator calls "
        "disagreed with what the process did (a tensor's buffer or offset, a buffer's size, the call's "
        "result); the report names both values and the ggml version, and the trace keeps the real ones",
    HazardKind.INCOMPLETE_CAPTURE:
        "a trace captured from a real ggml process does not hold all of it: the import stopped at a call or "
        "tensor it could not read (the report names the call, the tensor and what was missing), or nothing was "
        "captured at all (ggml linked statically, or not used); the trace holds what came before, so no verdict "
        "covers the rest",
    HazardKind.REPLAN:
        "every re-plan with its cause (not the first plan); a re-plan before (nearly) every binding of one "
        "allocator is reported once more as churn",
}


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
        return f"'{inert(self.name)}' (#{self.tensor_id})" if self.name else f"#{self.tensor_id}"

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


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` sorted, with those that overlap or touch joined (a ``Hazard``'s ``ranges``)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def qlabel(model: TraceModel, tensor_id: int) -> str:
    """A tensor's name quoted and inert (``'h_pre'``), or ``#id`` when it has none."""
    info = model.tensors.get(tensor_id)
    if info is None or not info.name:
        return f"#{tensor_id}"
    return f"'{inert(info.name)}'"


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
        placement.offset, placement.nbytes, ev.enum_text(placement.by), placement.seq, placement.loc, placement.binding_id, placement.stale_reason,
    )


@dataclass
class Collector:
    """Merges equal findings: the first occurrence is kept, later ones are counted.

    A finding is added with a function that makes its ``Hazard``; that function runs in
    ``hazards()``, once every event has been seen, so a report names tensors as the trace
    leaves them (their last name, a placement's final staleness) whether the trace was
    analysed in one piece or as a stream. Whatever it must know of the moment of the finding
    (the state of the pass) is captured when it is added.

    Plan-predicted use-after-reuse findings (``predict``) wait apart: one that a compute
    shows (the access pass found the same pair, in either order) is dropped in ``hazards()``.
    """

    #: key -> [make, occurrences, last_seq, steps, compute id it settled on (None: its own)]
    found: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict)
    #: plan-predicted use-after-reuse findings, the same way
    predicted: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict)
    #: findings seen so far, repeats included (tells a caller whether a check found anything)
    n_findings: int = 0
    #: keys with an occurrence waiting for its step (``NEXT_STEP``) -> whether it is the first
    waiting: dict[tuple[Any, ...], bool] = field(default_factory=dict)

    def bump(self, key: tuple[Any, ...], seq: int, step: int) -> bool:
        """Count another occurrence; False when the key is new (the caller must ``add``)."""
        entry = self.found.get(key)
        if entry is None:
            return False
        self.n_findings += 1
        entry[1] += 1
        if seq > entry[2]:
            entry[2] = seq
        if step == NEXT_STEP:
            self.waiting.setdefault(key, False)
        else:
            _add_step(entry[3], step)
        return True

    def add(self, key: tuple[Any, ...], make: Callable[[], Hazard], step: int, seq: int) -> None:
        """A new finding first seen at ``seq``; ``make()`` (called in ``hazards()``) must give a
        ``Hazard`` whose ``seq`` is ``seq``."""
        self.n_findings += 1
        self.found[key] = [make, 1, seq, [step] if step >= 0 else [], None]
        if step == NEXT_STEP:
            self.waiting[key] = True

    def predict(self, key: tuple[Any, ...], make: Callable[[], Hazard], step: int, seq: int) -> None:
        """A use-after-reuse predicted from a plan (``key`` = kind, victim, other, buffer): kept
        once, unless the pair (in either order) was already predicted or is found by the access
        pass, now or later."""
        rev = (key[0], key[2], key[1], key[3])
        if key in self.found or rev in self.found or key in self.predicted or rev in self.predicted:
            return
        self.n_findings += 1
        self.predicted[key] = [make, 1, seq, [step] if step >= 0 else [], None]

    def settle(self, compute_id: int) -> None:
        """The compute the waiting occurrences belong to has begun (-1: none came): give them
        its id as their step, and as the hazard's ``compute_id`` where it was the first."""
        if compute_id >= 0:
            for key, first in self.waiting.items():
                entry = self.found[key]
                _add_step(entry[3], compute_id)
                if first:
                    entry[4] = compute_id
        self.waiting.clear()

    def hazards(self) -> list[Hazard]:
        out = []
        found = self.found
        entries = list(found.values())
        for key, entry in self.predicted.items():
            if key not in found and (key[0], key[2], key[1], key[3]) not in found:
                entries.append(entry)
        for make, occurrences, last_seq, steps, compute_id in entries:
            h: Hazard = make()
            if compute_id is not None:
                h = replace(h, compute_id=compute_id)
            out.append(replace(h, occurrences=occurrences, last_seq=last_seq, steps=tuple(steps)))
        return out


def _add_step(steps: list[int], step: int) -> None:
    if step >= 0 and len(steps) < MAX_STEPS and (not steps or steps[-1] != step):
        steps.append(step)


def find_hazards(model: TraceModel, *, progress: Callable[[int, int], None] | None = None) -> list[Hazard]:
    """Every hazard in the trace, sorted by first step, kind, tensor ids and buffer.

    ``progress(done, total)`` is called now and then during the byte-map pass (events done).
    """
    from vizalloc.analysis.dynamic import scan_accesses
    from vizalloc.analysis.static import check_bindings, check_replans, check_replay

    col = Collector()
    with gc_paused():
        scan_accesses(model, col, progress=progress)
        check_bindings(model, col)
        check_replans(model, col)
        check_replay(model, col)
    hazards = col.hazards()
    hazards.sort(key=Hazard.sort_key)
    return hazards
