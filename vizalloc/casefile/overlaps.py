"""The golden harness's liveness overlap analysis of one allocation step.

The corpus README ("Liveness and overlaps") defines it: every *root* of the step's graph
that has data gets a live range ``[first write, last read]`` from the graph's structure,
two roots overlap when they share a byte of the same buffer, and an overlapping pair is
``both_live`` by :func:`vizalloc.analysis.liveness.both_live` — the one definition the
hazard analysis uses too.

The ranges are computed here from the case file's own records, not by
:func:`vizalloc.analysis.liveness.graph_spans` (which reads a trace model): the file must
reproduce the ``a_live``/``b_live`` numbers ggml's harness recorded, and that harness
writes the root of a *leaf view* (``ggml_view_tensor`` of a computed tensor, case
``vt01``) at its own node, where ``graph_spans`` counts it as pre-existing (-1). Both give
the same both_live answer on the corpus (``tests/analysis/test_golden_hazards.py``).

Cost is proportional to the answer, not to the square of the roots: the overlap count
is a sweep over byte intervals, the both_live pairs come from
:func:`vizalloc.analysis.rects.intersecting_pairs` (bytes x live time), and the full list
of overlapping pairs is only built when asked for (it can be quadratic: every tensor of
an in-place chain shares the same bytes).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vizalloc.analysis.liveness import both_live
from vizalloc.analysis.rects import intersecting_pairs
from vizalloc.casefile.parse import TensorSpec
from vizalloc.errors import UsageError
from vizalloc.runtime.tensor import VIEW_OPS, Flag, Op

#: ops that compute nothing (the README's "not NONE/VIEW/RESHAPE/PERMUTE/TRANSPOSE"); a
#: tuple, as ``in`` on it compares identities where a set would call Enum's Python __hash__
NOT_WRITES = (Op.NONE, *VIEW_OPS)
#: Most overlapping pairs listed in full for one step.
MAX_LISTED_PAIRS = 1_000_000
_INPUT, _OUTPUT = int(Flag.INPUT), int(Flag.OUTPUT)


def root_spans(specs: Sequence[TensorSpec], nodes: Sequence[int], leafs: Sequence[int],
               has_data: Sequence[bool]) -> dict[int, tuple[int, int]]:
    """``root -> (first write, last read)`` for the roots of the graph that have data.

    A root with no write in the graph starts at -1; one nobody reads ends where it starts.
    """
    n = len(nodes)
    node_set = set(nodes)
    consumed: set[int | None] = set()
    roots = {specs[t].root for t in leafs}
    for tid in nodes:
        spec = specs[tid]
        consumed.update(spec.src)
        roots.add(spec.root)
    consumed.discard(None)
    for s in consumed:
        roots.add(specs[s].root)  # type: ignore[index]
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    results: set[int] = set()  # roots of computing nodes nobody consumes: read at n
    for i, tid in enumerate(nodes):
        spec = specs[tid]
        r = spec.root
        computes = spec.op not in NOT_WRITES
        if (computes or r == tid) and r not in first:
            first[r] = i
        if computes:
            for s in spec.src:
                if s is not None:
                    last[specs[s].root] = i
            if tid not in consumed:
                results.add(r)
    live: dict[int, tuple[int, int]] = {}
    for r in roots:
        if not has_data[r]:
            continue
        spec = specs[r]
        pre = r not in node_set or spec.op is Op.NONE or spec.flags_raw & _INPUT
        f = -1 if pre or r not in first else first[r]
        live[r] = (f, n if r in results or spec.flags_raw & _OUTPUT else last.get(r, f))
    return live


def overlap_report(live: Mapping[int, tuple[int, int]], extent: Mapping[int, tuple[int, int]], *,
                   full: bool, step: int = -1) -> dict[str, Any]:
    """``overlap_pairs``, ``conflicting_pairs`` and ``conflicts`` (or, with ``full``, every
    pair as ``overlaps``) for roots with live ranges ``live`` and bytes ``extent``
    (``root -> (address, nbytes)``; addresses of different buffers never coincide)."""
    roots = sorted(r for r in live if extent[r][1] > 0)
    m = len(roots)
    start = np.fromiter((extent[r][0] for r in roots), dtype=np.int64, count=m)
    end = start + np.fromiter((extent[r][1] for r in roots), dtype=np.int64, count=m)
    first = np.fromiter((live[r][0] for r in roots), dtype=np.int64, count=m)
    last = np.fromiter((live[r][1] for r in roots), dtype=np.int64, count=m)
    # overlapping pairs counted by a sweep: interval k (sorted by start) overlaps every
    # earlier one except those that end at or before its start
    before = np.searchsorted(np.sort(end), np.sort(start), side="right")
    n_pairs = int((np.arange(m) - before).sum())
    # only a root that shares bytes with another and is live with another can be in a
    # both_live pair: the rest (all of an in-place chain) never reach the 2-D sweep
    cand = [roots[k] for k in np.flatnonzero(meets_another(first, last) & meets_another(start, end)).tolist()]
    rects = [(extent[r][0], extent[r][0] + extent[r][1], live[r][0], live[r][1]) for r in cand]
    conflicts = sorted((cand[i], cand[j]) for i, j in intersecting_pairs(rects))

    def entry(a: int, b: int, both: bool) -> dict[str, Any]:
        return {"a": a, "b": b, "both_live": both, "a_live": list(live[a]), "b_live": list(live[b])}

    out: dict[str, Any] = {"overlap_pairs": n_pairs, "conflicting_pairs": len(conflicts)}
    if full:
        if n_pairs > MAX_LISTED_PAIRS:
            raise UsageError(f"step {step} has {n_pairs:,} overlapping pairs of tensors; vizalloc plan lists at "
                             f"most {MAX_LISTED_PAIRS:,} (the table view and --check without 'overlaps' count them)")
        out["overlaps"] = [entry(a, b, both_live(live[a], live[b])) for a, b in _overlapping(roots, extent)]
    else:
        out["conflicts"] = [entry(a, b, True) for a, b in conflicts]
    return out


def meets_another(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which of the half-open intervals ``[start, end)`` intersect another one (empty ones never do).

    Sorted by start, an interval meets an earlier one when the furthest end before it lies
    past its start, and a later one when the next start lies before its end; an earlier
    interval that meets it meets the one right after itself too, so nothing is missed.
    """
    order = np.flatnonzero(starts < ends)
    order = order[np.argsort(starts[order], kind="stable")]
    s, e = starts[order], ends[order]
    hit = np.zeros(len(order), dtype=bool)
    if len(order) > 1:
        hit[1:] |= np.maximum.accumulate(e)[:-1] > s[1:]
        hit[:-1] |= s[1:] < e[:-1]
    out = np.zeros(len(starts), dtype=bool)
    out[order[hit]] = True
    return out


def _overlapping(roots: Sequence[int], extent: Mapping[int, tuple[int, int]]) -> list[tuple[int, int]]:
    """Every pair ``(a, b)``, ``a < b``, of roots sharing a byte, sorted (a sweep over starts)."""
    order = sorted(roots, key=lambda r: extent[r][0])
    active: list[tuple[int, int]] = []  # heap of (end, root)
    pairs = []
    for r in order:
        start, size = extent[r]
        while active and active[0][0] <= start:
            heapq.heappop(active)
        for _, other in active:
            pairs.append((other, r) if other < r else (r, other))
        heapq.heappush(active, (start + size, r))
    pairs.sort()
    return pairs
