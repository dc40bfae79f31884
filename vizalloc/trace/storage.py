"""Trace files: ``load()``, ``save()``, ``read_batches()``, ``read_header()``, ``follow()``.

    import vizalloc
    trace = vizalloc.load("run.vztrace")          # a Trace equal to the one recorded
    vizalloc.trace.api.save(trace, "copy.vztrace")

The format itself (frames, chunks, checks) is ``fileformat.py``'s; recording is
``session.py``'s.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vizalloc.errors import UsageError
from vizalloc.gcpause import gc_paused
from vizalloc.files import create_new
from vizalloc.trace import events as ev
from vizalloc.trace.chunk_decoder import MAX_CHUNK_EVENTS
from vizalloc.trace.fileformat import BATCH_EVENTS, TraceFileReader, TraceFileWriter, read_trace
from vizalloc.trace.value import Trace, TraceHeader

__all__ = ["TraceFollower", "follow", "load", "open_reader", "read_batches", "read_header", "save"]

PathLike = str | os.PathLike[str]


def open_trace_file(path: PathLike) -> Any:
    """A trace file opened for reading (binary).

    Raises:
        UsageError: the file does not exist or cannot be read (the message names it).
    """
    try:
        return open(path, "rb")  # noqa: SIM115
    except FileNotFoundError as exc:
        raise UsageError(f"no trace file at {os.fspath(path)}") from exc
    except OSError as exc:
        raise UsageError(f"cannot read the trace file {os.fspath(path)}: {exc.strerror or exc}") from exc


def load(path: PathLike) -> Trace:
    """Read a trace file into a ``Trace`` equal to the one recorded.

    A file that ends early (its writer was killed) loads up to its last complete chunk
    with a ``TraceTruncatedWarning``.

    Raises:
        TraceFormatError: the file is not a trace, or is corrupt (the message names the byte offset).
        UsageError: the file does not exist or cannot be read.
    """
    with open_trace_file(path) as f:
        data = f.read()  # one read: parsing frames from memory is faster than many small reads
    return read_trace(io.BytesIO(data), os.fspath(path), stacklevel=3)


@contextmanager
def open_reader(path: PathLike) -> Iterator[TraceFileReader]:
    """A trace file's reader (its header read), for reading the file batch by batch or as
    columns (``vizalloc.trace.columns.iter_columns``); the file is closed after the block.

    Raises:
        TraceFormatError: the file is not a trace, or its header is damaged.
        UsageError: the file does not exist or cannot be read.
    """
    with open_trace_file(path) as f:
        yield TraceFileReader(f, os.fspath(path))


def read_batches(path: PathLike, max_events: int = BATCH_EVENTS, *, slice_events: int | None = None
                 ) -> Iterator[list[ev.Event]]:
    """Events of a trace file in lists of about ``max_events``, so memory stays bounded.

    Yields the header-less event batches; warns like ``load`` when the file ends early.
    ``slice_events`` (e.g. 4096): build the events that many at a time, releasing the GIL
    in between, so other threads (a UI) keep running while a worker reads; a little slower,
    same events.
    """
    with open_reader(path) as reader:
        yield from reader.batches(max_events, slice_events=slice_events)
        reader.warn_if_incomplete()


class TraceFollower:
    """Follows a trace file while its program writes it (for live views).

        with vizalloc.trace.api.follow("run.vztrace") as live:
            while not live.complete:
                for event in live.poll():
                    ...
                time.sleep(0.1)

    ``poll()`` returns the events of every chunk completed since the last call (the writer
    flushes at each graph compute and every 100 ms); ``complete`` turns True once the end
    record was read.
    """

    def __init__(self, path: PathLike) -> None:
        self._file = open_trace_file(path)
        try:
            self._reader = TraceFileReader(self._file, os.fspath(path))
        except BaseException:
            self._file.close()
            raise
        self.header = self._reader.header

    def poll(self) -> list[ev.Event]:
        return self._reader.poll()

    @property
    def complete(self) -> bool:
        return self._reader.complete

    @property
    def n_events(self) -> int:
        return self._reader.n_events

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def follow(path: PathLike) -> TraceFollower:
    """Follow a trace file that is being written (see ``TraceFollower``)."""
    return TraceFollower(path)


def read_header(path: PathLike) -> TraceHeader:
    """Only the header of a trace file."""
    with open_reader(path) as reader:
        return reader.header


def save(trace_: Trace, path: PathLike, *, chunk_events: int = 65536, compress_level: int | None = 1,
         overwrite: bool = False) -> int:
    """Write ``trace_`` to a new file ``path`` (an existing one only with ``overwrite``) in
    chunks of ``chunk_events`` (1 to ``chunk_decoder.MAX_CHUNK_EVENTS``); returns the bytes
    written."""
    if not 1 <= chunk_events <= MAX_CHUNK_EVENTS:
        raise UsageError(f"chunk_events must be 1 to {MAX_CHUNK_EVENTS:,}, got {chunk_events}")
    events = trace_.events
    with create_new(path, overwrite=overwrite) as f:
        writer = TraceFileWriter(f, trace_.header, compress_level=compress_level)
        with gc_paused():
            for i in range(0, len(events), chunk_events):
                writer.write_events(events[i:i + chunk_events])
        writer.close()
        return writer.nbytes
