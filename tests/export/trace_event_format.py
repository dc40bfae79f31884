"""A structural check of the Chrome Trace Event Format (what ui.perfetto.dev's JSON importer needs).

``problems(doc)`` returns every violation found (an empty list means the document passes):
required keys per phase, numeric timestamps/durations/counter values, async begin/end pairs
matched by (cat, id) with the end after the begin, complete slices on one thread nesting
properly (no partial overlap), and timestamps that never go back on a track.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

REQUIRED: dict[str, tuple[str, ...]] = {
    "X": ("name", "ts", "dur", "pid", "tid"),
    "B": ("name", "ts", "pid", "tid"),
    "E": ("ts", "pid", "tid"),
    "b": ("name", "cat", "ts", "pid", "id"),
    "e": ("cat", "ts", "pid", "id"),
    "n": ("name", "cat", "ts", "pid", "id"),
    "i": ("name", "ts", "pid", "s"),
    "I": ("name", "ts", "pid"),
    "C": ("name", "ts", "pid", "args"),
    "M": ("name", "pid", "args"),
}


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def problems(doc: Any) -> list[str]:
    out: list[str] = []
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return ["traceEvents is not a list"]
    if isinstance(doc, dict) and doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        out.append("displayTimeUnit must be 'ms' or 'ns'")
    last_ts: dict[tuple[Any, ...], float] = {}
    open_async: dict[tuple[Any, Any, Any], float] = {}
    stacks: dict[tuple[Any, Any], list[float]] = defaultdict(list)  # thread -> open X end times
    for k, e in enumerate(events):
        ph = e.get("ph")
        if ph not in REQUIRED:
            out.append(f"event {k}: unknown phase {ph!r}")
            continue
        for key in REQUIRED[ph]:
            if key not in e:
                out.append(f"event {k} ({ph}): missing {key!r}")
        if ph == "M":
            continue
        ts = e.get("ts")
        if not _num(ts):
            out.append(f"event {k}: ts {ts!r} is not a finite number")
            continue
        if ph == "X" and (not _num(e.get("dur")) or e["dur"] < 0):
            out.append(f"event {k}: dur {e.get('dur')!r} is not a number >= 0")
        if ph == "C":
            args = e.get("args", {})
            if not args or not all(_num(v) for v in args.values()):
                out.append(f"event {k}: counter values must be numbers: {args!r}")
        if ph == "i" and e.get("s") not in ("g", "p", "t"):
            out.append(f"event {k}: instant scope {e.get('s')!r}")
        if ph in ("i", "X") and ph == "i" and e.get("s") == "t" and "tid" not in e:
            out.append(f"event {k}: thread instant without tid")
        track = (e.get("pid"), e.get("tid"), "async" if ph in "be" else ("C", e.get("name")) if ph == "C" else "")
        if ts < last_ts.get(track, -math.inf):
            out.append(f"event {k}: ts {ts} goes back on track {track}")
        last_ts[track] = ts
        if ph == "b":
            key = (e.get("pid"), e.get("cat"), e.get("id"))
            if key in open_async:
                out.append(f"event {k}: async id {key} begun twice")
            open_async[key] = ts
        elif ph == "e":
            key = (e.get("pid"), e.get("cat"), e.get("id"))
            begin = open_async.pop(key, None)
            if begin is None:
                out.append(f"event {k}: async end {key} without a begin")
            elif ts < begin:
                out.append(f"event {k}: async end before its begin")
        elif ph == "X":
            thread = (e.get("pid"), e.get("tid"))
            stack = stacks[thread]
            while stack and stack[-1] <= ts + 1e-9:
                stack.pop()
            end = ts + e.get("dur", 0)
            if stack and end > stack[-1] + 1e-6:
                out.append(f"event {k}: slice [{ts}, {end}] overlaps its parent ending at {stack[-1]} on {thread}")
            stack.append(end)
    for key in open_async:
        out.append(f"async {key} never ended")
    return out
