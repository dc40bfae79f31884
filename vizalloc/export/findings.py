"""Findings as the exporters draw them: a small record made from the analysis's hazards.

The diagrams only need, per finding, the tensors involved, the kind, one line of
reason, and where it happened; :func:`highlights` makes those from
``vizalloc.analysis.hazards.find_hazards`` results. Findings about no tensor (re-plans)
are kept for the timeline exporters, with ``tensor_id = -1``.

    >>> from vizalloc.analysis.model import build_model
    >>> from vizalloc.analysis.hazards import find_hazards
    >>> highlights(find_hazards(build_model([])))
    []
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vizalloc.export.units import fmt_range


@dataclass(frozen=True)
class Highlight:
    """A finding to draw: a hazard between two tensors (or about one, ``other_id=-1``)."""

    tensor_id: int
    other_id: int
    kind: str              # the HazardKind value: stale-overlap, use-after-reuse, ...
    reason: str            # one short line: "bytes [0, 256) of buffer #1"
    binding_id: int = -1   # the binding where it happens, when known
    seq: int = -1          # the step (event seq) where it was first seen
    compute_id: int = -1
    node_index: int = -1


def _reason(h: Any) -> str:
    parts = []
    if h.ranges:
        ranges = ", ".join(fmt_range(a, b) for a, b in h.ranges[:3])
        if len(h.ranges) > 3:
            ranges += ", \u2026"
        parts.append(f"bytes {ranges} of buffer #{h.buffer_id}")
    if h.binding_id >= 0:
        parts.append(f"binding #{h.binding_id}")
    if h.compute_id >= 0:
        # node -1: a host access (tensor_set, tensor_get, a copy) counted at that compute
        parts.append(f"compute #{h.compute_id} " + (f"node {h.node_index}" if h.node_index >= 0 else "host access"))
    if getattr(h, "occurrences", 1) > 1:
        parts.append(f"{h.occurrences}x")
    if not parts:
        parts.append(h.detail or h.cause or h.access)
    return ", ".join(p for p in parts if p)


def highlights(hazards: Iterable[Any]) -> list[Highlight]:
    """``Hazard`` records (``vizalloc.analysis.hazards``) as highlights, in the same order."""
    out = []
    for h in hazards:
        kind = getattr(h.kind, "value", str(h.kind))
        out.append(Highlight(h.tensor_id, h.other_id, kind, _reason(h), h.binding_id, h.seq, h.compute_id,
                             h.node_index))
    return out
