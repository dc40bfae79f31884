"""A few numbers about a trace, computed in one streaming pass (for ``vizalloc run``'s summary).

    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.trace.stats import trace_stats
    >>> s = trace_stats([ev.BufferAllocated(1, 1, None, 0, "CPU", "CPU", 0, 64, 32, "any", -1, -1, -1, ""),
    ...                  ev.BufferAllocated(2, 2, None, 1, "CPU", "CPU", 0, 32, 32, "any", -1, -1, -1, ""),
    ...                  ev.BufferFreed(3, 3, None, 0, "")])
    >>> s.n_buffers, s.peak_buffer_nbytes, s.live_buffer_nbytes
    (2, 96, 32)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from vizalloc.trace import events as ev


@dataclass(frozen=True, slots=True)
class TraceStats:
    """Counts of a trace, and the bytes of buffers allocated at once (live = allocated, not freed)."""

    n_events: int
    n_graphs: int
    n_buffers: int
    n_computes: int
    peak_buffer_nbytes: int
    live_buffer_nbytes: int
    kinds: dict[str, int] = field(default_factory=dict)


def trace_stats(events: Iterable[ev.Event]) -> TraceStats:
    """Count events, graphs, buffers and computes, and track the peak of live buffer bytes."""
    kinds: Counter[type[ev.Event]] = Counter()
    live: dict[int, int] = {}
    live_total = peak = 0
    for e in events:
        cls = e.__class__
        kinds[cls] += 1
        if cls is ev.BufferAllocated:
            live_total += e.nbytes - live.get(e.buffer_id, 0)  # type: ignore[attr-defined]
            live[e.buffer_id] = e.nbytes  # type: ignore[attr-defined]
            peak = max(peak, live_total)
        elif cls is ev.BufferFreed:
            live_total -= live.pop(e.buffer_id, 0)  # type: ignore[attr-defined]
    return TraceStats(
        n_events=sum(kinds.values()),
        n_graphs=kinds[ev.GraphCreated],
        n_buffers=kinds[ev.BufferAllocated],
        n_computes=kinds[ev.ComputeBegin],
        peak_buffer_nbytes=peak,
        live_buffer_nbytes=live_total,
        kinds={cls.__name__: n for cls, n in sorted(kinds.items(), key=lambda kv: kv[0].__name__)},
    )


def format_nbytes(nbytes: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} GiB"  # pragma: no cover
