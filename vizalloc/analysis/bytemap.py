"""A per-buffer "last writer" map over byte ranges: who wrote each byte last.

Kept as three parallel sorted lists of disjoint intervals (starts, ends, records), so
a write or a lookup costs a couple of bisections and one slice assignment, never a loop
over bytes. A record is whatever the caller stores (the hazard pass stores a tuple
``(alias key, tensor id, seq, writing event)``).

    >>> m = ByteMap()
    >>> m.write(0, 64, "a"); m.write(32, 96, "b")
    >>> m.scan(0, 128)
    [(0, 32, 'a'), (32, 96, 'b'), (96, 128, None)]
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any


class ByteMap:
    """Disjoint intervals ``[start, end)`` with a record each; gaps were never written."""

    __slots__ = ("starts", "ends", "recs")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.recs: list[Any] = []

    def write(self, a: int, b: int, rec: Any) -> None:
        """Record that ``rec`` wrote bytes ``[a, b)``."""
        if a >= b:
            return
        starts, ends, recs = self.starts, self.ends, self.recs
        lo = bisect_right(ends, a)       # first interval ending after a
        hi = bisect_left(starts, b, lo)  # first interval starting at or after b
        if hi - lo == 1 and starts[lo] == a and ends[lo] == b:
            recs[lo] = rec               # the common case: the same tensor written again
            return
        new_s = [a]
        new_e = [b]
        new_r = [rec]
        if lo < hi:
            if starts[lo] < a:
                new_s.insert(0, starts[lo])
                new_e.insert(0, a)
                new_r.insert(0, recs[lo])
            if ends[hi - 1] > b:
                new_s.append(b)
                new_e.append(ends[hi - 1])
                new_r.append(recs[hi - 1])
        starts[lo:hi] = new_s
        ends[lo:hi] = new_e
        recs[lo:hi] = new_r

    def covering(self, a: int, b: int) -> Any:
        """The record of the one interval covering all of ``[a, b)``, or None when several (or gaps) do."""
        ends = self.ends
        lo = bisect_right(ends, a)
        if lo < len(ends) and self.starts[lo] <= a and ends[lo] >= b:
            return self.recs[lo]
        return None

    def scan(self, a: int, b: int) -> list[tuple[int, int, Any]]:
        """``[a, b)`` cut into pieces ``(start, end, record)``; ``record`` is None for never-written gaps."""
        out: list[tuple[int, int, Any]] = []
        starts, ends, recs = self.starts, self.ends, self.recs
        j = bisect_right(ends, a)
        cur = a
        n = len(starts)
        while j < n and starts[j] < b:
            s = starts[j]
            if s > cur:
                out.append((cur, s, None))
                cur = s
            e = min(ends[j], b)
            out.append((cur, e, recs[j]))
            cur = e
            j += 1
        if cur < b:
            out.append((cur, b, None))
        return out

    def __len__(self) -> int:
        return len(self.starts)
