"""Which pairs of (bytes x live time) rectangles intersect, in time proportional to the answer.

A binding's roots are rectangles: bytes ``[start, end)`` of a buffer and a live range
``[first write, last read)`` in the graph (``liveness.both_live`` is exactly "the half-open
live ranges intersect"). A packed plan puts nearly every root on the same low offsets, so
a sweep over bytes alone meets every pair; a sweep over time alone meets every pair of
weights (all live from -1). ``intersecting_pairs`` sweeps over time and keeps the live
rectangles in two byte-axis structures: a segment tree over the compressed byte
coordinates (who covers a byte: a stabbing query) and a sorted list of start offsets (who
starts inside a range). Cost: O((n + k) log n) for n rectangles and k answers.

    >>> intersecting_pairs([(0, 64, 0, 3), (32, 96, 2, 5), (0, 64, 3, 6)])
    [(0, 1), (1, 2)]
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

#: one rectangle: (byte start, byte end, first, last); empty on either axis: never intersects
Rect = tuple[int, int, int, int]


def intersecting_pairs(rects: Sequence[Rect]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)``, ``i < j``, of rectangles that share a byte while both are live.

    Sorted by ``(j, i)``: the order in which a sweep over rectangles sorted by position
    (as the caller sorts them) would meet them, so callers keep their report order.
    """
    valid = [i for i, (s, e, f, l) in enumerate(rects) if s < e and f < l]
    if len(valid) < 2:
        return []
    coords = sorted({x for i in valid for x in (rects[i][0], rects[i][1])})
    pos = {x: k for k, x in enumerate(coords)}
    size = 1
    while size < len(coords):
        size *= 2
    tree: dict[int, set[int]] = {}   # segment-tree node -> rectangles covering all its leaves
    starts: list[tuple[int, int]] = []  # (byte start, rectangle) of the live rectangles, sorted
    # at equal times ends come first: [f, l) and [l, ...) do not intersect
    sweep = sorted([(rects[i][2], 1, i) for i in valid] + [(rects[i][3], 0, i) for i in valid])
    out: list[tuple[int, int]] = []
    for _, is_start, i in sweep:
        s, e = rects[i][0], rects[i][1]
        lo, hi = pos[s] + size, pos[e] + size
        if not is_start:
            del starts[bisect_left(starts, (s, i))]
            while lo < hi:
                if lo & 1:
                    tree[lo].discard(i)
                    lo += 1
                if hi & 1:
                    hi -= 1
                    tree[hi].discard(i)
                lo >>= 1
                hi >>= 1
            continue
        # live rectangles starting inside [s, e) ...
        for k in range(bisect_left(starts, (s, -1)), bisect_left(starts, (e, -1))):
            j = starts[k][1]
            out.append((j, i) if j < i else (i, j))
        # ... and those starting before s that cover byte s
        node = lo
        while node:
            members = tree.get(node)
            if members:
                for j in members:
                    if rects[j][0] < s:
                        out.append((j, i) if j < i else (i, j))
            node >>= 1
        insort(starts, (s, i))
        while lo < hi:
            if lo & 1:
                tree.setdefault(lo, set()).add(i)
                lo += 1
            if hi & 1:
                hi -= 1
                tree.setdefault(hi, set()).add(i)
            lo >>= 1
            hi >>= 1
    out.sort(key=lambda p: (p[1], p[0]))
    return out


def intersecting_pairs_brute(rects: Sequence[Rect]) -> list[tuple[int, int]]:
    """The same answer by comparing every pair (the reference for tests)."""
    out = []
    for j, (sj, ej, fj, lj) in enumerate(rects):
        for i in range(j):
            si, ei, fi, li = rects[i]
            if max(si, sj) < min(ei, ej) and max(fi, fj) < min(li, lj):
                out.append((i, j))
    return out
