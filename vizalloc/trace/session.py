"""Recording a trace: ``trace()`` (a ``TraceSession``) and ``mark()``.

    import vizalloc
    with vizalloc.trace("run.vztrace") as t:     # or vizalloc.trace() for memory only
        ...                                      # use vizalloc.runtime as usual
        vizalloc.mark("epoch 1")
    print(len(t.trace), "events")

Inside the ``with`` block every event the runtime emits (in any thread) is recorded;
blocks nest, and an inner block's events also reach the outer one (two blocks may not
write one file). With a path, events are appended to the file in chunks: at the end of
every graph compute (``ComputeEnd``), at least every 100 ms while events arrive (and
every 100 ms from a background thread when they stop), and when 65536 events or 16 MiB
of captured values are pending. So a process killed with SIGKILL leaves a file that
loads up to its last flush. Reading files back is ``storage.py``'s.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

from vizalloc.errors import TraceFormatError, UsageError
from vizalloc.gcpause import gc_paused
from vizalloc.files import create_new
from vizalloc.trace import events as ev
from vizalloc.trace import recorder
from vizalloc.trace.chunk_decoder import MAX_CHUNK_EVENTS, ChunkDecoder
from vizalloc.trace.fileformat import TraceFileWriter
from vizalloc.trace.schema import SCHEMA
from vizalloc.trace.value import Trace, TraceHeader

__all__ = ["TraceSession", "mark", "trace"]

PathLike = str | os.PathLike[str]

_NEW = {cls: s.new for cls, s in SCHEMA.items()}
_ComputeEnd = ev.ComputeEnd
_ValueSnapshot = ev.ValueSnapshot


class TraceSession:
    """An active (or finished) trace: a recorder that keeps events and appends them to a file.

    Made by ``trace()``; use it as a context manager, or call ``start()`` / ``stop()``.

    Args:
        path: the trace file to create, or None for memory only. An existing file (or
            a symbolic link) is refused unless ``overwrite``; the file is created without
            following links.
        overwrite: replace an existing file at ``path``.
        capture_values: ask the runtime for ``ValueSnapshot`` events (graph inputs and
            outputs at compute time).
        keep_events: keep every event in memory for ``.trace`` (False: only the file has them).
            With a file, what is kept is each chunk as written (11-30 bytes per event),
            decoded into events on the first ``.trace`` access.
        flush_interval_s: the longest time events wait before they are written.
        max_pending: flush when this many events wait (1 to 4,194,304: a chunk must stay
            small enough for every reader, ``chunk_decoder.MAX_CHUNK_EVENTS``).
        compress_level: zlib level for the file's chunk metadata (None: no compression).
        compress_max_overhead: compress a chunk only when that is expected to cost at most
            this fraction of the time the program ran since the previous flush (the encoder
            measures what compressing costs); other chunks are stored uncompressed. Keeps
            compression out of the overhead of programs that flush very often (a graph
            compute every few hundred microseconds). None: compress every chunk.
    """

    def __init__(
        self,
        path: PathLike | None = None,
        *,
        overwrite: bool = False,
        capture_values: bool = False,
        keep_events: bool = True,
        flush_interval_s: float = 0.1,
        max_pending: int = 65536,
        max_pending_value_bytes: int = 16 << 20,
        compress_level: int | None = 1,
        compress_max_overhead: float | None = 0.02,
    ) -> None:
        if not 1 <= max_pending <= MAX_CHUNK_EVENTS:
            raise UsageError(f"max_pending must be 1 to {MAX_CHUNK_EVENTS:,} events (a chunk's most), got {max_pending}")
        if path is None and not keep_events:
            raise UsageError("trace(path=None, keep_events=False) would record nothing; give a path or keep the events")
        self.path = None if path is None else os.fspath(path)
        self.overwrite = overwrite
        self.capture_values = capture_values
        self.keep_events = keep_events
        self.header = TraceHeader.new(capture_values=capture_values)
        self._interval_ns = int(flush_interval_s * 1e9)
        self._max_pending = max_pending
        self._max_value_bytes = max_pending_value_bytes
        self._compress_level = compress_level
        self._compress_overhead = compress_max_overhead
        self._last_flush_ns = 0
        # Events as two parallel lists: the kind, and the event or its row (seq, t_ns, loc, *fields)
        # as recorder.emit hands it over; rows become events only when .trace is asked for.
        self._kinds: list[type[ev.Event]] = []
        self._items: list[Any] = []
        self._rows_only = True       # no event object among the items
        self._events: list[ev.Event] = []  # the items made events so far (a prefix)
        # keep_events with a file: the chunks as written (meta, blob, n_events, stored), decoded
        # into events only when .trace is asked for; the rows themselves are dropped at each
        # flush (millions of kept tuples would cost the program memory and GC passes)
        self._chunks: list[tuple[bytes, bytes, int, bool]] = []
        self._decoded: list[ev.Event] = []
        self._decoder: ChunkDecoder | None = None
        self._dropped = 0            # items written and dropped from the lists
        self._n_final = 0            # items dropped once the final Trace was built
        self._value_bytes = 0
        # [deadline_ns, flush_at]: flush when an event is stamped at or after deadline_ns, or
        # flush_at items wait (no file: never; ComputeEnd still calls _flush, which returns at once)
        self._limits = [1 << 62, 1 << 62]
        self._file: Any = None
        self._writer: TraceFileWriter | None = None
        self._final: Trace | None = None
        self._stopped = False
        #: The first error writing the file met (raised again by ``stop()``).
        self.error: BaseException | None = None
        self.active = False

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> TraceSession:
        """Open the file (header written at once) and start recording."""
        if self.active or self._stopped:
            raise UsageError("this trace was already started; call vizalloc.trace(...) again for a new one")
        if self.path is not None:
            _refuse_a_file_being_written(self.path)
            self._file = create_new(self.path, overwrite=self.overwrite, buffering=0)  # closed in stop()
            try:
                self._writer = TraceFileWriter(self._file, self.header, compress_level=self._compress_level)
            except OSError as exc:
                self._file.close()
                raise UsageError(f"cannot write the trace file {self.path}: {exc.strerror or exc}") from exc
            _FLUSHER.add(self)
        if self._writer is not None:
            self._last_flush_ns = time.perf_counter_ns()
            self._limits[:] = [self._last_flush_ns + self._interval_ns, self._max_pending]
        self.record_row = self._make_record_row()  # type: ignore[method-assign]
        self.active = True
        _ACTIVE.add(self)
        recorder.push(self)
        return self

    def stop(self) -> None:
        """Stop recording, write what is pending and the end record, close the file.

        Raises the first error writing met, if any (``TraceFormatError`` or ``OSError``).
        """
        if not self.active:
            return
        recorder.pop(self)
        self.active = False
        _ACTIVE.discard(self)
        _FLUSHER.discard(self)
        with recorder._lock:
            self._flush()
            if self._writer is not None:
                try:
                    if self.error is None:
                        self._writer.close()
                finally:
                    self._file.close()
        # The events are built only when .trace is first asked for: a program that traces
        # to a file and never looks (or looks later) does not pay for it at the block's end.
        self._stopped = True
        if self.error is not None:
            raise self.error

    def __enter__(self) -> TraceSession:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.stop()
            return
        try:  # the body's exception wins over a writing error
            self.stop()
        except Exception:  # noqa: BLE001
            pass

    # -- the Recorder protocol ----------------------------------------------------
    def record(self, event: ev.Event) -> None:
        """Called by ``recorder.emit`` under its lock when some recorder wants event objects."""
        self._rows_only = False
        cls = event.__class__
        self._kinds.append(cls)
        self._items.append(event)  # kept as is; the encoder reads its fields
        if cls is _ValueSnapshot:
            self._value_bytes += len(event.data)  # type: ignore[attr-defined]
        if (cls is _ComputeEnd or event.t_ns >= self._limits[0] or len(self._items) >= self._limits[1]
                or self._value_bytes >= self._max_value_bytes):
            self._flush()

    def record_row(self, cls: type[ev.Event], row: tuple[Any, ...]) -> None:
        """Called by ``recorder.emit`` under its lock: ``row`` is ``(seq, t_ns, loc, *fields)``.

        The hot path of a file trace: two appends and one combined test.
        """
        items = self._items
        self._kinds.append(cls)
        items.append(row)
        if cls is _ComputeEnd or row[1] >= self._limits[0] or len(items) >= self._limits[1]:
            self._flush()
        elif cls is _ValueSnapshot:
            self._value_bytes += len(row[-1])
            if self._value_bytes >= self._max_value_bytes:
                self._flush()

    def _make_record_row(self) -> Any:
        """``record_row`` as a closure over this session's lists (what ``start`` installs:
        the same steps as the method without its attribute lookups, ~4,000 times per
        second of a small training loop). The lists are cleared, never replaced, while
        recording."""
        kinds_append = self._kinds.append
        items = self._items
        items_append = items.append
        limits = self._limits
        flush = self._flush
        compute_end, value_snapshot = _ComputeEnd, _ValueSnapshot

        def record_row(cls: type[ev.Event], row: tuple[Any, ...]) -> None:
            kinds_append(cls)
            items_append(row)
            if cls is compute_end or row[1] >= limits[0] or len(items) >= limits[1]:
                flush()
            elif cls is value_snapshot:
                self._value_bytes += len(row[-1])
                if self._value_bytes >= self._max_value_bytes:
                    flush()

        return record_row

    def _flush(self) -> None:
        """Write pending events as one chunk (caller holds ``recorder._lock``)."""
        writer = self._writer
        if writer is None or self.error is not None:
            return
        now = time.perf_counter_ns()
        self._limits[0] = now + self._interval_ns
        if not self._items:
            return
        overhead = self._compress_overhead
        budget_ns = None if overhead is None else (now - self._last_flush_ns) * overhead
        self._last_flush_ns = now
        try:
            chunk = writer.write_rows(self._kinds, self._items, rows_only=self._rows_only,
                                      compress_budget_ns=budget_ns)
        except (TraceFormatError, OSError) as exc:
            # never break the traced program: remember, stop writing, report at stop()
            self.error = exc
            return
        self._value_bytes = 0
        if self.keep_events:
            self._chunks.append(chunk)  # type: ignore[arg-type]
        self._dropped += len(self._items)
        self._items.clear()
        self._kinds.clear()
        self._events.clear()
        self._rows_only = True
        self._limits[1] = self._max_pending

    def flush(self) -> None:
        """Write pending events now."""
        with recorder._lock:
            self._flush()

    def _tick(self) -> None:
        """Called by the flusher thread every ``flush_interval_s``: events stop arriving while
        the program computes or waits, so write them anyway."""
        with recorder._lock:
            if self.active and self._items:
                self._flush()

    # -- results ---------------------------------------------------------------------
    @property
    def n_events(self) -> int:
        """Events recorded so far."""
        return self._dropped + len(self._items) + self._n_final

    @property
    def nbytes(self) -> int:
        """Bytes written to the file so far (0 without a file)."""
        return 0 if self._writer is None else self._writer.nbytes

    @property
    def trace(self) -> Trace:
        """The recorded trace (so far, while still active).

        After the block the events are built on the first access (not when the block
        ends), once; later accesses return the same ``Trace``.
        """
        if not self.keep_events:
            raise UsageError(f"this trace kept no events in memory (keep_events=False); load {self.path} instead")
        with recorder._lock:
            if self._final is not None:
                return self._final
            trace_ = Trace(self.header, tuple(self._materialize()))
            if self._stopped:  # built once; the rows are no longer needed
                self._final = trace_
                self._n_final = self.n_events
                self._dropped = 0
                self._items, self._kinds, self._events, self._decoded = [], [], [], []
            return trace_

    def _materialize(self) -> list[ev.Event]:
        """Every event so far: the chunks written (decoded once, in order), then the items not
        written yet (rows built into events once, in bulk)."""
        with gc_paused():
            if self._chunks:
                if self._decoder is None:
                    self._decoder = ChunkDecoder.for_current_schema(compressed=self._compress_level is not None)
                decode = self._decoder.decode
                parts = [decode(meta, blob, n, stored=stored) for meta, blob, n, stored in self._chunks]
                self._decoded += self._decoder.assemble(parts)
                self._chunks.clear()
            done = len(self._events)
            if done < len(self._items):
                new = _NEW
                self._events += [
                    new[c](*x) if type(x) is tuple else x
                    for c, x in zip(self._kinds[done:], self._items[done:])
                ]
        return self._decoded + self._events if self._decoded else self._events

    def __repr__(self) -> str:
        state = "active" if self.active else "stopped"
        return f"<TraceSession {self.path or '(memory)'} {state}, {self.n_events} events>"


#: Sessions recording now (so a forked child can let go of them).
_ACTIVE: weakref.WeakSet[TraceSession] = weakref.WeakSet()


def _refuse_a_file_being_written(path: str) -> None:
    """Refuse a path that an active session of this process writes: two writers would
    interleave their frames (and ``overwrite`` would truncate the first one's)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    for other in list(_ACTIVE):
        if other._writer is None or other._file is None:
            continue
        try:
            ost = os.fstat(other._file.fileno())
        except (OSError, ValueError):
            continue
        if (ost.st_dev, ost.st_ino) == (st.st_dev, st.st_ino):
            raise UsageError(
                f"{path} is being written by an active trace ({other.path}, {other.n_events} events so far); "
                "a trace block inside another records into both anyway: give the inner one no path "
                "(vizalloc.trace()) or another file"
            )


class _Flusher:
    """One daemon thread for every file trace of the process: each session's ``_tick`` runs
    every ``flush_interval_s`` while it records.

    Shared, because a thread per trace cost more to start and join than
    recording a small program's events; it sleeps on a condition while no trace records.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._next_ns: dict[TraceSession, int] = {}   # session -> when its next tick is due
        self._thread: threading.Thread | None = None

    def add(self, session: TraceSession) -> None:
        with self._cond:
            self._next_ns[session] = time.perf_counter_ns() + session._interval_ns
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vizalloc-trace-flush", daemon=True)
                self._thread.start()
            self._cond.notify()

    def discard(self, session: TraceSession) -> None:
        """Stop ticking ``session``; once this returns, no tick of it is running or will run."""
        with self._cond:
            self._next_ns.pop(session, None)
            while self._running is session:
                self._cond.wait()

    _running: TraceSession | None = None

    def _run(self) -> None:
        cond = self._cond
        with cond:
            while True:
                if not self._next_ns:
                    cond.wait()
                    continue
                now = time.perf_counter_ns()
                session, due = min(self._next_ns.items(), key=lambda kv: kv[1])
                if due > now:
                    cond.wait((due - now) / 1e9)
                    continue
                self._next_ns[session] = now + session._interval_ns
                self._running = session
                cond.release()  # never hold this while waiting for recorder._lock
                try:
                    session._tick()
                except Exception:  # noqa: BLE001 - _flush keeps its own errors; never kill the thread
                    pass
                finally:
                    cond.acquire()
                    self._running = None
                    cond.notify_all()

    def after_fork_in_child(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._next_ns = {}
        self._thread = None
        self._running = None


_FLUSHER = _Flusher()


def _detach_after_fork() -> None:
    """In a forked child: the parent's traces are the parent's. The child records nothing
    (the recorder stack is emptied too) and must never write into the parent's files."""
    _FLUSHER.after_fork_in_child()
    for session in list(_ACTIVE):
        session._writer = None
        session.active = False
        session.keep_events = False
    _ACTIVE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_detach_after_fork)


def trace(path: PathLike | None = None, *, capture_values: bool = False, **options: Any) -> TraceSession:
    """Record everything the runtime does inside a ``with`` block.

    Args:
        path: a ``.vztrace`` file to create, or None to keep the trace in memory only.
            An existing file is refused (``UsageError``) unless ``overwrite=True`` is
            among the options; a file another active trace writes is always refused.
        capture_values: also record the values of graph inputs and outputs at compute
            time (``ValueSnapshot`` events; needed for shadow execution).
        **options: ``overwrite``, ``keep_events``, ``flush_interval_s``, ``max_pending``,
            ``compress_level``, ``compress_max_overhead`` (see ``TraceSession``).

    Returns:
        The session; ``.trace`` is the recorded ``Trace``.
    """
    return TraceSession(path, capture_values=capture_values, **options)


def mark(text: str) -> None:
    """Put a ``Marker`` event in every active trace (does nothing outside one)."""
    if recorder.active():
        recorder.emit(ev.Marker, str(text))
