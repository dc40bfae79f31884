"""Pure analysis of traces: the model, hazards, plan quality and diffs. No I/O, no runtime.

    from vizalloc.analysis import build_model, find_hazards
    model = build_model(trace)          # a Trace, anything with .events, or a list of events
    for h in find_hazards(model):
        print(h.report())
"""

from __future__ import annotations

from vizalloc.analysis.hazards import Hazard, HazardKind, find_hazards
from vizalloc.analysis.model import TraceModel, build_model

__all__ = ["Hazard", "HazardKind", "TraceModel", "build_model", "find_hazards"]
