"""Pure analysis of traces: the model, hazards, plan quality and diffs. No I/O, no runtime.

    from vizalloc.analysis import build_model, find_hazards
    model = build_model(trace)          # a Trace, anything with .events, or a list of events
    for h in find_hazards(model):
        print(h.report())

A trace too big for its events to fit in memory is analysed as a stream, with the same
results (``stream.py``; repeated steps analysed once):

    from vizalloc.analysis.stream import analyse_columns
    from vizalloc.trace.columns import read_columns
    model, hazards = analyse_columns(read_columns("run.vztrace", 1 << 18))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# imported on first use (PEP 562 ``__getattr__`` below): a module of the package that
# needs neither (``liveness``, which ``vizalloc plan`` uses) is imported without them
_LAZY = {
    "Hazard": "vizalloc.analysis.hazards",
    "HazardKind": "vizalloc.analysis.hazards",
    "find_hazards": "vizalloc.analysis.hazards",
    "TraceModel": "vizalloc.analysis.model",
    "build_model": "vizalloc.analysis.model",
}

if TYPE_CHECKING:  # the same names, for type checkers
    from vizalloc.analysis.hazards import Hazard, HazardKind, find_hazards
    from vizalloc.analysis.model import TraceModel, build_model

__all__ = ["Hazard", "HazardKind", "TraceModel", "build_model", "find_hazards"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
