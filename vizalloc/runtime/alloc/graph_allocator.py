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
graph (gradients in a forward/backward alternation) from staying stale. Bindings are
remembered while ``reclaim`` is on (turning it on later, as ``OptContext`` does, reclaims
from the next binding). This is vizalloc's only knowing departure from ggml, and it is
off by default.

Every decision is reported through the recorder (``PlanBegin`` ... ``PlanEnd``,
``Replan``, ``BindingBegin``/``BindingEnd``) only while a trace is recording. The
planning pass itself is ``vizalloc.runtime.alloc.planner``.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from vizalloc.errors import AllocationError, GraphError
from vizalloc.gcpause import gc_paused
from vizalloc.runtime import memory
from vizalloc.runtime.alloc.dyn_allocator import DynAllocator
from vizalloc.runtime.alloc.planner import Plan, Record, plain_alloc_size, plan_graph
from vizalloc.runtime.alloc.rules import DEFAULT as DEFAULT_RULES
from vizalloc.runtime.alloc.rules import AllocatorRules
from vizalloc.runtime.buffer import Buffer, BufferType, Usage
from vizalloc.runtime.tensor import label
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

if TYPE_CHECKING:
    from vizalloc.runtime.graph import Graph
    from vizalloc.runtime.tensor import Tensor

_galloc_ids = itertools.count()
_binding_ids = itertools.count()

class GraphAllocator:
    """ggml's ``ggml_gallocr`` over one or more buffer types.

    Args:
        bufts: one buffer type, or one per buffer id. Ids whose buffer type is the same
            object share one planning allocator and one set of chunk buffers.
        reclaim: the "invalidate" fix (see the module docstring); off as in ggml.
        rules: the ggml version whose planner to follow (``alloc.rules``); d99724f2 by default.
    """

    def __init__(self, bufts: BufferType | Sequence[BufferType], *, reclaim: bool = False,
                 rules: AllocatorRules = DEFAULT_RULES) -> None:
        if isinstance(bufts, BufferType):
            bufts = [bufts]
        self.bufts: list[BufferType] = list(bufts)
        if not self.bufts:
            raise GraphError("GraphAllocator needs at least one buffer type")
        self.id = next(_galloc_ids)
        self.reclaim = reclaim
        self.rules = rules
        self._dyn: list[DynAllocator] = []
        for i, buft in enumerate(self.bufts):
            shared = next((self._dyn[j] for j in range(i) if self.bufts[j] is buft), None)
            self._dyn.append(shared or DynAllocator(buft.alignment, buft.max_size, buft.name))
        #: per buffer id: its chunk buffers (ggml's vbuffer), or None before the first reserve
        self.buffers: list[list[Buffer] | None] = [None] * len(self.bufts)
        self.plan: Plan | None = None
        #: tensors bound since the last explicit reserve while reclaim is on, by id()
        self._bound: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
        #: ids of every chunk buffer this allocator ever made (freed ones included)
        self._own_buffers: set[int] = set()
        self._plain = all(plain_alloc_size(b) for b in self.bufts)
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
                return (cause, f"node {i} {label(node)} " + self._why(node, plan.dst(i), bad), i, node.id)
            for j, s in enumerate(node.src):
                if s is None:
                    continue
                rec = plan.src(i, j)
                bad = self._invalid(s, rec, bufts)
                if bad is not None:
                    cause = ev.ReplanCause.LOST_DATA if bad < 0 else ev.ReplanCause.SRC_SIZE
                    return (cause, f"source {j} {label(s)} of node {i} {label(node)} " + self._why(s, rec, bad),
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
            return ("has no data now but had none planned (it had data or was a view at reserve time, "
                    "or the slot was empty)")
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
        # the planner's lists hold no reference cycles: collecting half-way through a large
        # plan would only traverse them
        with gc_paused():
            self.plan = plan_graph(self.id, graph, self.bufts, self._dyn, node_ids, leaf_ids, self._plain,
                                   self.rules.inplace_ops)
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
        # only the reclaim fix reads what was bound: without it, a weak reference per
        # tensor would cost more than the binding itself
        bound = self._bound if self.reclaim else None
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
                    if bound is not None:
                        bound[id(t)] = t
            elif t.data is None:
                b, c, o, size_max = rec
                if b < 0:
                    raise AllocationError(
                        f"tensor {label(t)} has no data and no plan entry (it had data at reserve time); "
                        "ggml's behaviour is undefined here. Call reserve() again before alloc_graph()"
                    )
                vb = buffers[b]
                if vb is None or c >= len(vb):
                    raise AllocationError(
                        f"tensor {label(t)} is planned in chunk {c} of buffer id {b}, which has no buffer "
                        "(reserve_n_size freed it); call reserve_n() before alloc_graph()"
                    )
                buf = vb[c]
                need = buf.buft.alloc_size(t)
                if need > size_max and o + need > buf.nbytes:
                    # only reachable for leafs: ggml re-validates node and source entries but not
                    # leaf entries; a bigger leaf that still fits its chunk is bound over its
                    # neighbours (as in ggml), one that does not makes ggml abort here
                    raise AllocationError(
                        f"leaf {label(t)} needs {need} bytes at offset {o} of a {buf.nbytes}-byte buffer: the reused "
                        f"plan's entry at its position holds {size_max} (the plan was made for another graph with "
                        "the same node and leaf counts; ggml does not check leaf entries and aborts). "
                        "Call reserve() with this graph first",
                        requested=need, available=buf.nbytes - o,
                    )
                tensor_alloc(buf, t, buf.base + o, by=gallocr, binding_id=binding_id)
                if bound is not None:
                    bound[id(t)] = t

        if plan is not None:
            leaf = plan.leaf
            for i, t in enumerate(graph.leafs):
                init(t, leaf(i))
            src, dst = plan.src, plan.dst
            # ``init`` leaves a tensor that is not a view and has data alone, and most
            # entries reach one (a node's sources were bound as earlier nodes): they are
            # skipped before their record is made
            for i, node in enumerate(graph.nodes):
                for j, s in enumerate(node.src):
                    if s is not None and (s.data is None or s.view_src is not None):
                        init(s, src(i, j))
                if node.data is None or node.view_src is not None:
                    init(node, dst(i))
        if tracing:
            recorder.emit(ev.BindingEnd, binding_id, True)

    def __repr__(self) -> str:
        return f"<GraphAllocator #{self.id} {[b.name for b in self.bufts]}>"


def _graph_tensors(graph: Graph) -> Iterator[Tensor]:
    """Leafs, nodes and their sources (with repeats)."""
    yield from graph.leafs
    for node in graph.nodes:
        yield node
        for s in node.src:
            if s is not None:
                yield s
