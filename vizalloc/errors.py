"""The one exception hierarchy of vizalloc.

Every error a user can cause is a ``VizallocError`` subclass whose message names
the tensor, the sizes involved and what to do about it. ``assert`` is kept for
internal invariants only. The CLI turns these into exit codes in one place.
"""

from __future__ import annotations


class VizallocError(Exception):
    """Root of every error vizalloc raises on purpose."""

    exit_code: int = 2


class Interrupted(KeyboardInterrupt):
    """vizalloc was asked to stop (Ctrl-C, SIGTERM, SIGHUP: ``signum``) while a program it
    ran was running; the program got the signal and ended, and the command stops as it
    would have had no program been running (the CLI exits ``128 + signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class ShapeError(VizallocError):
    """An op was given operands whose shapes, types or strides it cannot take."""


class GraphError(VizallocError):
    """A graph is malformed, too large, or used in a way ggml forbids."""


class ContextError(VizallocError):
    """A context is full, freed, or a tensor outlived the context that made it."""


class TensorMemoryError(VizallocError):
    """Base of the errors about tensor memory (placement, buffers, pointers)."""


class NoMemoryError(TensorMemoryError):
    """A tensor was computed or read while it had no memory."""


class AllocationError(TensorMemoryError):
    """An allocator could not place a tensor (buffer too small, too many free blocks, ...)."""

    def __init__(self, message: str, *, requested: int | None = None, available: int | None = None) -> None:
        super().__init__(message)
        self.requested = requested
        self.available = available


class BoundsError(TensorMemoryError):
    """An offset, byte range, index or stride reaches outside a tensor's own memory."""


class DanglingPointerError(TensorMemoryError):
    """Strict mode: a tensor points into a buffer that has been freed."""


class BackendError(VizallocError):
    """A backend cannot run an op, or cannot use a buffer."""


class BackendUnavailableError(BackendError):
    """An optional backend (cupy / CUDA) is not installed or has no device."""


class SchedulerError(VizallocError):
    """The backend scheduler was used out of order or cannot split a graph."""


class TraceFormatError(VizallocError):
    """A trace file is corrupt or of an unknown version (the message names the byte offset)."""


class CaseFormatError(VizallocError):
    """A graph case file (golden format) is malformed (the message names the field)."""


class UsageError(VizallocError):
    """The command line or an API was used wrongly (file exists, unknown option value, ...)."""
