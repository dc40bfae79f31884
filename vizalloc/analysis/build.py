"""The one pass that builds a ``TraceModel`` (``model.build_model`` calls it).

Handlers are looked up by event class; the four most frequent kinds (``NodeCompute``,
``TensorNamed``, ``TensorCreated``, ``TensorPlaced``) are handled inline in the loop. Unknown kinds are kept in ``events`` and ignored.

Without ``keep_events`` (the streaming analysis, ``stream.py``) the builder is fed the
events batch by batch and keeps no event: no ``events`` list, no tensor histories, no
node lists of computes; everything else is the same.

    >>> from vizalloc.analysis.model import build_model
    >>> build_model([]).n_events
    0
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.records import (
    NEVER, BindingInfo, BufferInfo, ComputeInfo, GraphInfo, GraphSnapshot, Placement, PlanInfo, SchedInfo,
    TensorInfo, cpy_destination,
)
from vizalloc.trace import events as ev
from vizalloc.trace.events import GGML_TYPE_SIZES, ggml_nbytes


class _NoHistory(list):  # type: ignore[type-arg]
    """A tensor history that stays empty (a streamed model keeps no events to point at)."""

    def append(self, item: Any) -> None:
        pass


_NO_HISTORY = _NoHistory()


def _no_history(items: Any) -> list[int]:
    return _NO_HISTORY


class Builder:
    """The one pass. Handlers are looked up by event class; unknown kinds are kept but ignored."""

    def __init__(self, events: list[ev.Event], *, keep_events: bool = True) -> None:
        self.m = TraceModel(events)
        self.keep = keep_events
        #: CPY node -> the source that is its destination (``dynamic.cpy_destinations``), kept
        #: up to date while streaming
        self.cpy_dst: dict[int, int] = {}
        #: while streaming, who is told of re-plans, plans, bindings begun and ended and tensors
        #: changed, as they happen (``stream.StreamAnalysis``: the hazard checks)
        self.hooks: Any = None
        #: tensors whose name, flags, sources or re-creation the hooks must hear of (``hooks.changed``)
        self.watch: Collection[int] = ()
        #: the stream analysis' skipped steps (``runs.RunTable``): their placements go stale too
        self.runs: Any = None
        self.current: dict[int, int] = {}          # tensor -> current placement index
        self.alias_of: dict[int, int] = {}         # tensor -> alias key of its latest placement
        self.pool_of: dict[int, bool] = {}         # tensor -> latest placement made by a graph allocator
        self.galloc_bound: dict[int, list[int]] = {}  # galloc -> placements its bindings made
        self.galloc_sched: dict[int, int] = {}     # galloc -> sched that drives it
        self.open_sched = -1                       # the scheduler whose alloc_graph is under way
        self.open_plan: PlanInfo | None = None
        self.open_bindings: dict[int, BindingInfo] = {}
        self.open_compute: ComputeInfo | None = None
        self.pending_replans: dict[int, list[ev.Replan]] = {}
        self.i = 0

    def run(self, progress: Callable[[int, int], None] | None = None) -> TraceModel:
        m = self.m
        if progress is not None:
            # report in slices so the hot loop stays free of the callback
            total = len(m.events)
            step = 1 << 16
            full = m.events
            for lo in range(0, total, step):
                self._run(full, lo, min(lo + step, total))
                progress(min(lo + step, total), total)
            return m
        self._run(m.events, 0, len(m.events))
        return m

    def feed(self, events: list[ev.Event]) -> None:
        """The next events (``keep_events=False``): the model grows, the events are not kept."""
        self._run(events, 0, len(events))
        self.m.n_streamed += len(events)
        if events:
            self.m.streamed_last_seq = events[-1].seq

    def _run(self, events: list[ev.Event], lo: int, hi: int) -> None:
        m = self.m
        handlers = {cls: getattr(self, "_" + name) for name, cls in ev.KINDS.items() if hasattr(self, "_" + name)}
        tensors = m.tensors
        tget = tensors.get
        get = handlers.get
        node_compute = ev.NodeCompute
        tensor_named = ev.TensorNamed
        tensor_created = ev.TensorCreated
        tensor_placed = ev.TensorPlaced
        compute_edges = (ev.ComputeBegin, ev.ComputeEnd)
        c = self.open_compute
        add_node = c.nodes.append if c is not None else None
        # for the inlined TensorCreated / TensorPlaced (each ~1/4 of a rebuilt graph's events)
        type_sizes = GGML_TYPE_SIZES
        placements = m.placements
        bindings_get = m.bindings.get
        buffers_get = m.buffers.get
        current = self.current
        current_pop = current.pop
        alias_of = self.alias_of
        pool_of = self.pool_of
        galloc_bound = self.galloc_bound
        keep = self.keep
        history_of = list if keep else _no_history
        watch = self.watch
        cpy_dst = self.cpy_dst
        for i in range(lo, hi):
            e = events[i]
            cls = type(e)
            if cls is node_compute:
                if not keep:
                    continue
                # the hot path, inlined: a node's reads and write
                if add_node is not None:
                    add_node(e)  # type: ignore[arg-type]
                info = tget(e.tensor_id)  # type: ignore[attr-defined]
                if info is not None:
                    info.history.append(i)
                for r in e.reads:  # type: ignore[attr-defined]
                    info = tget(r)
                    if info is not None:
                        info.history.append(i)
                continue
            if cls is tensor_named:
                info = tget(e.tensor_id)  # type: ignore[attr-defined]
                if watch and e.tensor_id in watch:  # type: ignore[attr-defined]
                    self.hooks.changed(e.tensor_id)  # type: ignore[attr-defined]
                if info is not None:
                    info.name = e.name  # type: ignore[attr-defined]
                    info.history.append(i)
                continue
            if cls is tensor_created:
                ne, nb, dtype = e.ne, e.nb, e.dtype  # type: ignore[attr-defined]
                # model.nbytes_of, one call less
                type_size, blck_size = type_sizes.get(dtype) or (nb[0] if nb else 1, 1)
                nbytes = ggml_nbytes(type_size, blck_size, ne, nb)
                t = e.tensor_id  # type: ignore[attr-defined]
                if watch and t in watch:
                    self.hooks.changed(t)
                tensors[t] = TensorInfo(
                    t, e.ctx_id, e.name, dtype, ne, nb, e.op, e.op_params,  # type: ignore[attr-defined]
                    e.srcs, e.view_src, e.view_offs, e.flags, e.copy_of, nbytes,  # type: ignore[attr-defined]
                    e.seq, e.loc, history_of((i,)),
                )
                if not keep and e.op == "CPY":  # type: ignore[attr-defined]
                    cpy_dst[t] = cpy_destination(t, e.srcs)  # type: ignore[attr-defined]
                continue
            if cls is tensor_placed:
                # inlined: a placement, its alias key and pool flag, and who keeps its index
                t = e.tensor_id  # type: ignore[attr-defined]
                seq = e.seq
                by = e.by  # type: ignore[attr-defined]
                old = current_pop(t, None)
                if old is not None:
                    p = placements[old]
                    p.end_seq = seq
                    p.end_reason = "replaced"
                binding_id = e.binding_id  # type: ignore[attr-defined]
                binding = bindings_get(binding_id) if binding_id >= 0 else None
                galloc = binding.galloc_id if binding is not None else -1
                info = tget(t)
                # string comparison: works for enum members and for plain strings alike
                by_pool = by == "gallocr" or by == "view_init"
                if info is None:
                    alias, pool = t, by_pool
                elif by == "copy" and info.copy_of >= 0 and info.copy_of in alias_of:
                    alias, pool = alias_of[info.copy_of], pool_of[info.copy_of]
                elif info.view_src >= 0:
                    vs = info.view_src
                    alias, pool = alias_of.get(vs, vs), pool_of.get(vs, by_pool)
                else:
                    alias, pool = t, by_pool
                alias_of[t] = alias
                pool_of[t] = pool
                idx = len(placements)
                buffer_id = e.buffer_id  # type: ignore[attr-defined]
                p = Placement(idx, t, buffer_id, e.offset, e.nbytes, by, binding_id, galloc,  # type: ignore[attr-defined]
                              seq, e.loc, NEVER, "", NEVER, "", alias, pool)
                placements.append(p)
                current[t] = idx
                if info is not None:
                    info.placements.append(idx)
                    info.history.append(i)
                buf = buffers_get(buffer_id)
                if buf is not None:
                    buf.placements.append(idx)
                    if buf.freed_seq <= seq and galloc >= 0:
                        p.stale_seq, p.stale_reason = seq, "freed"
                if binding is not None:
                    binding.placements.append(idx)
                    if by_pool:
                        bound = galloc_bound.get(galloc)
                        if bound is None:
                            bound = galloc_bound[galloc] = []
                        bound.append(idx)
                continue
            h = get(cls)
            if h is not None:
                self.i = i
                h(e)
                if cls in compute_edges:
                    c = self.open_compute
                    add_node = c.nodes.append if c is not None else None

    # -- helpers ------------------------------------------------------------------
    def _touch(self, tensor_id: int) -> None:
        info = self.m.tensors.get(tensor_id)
        if info is not None:
            info.history.append(self.i)

    def _end_placement(self, tensor_id: int, seq: int, reason: str) -> None:
        idx = self.current.pop(tensor_id, None)
        if idx is not None:
            p = self.m.placements[idx]
            p.end_seq = seq
            p.end_reason = reason

    def _make_stale(self, galloc_id: int, seq: int, reason: str) -> None:
        if self.runs is not None:
            self.runs.make_stale(galloc_id, seq, reason, self.m.placements)
        bound = self.galloc_bound.get(galloc_id)
        if not bound:
            return
        placements = self.m.placements
        for idx in bound:
            p = placements[idx]
            if p.end_seq == NEVER and p.stale_seq == NEVER:
                p.stale_seq = seq
                p.stale_reason = reason
        self.galloc_bound[galloc_id] = []

    # -- contexts and tensors ------------------------------------------------------
    def _ContextCreated(self, e: ev.ContextCreated) -> None:
        self.m.contexts[e.ctx_id] = e

    def _TensorFlagsSet(self, e: ev.TensorFlagsSet) -> None:
        if e.tensor_id in self.watch:
            self.hooks.changed(e.tensor_id)
        info = self.m.tensors.get(e.tensor_id)
        if info is not None:
            info.flags = e.flags
            info.history.append(self.i)

    def _TensorSrcSet(self, e: ev.TensorSrcSet) -> None:
        if e.tensor_id in self.watch:
            self.hooks.changed(e.tensor_id)
        info = self.m.tensors.get(e.tensor_id)
        if info is not None:
            srcs = list(info.srcs)
            while len(srcs) <= e.slot:
                srcs.append(-1)
            srcs[e.slot] = e.src_id
            info.srcs = tuple(srcs)
            info.history.append(self.i)
            if not self.keep and info.op == "CPY":
                self.cpy_dst[info.tensor_id] = cpy_destination(info.tensor_id, srcs)

    # -- buffers and placements ---------------------------------------------------
    def _BufferAllocated(self, e: ev.BufferAllocated) -> None:
        self.m.buffers[e.buffer_id] = BufferInfo(
            e.buffer_id, e.backend, e.buft, e.base, e.nbytes, e.alignment, e.usage, e.pool_id, e.slot,
            e.chunk, e.cause, e.seq, e.loc,
        )

    def _BufferFreed(self, e: ev.BufferFreed) -> None:
        buf = self.m.buffers.get(e.buffer_id)
        if buf is None:
            return
        buf.freed_seq = e.seq
        buf.free_cause = e.cause
        buf.freed_loc = e.loc
        placements = self.m.placements
        tensors = self.m.tensors
        for idx in buf.placements:
            p = placements[idx]
            if p.end_seq == NEVER:
                if p.stale_seq == NEVER and p.galloc_id >= 0:
                    p.stale_seq = e.seq
                    p.stale_reason = "freed"
                info = tensors.get(p.tensor_id)
                if info is not None:
                    info.history.append(self.i)
        if self.runs is not None:
            self.runs.buffer_freed(e.buffer_id, e.seq, placements)

    def _BufferCleared(self, e: ev.BufferCleared) -> None:
        buf = self.m.buffers.get(e.buffer_id)
        if buf is not None:
            buf.cleared_seqs.append(e.seq)

    def _TensorCleared(self, e: ev.TensorCleared) -> None:
        self._end_placement(e.tensor_id, e.seq, f"cleared by {e.by}")
        self._touch(e.tensor_id)

    # -- graphs ---------------------------------------------------------------------
    def _GraphCreated(self, e: ev.GraphCreated) -> None:
        self.m.graphs[e.graph_id] = GraphInfo(e.graph_id, e.size, e.kind, e.source_graph, e.seq, e.loc)

    def _GraphExpanded(self, e: ev.GraphExpanded) -> None:
        g = self.m.graphs.get(e.graph_id)
        if g is None:
            g = self.m.graphs[e.graph_id] = GraphInfo(e.graph_id, 0, "unknown", -1, e.seq, e.loc)
        g.nodes.extend(e.nodes)
        g.leafs.extend(e.leafs)

    def _GraphCleared(self, e: ev.GraphCleared) -> None:
        g = self.m.graphs.get(e.graph_id)
        if g is None:
            return
        # new lists, not cleared ones: plans, bindings and computes keep snapshots of the old
        g.nodes = []
        g.leafs = []
        g.cleared_seqs.append(e.seq)

    def _snapshot(self, graph_id: int) -> GraphSnapshot | None:
        g = self.m.graphs.get(graph_id)
        return g.snapshot() if g is not None else None

    # -- planning and binding ---------------------------------------------------------
    def _Replan(self, e: ev.Replan) -> None:
        if self.hooks is not None:
            self.hooks.replan(e)
        self.m.replans.append(e)
        self.pending_replans.setdefault(e.galloc_id, []).append(e)

    def _PlanBegin(self, e: ev.PlanBegin) -> None:
        if self.open_sched >= 0:
            self._associate(e.galloc_id, self.open_sched)
        self._make_stale(e.galloc_id, e.seq, "re-planned")
        plan = PlanInfo(e.plan_id, e.galloc_id, e.graph_id, e.n_nodes, e.n_leafs, tuple(e.alignments), e.seq,
                        e.loc, self._snapshot(e.graph_id))
        plan.replans = self.pending_replans.pop(e.galloc_id, [])
        self.m.plans[e.plan_id] = plan
        self.open_plan = plan
        if self.hooks is not None:
            self.hooks.plan(plan)

    def _decision(self, e: Any) -> None:
        plan = self.open_plan
        if plan is None or plan.plan_id != e.plan_id:
            plan = self.m.plans.get(e.plan_id)
        if plan is not None:
            plan.decisions.append(e)

    _PlanAlloc = _PlanInplace = _PlanRefused = _PlanFree = _PlanExternal = _decision

    def _PlanEnd(self, e: ev.PlanEnd) -> None:
        plan = self.m.plans.get(e.plan_id)
        if plan is not None:
            plan.end_seq = e.seq
            plan.chunk_sizes = tuple(tuple(c) for c in e.chunk_sizes)
        self.open_plan = None

    def _BindingBegin(self, e: ev.BindingBegin) -> None:
        if self.open_sched >= 0:
            self._associate(e.galloc_id, self.open_sched)
        b = BindingInfo(e.binding_id, e.galloc_id, e.plan_id, e.graph_id, e.seq, e.loc, self._snapshot(e.graph_id),
                        self.galloc_sched.get(e.galloc_id, -1))
        self.m.bindings[e.binding_id] = b
        if self.hooks is not None:
            self.hooks.binding(b)

    def _BindingEnd(self, e: ev.BindingEnd) -> None:
        b = self.m.bindings.get(e.binding_id)
        if b is not None:
            b.end_seq = e.seq
            b.ok = e.ok
            if self.hooks is not None:
                self.hooks.bound(b)

    # -- scheduler ----------------------------------------------------------------------
    def _sched(self, sched_id: int) -> SchedInfo:
        s = self.m.scheds.get(sched_id)
        if s is None:
            s = self.m.scheds[sched_id] = SchedInfo(sched_id)
        return s

    def _associate(self, galloc_id: int, sched_id: int) -> None:
        self.galloc_sched[galloc_id] = sched_id
        self._sched(sched_id).gallocs.add(galloc_id)

    def _SchedReset(self, e: ev.SchedReset) -> None:
        s = self._sched(e.sched_id)
        s.resets.append(e.seq)
        for g in s.gallocs:
            self._make_stale(g, e.seq, "reset")
        self.open_sched = -1

    def _SchedSplit(self, e: ev.SchedSplit) -> None:
        self._sched(e.sched_id).splits.append(e)
        self.open_sched = e.sched_id

    def _SchedCopy(self, e: ev.SchedCopy) -> None:
        self._sched(e.sched_id).copies.append(e)
        self.m.input_copies.add(e.copy_id)
        self.open_sched = e.sched_id

    def _SchedAlloc(self, e: ev.SchedAlloc) -> None:
        self._sched(e.sched_id).allocs.append(e)
        self.open_sched = -1

    # -- compute ----------------------------------------------------------------------
    def _ComputeBegin(self, e: ev.ComputeBegin) -> None:
        c = ComputeInfo(e.compute_id, e.graph_id, e.backend, e.n_nodes, e.seq, e.loc, self._snapshot(e.graph_id))
        self.m.computes[e.compute_id] = c
        self.open_compute = c

    def _ComputeEnd(self, e: ev.ComputeEnd) -> None:
        c = self.m.computes.get(e.compute_id)
        if c is not None:
            c.end_seq = e.seq
            c.wall_ns = e.wall_ns
        self.open_compute = None

    def _TensorCopy(self, e: ev.TensorCopy) -> None:
        self.m.copies.append(e)
        self._touch(e.src_id)
        if e.dst_id != e.src_id:
            self._touch(e.dst_id)

    # -- user I/O ---------------------------------------------------------------------------
    def _TensorSet(self, e: ev.TensorSet) -> None:
        self._touch(e.tensor_id)

    _TensorGet = _TensorSet

    def _ValueSnapshot(self, e: ev.ValueSnapshot) -> None:
        self.m.snapshots.append(e)
        self._touch(e.tensor_id)

    def _Marker(self, e: ev.Marker) -> None:
        self.m.markers.append(e)

    # -- a captured real process ------------------------------------------------------------
    def _ProcessCaptured(self, e: ev.ProcessCaptured) -> None:
        self.m.captured.append(e)

    def _ReplayMismatch(self, e: ev.ReplayMismatch) -> None:
        self.m.replay_mismatches.append(e)

    def _CaptureIncomplete(self, e: ev.CaptureIncomplete) -> None:
        self.m.capture_incomplete.append(e)
