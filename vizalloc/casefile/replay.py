"""Replaying a graph case file through vizalloc's allocators, one golden-shaped result per step.

The case's tensors are rebuilt in a context (same types, shapes, strides, views, sources
and flags), its static buffers are made at the addresses the file records, and its steps
run through a ``GraphAllocator`` (or, for scheduler cases, a ``Scheduler`` with one CPU
backend on the case's buffer type). Each step's result has the shape of the file's
"result" object, so :func:`vizalloc.casefile.compare.compare_results` can check it.

Scheduler steps (``sched_reset``, ``sched_alloc_graph``, ``compute``) run through a
``vizalloc.runtime.sched.Scheduler``. ``compute`` allocates when nothing is allocated (as
ggml's compute does) but runs no kernels: the files record allocation, not values.
``use_scheduler=False`` replays them through the equivalent graph-allocator calls instead
(semantics §6.4: with one CPU backend the scheduler's graph is the user graph and every
buffer id is 0).

``alloc_graph`` results also carry ``plan_entries_not_applied`` (corpus README, "Format
additions"): ggml binds a graph by walking the plan's entries (leafs, then for each node
its sources and then itself) and the first entry that reaches a tensor without data
decides its address. An entry that reaches the tensor again, with another address, is
not applied; each is listed as ``{"tensor", "entry", "planned", "bound_by", "bound"}``
(entries named ``leafs[i]``, ``nodes[i].src[j]``, ``nodes[i]``; addresses as the plan's
``[buffer_id, chunk, offset, size_max]``). Within one plan every entry agrees, so the list
is empty unless a plan made for another graph is reused.
"""

from __future__ import annotations

from typing import Any

from vizalloc.casefile.overlaps import overlap_report, root_spans
from vizalloc.casefile.parse import Case, CaseStep
from vizalloc.errors import CaseFormatError
from vizalloc.runtime import memory
from vizalloc.runtime.alloc.graph_allocator import GraphAllocator
from vizalloc.runtime.buffer import Buffer, BufferType, Usage
from vizalloc.runtime.context import Context
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.tensor import Tensor
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

PLAN_FORMAT = "[buffer_id, chunk, offset, size_max] or null (view / pre-allocated)"


class CaseReplay:
    """Rebuilds a case's tensors and replays its steps one by one (``run`` does all)."""

    def __init__(self, case: Case, *, reclaim: bool = False, use_scheduler: bool = True,
                 list_overlaps: bool = True) -> None:
        self.case = case
        #: whether steps that list every overlapping pair ("overlaps") build that list;
        #: without it they give the counts and the both_live pairs ("conflicts")
        self.list_overlaps = list_overlaps
        self.bufts: list[BufferType] = []
        for b in case.buffer_types:
            same = b.get("same_buffer_type_as")
            if same is not None:
                self.bufts.append(self.bufts[same])
            else:
                self.bufts.append(BufferType(b["name"], alignment=b["alignment"], max_size=b.get("max_size")))
        self.sched = None
        if case.is_sched and use_scheduler:
            from vizalloc.runtime.backends import CPUBackend
            from vizalloc.runtime.sched import Scheduler

            self.sched = Scheduler([CPUBackend()], bufts=self.bufts[:1], reclaim=reclaim)
            self.galloc = self.sched.galloc
        else:
            self.galloc = GraphAllocator(self.bufts, reclaim=reclaim)
        self.ctx = Context(name=f"case {case.name}", max_tensors=None)
        # external buffers: instances marked external, placed at the offsets of the first listing
        self.instance_of: dict[int, int] = {}  # Buffer.id -> instance
        self.static: dict[int, Buffer] = {}
        static_buft = BufferType("static", alignment=1)
        for b in case.buffer_instances:
            if b.get("external"):
                buf = static_buft.alloc_buffer(int(b["size"]), Usage.WEIGHTS,
                                               cause=f"case static buffer {b.get('name')}")
                self.static[int(b["instance"])] = buf
                self.instance_of[buf.id] = int(b["instance"])
        self._next_instance = len(self.static)
        self.ext_addr: dict[int, tuple[int, int]] = {}
        for step in case.steps:
            tens = (step.expected or {}).get("tensors") or {}
            for key, entry in tens.items():  # keys and fields checked by parse_case
                tid = int(key)
                if case.tensors[tid].external and tid not in self.ext_addr \
                        and entry.get("instance") in self.static and entry.get("offset") is not None:
                    self._check_static_place(step, key, tid, entry)
                    self.ext_addr[tid] = (entry["instance"], entry["offset"])
        self.tensors: list[Tensor] = []
        self._build_tensors()
        self._graphs: dict[tuple[tuple[int, ...], tuple[int, ...]], Graph] = {}
        self.birth = self._births()
        self.is_alloc = False
        self._tracked_buffers: list[Buffer] = []
        self._old_slots: dict[int, tuple[int, int]] = {}
        self._static_names = {b["instance"]: str(b.get("name")) for b in case.buffer_instances}

    def _check_static_place(self, step: CaseStep, key: str, tid: int, entry: Any) -> None:
        spec = self.case.tensors[tid]
        if spec.view_src is not None:
            return
        buf = self.static[entry["instance"]]
        need = spec.nbytes
        if entry["offset"] + need > buf.nbytes:
            raise CaseFormatError(
                f"steps[{step.index}].result.tensors[{key!r}].offset: tensor {tid} ({need:,} bytes) at offset "
                f"{entry['offset']:,} does not fit its static buffer instance {entry['instance']} "
                f"({buf.nbytes:,} bytes)")

    def _build_tensors(self) -> None:
        specs = self.case.tensors
        tensors = self.tensors
        made = tensors.__getitem__
        new_tensor = self.ctx.new_tensor_impl
        late: list[tuple[Tensor, tuple[int | None, ...]]] = []
        for spec in specs:
            vs = spec.view_src
            src_ids = spec.src
            try:  # the usual case, in one C loop (this runs per tensor): every source made already
                srcs: list[Tensor | None] = [*map(made, src_ids)]  # type: ignore[arg-type]  # None: below
                ready = True
            except TypeError:  # an empty slot (None) among the sources
                ready = all(s is None or s < spec.id for s in src_ids)
                srcs = [None if s is None else made(s) for s in src_ids] if ready else []
            except IndexError:  # a source made later (or the tensor itself, as ggml_cast lists): set below
                ready = False
                srcs = []
            u = spec.unary_op
            t = new_tensor(spec.type, spec.ne, None if vs is None else made(vs), spec.view_offs, nb=spec.nb,
                           op=spec.op, src=srcs, op_params=(u,) if u is not None else (), name=spec.name)
            if not ready:
                late.append((t, src_ids))
            t._set_flags(spec.flags_raw)
            tensors.append(t)
        # Static memory is allocated after the graphs are built (as ggml-opt does): views
        # created before it have no data until a binding's view_init; views marked external
        # were made after it and got root + view_offs at creation (buffer stays None).
        for i, spec in enumerate(specs):
            if spec.external and spec.view_src is None and i in self.ext_addr:
                inst, offset = self.ext_addr[i]
                buf = self.static[inst]
                memory.tensor_alloc(buf, self.tensors[i], buf.base + offset, by=ev.PlacedBy.USER)
        for i, spec in enumerate(specs):
            t = self.tensors[i]
            root = t.view_src
            if spec.external and root is not None and root.data is not None and t.data is None:
                t.data = root.data + t.view_offs
                t.storage = root.storage
                if recorder.active() and root.storage is not None:
                    recorder.emit(ev.TensorPlaced, t.id, root.storage.id, t.data - root.storage.base, t.nbytes,
                                  ev.PlacedBy.VIEW_CREATE, -1)
        for t, late_ids in late:
            t.src = [None if s is None else self.tensors[s] for s in late_ids]
            if recorder.active():
                for j, src in enumerate(t.src):
                    recorder.emit(ev.TensorSrcSet, t.id, j, -1 if src is None else src.id)

    def _births(self) -> list[int]:
        """The step from which each tensor exists (is listed in results once it has data).

        Every tensor exists before the first step, except in deep-copy cases (variant
        ``fix_dupgraph``), where each step's copies are made in a fresh context during the
        step: a tensor then exists from the first step that references it or any tensor
        created after it (ids follow creation order).
        """
        n = len(self.case.tensors)
        if "dupgraph" not in self.case.variant and not self.case.name.endswith("dupgraph"):
            return [0] * n
        first = [len(self.case.steps)] * n
        for step in self.case.steps:
            if step.nodes is None:
                continue
            for tid in self._referenced(step):
                first[tid] = min(first[tid], step.index)
        births = [0] * n
        best = len(self.case.steps)
        for i in range(n - 1, -1, -1):
            best = min(best, first[i])
            births[i] = best
        return births

    def _referenced(self, step: CaseStep) -> set[int]:
        specs = self.case.tensors
        out: set[int] = set()
        for tid in (step.nodes or ()) + (step.leafs or ()):
            out.add(tid)
            for s in specs[tid].src:
                if s is not None:
                    out.add(s)
        for tid in list(out):
            vs = specs[tid].view_src
            if vs is not None:
                out.add(vs)
        return out

    def graph(self, step: CaseStep) -> Graph:
        key = (step.nodes or (), step.leafs or ())
        g = self._graphs.get(key)
        if g is None:
            g = Graph(size=max(2048, len(key[0]), len(key[1])))
            g._extend([self.tensors[k] for k in key[0]], [self.tensors[k] for k in key[1]])
            self._graphs[key] = g
        return g

    def run(self) -> list[dict[str, Any]]:
        return [self.step(s) for s in self.case.steps]

    def step(self, step: CaseStep) -> dict[str, Any]:
        """Replay one step and return its result in the golden shape."""
        before = [t.data for t in self.tensors]
        freed_before = {b.id for b in self._tracked_buffers if b.freed}
        ok = True
        galloc = self.galloc
        action = step.action
        if action == "reserve":
            ok = galloc.reserve_n(self.graph(step), step.node_buffer_ids, step.leaf_buffer_ids)
        elif action == "alloc_graph":
            ok = galloc.alloc_graph(self.graph(step))
        elif action == "sched_reset":
            if self.sched is not None:
                self.sched.reset()
            self.is_alloc = False
        elif action == "sched_alloc_graph":
            ok = self._sched_alloc(self.graph(step))
        elif action == "compute":
            if self.sched is not None:
                if not self.sched.is_alloc:
                    ok = self.sched.alloc_graph(self.graph(step))
            elif not self.is_alloc:
                ok = self._sched_alloc(self.graph(step))
        elif action == "clear_tensor_pointers":
            ids = step.cleared if step.cleared is not None else [
                i for i, spec in enumerate(self.case.tensors) if not spec.external
            ]
            for i in ids:
                memory.clear_tensor_pointers(self.tensors[i], by="case")
        return self._result(step, ok, before, freed_before)

    def _sched_alloc(self, g: Graph) -> bool:
        # ggml_backend_sched_alloc_graph with one CPU backend: gallocr_alloc_graph, which
        # re-plans by itself with one buffer type; on failure the scheduler reserves and retries
        if self.sched is not None:
            return self.sched.alloc_graph(g)
        ok = self.galloc.alloc_graph(g)
        if not ok:
            ok = self.galloc.reserve_n(g, None, None) and self.galloc.alloc_graph(g)
        self.is_alloc = True
        return ok

    # -- results ------------------------------------------------------------------
    def _track_buffers(self) -> list[int]:
        new = []
        seen = {b.id for b in self._tracked_buffers}
        for vb in self.galloc.buffers:
            if vb is None:
                continue
            for buf in vb:
                if buf.id not in seen:
                    seen.add(buf.id)
                    self._tracked_buffers.append(buf)
                    self.instance_of[buf.id] = self._next_instance
                    new.append(self._next_instance)
                    self._next_instance += 1
        return new

    def _slot_of(self, buf: Buffer) -> tuple[int, int]:
        """(slot that owns ``buf``, chunk index) from the allocator's current or past buffers."""
        for i, vb in enumerate(self.galloc.buffers):
            if vb is not None:
                for c, b in enumerate(vb):
                    if b is buf:
                        return i, c
        return self._old_slots.get(buf.id, (-1, -1))

    def _result(self, step: CaseStep, ok: bool, before: list[int | None], freed_before: set[int]) -> dict[str, Any]:
        allocated = self._track_buffers()
        for i, vb in enumerate(self.galloc.buffers):
            if vb is not None:
                for c, b in enumerate(vb):
                    self._old_slots.setdefault(b.id, (i, c))
        freed = [self.instance_of[b.id] for b in self._tracked_buffers if b.freed and b.id not in freed_before]
        n_slots = len(self.bufts)
        res: dict[str, Any] = {
            "ok": bool(ok),
            "buffer_sizes": [self.galloc.buffer_size(i) for i in range(n_slots)],
            "buffers_allocated": allocated,
            "buffers_freed": sorted(freed),
        }
        chunked = self.case.chunked
        tensors: dict[str, Any] = {}
        # what every tensor of one storage shares: its instance, slot and chunk, liveness
        where: dict[int, tuple[dict[str, Any], int, int, bool]] = {}
        birth = self.birth
        index = step.index
        for i, t in enumerate(self.tensors):
            data = t.data
            if data is None or birth[i] > index:
                continue
            storage = t.storage
            key = id(storage)
            shared = where.get(key)
            if shared is None:
                inst = self.instance_of.get(storage.id, -1) if storage is not None else -1
                head: dict[str, Any]
                if inst in self.static:
                    head = {"buffer": None, "external_buffer": self._static_name(inst)}
                else:
                    slot, chunk = self._slot_of(storage) if isinstance(storage, Buffer) else (-1, -1)
                    head = {"buffer": slot, "chunk": chunk} if chunked else {"buffer": slot}
                base = storage.base if storage is not None else 0
                shared = where[key] = (head, inst, base, storage is not None and not storage.freed)
            head, inst, base, live = shared
            tensors[str(i)] = {**head, "offset": data - base if storage is not None else None, "nbytes": t.nbytes,
                               "kept": before[i] == data, "instance": inst, "live": live}
        res["tensors"] = tensors
        if step.action == "reserve":
            plan = self.galloc.plan
            if plan is not None:
                res["plan"] = {
                    "format": PLAN_FORMAT,
                    "nodes": [None if r is None else list(r) for r in plan.node_records()],
                    "leafs": [None if r is None else list(r) for r in plan.leaf_records()],
                    "chunk_max_sizes": [list(c) for c in plan.chunk_sizes],
                }
        if step.action in ("alloc_graph", "sched_alloc_graph"):
            res["kept_from_earlier_allocation"] = self._kept(step, before) if ok else []
            res.update(self._overlaps(step))
        if step.action == "alloc_graph":
            res["plan_entries_not_applied"] = self._not_applied(step, before) if ok else []
        return res

    def _static_name(self, inst: int) -> str:
        return self._static_names.get(inst, "")

    def _kept(self, step: CaseStep, before: list[int | None]) -> list[int]:
        specs = self.case.tensors
        out = set()
        for tid in (step.nodes or ()) + (step.leafs or ()):
            if specs[specs[tid].root].external:
                continue
            if before[tid] is not None:
                out.add(tid)
        return sorted(out)

    def _overlaps(self, step: CaseStep) -> dict[str, Any]:
        """The harness's liveness overlap analysis of the step's graph (README, "Liveness")."""
        has_data = [t.data is not None for t in self.tensors]
        live = root_spans(self.case.tensors, step.nodes or (), step.leafs or (), has_data)
        extent = {r: (self.tensors[r].data or 0, self.tensors[r].nbytes) for r in live}  # roots with data
        return overlap_report(live, extent, full=self._wants_full_overlaps(step) and self.list_overlaps,
                              step=step.index)

    def _not_applied(self, step: CaseStep, before: list[int | None]) -> list[dict[str, Any]]:
        """Plan entries that reached a tensor already bound by an earlier entry of this
        binding, with another address (module doc)."""
        plan = self.galloc.plan
        if plan is None or plan.graph_id == self.graph(step).id:
            return []  # the entries of a plan made for this graph all agree
        specs = self.case.tensors
        bound: dict[int, tuple[str, tuple[int, int, int, int]]] = {}
        out: list[dict[str, Any]] = []

        def visit(tid: int, entry: str, rec: tuple[int, int, int, int]) -> None:
            if specs[tid].view_src is not None or before[tid] is not None:
                return  # views take their root's bytes; a tensor with data is left alone
            first = bound.get(tid)
            if first is None:
                bound[tid] = (entry, rec)
            elif rec[0] >= 0 and rec[:3] != first[1][:3]:
                out.append({"tensor": tid, "entry": entry, "planned": list(rec), "bound_by": first[0],
                            "bound": list(first[1])})

        for i, tid in enumerate(step.leafs or ()):
            visit(tid, f"leafs[{i}]", plan.leaf(i))
        for i, tid in enumerate(step.nodes or ()):
            for j, s in enumerate(specs[tid].src):
                if s is not None:
                    visit(s, f"nodes[{i}].src[{j}]", plan.src(i, j))
            visit(tid, f"nodes[{i}]", plan.dst(i))
        return out

    def _wants_full_overlaps(self, step: CaseStep) -> bool:
        # The corpus lists every pair ("overlaps") for scheduler cases and a few gallocr
        # cases, only the both_live ones ("conflicts") elsewhere; follow the file.
        if step.expected is not None:
            return "overlaps" in step.expected
        return self.case.is_sched


def replay_case(case: Case, *, reclaim: bool = False, use_scheduler: bool = True,
                list_overlaps: bool = True) -> list[dict[str, Any]]:
    """Replay every step of ``case``; one golden-shaped result per step."""
    replay = CaseReplay(case, reclaim=reclaim, use_scheduler=use_scheduler, list_overlaps=list_overlaps)
    try:
        return replay.run()
    finally:
        replay.ctx.free()  # the results hold no tensor: free them now (Context.free)


