"""Hazard reports in the sanitizers' layout (AddressSanitizer, CUDA Stream Sanitizer):
a header with the kind and the tensor, the bad access and its source line, the
conflicting tensor and when it wrote, the byte ranges, where both tensors were created
and placed, the kind's definition (``hazards.DEFINITIONS``) and a one-line SUMMARY.

    >>> from vizalloc.analysis.hazards import Hazard, HazardKind
    >>> print(format_report(Hazard(HazardKind.REPLAN, 7, access="galloc #0 planned again: n_nodes",
    ...                            cause="n_nodes")).splitlines()[0])
    ==vizalloc== WARNING: replan (n_nodes) at seq 7
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vizalloc.analysis.hazards import DEFINITIONS

if TYPE_CHECKING:
    from vizalloc.analysis.hazards import Hazard

_WARNING_KINDS = frozenset({"replan"})


def _ranges(h: Hazard) -> str:
    return ", ".join(f"[{a}, {b})" for a, b in h.ranges)


def _nbytes(h: Hazard) -> int:
    return sum(b - a for a, b in h.ranges)


def format_report(h: Hazard) -> str:
    """The report text of one hazard (plain text; names are shown inert)."""
    kind = h.kind.value
    level = "WARNING" if kind in _WARNING_KINDS else "ERROR"
    lines: list[str] = []
    if h.tensor is not None:
        lines.append(f"==vizalloc== {level}: {kind} on tensor {h.tensor.label} at seq {h.seq}")
    else:
        extra = f" ({h.cause})" if h.cause else ""
        lines.append(f"==vizalloc== {level}: {kind}{extra} at seq {h.seq}")
    if h.access:
        size = f", {_nbytes(h)} bytes {_ranges(h)} of buffer #{h.buffer_id}" if h.ranges and h.buffer_id >= 0 else ""
        lines.append(f"{h.access}{size}")
        lines.append(f"    at {_loc(h.access_loc)}")
    if h.detail:
        lines.append(h.detail)
    if h.other is not None:
        if kind == "plan-mismatch":
            lines.append(f"the plan's entry was made for {h.other.label}, planned at seq {h.other_seq}")
        else:
            verb = ("placed" if kind in ("stale-overlap", "use-after-reuse", "plan-overflow") and h.binding_id >= 0
                    else "written")
            lines.append(f"conflicting tensor {h.other.label}, {verb} at seq {h.other_seq}")
        lines.append(f"    at {_loc(h.other_loc)}")
    elif h.other_seq >= 0 and h.other_loc is not None:
        lines.append(f"    (seq {h.other_seq} at {_loc(h.other_loc)})")
    lines.append("")
    if h.tensor is not None:
        lines.extend(h.tensor.describe())
    if h.other is not None:
        lines.extend(h.other.describe())
    lines.append(f"{kind}: {DEFINITIONS[h.kind]}")
    steps = ""
    if h.occurrences > 1:
        where = ", ".join(f"#{s}" for s in h.steps)
        steps = f" ({h.occurrences} occurrences, last at seq {h.last_seq}{'; steps ' + where if where else ''})"
    who = h.tensor.label if h.tensor is not None else ""
    if h.other is not None:
        who += f" <- {h.other.label}"
    where = f" in buffer #{h.buffer_id} {_ranges(h)}" if h.ranges and h.buffer_id >= 0 else ""
    lines.append(f"SUMMARY: vizalloc: {kind} {who}{where}{steps}".replace("  ", " ").rstrip())
    return "\n".join(lines)


def _loc(loc: object) -> str:
    return str(loc) if loc is not None else "<unknown location>"
