"""Keeping big graph diagrams readable: fold repeated layers, cap the node count.

* :func:`fold_groups` folds every group of tensors whose names match a pattern
  (``blk.N`` by default, as llama.cpp names layers) into one box per group, with
  the group's op counts and bytes. Tensors that are stale or part of a finding stay
  outside their box, so a folded diagram still shows every problem.
* :func:`limit_nodes` keeps at most ``max_nodes`` boxes: the neighbourhood of the
  findings (breadth first, both directions), or of the graph's last node when there
  are none, and summarises the rest in one box.

Edges to folded or hidden tensors are redirected to their box and merged (with a
count); edges inside a box disappear.

    >>> from vizalloc.export.graph_fold import fold_groups, limit_nodes
    >>> small = limit_nodes(fold_groups(model, r"blk\\.\\d+"), 200)   # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import replace

from vizalloc.errors import UsageError
from vizalloc.export.graph_model import EdgeKind, GCluster, GEdge, GNode, GraphModel, NodeRole

#: Layers as llama.cpp names them: ``blk.0.attn_q.weight``, ``blk.12.ffn_up``.
DEFAULT_FOLD = r"^blk\.\d+"


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--fold {pattern!r} is not a valid regular expression: {exc}") from exc


def _remap(model: GraphModel, key_of: dict[str, str], new_nodes: list[GNode], note: str) -> GraphModel:
    """Redirect edges through ``key_of`` (old key -> box key), merging duplicates with a count."""
    merged: dict[tuple[str, str, EdgeKind], list[GEdge]] = {}
    for e in model.edges:
        src, dst = key_of.get(e.src, e.src), key_of.get(e.dst, e.dst)
        if src == dst:
            continue
        kind = e.kind if (src == e.src and dst == e.dst) or e.kind is EdgeKind.HAZARD else EdgeKind.SUMMARY
        merged.setdefault((src, dst, kind), []).append(e)
    edges = []
    for (src, dst, kind), group in merged.items():
        label = group[0].label if len(group) == 1 else f"\u00d7{len(group)}"
        edges.append(GEdge(src, dst, kind, label))
    keep = {n.key for n in new_nodes}
    clusters = tuple(
        replace(c, members=tuple(dict.fromkeys(key_of.get(m, m) for m in c.members if key_of.get(m, m) in keep)))
        for c in model.clusters
    )
    return replace(model, nodes=tuple(new_nodes), edges=tuple(edges), clusters=tuple(c for c in clusters if c.members),
                   notes=model.notes + (note,))


def _box(key: str, role: NodeRole, title: str, members: list[GNode]) -> GNode:
    ops: Counter[str] = Counter()
    for n in members:
        if n.op:
            ops[n.op] += n.members
    top = ", ".join(f"{op}\u00d7{k}" for op, k in ops.most_common(4))
    if len(ops) > 4:
        top += ", \u2026"
    nbytes = sum(n.nbytes for n in members if n.op not in ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"))
    buffers = Counter(n.buffer_id for n in members if n.buffer_id >= 0)
    buffer_id = buffers.most_common(1)[0][0] if buffers else -1
    splits = Counter(n.split for n in members)
    return GNode(key=key, tensor_id=-1, name=title, op="", dtype="", shape=(), role=role,
                 buffer_id=buffer_id, nbytes=nbytes, members=sum(n.members for n in members),
                 split=splits.most_common(1)[0][0] if splits else -1, details=(top,))


def fold_groups(model: GraphModel, pattern: str = DEFAULT_FOLD) -> GraphModel:
    """Fold tensors whose name matches ``pattern`` into one box per matched text.

    The match (``re.search``; group 1 when the pattern has a group, else the whole
    match) names the group. Nothing is folded unless at least two groups repeat.

    Raises:
        UsageError: ``pattern`` is not a valid regular expression.
    """
    rx = _compile(pattern)
    groups: dict[str, list[GNode]] = {}
    for n in model.nodes:
        if n.tensor_id < 0 or n.stale or n.hazards:
            continue  # findings stay visible
        m = rx.search(n.name)
        if m is None:
            continue
        label = m.group(1) if rx.groups and m.group(1) is not None else m.group(0)
        groups.setdefault(label, []).append(n)
    groups = {k: v for k, v in groups.items() if len(v) >= 2}
    if len(groups) < 2:
        return model
    # boxes in execution order: by the first computed member (leafs come first in a graph)
    position = {n.key: i for i, n in enumerate(model.nodes)}

    def first_computed(members: list[GNode]) -> tuple[int, int]:
        computed = [position[n.key] for n in members if n.role is NodeRole.NODE]
        return (min(computed) if computed else len(position), min(position[n.key] for n in members))

    groups = dict(sorted(groups.items(), key=lambda kv: first_computed(kv[1])))
    key_of: dict[str, str] = {}
    boxes: dict[str, GNode] = {}
    for i, (label, members) in enumerate(groups.items()):
        key = f"fold{i}"
        boxes[key] = _box(key, NodeRole.FOLD, label, members)
        for n in members:
            key_of[n.key] = key
    new_nodes: list[GNode] = []
    placed: set[str] = set()
    for n in model.nodes:
        k = key_of.get(n.key)
        if k is None:
            new_nodes.append(n)
        elif k not in placed:
            placed.add(k)
            new_nodes.append(boxes[k])
    folded = sum(len(v) for v in groups.values())
    return _remap(model, key_of, new_nodes, f"{folded} tensors folded into {len(groups)} groups by {pattern!r}")


def limit_nodes(model: GraphModel, max_nodes: int) -> GraphModel:
    """Keep at most ``max_nodes`` boxes around the findings; summarise the rest in one box."""
    if max_nodes <= 0 or len(model.nodes) <= max_nodes:
        return model
    budget = max(max_nodes - 1, 1)  # one box for the summary
    by_key = {n.key: n for n in model.nodes}
    neighbours: dict[str, list[str]] = {n.key: [] for n in model.nodes}
    for e in model.edges:
        if e.src in neighbours and e.dst in neighbours:
            neighbours[e.src].append(e.dst)
            neighbours[e.dst].append(e.src)
    focus = [n.key for n in model.nodes if n.stale or n.hazards]
    if not focus:
        computed = [n.key for n in model.nodes if n.role is NodeRole.NODE]
        focus = [computed[-1] if computed else model.nodes[-1].key]
    kept: set[str] = set()
    queue: deque[str] = deque()
    for k in focus:
        if len(kept) < budget and k not in kept:
            kept.add(k)
            queue.append(k)
    while queue and len(kept) < budget:
        for nb in neighbours[queue.popleft()]:
            if nb not in kept and len(kept) < budget:
                kept.add(nb)
                queue.append(nb)
    hidden = [n for n in model.nodes if n.key not in kept]
    summary = _box("hidden", NodeRole.SUMMARY, f"{sum(n.members for n in hidden)} more tensors", hidden)
    summary = replace(summary, split=-1, buffer_id=-1)
    key_of = {n.key: "hidden" for n in hidden}
    new_nodes = [by_key[n.key] for n in model.nodes if n.key in kept] + [summary]
    return _remap(model, key_of, new_nodes,
                  f"{len(hidden)} tensors hidden by --max-nodes {max_nodes} (kept the neighbourhood of "
                  f"{'the findings' if any(by_key[k].stale or by_key[k].hazards for k in focus) else 'the output'})")


__all__ = ["DEFAULT_FOLD", "fold_groups", "limit_nodes", "GCluster"]
