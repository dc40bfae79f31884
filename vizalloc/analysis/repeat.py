"""Repetition: the same work done step after step, found in a trace's columns.

A decode loop binds the same graph with the same plan token after token; a real run's
trace is that step thousands of times with new ids. Here a column batch
(``vizalloc.trace.columns.ColumnBatch``) is cut into *steps* (each ends at a graph
compute's ``ComputeEnd`` and the ``TensorGet`` reads right after it), and consecutive
steps with the same kinds of events are compared column by column. A stretch of steps is
a *repetition* when each step is the one before with

* every id field moved by the same amount for all ids of one kind (tensors, graphs,
  bindings, computes, ... ``events.ID_FIELDS``), ids of the step's own objects moving, ids
  of older objects (weights, buffers, the allocator) staying, and every moving id above
  every staying one of its kind (so ids keep their order);
* ``seq`` moved by the same amount;
* every other field equal, except times (``t_ns``, ``events.TIME_FIELDS``).

Such a stretch is a ``Repetition``: the same ``Shift`` (per id kind: the amount, and the
threshold below which ids stay) turns each step into the next. Whether the analysis may
skip it is the stream analysis' decision (``stream.py``): only a step that sees nothing
of the step before it can be analysed once and counted again.

    >>> Shift({"tensor": (100, 16)}, 50).id("tensor", 120), Shift({"tensor": (100, 16)}, 50).id("tensor", 7)
    (136, 7)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vizalloc.trace import events as ev
from vizalloc.trace.columns import ColumnBatch, KindColumns
from vizalloc.trace.schema import SCHEMA

_COMPUTE_END = SCHEMA[ev.ComputeEnd].index
#: kinds that stay with the compute before them: what the user reads back after it
_TRAILING = np.zeros(256, dtype=bool)
_TRAILING[SCHEMA[ev.TensorGet].index] = True


@dataclass(frozen=True, slots=True)
class Shift:
    """How one step becomes the next: per id kind ``(threshold, amount)`` (ids at or above the
    threshold move by the amount, others stay), and the move of ``seq``."""

    ids: dict[str, tuple[int, int]]
    seq: int

    def id(self, kind: str, value: int, times: int = 1) -> int:
        """``value`` (an id of ``kind``) in the step ``times`` steps later."""
        rule = self.ids.get(kind)
        if rule is None or value < rule[0]:
            return value
        return value + rule[1] * times


@dataclass(frozen=True, slots=True)
class Repetition:
    """Steps ``steps[first..last]`` of a batch (inclusive), each one the one before moved by ``shift``."""

    first: int
    last: int
    shift: Shift

    @property
    def n_steps(self) -> int:
        return self.last - self.first + 1


def cut_steps(batch: ColumnBatch) -> list[tuple[int, int]]:
    """The batch's events ``[lo, hi)`` cut into steps: each ends at a ``ComputeEnd`` and the
    ``TensorGet`` events right after it. The events after the last cut form a last,
    unfinished step (the next batch may continue it)."""
    kinds = batch.kind_of
    ends = np.flatnonzero(kinds == _COMPUTE_END) + 1
    if len(ends) == 0:
        return [(0, batch.n)] if batch.n else []
    trailing = _TRAILING[kinds]
    out: list[tuple[int, int]] = []
    lo = 0
    n = batch.n
    for end in ends.tolist():
        if end <= lo:
            continue
        while end < n and trailing[end]:
            end += 1
        out.append((lo, end))
        lo = end
    if lo < n:
        out.append((lo, n))
    return out


def repetitions(batch: ColumnBatch, steps: Sequence[tuple[int, int]], min_steps: int = 3) -> list[Repetition]:
    """Stretches of at least ``min_steps`` consecutive steps of which each is the one before moved
    by one ``Shift`` (see the module docstring), in order, not overlapping."""
    out: list[Repetition] = []
    n = len(steps)
    i = 0
    shapes = [bytes(batch.kind_of[lo:hi]) for lo, hi in steps]
    while i < n:
        j = i + 1
        while j < n and shapes[j] == shapes[i]:
            j += 1
        if j - i >= min_steps:
            out.extend(_arithmetic(batch, steps, i, j, min_steps))
        i = j
    return out


def _arithmetic(batch: ColumnBatch, steps: Sequence[tuple[int, int]], a: int, b: int,
                min_steps: int) -> list[Repetition]:
    """Steps ``a..b-1`` (all of the same shape) split into stretches where one Shift holds."""
    lo = steps[a][0]
    hi = steps[b - 1][1]
    n_steps = b - a
    # per kind: its events in these steps, one row per step (every step has as many)
    tables: list[tuple[KindColumns, int, int]] = []
    for kc in batch.by_kind.values():
        s, e = np.searchsorted(kc.index, [lo, hi]).tolist()
        if e > s:
            tables.append((kc, s, e))
    # ok[p]: steps a+p and a+p+1 differ as steps a+p-1 and a+p do (second differences zero)
    same = np.ones(max(n_steps - 2, 0), dtype=bool)
    first_diff: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}   # id kind -> (diff, values) pieces
    seq_moves: list[np.ndarray] = []
    plain_ok = np.ones(max(n_steps - 1, 0), dtype=bool)
    for kc, s, e in tables:
        per = (e - s) // n_steps
        name = kc.cls.__name__
        _rows(kc.seq[s:e], n_steps, per, None, same, plain_ok, seq_moves, None)
        for field in kc.plan.schema.fields:
            col = kc.cols[field][s:e]
            if (name, field) in ev.TIME_FIELDS:
                continue
            id_kind = ev.ID_FIELDS.get(field)
            items = kc.items.get(field)
            if items is not None:
                # the counts are plain values; the items are ids or plain values
                _rows(col, n_steps, per, None, same, plain_ok, None, None)
                starts, values = items
                a0, a1 = int(starts[s]), int(starts[e])
                totals = starts[s + per:e + 1:per] - starts[s:e + 1 - per:per]
                if len(totals) and (totals != totals[0]).any():
                    plain_ok[:] = False  # steps with other numbers of items: rows do not line up
                    continue
                if a1 > a0:
                    flat = values[a0:a1]
                    _rows(flat, n_steps, (a1 - a0) // n_steps, id_kind, same, plain_ok, None, first_diff)
                continue
            _rows(col, n_steps, per, id_kind, same, plain_ok, None, first_diff)
    # the stretches where consecutive differences agree and plain values never change
    out: list[Repetition] = []
    p = 0
    while p < n_steps - 1:
        if not plain_ok[p]:
            p += 1
            continue
        q = p
        while q + 1 < n_steps - 1 and plain_ok[q + 1] and same[q]:
            q += 1
        # steps a+p .. a+q+1 form one arithmetic stretch
        if q + 2 - p >= min_steps:
            shift = _shift(first_diff, seq_moves, p)
            if shift is not None:
                out.append(Repetition(a + p, a + q + 1, shift))
        p = q + 1
    return out


def _rows(col: np.ndarray, n_steps: int, per: int, id_kind: str | None, same: np.ndarray, plain_ok: np.ndarray,
          seq_moves: list[np.ndarray] | None, first_diff: dict[str, list[tuple[np.ndarray, np.ndarray]]] | None
          ) -> None:
    """Compare one column's rows (one per step): plain values must not change; ids (and seq)
    must change the same way from each step to the next."""
    if per == 0:
        return
    m = col.reshape(n_steps, per)
    d = np.diff(m, axis=0)
    if seq_moves is None and id_kind is None:
        plain_ok &= ~(d != 0).any(axis=1)
        return
    if len(d) > 1:
        same &= ~(d[1:] != d[:-1]).any(axis=1)
    if seq_moves is not None:
        # every event moves by the same amount
        plain_ok &= ~(d != d[:, :1]).any(axis=1)
        seq_moves.append(d[:, 0])
        return
    assert first_diff is not None and id_kind is not None
    first_diff.setdefault(id_kind, []).append((d, m[:-1]))


def _shift(first_diff: dict[str, list[tuple[np.ndarray, np.ndarray]]], seq_moves: list[np.ndarray],
           p: int) -> Shift | None:
    """The Shift between steps p and p+1 of a stretch (the same for the whole stretch), or None
    when the ids do not move as one (one amount per id kind, moving ids above staying ones)."""
    if not seq_moves:
        return None
    seq = int(seq_moves[0][p])
    if seq <= 0 or any(int(m[p]) != seq for m in seq_moves):
        return None
    ids: dict[str, tuple[int, int]] = {}
    for kind, pieces in first_diff.items():
        moves = np.concatenate([d[p] for d, _ in pieces])
        values = np.concatenate([v[p] for _, v in pieces])
        moving = moves != 0
        if not moving.any():
            continue
        amounts = np.unique(moves[moving])
        if len(amounts) != 1 or int(amounts[0]) <= 0:
            return None
        threshold = int(values[moving].min())
        staying = values[~moving]
        if len(staying) and int(staying.max()) >= threshold:
            return None
        ids[kind] = (threshold, int(amounts[0]))
    return Shift(ids, seq)
