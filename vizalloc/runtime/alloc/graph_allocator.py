"""The graph allocator (ggml's ``ggml_gallocr``): plans every tensor of a graph into
per-buffer-type "vbuffers" (up to 16 chunk buffers each), then binds graphs to the plan.

    >>> from vizalloc.runtime import BufferType, Context, F32, Graph
    >>> from vizalloc.runtime.alloc import GraphAllocator
    >>> from vizalloc.runtime.tensor import Op
    >>> ctx = Context()
    >>> a = ctx.new_tensor_1d(F32, 8); b = ctx.new_tensor_1d(F32, 8)
    >>> c = ctx.new_tensor_impl(F32, (8,), op=Op.ADD, src=[a, b])
    >>> g = Graph(); g.build_forward_expand(c)
    >>> galloc = GraphAllocator(BufferType("CPU", alignment=32))
    >>> galloc.alloc_graph(g), galloc.buffer_size(0), [t.offset for t in (a, b, c)]
    (True, 64, [0, 32, 0])

Two steps, as in ggml (semantics §5):

* ``reserve``/``reserve_n`` plan the graph (leafs, then inputs, then an execution-order
  simulation with in-place reuse and frees through consumers), record the plan position
  by position, and rebuild a slot's chunk buffers only when a chunk must grow;
* ``alloc_graph`` checks the graph against the recorded plan (node and leaf counts,
  sizes, lost data), re-plans automatically with one buffer type, and binds: leaf
  records first, then per node its sources and itself; the first record that touches a
  tensor wins. Tensors that already have data or a buffer are external: the planner
  does not see their bytes, never frees them, never reuses them in place.

``reclaim=True`` adds the "invalidate" fix (ggml PR #999, rejected upstream): at
``alloc_graph`` the tensors of the new graph that this allocator bound (in any binding
since the last explicit ``reserve``) and that still point into one of its buffers are
cleared first, so they are planned afresh. An explicit ``reserve`` forgets what was
bound before it (the hole the maintainers' counter-example exploits). Remembering every
binding since the last reserve, not only the very last one, keeps tensors that skip a
graph (gradients in a forward/backward alternation) from staying stale. This is
vizalloc's only knowing departure from ggml, and it is off by default.

Every decision is reported through the recorder (``PlanBegin`` ... ``PlanEnd``,
``Replan``, ``BindingBegin``/``BindingEnd``) only while a trace is recording. The
planner works on the graph flattened into integer-indexed lists, because a literal
port (dicts keyed by tensor, attribute lookups in the loops) runs 30-50x slower than C.
"""

from __future__ import annotations

import gc
import itertools
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from vizalloc.errors import AllocationError, GraphError
from vizalloc.runtime import memory
from vizalloc.runtime.alloc.dyn_allocator import SIZE_MAX, DynAllocator
from vizalloc.runtime.buffer import Buffer, BufferType, Usage
from vizalloc.runtime.tensor import INPLACE_OPS, Flag, Op, nbytes_of
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

if TYPE_CHECKING:
    from vizalloc.runtime.graph import Graph
    from vizalloc.runtime.tensor import Tensor

_galloc_ids = itertools.count()
_plan_ids = itertools.count()
_binding_ids = itertools.count()

_INPUT = int(Flag.INPUT)
_OUTPUT = int(Flag.OUTPUT)
_NONE = Op.NONE
#: ggml_op_can_inplace by object identity (an Enum's __hash__ runs Python code)
_INPLACE_IDS = frozenset(id(op) for op in INPLACE_OPS)

#: A plan record: (buffer_id, chunk, offset, size_max). ggml's "invalid" record.
Record = tuple[int, int, int, int]
INVALID: Record = (-1, -1, SIZE_MAX, 0)

# planner states of a tensor (ggml: hash_node.allocated, plus "is_allocated or view")
_FREE, _OWN, _SKIP = 0, 1, 2


def _plain_alloc_size(buft: BufferType) -> bool:
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
                 hasrec: list[bool], chunk_sizes: list[list[int]]) -> None:
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


class GraphAllocator:
    """ggml's ``ggml_gallocr`` over one or more buffer types.

    Args:
        bufts: one buffer type, or one per buffer id. Ids whose buffer type is the same
            object share one planning allocator and one set of chunk buffers.
        reclaim: the "invalidate" fix (see the module docstring); off as in ggml.
    """

    def __init__(self, bufts: BufferType | Sequence[BufferType], *, reclaim: bool = False) -> None:
        if isinstance(bufts, BufferType):
            bufts = [bufts]
        self.bufts: list[BufferType] = list(bufts)
        if not self.bufts:
            raise GraphError("GraphAllocator needs at least one buffer type")
        self.id = next(_galloc_ids)
        self.reclaim = reclaim
        self._dyn: list[DynAllocator] = []
        for i, buft in enumerate(self.bufts):
            shared = next((self._dyn[j] for j in range(i) if self.bufts[j] is buft), None)
            self._dyn.append(shared or DynAllocator(buft.alignment, buft.max_size, buft.name))
        #: per buffer id: its chunk buffers (ggml's vbuffer), or None before the first reserve
        self.buffers: list[list[Buffer] | None] = [None] * len(self.bufts)
        self.plan: Plan | None = None
        #: tensors bound since the last explicit reserve (for reclaim), by id()
        self._bound: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
        #: ids of every chunk buffer this allocator ever made (freed ones included)
        self._own_buffers: set[int] = set()
        self._plain = all(_plain_alloc_size(b) for b in self.bufts)
        #: why the last reserve returned False (a buffer could not be allocated)
        self.last_error: str = ""

    @property
    def n_buffers(self) -> int:
        return len(self.bufts)

    # -- public API ---------------------------------------------------------------
    def reserve(self, graph: Graph) -> bool:
        """``ggml_gallocr_reserve``: plan ``graph`` with every tensor in buffer 0."""
        return self.reserve_n(graph, None, None)

    def reserve_n(self, graph: Graph, node_buffer_ids: Sequence[int] | None,
                  leaf_buffer_ids: Sequence[int] | None) -> bool:
        """``ggml_gallocr_reserve_n``: plan ``graph`` with a buffer id per node and per leaf."""
        if recorder.active():
            recorder.emit(ev.Replan, self.id, ev.ReplanCause.EXPLICIT, "reserve called", -1, -1)
        self._bound.clear()
        return self._reserve(graph, node_buffer_ids, leaf_buffer_ids, no_alloc=False)

    def reserve_n_size(self, graph: Graph, node_buffer_ids: Sequence[int] | None = None,
                       leaf_buffer_ids: Sequence[int] | None = None) -> list[int]:
        """``ggml_gallocr_reserve_n_size``: plan and report the bytes each id needs.

        As in ggml, a slot whose chunks would have to grow has its buffers freed and
        left empty (no allocation happens).
        """
        if recorder.active():
            recorder.emit(ev.Replan, self.id, ev.ReplanCause.EXPLICIT, "reserve_n_size called", -1, -1)
        self._bound.clear()
        self._reserve(graph, node_buffer_ids, leaf_buffer_ids, no_alloc=True)
        return [sum(d.max_sizes) for d in self._dyn]

    def buffer_size(self, buffer_id: int) -> int:
        """``ggml_gallocr_get_buffer_size``: bytes of the chunk buffers of ``buffer_id``.

        0 when none exist yet, or when an earlier id shares them (counted once).
        """
        if not 0 <= buffer_id < len(self.bufts):
            raise GraphError(f"buffer id {buffer_id} out of range: this allocator has {len(self.bufts)} buffer types")
        vb = self.buffers[buffer_id]
        if vb is None:
            return 0
        for j in range(buffer_id):
            if self.buffers[j] is vb:
                return 0
        return sum(b.nbytes for b in vb)

    def chunk_sizes(self) -> list[list[int]]:
        """The planning allocator's chunk high-water marks per buffer id (shared ids repeat)."""
        return [d.chunk_sizes() for d in self._dyn]

    def alloc_graph(self, graph: Graph) -> bool:
        """``ggml_gallocr_alloc_graph``: bind ``graph`` to the recorded plan.

        Re-plans first when the graph does not fit the plan; with several buffer types it
        returns False instead (call ``reserve_n``).
        """
        tracing = recorder.active()
        if self.reclaim and len(self._bound):
            self._reclaim(graph)
        why = self.needs_realloc(graph)
        if why is not None:
            cause, detail, node_index, tensor_id = why
            if tracing:
                recorder.emit(ev.Replan, self.id, cause, detail, node_index, tensor_id)
            if len(self.bufts) != 1:
                return False
            if not self._reserve(graph, None, None, no_alloc=False):
                return False
        self._bind(graph, tracing)
        return True

    def needs_realloc(self, graph: Graph) -> tuple[ev.ReplanCause, str, int, int] | None:
        """``ggml_gallocr_needs_realloc``: why ``graph`` cannot be bound to the plan, or None."""
        plan = self.plan
        nodes, leafs = graph.nodes, graph.leafs
        if plan is None:
            if not nodes and not leafs:
                return None
            return (ev.ReplanCause.FIRST, "nothing planned yet", -1, -1)
        if plan.n_nodes != len(nodes):
            return (ev.ReplanCause.N_NODES, f"graph has {len(nodes)} nodes, the plan {plan.n_nodes}", -1, -1)
        if plan.n_leafs != len(leafs):
            return (ev.ReplanCause.N_LEAFS, f"graph has {len(leafs)} leafs, the plan {plan.n_leafs}", -1, -1)
        bufts = self.bufts
        for i, node in enumerate(nodes):
            bad = self._invalid(node, plan.dst(i), bufts)
            if bad is not None:
                cause = ev.ReplanCause.LOST_DATA if bad < 0 else ev.ReplanCause.NODE_SIZE
                return (cause, f"node {i} {_label(node)} " + self._why(node, plan.dst(i), bad), i, node.id)
            for j, s in enumerate(node.src):
                if s is None:
                    continue
                rec = plan.src(i, j)
                bad = self._invalid(s, rec, bufts)
                if bad is not None:
                    cause = ev.ReplanCause.LOST_DATA if bad < 0 else ev.ReplanCause.SRC_SIZE
                    return (cause, f"source {j} {_label(s)} of node {i} {_label(node)} " + self._why(s, rec, bad),
                            i, s.id)
        return None

    # -- checks ---------------------------------------------------------------------
    @staticmethod
    def _invalid(t: Tensor, rec: Record, bufts: list[BufferType]) -> int | None:
        """None if ``t`` fits ``rec``; -1 if it has no record to use; else the bytes it needs."""
        if t.data is None and t.view_src is None:
            if rec[0] < 0:
                return -1
            need = bufts[rec[0]].alloc_size(t)
            return need if rec[3] < need else None
        return None

    @staticmethod
    def _why(t: Tensor, rec: Record, bad: int) -> str:
        if bad < 0:
            return "has no data now but had none planned (it had data or was a view at reserve time, or the slot was empty)"
        return f"needs {bad} bytes but its plan entry holds {rec[3]}"

    # -- reclaim ("invalidate" fix) ------------------------------------------------
    def _reclaim(self, graph: Graph) -> None:
        bound = self._bound
        own = self._own_buffers
        for t in _graph_tensors(graph):
            storage = t.storage
            if t.data is not None and storage is not None and storage.id in own and bound.get(id(t)) is t:
                memory.clear_tensor_pointers(t, by="invalidate")

    # -- planning ------------------------------------------------------------------
    def _reserve(self, graph: Graph, node_ids: Sequence[int] | None, leaf_ids: Sequence[int] | None,
                 *, no_alloc: bool) -> bool:
        nodes, leafs = graph.nodes, graph.leafs
        n_buf = len(self.bufts)
        node_ids = self._check_ids(node_ids, len(nodes), "node")
        leaf_ids = self._check_ids(leaf_ids, len(leafs), "leaf")
        for d in self._dyn:
            d.reset()
        # The planner builds many short-lived lists and no reference cycles; a cyclic
        # collection triggered half-way through a 100k-node plan would cost more than the
        # plan itself, so collection waits until the plan is made.
        collecting = gc.isenabled()
        if collecting:
            gc.disable()
        try:
            self.plan = self._plan(graph, node_ids, leaf_ids)
        finally:
            if collecting:
                gc.enable()
        return self._realloc_buffers(no_alloc, n_buf)

    def _check_ids(self, ids: Sequence[int] | None, n: int, what: str) -> list[int]:
        if ids is None:
            return [0] * n
        ids = list(ids)
        if len(ids) != n:
            raise GraphError(f"{what}_buffer_ids has {len(ids)} entries; the graph has {n} {what}s")
        nb = len(self.bufts)
        for i, b in enumerate(ids):
            if not 0 <= b < nb:
                raise GraphError(f"{what}_buffer_ids[{i}] = {b}: this allocator has {nb} buffer types")
        return ids

    def _plan(self, graph: Graph, node_ids: list[int], leaf_ids: list[int]) -> Plan:  # noqa: C901
        # The three phases of ggml_gallocr_alloc_graph_impl (semantics §5.5), on the
        # graph flattened into integer-indexed lists: tensor k's planner state lives
        # in st/nch/nv/bid/chk/off[k].
        tracing = recorder.active()
        plan_id = next(_plan_ids)
        nodes, leafs = graph.nodes, graph.leafs
        bufts = self.bufts
        dyn = self._dyn
        plain = self._plain
        if tracing:
            recorder.emit(ev.PlanBegin, self.id, plan_id, graph.id, len(nodes), len(leafs),
                          tuple(b.alignment for b in bufts))

        # the sentinel stands for empty source slots: never allocated, never freed, so the
        # loops below need no "is this slot empty" test
        index, tensors, leaf_k, node_k, node_src, sentinel = _flatten(leafs, nodes)
        m = len(tensors)
        # states and flags are bytes: compact (100k-node graphs outgrow the caches) and
        # indexing a bytearray yields cached small ints
        st = bytearray(m)
        st[sentinel] = _SKIP
        root = [-1] * m
        fl = bytearray(m)
        size = [0] * m
        hasrec = bytearray(m)
        for k in itertools.chain(range(sentinel), range(sentinel + 1, m)):
            t = tensors[k]
            fl[k] = t.flags & 0xFF
            vs = t.view_src
            if vs is not None:
                root[k] = index[vs]
                st[k] = _SKIP
                continue
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

        nch = [0] * m
        nv = [0] * m
        bid = [0] * m
        chk = [0] * m
        off = [0] * m
        emit = recorder.emit
        Refused = ev.PlanRefused
        RR = ev.RefuseReason
        inplace_ops = _INPLACE_IDS
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
            if id(t.op) in inplace_ops:
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
                            self._free_extra_space(k, pk, pb, tensors, chk, off, plan_id, tracing)
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
        for node, k, srcs, b in zip(nodes, node_k, node_src, node_ids):
            r = root[k]
            if r >= 0 and node.op is not _NONE:
                nv[r] += 1
            if fl[k] & _INPUT and st[k] == _FREE:
                allocate(k, b, 2, srcs)
            for sk in srcs:
                nch[sk] += 1
                if fl[sk] & _INPUT and st[sk] == _FREE:
                    allocate(sk, b, 2)

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

    def _free_extra_space(self, k: int, pk: int, pb: int, tensors: list[Tensor], chk: list[int],
                          off: list[int], plan_id: int, tracing: bool) -> None:
        """ggml_gallocr_free_extra_space: give back the tail of a larger parent taken in place."""
        buft = self.bufts[pb]
        t, p = tensors[k], tensors[pk]
        psize = buft.alloc_size(p)
        tsize = buft.alloc_size(t)
        if psize < tsize:
            raise AllocationError(
                f"in-place reuse: parent {_label(p)} needs {psize} bytes, less than node {_label(t)}'s {tsize}; "
                "a buffer type's alloc_size must not grow for the same layout"
            )
        d = self._dyn[pb]
        m = d._mask
        psize = (psize + m) & ~m
        tsize = (tsize + m) & ~m
        if psize > tsize:
            d.free(chk[pk], off[pk] + tsize, psize - tsize)
            if tracing:
                recorder.emit(ev.PlanFree, plan_id, p.id, pb, chk[pk], off[pk] + tsize, psize - tsize)

    def _realloc_buffers(self, no_alloc: bool, n_buf: int) -> bool:
        # ggml_gallocr_reserve_n_impl's last loop: rebuild a slot only when a chunk must grow
        buffers = self.buffers
        for i in range(n_buf):
            for j in range(i):
                if self._dyn[j] is self._dyn[i]:
                    buffers[i] = buffers[j]
                    break
            vb = buffers[i]
            need = self._dyn[i].max_sizes
            realloc = vb is None
            grow = []
            for c, m in enumerate(need):
                cur = vb[c].nbytes if vb is not None and c < len(vb) else 0
                if m > cur:
                    realloc = True
                    grow.append(c)
            if not realloc:
                continue
            buft = self.bufts[i]
            if vb is not None:
                why = f"galloc {self.id} slot {i}: chunk(s) {grow} must grow to {[need[c] for c in grow]} bytes"
                for buf in vb:
                    buf.free(cause=why)
            if no_alloc:
                buffers[i] = None
                continue
            new: list[Buffer] = []
            cause = "first plan" if vb is None else f"plan grew chunk(s) {grow}"
            try:
                for c, m in enumerate(need):
                    new.append(buft.alloc_buffer(m, Usage.COMPUTE, pool_id=self.id, slot=i, chunk=c,
                                                 cause=f"galloc {self.id} slot {i} chunk {c}: {cause}"))
            except AllocationError as exc:
                for buf in new:
                    buf.free(cause="allocation of a sibling chunk failed")
                buffers[i] = None
                self.last_error = str(exc)
                return False
            buffers[i] = new
            self._own_buffers.update(b.id for b in new)
        return True

    # -- binding -------------------------------------------------------------------
    def _bind(self, graph: Graph, tracing: bool) -> None:
        plan = self.plan
        binding_id = next(_binding_ids)
        if tracing:
            recorder.emit(ev.BindingBegin, self.id, binding_id, -1 if plan is None else plan.plan_id, graph.id)
        bound = self._bound
        buffers = self.buffers
        tensor_alloc = memory.tensor_alloc
        view_init = memory.view_init
        gallocr = ev.PlacedBy.GALLOCR

        def init(t: Tensor, rec: Record) -> None:
            vs = t.view_src
            if vs is not None:
                if t.buffer is None:
                    if vs.buffer is None:
                        return  # root placed without a buffer: ggml leaves the view alone
                    view_init(t, binding_id=binding_id)
                    bound[id(t)] = t
            elif t.data is None:
                b, c, o, size_max = rec
                if b < 0:
                    raise AllocationError(
                        f"tensor {_label(t)} has no data and no plan entry (it had data at reserve time); "
                        "ggml's behaviour is undefined here. Call reserve() again before alloc_graph()"
                    )
                vb = buffers[b]
                if vb is None or c >= len(vb):
                    raise AllocationError(
                        f"tensor {_label(t)} is planned in chunk {c} of buffer id {b}, which has no buffer "
                        "(reserve_n_size freed it); call reserve_n() before alloc_graph()"
                    )
                buf = vb[c]
                need = buf.buft.alloc_size(t)
                if need > size_max and o + need > buf.nbytes:
                    # only reachable for leafs: ggml re-validates node and source entries but not
                    # leaf entries; a bigger leaf that still fits its chunk is bound over its
                    # neighbours (as in ggml), one that does not makes ggml abort here
                    raise AllocationError(
                        f"leaf {_label(t)} needs {need} bytes at offset {o} of a {buf.nbytes}-byte buffer: the reused "
                        f"plan's entry at its position holds {size_max} (the plan was made for another graph with "
                        "the same node and leaf counts; ggml does not check leaf entries and aborts). "
                        "Call reserve() with this graph first",
                        requested=need, available=buf.nbytes - o,
                    )
                tensor_alloc(buf, t, buf.base + o, by=gallocr, binding_id=binding_id)
                bound[id(t)] = t

        if plan is not None:
            leaf = plan.leaf
            for i, t in enumerate(graph.leafs):
                init(t, leaf(i))
            src, dst = plan.src, plan.dst
            for i, node in enumerate(graph.nodes):
                for j, s in enumerate(node.src):
                    if s is not None:
                        init(s, src(i, j))
                init(node, dst(i))
        if tracing:
            recorder.emit(ev.BindingEnd, binding_id, True)

    def __repr__(self) -> str:
        return f"<GraphAllocator #{self.id} {[b.name for b in self.bufts]}>"


def _flatten(leafs: list[Tensor], nodes: list[Tensor]
             ) -> tuple[dict[Tensor | None, int], list[Tensor | None], list[int], list[int], list[list[int]], int]:
    """Number every tensor the planner touches: leafs, nodes, sources, view roots.

    Returns the index (tensor -> k), the tensors by k, the k of each leaf and node
    position, each node's source k per slot, and the sentinel k that stands for an empty
    source slot (``tensors[sentinel]`` is None; the planner never allocates or frees it).
    """
    nl, nn = len(leafs), len(nodes)
    index: dict[Tensor | None, int] = dict(zip(leafs, range(nl)))
    index.update(zip(nodes, range(nl, nl + nn)))
    if len(index) == nl + nn:
        tensors: list[Tensor | None] = leafs + nodes
        leaf_k = list(range(nl))
        node_k = list(range(nl, nl + nn))
    else:  # a tensor listed twice: number first appearances only
        index = {}
        for t in leafs:
            index.setdefault(t, len(index))
        for t in nodes:
            index.setdefault(t, len(index))
        tensors = list(index)
        leaf_k = [index[t] for t in leafs]
        node_k = [index[t] for t in nodes]
    sentinel = len(tensors)
    index[None] = sentinel
    tensors.append(None)
    getitem = index.__getitem__
    try:
        node_src = [[*map(getitem, t.src)] for t in nodes]
    except KeyError:  # a source outside the graph (graph views, hand-made graphs)
        node_src = []
        for t in nodes:
            row = []
            for s in t.src:
                k = index.get(s)
                if k is None:
                    k = index[s] = len(tensors)
                    tensors.append(s)
                row.append(k)
            node_src.append(row)
    for t in tensors:
        if t is not None:
            vs = t.view_src
            if vs is not None and vs not in index:
                index[vs] = len(tensors)
                tensors.append(vs)
    return index, tensors, leaf_k, node_k, node_src, sentinel


def _label(t: Tensor) -> str:
    return repr(t.name) if t.name else f"#{t.id}"


def _graph_tensors(graph: Graph):  # type: ignore[no-untyped-def]
    """Leafs, nodes and their sources (with repeats)."""
    yield from graph.leafs
    for node in graph.nodes:
        yield node
        for s in node.src:
            if s is not None:
                yield s
