"""A trace as a value: a ``TraceHeader`` and the events, in order, immutable.

A ``Trace`` compares equal to another with the same header and events, so a trace
recorded in memory and the same trace read back from its file are equal values.

    >>> from vizalloc.trace.value import Trace, TraceHeader
    >>> from vizalloc.trace.events import Marker
    >>> t = Trace(TraceHeader.new(), (Marker(1, 10, None, "start"),))
    >>> len(t), t[0].text
    (1, 'start')
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import overload

from vizalloc.trace.events import Event

#: Version of the trace file format (``docs/trace-format.md``); bumped on any incompatible change.
FORMAT_VERSION = 1


def _vizalloc_version() -> str:
    # read lazily from the package so trace/ imports nothing else of vizalloc
    pkg = sys.modules.get("vizalloc")
    return str(getattr(pkg, "__version__", "unknown"))


@dataclass(frozen=True, slots=True)
class TraceHeader:
    """What is known when a trace starts: format version, who wrote it, and how."""

    format_version: int
    vizalloc_version: str
    python_version: str
    created_unix_ns: int
    pid: int
    argv: tuple[str, ...]
    capture_values: bool

    @classmethod
    def new(cls, *, capture_values: bool = False, argv: tuple[str, ...] | None = None) -> TraceHeader:
        """A header for a trace starting now in this process."""
        return cls(
            format_version=FORMAT_VERSION,
            vizalloc_version=_vizalloc_version(),
            python_version=platform.python_version(),
            created_unix_ns=time.time_ns(),
            pid=os.getpid(),
            argv=tuple(sys.argv if argv is None else argv),
            capture_values=capture_values,
        )


@dataclass(frozen=True, slots=True)
class Trace:
    """A recorded trace: ``header`` and ``events`` (a tuple, in recording order)."""

    header: TraceHeader
    events: tuple[Event, ...]

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Event, ...]: ...

    def __getitem__(self, index: int | slice) -> Event | tuple[Event, ...]:
        return self.events[index]

    def __repr__(self) -> str:
        return f"<Trace {len(self.events)} events, pid {self.header.pid}, format v{self.header.format_version}>"
