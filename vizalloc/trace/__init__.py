"""Tracing: event records, the recorder seam, trace files.

The runtime imports only ``events`` and ``recorder`` from here; ``api`` names the
user-facing ``trace()`` / ``mark()`` (recording, ``session``) and ``load()`` / ``save()``
(files, ``storage``).

This package is itself callable, so ``vizalloc.trace(path)`` works whether
``vizalloc.trace`` resolves to the package (as soon as any submodule was imported,
Python binds the package there) or to ``api.trace``:

    import vizalloc
    with vizalloc.trace() as t:
        vizalloc.mark("hello")
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, path: Any = None, *, capture_values: bool = False, **options: Any) -> Any:
        from vizalloc.trace.session import trace

        return trace(path, capture_values=capture_values, **options)


sys.modules[__name__].__class__ = _CallableModule
