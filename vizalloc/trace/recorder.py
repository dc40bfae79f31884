"""The recorder seam: the one place the runtime reports what it does.

Runtime call sites do::

    if recorder.active():
        recorder.emit(events.TensorPlaced, t.id, buf.id, offset, nbytes, PlacedBy.GALLOCR, binding)

``emit`` stamps the event with a sequence number, a monotonic time and the user's
source line, and hands it to every active recorder (traces nest: an inner trace's
events also reach the outer one). Outside any trace ``active()`` is False and the
runtime builds no event at all, so tracing costs nothing when off.

This is the hot path of tracing, so it is written for speed: events are built with
the kinds' fast constructors (``schema.fast_constructor``: same objects, half the
cost of the dataclass ``__init__``); source lines are found with a per-code-object
table keyed by ``id(code)`` (hashing a code object is slow) and, for the user's code,
by instruction offset (``f_lasti`` is a field, ``f_lineno`` a line-table scan); and the
location seen from an executing vizalloc frame is remembered (``_loc_cache``), so the
many events of one runtime call (a plan: one per tensor) walk the stack once. A
forked child starts with no recorder: it must not write into its parent's trace file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable, Protocol

from vizalloc.trace.events import Event, Location

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: Packaged *programs* (the demo's training loops) are the user's code as far as source
#: lines go: a hazard in the demo should point at the loop's line, not at the CLI.
_USER_DIRS = (_PACKAGE_DIR + "scenarios" + os.sep,)


class Recorder(Protocol):
    """Something that receives events (a trace being written, a test's list).

    A recorder may also define ``record_row(cls, row)``, taking an event as its kind and
    the tuple ``(seq, t_ns, loc, *fields)``. While every active recorder has it, ``emit``
    builds no event object at all (the trace file writer needs none; it builds them
    later, in bulk, only if asked). Events of classes outside ``events.KINDS`` always
    go to ``record``.
    """

    #: Whether graph inputs and outputs should be snapshotted at compute time.
    capture_values: bool

    def record(self, event: Event) -> None: ...


#: Held while an event is numbered and handed to the recorders, so every recorder sees
#: events in ``seq`` order. Not reentrant: a recorder's ``record`` must not emit.
_lock = threading.Lock()
_recorders: tuple[Recorder, ...] = ()
_sinks: tuple[Callable[[Event], None], ...] = ()
_row_sinks: tuple[Callable[[type[Event], tuple[Any, ...]], None], ...] = ()  # non-empty: rows for everyone
_row_sink: Callable[[type[Event], tuple[Any, ...]], None] | None = None      # the only one, if just one
_capturing = False
_seq = 0
_perf_counter_ns = time.perf_counter_ns
#: While a captured process is replayed (``replaying``): the source line of the call being
#: replayed, used instead of walking this process's stack.
_replayed_location: Callable[[], Location | None] | None = None
_getframe = sys._getframe
#: What a code object is, by ``id(code)``: ``_INTERNAL`` (vizalloc's own code),
#: ``_INTERNAL_RESUMABLE`` (vizalloc's own generator or coroutine), or for a user's code
#: object a dict ``{f_lasti: Location}``. The code objects are kept alive in
#: ``_code_keep`` so their ids stay unique.
_INTERNAL, _INTERNAL_RESUMABLE = "internal", "internal generator"   # compared by identity
_code_lines: dict[int, dict[int, Location] | str] = {}
_code_keep: list[Any] = []
#: One ``Location`` object per (file, line, function): the file writer interns by identity.
_interned: dict[Location, Location] = {}
_RESUMABLE = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
#: The location cache: ``(f1, loc1, f2, loc2)``, two frames of vizalloc's own code that are
#: still executing, with the user's location seen from them. ``f1`` is the last frame that
#: emitted (a planner loop emits many events from one frame), ``f2`` the outermost vizalloc
#: frame of that walk (the public call the user made, e.g. ``Scheduler.alloc_graph``). While
#: a frame executes, every frame outside it waits in a call, so their lines cannot change:
#: the location seen from it is fixed. Frames are compared by identity and held by this
#: tuple, so a new call can never be taken for a cached one; generator and coroutine frames
#: are never cached (their callers change between resumptions). Cleared when the last
#: recorder goes, so no frame outlives a trace.
_loc_cache: tuple[Any, Location | None, Any, Location | None] = (None, None, None, None)
#: each kind's fast constructor and field count, from the event schema: filled when the
#: first recorder starts (``_set``), so a program that never records (``vizalloc plan``)
#: never imports the schema, which builds every kind's constructor as it loads
_new: dict[type[Event], Callable[..., Event]] = {}
_arity: dict[type[Event], int] = {}


def _load_schema() -> None:
    from vizalloc.trace.schema import SCHEMA

    _new.update({cls: s.new for cls, s in SCHEMA.items()})
    _arity.update({cls: len(s.fields) for cls, s in SCHEMA.items()})


def active() -> bool:
    """True while at least one recorder listens."""
    return bool(_recorders)


def capturing_values() -> bool:
    """True while some active recorder wants tensor values captured."""
    return _capturing


def _set(recs: tuple[Recorder, ...]) -> None:
    global _recorders, _sinks, _row_sinks, _row_sink, _capturing, _loc_cache
    if recs and not _new:
        _load_schema()
    _sinks = tuple(r.record for r in recs)
    rows = tuple(getattr(r, "record_row", None) for r in recs)
    _row_sinks = rows if rows and all(f is not None for f in rows) else ()  # type: ignore[assignment]
    _row_sink = _row_sinks[0] if len(_row_sinks) == 1 else None
    _capturing = any(r.capture_values for r in recs)
    _recorders = recs
    if not recs:
        _loc_cache = (None, None, None, None)


def push(rec: Recorder) -> None:
    """Start sending events to ``rec`` (innermost last)."""
    with _lock:
        _set(_recorders + (rec,))


def pop(rec: Recorder) -> None:
    """Stop sending events to ``rec``."""
    with _lock:
        _set(tuple(r for r in _recorders if r is not rec))


def _lines_of(code: Any) -> dict[int, Location] | str:
    filename = code.co_filename
    internal = (filename.startswith(_PACKAGE_DIR) and not filename.startswith(_USER_DIRS)) \
        or filename.startswith("<frozen ")
    lines: dict[int, Location] | str = {}
    if internal:
        lines = _INTERNAL_RESUMABLE if code.co_flags & _RESUMABLE else _INTERNAL
    _code_keep.append(code)
    _code_lines[id(code)] = lines
    return lines


def _user_loc(frame: Any, code: Any, lines: dict[int, Location]) -> Location:
    """The interned location of a user frame's current line, cached by instruction offset
    (``f_lineno`` scans the line table, ``f_lasti`` is a field)."""
    lasti = frame.f_lasti
    loc = lines.get(lasti)
    if loc is None:
        loc = Location(code.co_filename, frame.f_lineno, code.co_name)
        loc = lines[lasti] = _interned.setdefault(loc, loc)
    return loc


def _walk(frame: Any) -> Location | None:
    """The user's location seen from ``frame`` (an executing frame), using and refreshing
    the location cache (``emit`` checks the two cache hits itself before calling this)."""
    global _loc_cache
    cache = _loc_cache
    if frame is cache[0]:
        return cache[1]
    if frame is cache[2]:
        return cache[3]
    code = frame.f_code
    lines = _code_lines.get(id(code))
    if lines is None:
        lines = _lines_of(code)
    if lines.__class__ is dict:  # the user's code
        loc = lines.get(frame.f_lasti)
        return _user_loc(frame, code, lines) if loc is None else loc
    first = outer = frame if lines is _INTERNAL else None
    f2 = cache[2]
    frame = frame.f_back
    while frame is not None:
        if frame is f2:
            loc = cache[3]
            break
        code = frame.f_code
        lines = _code_lines.get(id(code))
        if lines is None:
            lines = _lines_of(code)
        if lines.__class__ is dict:
            loc = lines.get(frame.f_lasti)
            if loc is None:
                loc = _user_loc(frame, code, lines)
            break
        outer = frame if lines is _INTERNAL else None
        frame = frame.f_back
    else:
        loc = None
    # Remember what was found, unless the caller is just a function the user called
    # (a new frame per call, like Tensor.set_name: remembering would cost more than it saves).
    if first is not outer:
        if outer is None or (frame is f2 and f2 is not None):  # keep the cached outer pair
            _loc_cache = (first, loc, f2, cache[3])
        else:
            _loc_cache = (first, loc, outer, loc)
    return loc


def user_location(depth: int = 2) -> Location | None:
    """The first frame outside the vizalloc package (the user's line), interned.

    ``depth`` counts from this function: 1 is its caller, 2 the caller's caller.
    """
    try:
        frame = _getframe(depth)
    except ValueError:
        return None
    return _walk(frame)


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
        The event, or None when nothing is recording or every recorder takes rows
        (see ``Recorder``; runtime code never needs the event back).
    """
    global _seq
    if loc is _NOT_GIVEN:
        if not _sinks:
            return None  # (nothing records: never touch the cache)
        if _replayed_location is not None:
            loc = _replayed_location()
        else:
            # the two cache hits inline (they are the common case); a miss walks the stack
            frame: Any = _getframe(1)
            cache = _loc_cache  # read once: another thread may replace it
            if frame is cache[0]:
                loc = cache[1]
            elif frame is cache[2]:
                loc = cache[3]
            else:
                loc = _walk(frame)
    sink = _row_sink
    if sink is not None and _arity.get(cls) == len(payload):  # the usual case: one trace
        lock = _lock
        lock.acquire()  # (cheaper than ``with``)
        try:
            _seq = seq = _seq + 1
            sink(cls, (seq, _perf_counter_ns(), loc) + payload)
        finally:
            lock.release()
        return None
    sinks = _sinks
    if not sinks:
        return None
    if _row_sinks and _arity.get(cls) == len(payload):
        with _lock:
            _seq = seq = _seq + 1
            row = (seq, _perf_counter_ns(), loc) + payload
            for row_sink in _row_sinks:
                row_sink(cls, row)
        return None
    new = _new.get(cls, cls)
    with _lock:
        _seq = seq = _seq + 1
        event = new(seq, _perf_counter_ns(), loc, *payload)
        for sink_ in sinks:
            sink_(event)
    return event


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Send no event to the active recorders for a while (work of vizalloc's own, such as a
    replay, that is not the traced program's); a recorder pushed inside gets its events alone."""
    with _lock:
        saved = _recorders
        _set(())
    try:
        yield
    finally:
        with _lock:
            _set(saved)


@contextlib.contextmanager
def replaying(clock: Callable[[], int], location: Callable[[], Location | None]) -> Iterator[None]:
    """Stamp events with another process's time and source lines while a record of it is
    replayed (``vizalloc.capture``): ``clock()`` gives each event's ``t_ns`` and
    ``location()`` the ``loc`` of events whose caller gives none. Not reentrant."""
    global _perf_counter_ns, _replayed_location
    saved = _perf_counter_ns, _replayed_location
    _perf_counter_ns, _replayed_location = clock, location
    try:
        yield
    finally:
        _perf_counter_ns, _replayed_location = saved


def _after_fork_in_child() -> None:
    global _lock, _recorders, _sinks, _row_sinks, _row_sink, _capturing, _loc_cache
    _lock = threading.Lock()  # another thread may have held it at fork time
    _recorders, _sinks, _row_sinks, _row_sink, _capturing = (), (), (), None, False
    _loc_cache = (None, None, None, None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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


class StrictRecorder(ListRecorder):
    """A ``ListRecorder`` that checks every event against the event schema as it arrives
    (``schema.check_event``): a field of the wrong type raises ``TypeError`` at the ``emit``
    that made it. For tests: the check costs more than recording."""

    def record(self, event: Event) -> None:
        from vizalloc.trace.schema import check_event

        check_event(event)
        self.events.append(event)
