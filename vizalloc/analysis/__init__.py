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

from vizalloc.analysis.hazards import Hazard, HazardKind, find_hazards
from vizalloc.analysis.model import TraceModel, build_model

__all__ = ["Hazard", "HazardKind", "TraceModel", "build_model", "find_hazards"]
