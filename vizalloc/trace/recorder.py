"""The recorder seam: the one place the runtime reports what it does.

Runtime call sites do::

    if recorder.active():
        recorder.emit(events.TensorPlaced, t.id, buf.id, offset, nbytes, PlacedBy.GALLOCR, binding)

``emit`` stamps the event with a sequence number, a monotonic time and the user's
source line, and hands it to every active recorder (traces nest: an inner trace's
events also reach the outer one). Outside any trace ``active()`` is False and the
runtime builds no event at all, so tracing costs nothing when off.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Protocol

from vizalloc.trace.events import Event, Location

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class Recorder(Protocol):
    """Something that receives events (a trace being written, a test's list)."""

    #: Whether graph inputs and outputs should be snapshotted at compute time.
    capture_values: bool

    def record(self, event: Event) -> None: ...


_lock = threading.RLock()
_recorders: tuple[Recorder, ...] = ()
_capturing = False
_seq = 0
_internal_code: dict[Any, bool] = {}
_locations: dict[tuple[str, int, str], Location] = {}


def active() -> bool:
    """True while at least one recorder listens."""
    return bool(_recorders)


def capturing_values() -> bool:
    """True while some active recorder wants tensor values captured."""
    return _capturing


def push(rec: Recorder) -> None:
    """Start sending events to ``rec`` (innermost last)."""
    global _recorders, _capturing
    with _lock:
        _recorders = _recorders + (rec,)
        _capturing = any(r.capture_values for r in _recorders)


def pop(rec: Recorder) -> None:
    """Stop sending events to ``rec``."""
    global _recorders, _capturing
    with _lock:
        _recorders = tuple(r for r in _recorders if r is not rec)
        _capturing = any(r.capture_values for r in _recorders)


def _is_internal(code: Any) -> bool:
    internal = _internal_code.get(code)
    if internal is None:
        internal = code.co_filename.startswith(_PACKAGE_DIR) or code.co_filename.startswith("<frozen ")
        _internal_code[code] = internal
    return internal


def user_location(depth: int = 2) -> Location | None:
    """The first frame outside the vizalloc package (the user's line), interned."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return None
    while frame is not None and _is_internal(frame.f_code):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return None
    code = frame.f_code
    key = (code.co_filename, frame.f_lineno, code.co_name)
    loc = _locations.get(key)
    if loc is None:
        loc = _locations[key] = Location(*key)
    return loc


_NOT_GIVEN: Any = object()


def emit(cls: type[Event], *payload: Any, loc: Location | None = _NOT_GIVEN) -> Event | None:
    """Build a ``cls`` event from ``payload`` (its own fields in order) and record it.

    Args:
        cls: the event kind.
        *payload: the kind's fields after ``seq``, ``t_ns`` and ``loc``.
        loc: the source line to attach; found by walking the stack when not given
            (pass ``None`` for events no user call caused, or a location found once
            for a batch, such as the node computes of one graph compute).

    Returns:
        The event, or None when nothing is recording.
    """
    global _seq
    recs = _recorders
    if not recs:
        return None
    if loc is _NOT_GIVEN:
        loc = user_location(2)
    with _lock:
        _seq += 1
        event = cls(_seq, time.perf_counter_ns(), loc, *payload)
        for r in recs:
            r.record(event)
    return event


class ListRecorder:
    """The simplest recorder: keeps events in a list (tests and in-memory traces)."""

    def __init__(self, capture_values: bool = False) -> None:
        self.capture_values = capture_values
        self.events: list[Event] = []

    def record(self, event: Event) -> None:
        self.events.append(event)

    def __enter__(self) -> ListRecorder:
        push(self)
        return self

    def __exit__(self, *exc: object) -> None:
        pop(self)
