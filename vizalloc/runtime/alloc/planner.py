"""The planning pass of the graph allocator (ggml's ``ggml_gallocr_alloc_graph_impl``)
and the records it leaves (``node_allocs`` / ``leaf_allocs``).

    >>> from vizalloc.runtime.alloc.planner import INVALID
    >>> INVALID
    (-1, -1, 18446744073709551615, 0)

Planning is two steps:

* ``flatten`` numbers the graph's tensors and gathers, in lists indexed by that number,
  what the planner reads about each: its sources' numbers, its view root's number, its
  INPUT/OUTPUT flags, whether it is skipped (a view, or external: data or a buffer
  already), its size;
* ``plan`` runs ggml's three phases (semantics §5.5) on those lists. ggml keeps a
  ``hash_node`` per tensor (``n_children``, ``n_views``, ``buffer_id``, ``addr``,
  ``allocated``); here each field is a list indexed by the tensor's number, because
  dict lookups and attribute reads in the inner loops would cost more than the planning.

Every decision is an event while a trace records: ``PlanBegin``, ``PlanExternal``,
``PlanAlloc``, ``PlanInplace``, ``PlanRefused``, ``PlanFree``, ``PlanEnd``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

from vizalloc.errors import AllocationError
from vizalloc.runtime.alloc.dyn_allocator import SIZE_MAX, DynAllocator
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.tensor import INPLACE_OPS, Flag, Op, label
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

if TYPE_CHECKING:
    from vizalloc.runtime.graph import Graph
    from vizalloc.runtime.tensor import Tensor

_plan_ids = itertools.count()

#: A plan record: (buffer_id, chunk, offset, size_max). ggml's "invalid" record.
Record = tuple[int, int, int, int]
INVALID: Record = (-1, -1, SIZE_MAX, 0)

# A tensor's planner state. ggml asks ``is_allocated(t) or is_view(t)`` and ``hash[t].allocated``;
# the answers are kept in one byte per tensor:
#: not placed: ``allocate_node`` places it
UNPLACED = 0
#: placed by this planner (ggml's ``allocated``): it may be freed or taken over in place
OWN = 1
#: never placed: a view, a tensor with data or a buffer (external), or the empty source slot
SKIPPED = 2

# flag bits of ``FlatGraph.flags``
INPUT = int(Flag.INPUT)
OUTPUT = int(Flag.OUTPUT)
#: a view whose op is not NONE: counts towards its root's ``n_views`` (ggml's phase 2 test)
VIEW_OP = 4
#: bytes.translate table: 1 where the INPUT bit is set
_INPUT_BIT = bytes(v & INPUT for v in range(256))
#: ``ggml_op_can_inplace`` (the default rules) by object identity (an Enum's ``__hash__`` runs Python code)
_INPLACE_IDS = frozenset(id(op) for op in INPLACE_OPS)


def plain_alloc_size(buft: BufferType) -> bool:
    """True when ``buft.alloc_size(t)`` is just ``t.nbytes`` (the planner may then cache sizes)."""
    return type(buft).alloc_size is BufferType.alloc_size and getattr(buft, "_alloc_size", 1) is None


# -- step 1: the graph as numbered lists ----------------------------------------------

@dataclass(slots=True)
class FlatGraph:
    """A graph numbered for the planner: tensor ``k``'s facts at index ``k`` of each list.

    The numbers are: the leafs, the nodes, ``empty`` (one number for every empty source
    slot: never placed, never freed, so the planner's loops need no "is this slot empty"
    test), then the tensors outside the graph that it refers to (view roots, sources).
    A tensor listed twice has one number.
    """

    #: number -> tensor (``tensors[empty]`` is None and never read)
    tensors: list[Tensor]
    #: tensor -> number
    index: dict[Tensor | None, int]
    #: each leaf's / node's number, in graph order
    leaf_k: list[int]
    node_k: list[int]
    #: each node's source slots as numbers, in slot order
    node_src: list[list[int]]
    empty: int
    #: number of the view root (-1: not a view)
    view_root: list[int]
    #: INPUT, OUTPUT and VIEW_OP bits
    flags: bytearray
    #: UNPLACED, or SKIPPED for views, external tensors and ``empty``
    state: bytearray
    #: ``nbytes`` of each tensor that gets a record (0 otherwise; only filled when the
    #: buffer types size tensors by ``nbytes``)
    size: list[int]
    #: 1 where ggml records the tensor's hash entry: neither a view nor holding data
    has_record: bytearray
    #: the external tensors' numbers, in the order they were found
    external: list[int]


class _ListedTwice(Exception):
    """The numbering made while scanning met a tensor twice: number in bulk instead."""


def flatten(graph: Graph, plain: bool, *, incremental: bool = True) -> FlatGraph:
    """Number ``graph``'s tensors for ``plan`` (``plain``: also record each one's ``nbytes``).

    With ``incremental`` the numbers are given while the tensors are scanned, so each tensor
    object is touched once while it is in the cache (at 100k nodes, graph order scatters
    them over tens of MB). That needs every source and view root to come earlier in the
    graph; the first that does not completes the numbering in bulk, and a tensor listed
    twice (found at the end of the scan) starts again in bulk. Both ways give the same
    numbers.
    """
    if incremental:
        try:
            return _flatten(graph, plain, True)
        except _ListedTwice:
            pass
    return _flatten(graph, plain, False)


def _flatten(graph: Graph, plain: bool, incremental: bool) -> FlatGraph:  # noqa: C901 - one pass, kept whole
    leafs, nodes = graph.leafs, graph.nodes
    n_leafs, n_nodes = len(leafs), len(nodes)
    # typed as tensors: only ``empty``'s entry is None, and no code reads it
    tensors: list[Tensor] = [*leafs, *nodes, None]  # type: ignore[list-item]
    # one int object per number, shared by the index, the position lists and the rows
    ks = list(range(len(tensors)))
    empty = len(tensors) - 1
    index: dict[Tensor | None, int]
    if incremental:
        index = {None: ks[empty]}
        distinct = True
    else:
        index = dict(zip(tensors, ks))
        distinct = len(index) == len(tensors)
    if distinct:
        leaf_k = ks[:n_leafs]
        node_k = ks[n_leafs:n_leafs + n_nodes]
    else:  # a tensor listed twice: number first appearances only
        index = {}
        for t in tensors:
            index.setdefault(t, len(index))
        tensors = list(index)  # type: ignore[arg-type]
        leaf_k = [index[t] for t in leafs]
        node_k = [index[t] for t in nodes]
    empty = len(tensors) - 1
    m = len(tensors)
    # bytearrays: compact (100k-node graphs outgrow the caches), and indexing one yields
    # cached small ints
    state = bytearray(m)
    state[empty] = SKIPPED
    view_root = [-1] * m
    flags = bytearray(m)
    size = [0] * m
    has_record = bytearray(m)
    external: list[int] = []
    outside: list[int] = []  # tensors outside the graph, numbered after ``empty``

    def number_outside(t: Tensor) -> int:
        k = len(tensors)
        index[t] = k
        tensors.append(t)
        state.append(UNPLACED)
        view_root.append(-1)
        flags.append(0)
        size.append(0)
        has_record.append(0)
        outside.append(k)
        return k

    def src_row(t: Tensor) -> list[int]:
        row = []
        for s in t.src:
            k = index.get(s)
            if k is None:
                assert s is not None  # the empty slot is numbered
                k = number_outside(s)
            row.append(k)
        return row

    def complete_in_bulk(k: int) -> None:
        nonlocal incremental
        incremental = False
        index.update(zip(tensors[k:empty], ks[k:empty]))

    number_of = index.__getitem__
    node_src: list[list[int]]
    if distinct:
        node_src = [[]] * n_nodes
    else:
        node_src = [src_row(t) for t in nodes]
    # one pass: each node's source row, then what the planner needs to know about each
    # tensor (each object touched once: large graphs outgrow the caches)
    for k in range(empty):
        t = tensors[k]
        if incremental:
            index[t] = ks[k]
        if distinct and k >= n_leafs:
            try:
                node_src[k - n_leafs] = [*map(number_of, t.src)]
            except KeyError:  # a source outside the graph (graph views, hand-made graphs)
                if incremental:  # or later in it: number the rest first
                    complete_in_bulk(k)
                node_src[k - n_leafs] = src_row(t)
        vs = t.view_src
        if vs is not None:
            r = index.get(vs)
            if r is None and incremental:
                complete_in_bulk(k)
                r = index.get(vs)
            view_root[k] = number_outside(vs) if r is None else r
            state[k] = SKIPPED
            flags[k] = t.flags & 3 if t.op is Op.NONE else (t.flags & 3) | VIEW_OP
            continue
        flags[k] = t.flags & 3
        if t.data is not None:
            state[k] = SKIPPED
            external.append(k)
            continue
        has_record[k] = 1
        if t.buffer is not None:
            state[k] = SKIPPED
            external.append(k)
        if plain:
            size[k] = t.nbytes
    if len(index) != m + len(outside):
        raise _ListedTwice()
    j = 0
    while j < len(outside):  # rare: view roots and sources outside the graph (may add more)
        k = outside[j]
        j += 1
        t = tensors[k]
        flags[k] = t.flags & 3
        vs = t.view_src
        if vs is not None:
            r = index.get(vs)
            view_root[k] = number_outside(vs) if r is None else r
            state[k] = SKIPPED
        elif t.data is not None or t.buffer is not None:
            state[k] = SKIPPED
            has_record[k] = t.data is None
            external.append(k)
        else:
            has_record[k] = 1
            if plain:
                size[k] = t.nbytes
    return FlatGraph(tensors, index, leaf_k, node_k, node_src, empty, view_root, flags, state, size, has_record,
                     external)


# -- step 2: ggml's three phases ------------------------------------------------------

class Plan:
    """The plan recorded by the last reserve (ggml's ``node_allocs`` / ``leaf_allocs``).

    Records are kept as the planner's lists (a tensor number per position, the final
    ``buffer_id`` / ``chunk`` / ``offset`` / ``size_max`` per number) so recording costs
    nothing per position.
    """

    __slots__ = ("plan_id", "graph_id", "n_nodes", "n_leafs", "node_k", "node_src", "leaf_k",
                 "buffer_id", "chunk", "offset", "size_max", "has_record", "chunk_sizes")

    def __init__(self, plan_id: int, graph_id: int, flat: FlatGraph, buffer_id: list[int], chunk: list[int],
                 offset: list[int], size_max: list[int], chunk_sizes: list[list[int]]) -> None:
        self.plan_id = plan_id
        self.graph_id = graph_id
        self.n_nodes = len(flat.node_k)
        self.n_leafs = len(flat.leaf_k)
        self.node_k = flat.node_k
        self.node_src = flat.node_src
        self.leaf_k = flat.leaf_k
        self.buffer_id = buffer_id
        self.chunk = chunk
        self.offset = offset
        self.size_max = size_max
        self.has_record = flat.has_record
        self.chunk_sizes = chunk_sizes

    def _rec(self, k: int) -> Record:
        if k < 0 or not self.has_record[k]:
            return INVALID
        return (self.buffer_id[k], self.chunk[k], self.offset[k], self.size_max[k])

    def dst(self, i: int) -> Record:
        """Record of node position ``i``."""
        return self._rec(self.node_k[i])

    def src(self, i: int, j: int) -> Record:
        """Record of source slot ``j`` of node position ``i`` (invalid for an empty slot)."""
        srcs = self.node_src[i]
        return self._rec(srcs[j]) if j < len(srcs) else INVALID

    def leaf(self, i: int) -> Record:
        return self._rec(self.leaf_k[i])

    def node_records(self) -> list[Record | None]:
        """Each node's own record, None where ggml records "invalid" (views, data)."""
        return [None if not self.has_record[k] else self._rec(k) for k in self.node_k]

    def leaf_records(self) -> list[Record | None]:
        return [None if not self.has_record[k] else self._rec(k) for k in self.leaf_k]


def plan_graph(galloc_id: int, graph: Graph, bufts: list[BufferType], dyn: list[DynAllocator],
               node_ids: list[int], leaf_ids: list[int], plain: bool,
               inplace_ops: frozenset[Op] = INPLACE_OPS) -> Plan:
    """Plan ``graph`` (``ggml_gallocr_alloc_graph_impl``) with fresh ``dyn`` allocators."""
    return plan(galloc_id, graph.id, flatten(graph, plain), bufts, dyn, node_ids, leaf_ids, plain, inplace_ops)


def plan(galloc_id: int, graph_id: int, flat: FlatGraph, bufts: Sequence[BufferType],
         dyn: Sequence[DynAllocator], node_ids: Sequence[int], leaf_ids: Sequence[int], plain: bool,
         inplace_ops: frozenset[Op] = INPLACE_OPS) -> Plan:
    """ggml's ``ggml_gallocr_alloc_graph_impl`` on a flattened graph; returns the records.

    ``node_ids`` / ``leaf_ids``: the buffer id of each node / leaf. ``plain``: every buffer
    type sizes tensors by ``nbytes`` (``flat.size`` holds them). ``inplace_ops``: the ops
    that may take a parent over in place (``ggml_op_can_inplace`` of the ggml version followed).
    """
    tracing = recorder.active()
    plan_id = next(_plan_ids)
    if tracing:
        recorder.emit(ev.PlanBegin, galloc_id, plan_id, graph_id, len(flat.node_k), len(flat.leaf_k),
                      tuple(b.alignment for b in bufts))
        for k in flat.external:
            recorder.emit(ev.PlanExternal, plan_id, flat.tensors[k].id)
    h = HashNodes(flat)
    allocate, free = _node_functions(plan_id, flat, h, bufts, dyn, plain, inplace_ops, tracing)
    _allocate_leafs(flat, h, leaf_ids, allocate)
    _count_consumers(flat, h, node_ids, allocate)
    _allocate_in_order(flat, h, node_ids, allocate, free)
    # the records' size_max: alloc_size in the tensor's buffer id
    size_max = flat.size
    if not plain:
        has_record, buffer_id = flat.has_record, h.buffer_id
        size_max = [bufts[buffer_id[k]].alloc_size(t) if has_record[k] else 0 for k, t in enumerate(flat.tensors)]
    chunk_sizes = [d.chunk_sizes() for d in dyn]
    if tracing:
        recorder.emit(ev.PlanEnd, plan_id, tuple(tuple(c) for c in chunk_sizes))
    return Plan(plan_id, graph_id, flat, h.buffer_id, h.chunk, h.offset, size_max, chunk_sizes)


class HashNodes:
    """ggml's ``hash_node`` of every tensor, one list per field indexed by tensor number
    (``allocated`` is ``state[k] == OWN``)."""

    __slots__ = ("state", "n_children", "n_views", "buffer_id", "chunk", "offset")

    def __init__(self, flat: FlatGraph) -> None:
        m = len(flat.tensors)
        self.state = bytearray(flat.state)
        self.n_children = [0] * m
        self.n_views = [0] * m
        self.buffer_id = [0] * m
        self.chunk = [0] * m
        self.offset = [0] * m


#: ``allocate(k, buffer_id, phase, srcs=None)`` and ``free(k)``
Allocate = Callable[..., None]
Free = Callable[[int], None]


def _allocate_leafs(flat: FlatGraph, h: HashNodes, leaf_ids: Sequence[int], allocate: Allocate) -> None:
    """Phase 1: the leafs, in leaf order, each in its own buffer id."""
    state = h.state
    for k, b in zip(flat.leaf_k, leaf_ids):
        if state[k] == UNPLACED:
            allocate(k, b, 1)


def _count_consumers(flat: FlatGraph, h: HashNodes, node_ids: Sequence[int], allocate: Allocate) -> None:
    """Phase 2: count each tensor's consumers (``n_children``) and each root's views with an
    op (``n_views``); INPUT nodes and sources are allocated here, in node order, in the
    consumer's buffer id, their in-place choice seeing the counts taken so far."""
    flags, view_root, n_views, n_children = flat.flags, flat.view_root, h.n_views, h.n_children
    if flags.translate(_INPUT_BIT).find(1, len(flat.leaf_k)) >= 0:
        state = h.state
        for k, srcs, b in zip(flat.node_k, flat.node_src, node_ids):
            f = flags[k]
            if f:
                if f & VIEW_OP:
                    n_views[view_root[k]] += 1
                if f & INPUT and state[k] == UNPLACED:
                    allocate(k, b, 2, srcs)
            for sk in srcs:
                n_children[sk] += 1
                if flags[sk] & INPUT and state[sk] == UNPLACED:
                    allocate(sk, b, 2)
    else:
        # No INPUT tensor besides the leafs, which phase 1 placed or skipped (no count was
        # set yet, so none took another over): phase 2 allocates nothing, and the counts
        # can be taken in any order.
        for k in flat.node_k:
            if flags[k] & VIEW_OP:
                n_views[view_root[k]] += 1
        for sk in chain.from_iterable(flat.node_src):
            n_children[sk] += 1


def _allocate_in_order(flat: FlatGraph, h: HashNodes, node_ids: Sequence[int], allocate: Allocate,
                       free: Free) -> None:
    """Phase 3: execution order. Allocate each node's sources (normally placed already) and
    the node, then free each source whose last consumer this was (a view's root once its
    views' consumers are done too)."""
    state, n_children, n_views, view_root = h.state, h.n_children, h.n_views, flat.view_root
    for k, srcs, b in zip(flat.node_k, flat.node_src, node_ids):
        for sk in srcs:
            if state[sk] == UNPLACED:
                allocate(sk, b, 3)
        if state[k] == UNPLACED:
            allocate(k, b, 3, srcs)
        for sk in srcs:
            c = n_children[sk] - 1
            n_children[sk] = c
            if c == 0 and n_views[sk] == 0:
                r = view_root[sk]
                if r >= 0:
                    v = n_views[r] - 1
                    n_views[r] = v
                    if v == 0 and n_children[r] == 0 and state[r] == OWN:
                        free(r)
                elif state[sk] == OWN:
                    free(sk)


def _node_functions(plan_id: int, flat: FlatGraph, h: HashNodes, bufts: Sequence[BufferType],  # noqa: C901
                    dyn: Sequence[DynAllocator], plain: bool, inplace_ops: frozenset[Op],
                    tracing: bool) -> tuple[Allocate, Free]:
    """``ggml_gallocr_allocate_node`` and ``ggml_gallocr_free_node`` over ``h``, as closures:
    the phases call them once or twice per tensor, and the lists they read are locals of
    this function (a method would look each one up as an attribute on every call, ~10% of
    the planning time)."""
    emit = recorder.emit
    tensors, empty, flags, size = flat.tensors, flat.empty, flat.flags, flat.size
    state, n_children, n_views, buffer_id, chunk, offset = h.state, h.n_children, h.n_views, h.buffer_id, h.chunk, \
        h.offset
    Refused = ev.PlanRefused
    RR = ev.RefuseReason
    inplace_ids = _INPLACE_IDS if inplace_ops is INPLACE_OPS else frozenset(id(op) for op in inplace_ops)
    index_get = flat.index.get
    node_row: dict[int, list[int]] = {}  # a node's source row by number, filled on first need

    def sources_of(k: int) -> list[int]:
        if not node_row:
            node_row.update(zip(flat.node_k, flat.node_src))
        row = node_row.get(k)
        if row is None:  # a leaf or a tensor outside the graph (-1: a source not numbered)
            t = tensors[k]
            row = [index_get(p, -1) if p is not None else empty for p in t.src]
        return row

    def allocate_node(k: int, b: int, phase: int, srcs: list[int] | None = None) -> None:
        """``ggml_gallocr_allocate_node`` for an UNPLACED tensor (the callers test the state:
        the test is cheaper than the call). ``srcs``: its source numbers, when the caller has them."""
        state[k] = OWN
        t = tensors[k]
        if id(t.op) in inplace_ids:
            # take over the first parent that is this planner's, not an output, laid out
            # like t, and has t as its last consumer
            if srcs is None:
                srcs = sources_of(k)
            for j in range(len(srcs)):
                pk = srcs[j]
                if pk == empty:
                    continue
                if pk < 0 or state[pk] != OWN:
                    if tracing:
                        p = t.src[j]
                        assert p is not None
                        reason = (RR.VIEW if p.view_src is not None else
                                  RR.EXTERNAL if (p.data is not None or p.buffer is not None) else RR.NOT_OWN)
                        emit(Refused, plan_id, t.id, p.id, reason)
                    continue
                p = tensors[pk]
                if flags[pk] & OUTPUT:
                    if tracing:
                        emit(Refused, plan_id, t.id, p.id, RR.OUTPUT)
                    continue
                if p.type is not t.type or p.ne != t.ne or p.nb != t.nb:
                    if tracing:
                        emit(Refused, plan_id, t.id, p.id, RR.LAYOUT)
                    continue
                if n_children[pk] == 1 and n_views[pk] == 0:
                    pb = buffer_id[pk]
                    buffer_id[k] = pb
                    chunk[k] = chunk[pk]
                    offset[k] = offset[pk]
                    state[pk] = UNPLACED  # the parent's block now belongs to t
                    if tracing:
                        emit(ev.PlanInplace, plan_id, t.id, p.id, pb, chunk[pk], offset[pk])
                    if not plain:
                        free_extra_space(t, p, pk)
                    return
                if tracing:
                    emit(Refused, plan_id, t.id, p.id, RR.CONSUMERS)
        d = dyn[b]
        nbytes = size[k] if plain else bufts[b].alloc_size(t)
        c, o, block = d.alloc(nbytes)
        buffer_id[k] = b
        chunk[k] = c
        offset[k] = o
        if tracing:
            emit(ev.PlanAlloc, plan_id, t.id, b, c, o, d.padded(nbytes), phase, block)

    def free_extra_space(t: Tensor, p: Tensor, pk: int) -> None:
        """``ggml_gallocr_free_extra_space``: give back the tail of a larger parent taken in place."""
        pb = buffer_id[pk]
        buft = bufts[pb]
        psize = buft.alloc_size(p)
        tsize = buft.alloc_size(t)
        if psize < tsize:
            raise AllocationError(
                f"in-place reuse: parent {label(p)} needs {psize} bytes, less than node {label(t)}'s {tsize}; "
                "a buffer type's alloc_size must not grow for the same layout"
            )
        d = dyn[pb]
        psize = d.padded(psize)
        tsize = d.padded(tsize)
        if psize > tsize:
            d.free(chunk[pk], offset[pk] + tsize, psize - tsize)
            if tracing:
                emit(ev.PlanFree, plan_id, p.id, pb, chunk[pk], offset[pk] + tsize, psize - tsize)

    def free_node(k: int) -> None:
        """``ggml_gallocr_free_node``: outputs are never freed."""
        if flags[k] & OUTPUT:
            return
        b = buffer_id[k]
        t = tensors[k]
        nbytes = size[k] if plain else bufts[b].alloc_size(t)
        d = dyn[b]
        d.free(chunk[k], offset[k], nbytes)
        state[k] = UNPLACED
        if tracing:
            emit(ev.PlanFree, plan_id, t.id, b, chunk[k], offset[k], d.padded(nbytes))

    return allocate_node, free_node
