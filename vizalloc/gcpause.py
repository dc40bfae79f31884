"""Pausing Python's cyclic garbage collector around work that makes many objects.

Planning a large graph, reading or writing a trace, building the model and finding
hazards each create up to millions of objects that stay alive, with no reference cycles
to find: every automatic collection in between would traverse all of them again and free
nothing. This is the one place that turns the collector off and back on.

    >>> import gc
    >>> from vizalloc.gcpause import gc_paused
    >>> with gc_paused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True

Objects that live on after the work (the model a UI shows, the analysis a report reads)
can be handed to ``gc.freeze`` with ``freeze()``: frozen, a later full collection does
not traverse them either.
"""

from __future__ import annotations

import gc
from types import TracebackType

__all__ = ["gc_paused"]


class gc_paused:  # noqa: N801 - used like contextlib's context managers
    """Context manager: the cyclic collector is off in the block, then as it was before."""

    __slots__ = ("was_enabled", "frozen", "keep_frozen")

    def __init__(self) -> None:
        self.was_enabled = False
        self.frozen = False
        self.keep_frozen = False

    def __enter__(self) -> gc_paused:
        self.was_enabled = gc.isenabled()
        gc.disable()
        return self

    def freeze(self, *, keep: bool = False) -> None:
        """Freeze every object alive now (``gc.freeze``) and turn the collector back on.

        At the end of the block the objects are unfrozen again (a caller in the same
        process gets the collector as it was), unless ``keep``: a long-lived program keeps
        them out of the collector's sight for good. Nothing happens when the collector was
        off before the block, or on a second call.
        """
        if self.was_enabled and not self.frozen:
            gc.freeze()
            self.frozen = True
            self.keep_frozen = keep
            gc.enable()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.frozen:
            if not self.keep_frozen:
                gc.unfreeze()
        elif self.was_enabled:
            gc.enable()
