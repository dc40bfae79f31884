"""Liveness: when a tensor's bytes must hold its value, and ggml's ``both_live`` rule.

Two sources of live ranges, one rule to compare them:

* ``graph_spans``: a graph's memory roots from its structure alone (no compute needed),
  what the binding-time check uses;
* ``compute_spans``: the tensors one recorded compute touched, from its node events.

This is the rule the golden corpus was checked with against real ggml
(``shared/golden/README.md``, "Liveness and overlaps"), so a pair of overlapping roots
that ggml reports as ``both_live`` is exactly a pair ``both_live`` says yes to here:

* a root is written at -1 if it is a leaf, has op NONE, is flagged INPUT, or is not a
  node of the graph (its contents predate the graph); otherwise at the index of every
  node whose root it is and whose op computes something (in-place API ops are view nodes
  with a compute op: they write their root);
* it is read at the index of every computing node with a source whose root it is; an
  OUTPUT flag, or being a computing node nobody consumes, counts as a read at ``N``.

One addition for several backends (no golden case has them): an input copy the scheduler
made for a split is written by its ``TensorCopy`` when the split starts, so as a node of
the graph it is written at its own index, not at -1; the input it copies is read there
(the scheduler puts a view of the input, with the input as its source, just before the
copy: ggml's planner counts it as a consumer, so the input's bytes stay until then).

``compute_spans`` reads what the nodes did instead: a tensor written by node ``i`` is
live from ``i``, one read before any write (inputs, weights, stale tensors) from -1; it
lives to its last read, or to the end (the number of nodes) when it is flagged OUTPUT or
written and never read.

``a = [first write, last read]``; two roots are both live when
``max(first writes) < min(last reads)``: a write at the node that does the other's last
read is allowed (ggml's in-place pattern).

    >>> both_live((0, 3), (2, 5)), both_live((0, 2), (2, 5))
    (True, False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vizalloc.analysis.records import FLAG_INPUT, FLAG_OUTPUT, NON_WRITING_OPS, ComputeInfo, GraphSnapshot

if TYPE_CHECKING:  # annotations only: the model is not needed to compare live ranges
    from vizalloc.analysis.model import TraceModel

#: (first write, last read); last read is None when nothing reads the root.
Span = tuple[int, "int | None"]


def both_live(a: Span, b: Span) -> bool:
    """Whether one root is written while the other still has a pending reader."""
    if a[1] is None or b[1] is None:
        return False
    return max(a[0], b[0]) < min(a[1], b[1])


def graph_spans(model: TraceModel, graph: GraphSnapshot) -> dict[int, Span]:
    """``root -> (first write, last read)`` for every root reached by the graph's nodes and leafs."""
    tensors = model.tensors
    nodes = graph.nodes
    leafs = graph.leafs
    n = len(nodes)
    node_set = set(nodes)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    consumed: set[int] = set()

    def root_of(t: int) -> int:
        info = tensors.get(t)
        return info.root if info is not None else t

    # pre-existing contents
    for t in leafs:
        first[root_of(t)] = -1
    copies = model.input_copies
    for i, t in enumerate(nodes):
        info = tensors.get(t)
        if info is None:
            continue
        if t in copies and info.view_src < 0:
            first.setdefault(t, i)
        for s in info.srcs:
            if s >= 0:
                consumed.add(s)
                r = root_of(s)
                if r not in node_set or (r not in copies and _pre_existing(model, r)):
                    first[r] = -1
        r = info.root
        if r not in node_set or (r not in copies and _pre_existing(model, r)):
            first[r] = -1
    for i, t in enumerate(nodes):
        info = tensors.get(t)
        if info is None:
            continue
        if info.op not in NON_WRITING_OPS:
            r = info.root
            if r not in first:
                first[r] = i
            for s in info.srcs:
                if s >= 0:
                    last[root_of(s)] = i
        elif info.op == "NONE" and t not in copies and any(s >= 0 for s in info.srcs):
            # the scheduler's dependency on a split input (a view of it with the input as
            # source, just before the copy): the copy reads the input here, and ggml's
            # planner keeps the input until then
            for s in info.srcs:
                if s >= 0:
                    last[root_of(s)] = i
    for t in nodes:
        info = tensors.get(t)
        if info is None:
            continue
        r = info.root
        rinfo = tensors.get(r)
        if (rinfo is not None and rinfo.flags & FLAG_OUTPUT) or (info.flags & FLAG_OUTPUT):
            last[r] = n
        elif info.op not in NON_WRITING_OPS and t not in consumed:
            last[r] = n
    for t in leafs:
        info = tensors.get(t)
        if info is not None and info.flags & FLAG_OUTPUT:
            last[info.root] = n
    return {r: (f, last.get(r)) for r, f in first.items()}


def _pre_existing(model: TraceModel, root: int) -> bool:
    info = model.tensors.get(root)
    return info is None or info.op == "NONE" or bool(info.flags & FLAG_INPUT)


def compute_spans(model: TraceModel, compute: ComputeInfo, *, by_root: bool = False) -> dict[int, Span]:
    """``tensor -> (first write, last read)`` for every tensor one compute's nodes touched
    (keyed by memory root with ``by_root``); the last read is always a node index or the end."""
    tensors = model.tensors
    first: dict[int, int] = {}
    last: dict[int, int] = {}

    def key(t: int) -> int:
        if not by_root:
            return t
        info = tensors.get(t)
        return info.root if info is not None else t

    was_read: set[int] = set()
    for i, node in enumerate(compute.nodes):
        for r in node.reads:
            k = key(r)
            if k not in first:
                first[k] = -1
            last[k] = i
            was_read.add(k)
        k = key(node.tensor_id)
        if k not in first:
            first[k] = i
        if last.get(k, -2) < i:
            last[k] = i
    end = len(compute.nodes)
    spans: dict[int, Span] = {}
    for k, f in first.items():
        info = tensors.get(k)
        if (info is not None and info.flags & FLAG_OUTPUT) or k not in was_read:
            spans[k] = (f, end)
        else:
            spans[k] = (f, last[k])
    return spans
