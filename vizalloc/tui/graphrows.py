"""The graph view's rows: a bound graph's nodes in execution order, with their sources,
view and in-place relations, and layers (``blk.N``) folded into one row each.

    >>> rows = graph_rows(nodes=[], leafs=[], info=lambda t: None, inplace={})
    >>> rows
    []
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vizalloc.tui.inert import inert
from vizalloc.tui.tensorrows import shape_text

#: Layers as llama.cpp names them (``blk.0.attn_q``); same default as the DOT exporter.
LAYER_PATTERN = re.compile(r"^blk\.(\d+)")


@dataclass(frozen=True, slots=True)
class GraphRow:
    """A node, a leaf, or a folded layer (``group``: its key; ``members``: node count)."""

    kind: str            # node | leaf | layer
    tensor_id: int
    index: int           # node index (-1 for leafs)
    name: str
    op: str
    shape: str
    sources: str
    relation: str
    group: str = ""
    members: int = 0
    indent: int = 0


def _relation(info: Any, inplace: dict[int, int], label: Callable[[int], str]) -> str:
    parts = []
    if info.view_src >= 0:
        parts.append(f"view of {inert(label(info.view_src), 24)} +{info.view_offs}")
    if info.tensor_id in inplace:
        parts.append(f"in-place on {inert(label(inplace[info.tensor_id]), 24)}")
    return "; ".join(parts)


def graph_rows(*, nodes: Sequence[int], leafs: Sequence[int], info: Callable[[int], Any],
               inplace: dict[int, int], expanded: frozenset[str] = frozenset(),
               fold: re.Pattern[str] | None = LAYER_PATTERN) -> list[GraphRow]:
    """Rows for a graph: leafs first, then nodes; layers folded unless their key is in ``expanded``."""

    def label(t: int) -> str:
        i = info(t)
        return (i.name or f"#{t}") if i is not None else f"#{t}"

    def row(kind: str, t: int, index: int, indent: int = 0) -> GraphRow:
        i = info(t)
        if i is None:
            return GraphRow(kind, t, index, f"#{t}", "?", "", "", "", indent=indent)
        srcs = ", ".join(inert(label(s), 24) for s in i.srcs if s >= 0)
        return GraphRow(kind, t, index, label(t), i.op, shape_text(i.ne), srcs, _relation(i, inplace, label),
                        indent=indent)

    out = [row("leaf", t, -1) for t in leafs]
    groups: dict[str, list[int]] = {}
    keys: list[str | None] = []
    for t in nodes:
        i = info(t)
        m = fold.match(i.name) if (fold is not None and i is not None and i.name) else None
        key = m.group(0) if m else None
        keys.append(key)
        if key is not None:
            groups.setdefault(key, []).append(t)
    emitted: set[str] = set()
    for index, (t, key) in enumerate(zip(nodes, keys)):
        if key is None or len(groups[key]) < 2:
            out.append(row("node", t, index))
            continue
        if key not in emitted:
            emitted.add(key)
            members = groups[key]
            ops = Counter(info(m).op for m in members if info(m) is not None)
            summary = ", ".join(f"{op}\u00d7{n}" for op, n in ops.most_common(4))
            if len(ops) > 4:
                summary += ", \u2026"
            mark = "\u25be" if key in expanded else "\u25b8"
            out.append(GraphRow("layer", -1, index, f"{mark} {key}", "layer", "", summary, "",
                                group=key, members=len(members)))
        if key in expanded:
            out.append(row("node", t, index, indent=2))
    return out
