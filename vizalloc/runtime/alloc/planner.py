"""The planning pass of the graph allocator (ggml's ``ggml_gallocr_alloc_graph_impl``)
and the records it leaves (``node_allocs`` / ``leaf_allocs``).

    >>> from vizalloc.runtime.alloc.planner import INVALID
    >>> INVALID
    (-1, -1, 18446744073709551615, 0)

``plan_graph`` runs the three phases of semantics §5.5 on the graph flattened into
integer-indexed lists: tensor ``k``'s planner state lives in ``st/nch/nv/bid/chk/off[k]``
(a literal port with dicts keyed by tensor runs 30-50x slower than C). Every decision is
an event while a trace records: ``PlanBegin``, ``PlanExternal``, ``PlanAlloc``,
``PlanInplace``, ``PlanRefused``, ``PlanFree``, ``PlanEnd``.
"""

from __future__ import annotations

import itertools
from itertools import chain
from typing import TYPE_CHECKING

from vizalloc.errors import AllocationError
from vizalloc.runtime.alloc.dyn_allocator import SIZE_MAX, DynAllocator
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.tensor import INPLACE_OPS, Flag, Op, nbytes_of
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

if TYPE_CHECKING:
    from vizalloc.runtime.graph import Graph
    from vizalloc.runtime.tensor import Tensor

_plan_ids = itertools.count()

_INPUT = int(Flag.INPUT)
_OUTPUT = int(Flag.OUTPUT)
#: planner-only flag bit: a view whose op is not NONE (counts towards its root's n_views)
_VIEWOP = 4
#: bytes.translate table: 1 where the INPUT bit is set
_INPUT_BIT = bytes(v & _INPUT for v in range(256))
_NONE = Op.NONE
#: ggml_op_can_inplace by object identity (an Enum's __hash__ runs Python code)
_INPLACE_IDS = frozenset(id(op) for op in INPLACE_OPS)

#: A plan record: (buffer_id, chunk, offset, size_max). ggml's "invalid" record.
Record = tuple[int, int, int, int]
INVALID: Record = (-1, -1, SIZE_MAX, 0)

# planner states of a tensor (ggml: hash_node.allocated, plus "is_allocated or view")
_FREE, _OWN, _SKIP = 0, 1, 2


def plain_alloc_size(buft: BufferType) -> bool:
    """True when ``buft.alloc_size(t)`` is just ``t.nbytes`` (the planner may then cache sizes)."""
    return type(buft).alloc_size is BufferType.alloc_size and getattr(buft, "_alloc_size", 1) is None


class Plan:
    """The plan recorded by the last reserve (ggml's ``node_allocs`` / ``leaf_allocs``).

    Records are kept as the planner's flat lists (tensor index per position, and the
    final planner state per tensor index) so recording costs nothing per position.
    """

    __slots__ = ("plan_id", "graph_id", "n_nodes", "n_leafs", "node_k", "node_src", "leaf_k",
                 "bid", "chk", "off", "size", "hasrec", "chunk_sizes")

    def __init__(self, plan_id: int, graph_id: int, node_k: list[int], node_src: list[list[int]],
                 leaf_k: list[int], bid: list[int], chk: list[int], off: list[int], size: list[int],
                 hasrec: bytearray, chunk_sizes: list[list[int]]) -> None:
        self.plan_id = plan_id
        self.graph_id = graph_id
        self.n_nodes = len(node_k)
        self.n_leafs = len(leaf_k)
        self.node_k = node_k
        self.node_src = node_src
        self.leaf_k = leaf_k
        self.bid = bid
        self.chk = chk
        self.off = off
        self.size = size
        self.hasrec = hasrec
        self.chunk_sizes = chunk_sizes

    def _rec(self, k: int) -> Record:
        if k < 0 or not self.hasrec[k]:
            return INVALID
        return (self.bid[k], self.chk[k], self.off[k], self.size[k])

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
        return [None if not self.hasrec[k] else self._rec(k) for k in self.node_k]

    def leaf_records(self) -> list[Record | None]:
        return [None if not self.hasrec[k] else self._rec(k) for k in self.leaf_k]


def plan_graph(galloc_id: int, graph: Graph, bufts: list[BufferType], dyn: list[DynAllocator],  # noqa: C901
               node_ids: list[int], leaf_ids: list[int], plain: bool, _plan_id: int = -1,
               inplace_ops: frozenset[Op] = INPLACE_OPS) -> Plan:
    """Plan ``graph`` (ggml_gallocr_alloc_graph_impl) with fresh ``dyn`` allocators; returns the records.

    ``plain``: every buffer type sizes tensors by ``nbytes`` (sizes are then computed once).
    ``_plan_id``: internal (a second attempt that numbers the tensors in bulk, see below).
    """
    # The three phases of ggml_gallocr_alloc_graph_impl (semantics §5.5), on the
    # graph flattened into integer-indexed lists: tensor k's planner state lives
    # in st/nch/nv/bid/chk/off[k].
    tracing = recorder.active()
    retry = _plan_id >= 0
    plan_id = _plan_id if retry else next(_plan_ids)
    nodes, leafs = graph.nodes, graph.leafs
    if tracing:
        recorder.emit(ev.PlanBegin, galloc_id, plan_id, graph.id, len(nodes), len(leafs),
                      tuple(b.alignment for b in bufts))

    # Number the tensors: leafs, nodes, a sentinel that stands for empty source slots
    # (never allocated, never freed, so the loops need no "is this slot empty" test),
    # then "extras": view roots and sources that are not in the graph.
    nl, nn = len(leafs), len(nodes)
    # typed as tensors: only the sentinel's entry is None, and no code reads it as one
    tensors: list[Tensor] = [*leafs, *nodes, None]  # type: ignore[list-item]
    # one int object per number, shared by the index, the position lists and the rows
    ks = list(range(len(tensors)))
    sentinel = len(tensors) - 1
    # Without a trace the index is filled during the scan below, so each tensor object is
    # touched once while it is in the cache (at 100k nodes, graph order scatters them over
    # tens of MB). This needs every source and view root to come earlier in the graph;
    # the first that does not completes the index in bulk, and a tensor listed twice
    # (seen at the end of the scan) restarts the plan with the bulk numbering. A trace
    # always numbers in bulk: a restart would repeat the PlanExternal events of the scan.
    incremental = not (tracing or retry)
    index: dict[Tensor | None, int]
    if incremental:
        index = {None: ks[sentinel]}
        simple = True
    else:
        index = dict(zip(tensors, ks))
        simple = len(index) == len(tensors)
    if simple:
        leaf_k = ks[:nl]
        node_k = ks[nl:nl + nn]
    else:  # a tensor listed twice: number first appearances only
        index = {}
        for t in tensors:
            index.setdefault(t, len(index))
        tensors = list(index)  # type: ignore[arg-type]
        leaf_k = [index[t] for t in leafs]
        node_k = [index[t] for t in nodes]
    sentinel = len(tensors) - 1
    m = len(tensors)
    # states and flags are bytes: compact (100k-node graphs outgrow the caches) and
    # indexing a bytearray yields cached small ints
    st = bytearray(m)
    st[sentinel] = _SKIP
    root = [-1] * m
    fl = bytearray(m)
    size = [0] * m
    hasrec = bytearray(m)
    extras: list[int] = []

    def add_extra(t: Tensor) -> int:
        k = len(tensors)
        index[t] = k
        tensors.append(t)
        st.append(_FREE)
        root.append(-1)
        fl.append(0)
        size.append(0)
        hasrec.append(0)
        extras.append(k)
        return k

    def src_row(t: Tensor) -> list[int]:
        row = []
        for s in t.src:
            k = index.get(s)
            row.append(add_extra(s) if k is None else k)
        return row

    getitem = index.__getitem__
    if simple:
        node_src: list[list[int]] = [[]] * nn
    else:
        node_src = [src_row(t) for t in nodes]  # type: ignore[arg-type]
    # one pass over the tensors: the nodes' source rows, then what the planner needs to
    # know about each tensor (each object is touched once: large graphs outgrow caches)
    for k in range(sentinel):
        t = tensors[k]
        if incremental:
            index[t] = ks[k]
        if simple and k >= nl:
            try:
                node_src[k - nl] = [*map(getitem, t.src)]
            except KeyError:  # a source outside the graph (graph views, hand-made graphs)
                if incremental:  # or later in it: number the rest first
                    incremental = False
                    index.update(zip(tensors[k:sentinel], ks[k:sentinel]))
                node_src[k - nl] = src_row(t)
        vs = t.view_src
        if vs is not None:
            r = index.get(vs)
            if r is None and incremental:
                incremental = False
                index.update(zip(tensors[k:sentinel], ks[k:sentinel]))
                r = index.get(vs)
            root[k] = add_extra(vs) if r is None else r
            st[k] = _SKIP
            fl[k] = t.flags & 3 if t.op is _NONE else (t.flags & 3) | _VIEWOP
            continue
        fl[k] = t.flags & 3
        if t.data is not None:
            st[k] = _SKIP
            if tracing:
                recorder.emit(ev.PlanExternal, plan_id, t.id)
            continue
        hasrec[k] = 1
        if t.buffer is not None:
            st[k] = _SKIP
            if tracing:
                recorder.emit(ev.PlanExternal, plan_id, t.id)
        if plain:
            dt = t.type
            ne0, ne1, ne2, ne3 = t.ne
            if dt.blck_size == 1:
                nb0, nb1, nb2, nb3 = t.nb
                # ggml_nbytes: the span the strides touch (0 for an empty tensor)
                if ne0 > 0 and ne1 > 0 and ne2 > 0 and ne3 > 0:
                    size[k] = dt.type_size + (ne0 - 1) * nb0 + (ne1 - 1) * nb1 + (ne2 - 1) * nb2 + (ne3 - 1) * nb3
            else:
                size[k] = nbytes_of(dt, t.ne, t.nb)
    if len(index) != m + len(extras):
        # a tensor listed twice (only bulk numbering knows it before the scan): start again
        return plan_graph(galloc_id, graph, bufts, dyn, node_ids, leaf_ids, plain, plan_id, inplace_ops)
    j = 0
    while j < len(extras):  # rare: roots and sources outside the graph (may add more)
        k = extras[j]
        j += 1
        t = tensors[k]
        fl[k] = t.flags & 3
        vs = t.view_src
        if vs is not None:
            r = index.get(vs)
            root[k] = add_extra(vs) if r is None else r
            st[k] = _SKIP
        elif t.data is not None or t.buffer is not None:
            st[k] = _SKIP
            hasrec[k] = t.data is None
            if tracing:
                recorder.emit(ev.PlanExternal, plan_id, t.id)
        else:
            hasrec[k] = 1
            if plain:
                size[k] = t.nbytes
    m = len(tensors)

    nch = [0] * m
    nv = [0] * m
    bid = [0] * m
    chk = [0] * m
    off = [0] * m
    emit = recorder.emit
    Refused = ev.PlanRefused
    RR = ev.RefuseReason
    inplace_ids = _INPLACE_IDS if inplace_ops is INPLACE_OPS else frozenset(id(op) for op in inplace_ops)
    get = index.get
    node_row: dict[int, list[int]] = {}  # filled on first need (sources allocated early)

    def row_of(k: int) -> list[int] | None:
        if not node_row:
            node_row.update(zip(node_k, node_src))
        return node_row.get(k)

    def allocate(k: int, b: int, phase: int, row: list[int] | None = None) -> None:
        # ggml_gallocr_allocate_node for a tensor the caller found in state _FREE;
        # ``row``: its sources' indices when the caller has them
        st[k] = _OWN
        t = tensors[k]
        if id(t.op) in inplace_ids:
            if row is None:
                row = row_of(k)
            if row is None:
                row = [get(p, -1) if p is not None else sentinel for p in t.src]
            tsrc = t.src
            for j in range(len(row)):
                pk = row[j]
                if pk == sentinel:
                    continue  # empty slot
                if pk < 0 or st[pk] != _OWN:
                    if tracing:
                        p = tsrc[j]
                        reason = (RR.VIEW if p.view_src is not None else
                                  RR.EXTERNAL if (p.data is not None or p.buffer is not None) else RR.NOT_OWN)
                        emit(Refused, plan_id, t.id, p.id, reason)
                    continue
                p = tensors[pk]
                if fl[pk] & _OUTPUT:
                    if tracing:
                        emit(Refused, plan_id, t.id, p.id, RR.OUTPUT)
                    continue
                if p.type is not t.type or p.ne != t.ne or p.nb != t.nb:
                    if tracing:
                        emit(Refused, plan_id, t.id, p.id, RR.LAYOUT)
                    continue
                if nch[pk] == 1 and nv[pk] == 0:
                    pb = bid[pk]
                    bid[k] = pb
                    chk[k] = chk[pk]
                    off[k] = off[pk]
                    st[pk] = _FREE  # the parent's block now belongs to t
                    if tracing:
                        emit(ev.PlanInplace, plan_id, t.id, p.id, pb, chk[pk], off[pk])
                    if not plain:
                        _free_extra_space(bufts, dyn, k, pk, pb, tensors, chk, off, plan_id, tracing)
                    return
                if tracing:
                    emit(Refused, plan_id, t.id, p.id, RR.CONSUMERS)
        d = dyn[b]
        nbytes = size[k] if plain else bufts[b].alloc_size(t)
        c, o, blk = d.alloc(nbytes)
        bid[k] = b
        chk[k] = c
        off[k] = o
        if tracing:
            mask = d._mask
            emit(ev.PlanAlloc, plan_id, t.id, b, c, o, (nbytes + mask) & ~mask, phase, blk)

    def free_node(k: int) -> None:
        # ggml_gallocr_free_node: outputs are never freed
        if fl[k] & _OUTPUT:
            return
        b = bid[k]
        nbytes = size[k] if plain else bufts[b].alloc_size(tensors[k])
        d = dyn[b]
        d.free(chk[k], off[k], nbytes)
        st[k] = _FREE
        if tracing:
            mask = d._mask
            emit(ev.PlanFree, plan_id, tensors[k].id, b, chk[k], off[k], (nbytes + mask) & ~mask)

    # phase 1: leafs, in leaf order
    for k, b in zip(leaf_k, leaf_ids):
        if st[k] == _FREE:
            allocate(k, b, 1)

    # phase 2: count children and views; allocate inputs early
    if fl.translate(_INPUT_BIT).find(1, nl) >= 0:
        # an INPUT node or outside source: it is allocated here, in node order, and its
        # in-place choice sees the counts taken so far
        for k, srcs, b in zip(node_k, node_src, node_ids):
            f = fl[k]
            if f:
                if f & _VIEWOP:
                    nv[root[k]] += 1
                if f & _INPUT and st[k] == _FREE:
                    allocate(k, b, 2, srcs)
            for sk in srcs:
                nch[sk] += 1
                if fl[sk] & _INPUT and st[sk] == _FREE:
                    allocate(sk, b, 2)
    else:
        # Phase 1 placed or skipped every leaf (no count is set yet, so no leaf takes over
        # another), and no other tensor is an INPUT: phase 2 allocates nothing and the
        # counts can be taken in any order.
        for k in node_k:
            if fl[k] & _VIEWOP:
                nv[root[k]] += 1
        for sk in chain.from_iterable(node_src):
            nch[sk] += 1

    # phase 3: execution order; free sources after their last consumer
    for k, srcs, b in zip(node_k, node_src, node_ids):
        for sk in srcs:
            if st[sk] == _FREE:
                allocate(sk, b, 3)
        if st[k] == _FREE:
            allocate(k, b, 3, srcs)
        for sk in srcs:
            c = nch[sk] - 1
            nch[sk] = c
            if c == 0 and nv[sk] == 0:
                r = root[sk]
                if r >= 0:
                    v = nv[r] - 1
                    nv[r] = v
                    if v == 0 and nch[r] == 0 and st[r] == _OWN:
                        free_node(r)
                elif st[sk] == _OWN:
                    free_node(sk)

    if not plain:
        for k in range(m):
            if hasrec[k]:
                size[k] = bufts[bid[k]].alloc_size(tensors[k])
    chunk_sizes = [d.chunk_sizes() for d in dyn]
    if tracing:
        recorder.emit(ev.PlanEnd, plan_id, tuple(tuple(c) for c in chunk_sizes))
    return Plan(plan_id, graph.id, node_k, node_src, leaf_k, bid, chk, off, size, hasrec, chunk_sizes)


def _free_extra_space(bufts: list[BufferType], dyn: list[DynAllocator], k: int, pk: int, pb: int,
                      tensors: list[Tensor], chk: list[int], off: list[int], plan_id: int,
                      tracing: bool) -> None:
    """ggml_gallocr_free_extra_space: give back the tail of a larger parent taken in place."""
    buft = bufts[pb]
    t, p = tensors[k], tensors[pk]
    assert t is not None and p is not None
    psize = buft.alloc_size(p)
    tsize = buft.alloc_size(t)
    if psize < tsize:
        raise AllocationError(
            f"in-place reuse: parent {_label(p)} needs {psize} bytes, less than node {_label(t)}'s {tsize}; "
            "a buffer type's alloc_size must not grow for the same layout"
        )
    d = dyn[pb]
    m = d._mask
    psize = (psize + m) & ~m
    tsize = (tsize + m) & ~m
    if psize > tsize:
        d.free(chk[pk], off[pk] + tsize, psize - tsize)
        if tracing:
            recorder.emit(ev.PlanFree, plan_id, p.id, pb, chk[pk], off[pk] + tsize, psize - tsize)


def _label(t: Tensor) -> str:
    return repr(t.name) if t.name else f"#{t.id}"
