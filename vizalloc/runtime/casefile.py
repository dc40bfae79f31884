"""Graph case files (the golden corpus format ``vizalloc-golden/1``): load one, rebuild its
tensors, replay its steps through vizalloc's allocators, and produce each step's result
in the file's "result" shape so it can be compared with what real ggml did.

    >>> import json
    >>> from vizalloc.runtime.casefile import parse_case, replay_case, compare_results
    >>> case = parse_case(json.load(open("tests/data/golden/ew01_unary_chain_inplace.json")))  # doctest: +SKIP
    >>> results = replay_case(case)                                                           # doctest: +SKIP
    >>> compare_results(case, results)                                                        # doctest: +SKIP
    []

Only the CLI and tests open files; this module takes parsed JSON (or its text).

Scheduler steps (``sched_reset``, ``sched_alloc_graph``, ``compute``) run through a
``vizalloc.runtime.sched.Scheduler`` with one CPU backend on the case's buffer type.
``compute`` allocates when nothing is allocated (as ggml's compute does) but runs no
kernels: the files record allocation, not values. ``use_scheduler=False`` replays them
through the equivalent graph-allocator calls instead (semantics §6.4: with one CPU
backend the scheduler's graph is the user graph and every buffer id is 0).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vizalloc.errors import CaseFormatError
from vizalloc.runtime import memory
from vizalloc.runtime.alloc.graph_allocator import GraphAllocator
from vizalloc.runtime.buffer import Buffer, BufferType, Usage
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.tensor import Op, Tensor, UnaryOp
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

FORMAT = "vizalloc-golden/1"
ACTIONS = ("reserve", "alloc_graph", "sched_reset", "sched_alloc_graph", "clear_tensor_pointers", "compute")
GRAPH_ACTIONS = ("reserve", "alloc_graph", "sched_alloc_graph", "compute")
PLAN_FORMAT = "[buffer_id, chunk, offset, size_max] or null (view / pre-allocated)"
_FLAG_NAMES = {"input": 1, "output": 2, "param": 4, "loss": 8}
_NOT_WRITES = {"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"}


@dataclass(frozen=True)
class CaseStep:
    index: int
    action: str
    nodes: tuple[int, ...] | None
    leafs: tuple[int, ...] | None
    node_buffer_ids: tuple[int, ...] | None
    leaf_buffer_ids: tuple[int, ...] | None
    cleared: tuple[int, ...] | None
    expected: Mapping[str, Any] | None


@dataclass(frozen=True)
class Case:
    """A validated case file. ``tensors`` keep the file's dicts (fields checked)."""

    name: str
    description: str
    driver: str
    buffer_types: tuple[Mapping[str, Any], ...]
    buffer_instances: tuple[Mapping[str, Any], ...]
    tensors: tuple[Mapping[str, Any], ...]
    steps: tuple[CaseStep, ...]
    variant: str = ""

    @property
    def is_sched(self) -> bool:
        return self.driver.startswith("ggml_backend_sched")

    @property
    def chunked(self) -> bool:
        return any(b.get("max_size") is not None for b in self.buffer_types)


# -- parsing ----------------------------------------------------------------------

def _fail(where: str, what: str) -> CaseFormatError:
    return CaseFormatError(f"{where}: {what}")


def _int(v: Any, where: str, *, allow_none: bool = False) -> Any:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(where, f"expected an integer, got {json.dumps(v)[:40]}")
    return v


def _ints(v: Any, where: str, n: int | None = None) -> tuple[int, ...]:
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v) or (
        n is not None and len(v) != n
    ):
        raise _fail(where, f"expected {n if n is not None else 'a list of'} integers")
    return tuple(v)


def parse_case(data: Any) -> Case:
    """Validate a case (parsed JSON, or its text); raises ``CaseFormatError`` naming the field."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise CaseFormatError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CaseFormatError("the case must be a JSON object")
    if data.get("format") != FORMAT:
        raise _fail("format", f"expected {FORMAT!r}, got {data.get('format')!r}")
    for key in ("buffer_types", "tensors", "steps"):
        if not isinstance(data.get(key), list):
            raise _fail(key, "expected a list")
    bufts = []
    for i, b in enumerate(data["buffer_types"]):
        w = f"buffer_types[{i}]"
        if not isinstance(b, dict) or not isinstance(b.get("name"), str):
            raise _fail(f"{w}.name", "expected a string")
        a = _int(b.get("alignment"), f"{w}.alignment")
        if a <= 0 or a & (a - 1):
            raise _fail(f"{w}.alignment", f"{a} is not a power of two")
        _int(b.get("max_size"), f"{w}.max_size", allow_none=True)
        same = b.get("same_buffer_type_as")
        if same is not None and not (isinstance(same, int) and 0 <= same < i):
            raise _fail(f"{w}.same_buffer_type_as", "expected the index of an earlier buffer type")
        bufts.append(b)
    if not bufts:
        raise _fail("buffer_types", "expected at least one buffer type")
    n = len(data["tensors"])
    tensors = []
    for i, t in enumerate(data["tensors"]):
        w = f"tensors[{i}]"
        if not isinstance(t, dict):
            raise _fail(w, "expected an object")
        if t.get("id") != i:
            raise _fail(f"{w}.id", f"expected {i} (ids are 0..n-1 in order)")
        if not isinstance(t.get("name"), str):
            raise _fail(f"{w}.name", "expected a string")
        try:
            DType.from_label(str(t.get("type")))
        except ValueError:
            raise _fail(f"{w}.type", f"unknown type {t.get('type')!r} (f32, f16, i32)") from None
        ne = _ints(t.get("ne"), f"{w}.ne", 4)
        if any(x < 0 for x in ne):
            raise _fail(f"{w}.ne", "expected 4 non-negative integers")
        _ints(t.get("nb"), f"{w}.nb", 4)
        if t.get("op") not in Op.__members__:
            raise _fail(f"{w}.op", f"unknown op {t.get('op')!r}")
        u = t.get("unary_op")
        if u is not None and u not in UnaryOp.__members__:
            raise _fail(f"{w}.unary_op", f"unknown unary op {u!r}")
        src = t.get("src")
        if not isinstance(src, list) or len(src) > 10:
            raise _fail(f"{w}.src", "expected a list of at most 10 tensor ids or nulls")
        for j, s in enumerate(src):
            if s is not None and (not isinstance(s, int) or isinstance(s, bool) or not 0 <= s < n):
                raise _fail(f"{w}.src[{j}]", f"expected the id of another tensor (0..{n - 1}) or null")
        vs = t.get("view_src")
        if vs is not None and (not isinstance(vs, int) or isinstance(vs, bool) or not 0 <= vs < i):
            raise _fail(f"{w}.view_src", "expected the id of an earlier tensor or null")
        if vs is not None and data["tensors"][vs].get("view_src") is not None:
            raise _fail(f"{w}.view_src", "a view's view_src must be a root (not another view)")
        if _int(t.get("view_offs"), f"{w}.view_offs") < 0:
            raise _fail(f"{w}.view_offs", "expected a non-negative integer")
        _int(t.get("flags_raw"), f"{w}.flags_raw")
        if not isinstance(t.get("external"), bool):
            raise _fail(f"{w}.external", "expected true or false")
        tensors.append(t)
    steps = []
    for i, s in enumerate(data["steps"]):
        w = f"steps[{i}]"
        if not isinstance(s, dict):
            raise _fail(w, "expected an object")
        action = s.get("action")
        if action not in ACTIONS:
            raise _fail(f"{w}.action", f"unknown action {action!r} (one of {', '.join(ACTIONS)})")
        nodes = leafs = None
        g = s.get("graph")
        if action in GRAPH_ACTIONS or g is not None:
            if not isinstance(g, dict):
                raise _fail(f"{w}.graph", f"action {action} needs a graph with nodes and leafs")
            nodes = _ints(g.get("nodes"), f"{w}.graph.nodes")
            leafs = _ints(g.get("leafs"), f"{w}.graph.leafs")
            for key, ids in (("nodes", nodes), ("leafs", leafs)):
                for j, k in enumerate(ids):
                    if not 0 <= k < n:
                        raise _fail(f"{w}.graph.{key}[{j}]", f"tensor id {k} out of range (0..{n - 1})")
        nbi_raw = s.get("node_buffer_ids")
        lbi_raw = s.get("leaf_buffer_ids")
        nbi = None if nbi_raw is None else _ints(nbi_raw, f"{w}.node_buffer_ids")
        lbi = None if lbi_raw is None else _ints(lbi_raw, f"{w}.leaf_buffer_ids")
        for key, buffer_ids, cnt in (("node_buffer_ids", nbi, nodes), ("leaf_buffer_ids", lbi, leafs)):
            if buffer_ids is not None:
                if cnt is None or len(buffer_ids) != len(cnt):
                    raise _fail(f"{w}.{key}", "expected one buffer id per graph entry")
                if any(not 0 <= b < len(bufts) for b in buffer_ids):
                    raise _fail(f"{w}.{key}", f"buffer ids must be in 0..{len(bufts) - 1}")
        cleared = s.get("cleared")
        if cleared is not None:
            cleared = _ints(cleared, f"{w}.cleared")
            if any(not 0 <= k < n for k in cleared):
                raise _fail(f"{w}.cleared", "tensor id out of range")
        result = s.get("result")
        if result is not None and not isinstance(result, dict):
            raise _fail(f"{w}.result", "expected an object")
        steps.append(CaseStep(i, action, nodes, leafs, nbi, lbi, cleared, result))
    insts = data.get("buffer_instances", [])
    if not isinstance(insts, list):
        raise _fail("buffer_instances", "expected a list")
    for i, b in enumerate(insts):
        if not isinstance(b, dict) or not isinstance(b.get("instance"), int):
            raise _fail(f"buffer_instances[{i}].instance", "expected an integer")
        if b.get("external"):
            _int(b.get("size"), f"buffer_instances[{i}].size")
    return Case(
        name=str(data.get("name", "")), description=str(data.get("description", "")),
        driver=str(data.get("driver", "ggml_gallocr")), buffer_types=tuple(bufts),
        buffer_instances=tuple(insts), tensors=tuple(tensors), steps=tuple(steps),
        variant=str(data.get("variant") or ""),
    )


# -- replay -----------------------------------------------------------------------

class CaseReplay:
    """Rebuilds a case's tensors and replays its steps one by one (``run`` does all)."""

    def __init__(self, case: Case, *, reclaim: bool = False, use_scheduler: bool = True) -> None:
        self.case = case
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
            if not isinstance(tens, dict):
                continue
            for key, entry in tens.items():
                tid = int(key)
                if tid < len(case.tensors) and case.tensors[tid]["external"] and tid not in self.ext_addr \
                        and isinstance(entry, dict) and entry.get("instance") in self.static:
                    self.ext_addr[tid] = (int(entry["instance"]), int(entry["offset"]))
        self.tensors: list[Tensor] = []
        self._build_tensors()
        self._graphs: dict[tuple[tuple[int, ...], tuple[int, ...]], Graph] = {}
        self.birth = self._births()
        self.is_alloc = False
        self._tracked_buffers: list[Buffer] = []

    def _build_tensors(self) -> None:
        specs = self.case.tensors
        late: list[tuple[Tensor, list[int | None]]] = []
        for i, spec in enumerate(specs):
            vs = None if spec["view_src"] is None else self.tensors[spec["view_src"]]
            src_ids = spec["src"]
            ready = all(s is None or s < i for s in src_ids)
            srcs = [None if s is None else self.tensors[s] for s in src_ids] if ready else []
            u = spec.get("unary_op")
            t = self.ctx.new_tensor_impl(
                DType.from_label(spec["type"]), spec["ne"], vs, spec["view_offs"], nb=spec["nb"],
                op=Op[spec["op"]], src=srcs, op_params=(UnaryOp[u],) if u else (), name=spec["name"],
            )
            if not ready:
                late.append((t, src_ids))
            t._set_flags(spec["flags_raw"])
            self.tensors.append(t)
        # Static memory is allocated after the graphs are built (as ggml-opt does): views
        # created before it have no data until a binding's view_init; views marked external
        # were made after it and got root + view_offs at creation (buffer stays None).
        for i, spec in enumerate(specs):
            if spec["external"] and spec["view_src"] is None and i in self.ext_addr:
                inst, offset = self.ext_addr[i]
                buf = self.static[inst]
                memory.tensor_alloc(buf, self.tensors[i], buf.base + offset, by=ev.PlacedBy.USER)
        for i, spec in enumerate(specs):
            t = self.tensors[i]
            root = t.view_src
            if spec["external"] and root is not None and root.data is not None and t.data is None:
                t.data = root.data + t.view_offs
                t.storage = root.storage
                if recorder.active() and root.storage is not None:
                    recorder.emit(ev.TensorPlaced, t.id, root.storage.id, t.data - root.storage.base, t.nbytes,
                                  ev.PlacedBy.VIEW_CREATE, -1)
        for t, src_ids in late:
            t.src = [None if s is None else self.tensors[s] for s in src_ids]
            if recorder.active():
                for j, s in enumerate(t.src):
                    recorder.emit(ev.TensorSrcSet, t.id, j, -1 if s is None else s.id)

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
            for s in specs[tid]["src"]:
                if s is not None:
                    out.add(s)
        for tid in list(out):
            vs = specs[tid]["view_src"]
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
                i for i, spec in enumerate(self.case.tensors) if not spec["external"]
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
        if not hasattr(self, "_old_slots"):
            self._old_slots: dict[int, tuple[int, int]] = {}
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
        specs = self.case.tensors
        chunked = self.case.chunked
        tensors: dict[str, Any] = {}
        for i, t in enumerate(self.tensors):
            if t.data is None:
                continue
            if self.birth[i] > step.index:
                continue
            storage = t.storage
            entry: dict[str, Any]
            inst = self.instance_of.get(storage.id, -1) if storage is not None else -1
            offset = t.data - storage.base if storage is not None else None
            if inst in self.static:
                entry = {"buffer": None, "external_buffer": self._static_name(inst)}
            else:
                slot, chunk = self._slot_of(storage) if isinstance(storage, Buffer) else (-1, -1)
                entry = {"buffer": slot}
                if chunked:
                    entry["chunk"] = chunk
            entry.update({
                "offset": offset, "nbytes": t.nbytes, "kept": before[i] == t.data, "instance": inst,
                "live": storage is not None and not storage.freed,
            })
            tensors[str(i)] = entry
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
        return res

    def _static_name(self, inst: int) -> str:
        for b in self.case.buffer_instances:
            if b.get("instance") == inst:
                return str(b.get("name"))
        return ""

    def _kept(self, step: CaseStep, before: list[int | None]) -> list[int]:
        specs = self.case.tensors
        out = set()
        for tid in (step.nodes or ()) + (step.leafs or ()):
            root = specs[tid]["view_src"]
            root = tid if root is None else root
            if specs[root]["external"]:
                continue
            if before[tid] is not None:
                out.add(tid)
        return sorted(out)

    def _overlaps(self, step: CaseStep) -> dict[str, Any]:
        """The harness's liveness overlap analysis of the step's graph (README, "Liveness")."""
        specs = self.case.tensors
        nodes = list(step.nodes or ())
        leafs = list(step.leafs or ())
        n = len(nodes)

        def root_of(tid: int) -> int:
            vs = specs[tid]["view_src"]
            return tid if vs is None else vs

        node_pos = {tid: i for i, tid in enumerate(nodes)}
        consumed: set[int] = set()
        for tid in nodes:
            for s in specs[tid]["src"]:
                if s is not None:
                    consumed.add(s)
        roots: list[int] = []
        seen: set[int] = set()
        for tid in leafs + nodes + [s for t in nodes for s in specs[t]["src"] if s is not None]:
            r = root_of(tid)
            if r not in seen and self.tensors[r].data is not None:
                seen.add(r)
                roots.append(r)
        writes: dict[int, list[int]] = {r: [] for r in roots}
        reads: dict[int, list[int]] = {r: [] for r in roots}
        for i, tid in enumerate(nodes):
            op = specs[tid]["op"]
            r = root_of(tid)
            if r in writes and (r == tid or op not in _NOT_WRITES):
                writes[r].append(i)
            if op not in _NOT_WRITES:
                for s in specs[tid]["src"]:
                    if s is not None and root_of(s) in reads:
                        reads[root_of(s)].append(i)
            if op not in _NOT_WRITES and tid not in consumed and r in reads:
                reads[r].append(n)
        live: dict[int, tuple[int, int]] = {}
        for r in roots:
            spec = specs[r]
            pre = (r not in node_pos or spec["op"] == "NONE" or spec["flags_raw"] & 1)
            first = -1 if pre or not writes[r] else min(writes[r])
            rd = reads[r]
            if spec["flags_raw"] & 2:
                rd = rd + [n]
            last = max(rd) if rd else first
            live[r] = (first, last)
        pairs = []
        ext: dict[int, tuple[object, int, int]] = {}
        for r in roots:
            t = self.tensors[r]
            assert t.data is not None  # roots are the tensors with data (above)
            ext[r] = (t.storage, t.data, t.nbytes)
        ordered = sorted(roots)
        for x in range(len(ordered)):
            a = ordered[x]
            sa, da, na = ext[a]
            for y in range(x + 1, len(ordered)):
                b = ordered[y]
                sb, db, nb = ext[b]
                if sa is not sb or na == 0 or nb == 0 or da >= db + nb or db >= da + na:
                    continue
                la, lb = live[a], live[b]
                both = max(la[0], lb[0]) < min(la[1], lb[1])
                pairs.append({"a": a, "b": b, "both_live": both, "a_live": list(la), "b_live": list(lb)})
        conflicts = [p for p in pairs if p["both_live"]]
        out: dict[str, Any] = {"overlap_pairs": len(pairs), "conflicting_pairs": len(conflicts)}
        if self._wants_full_overlaps(step):
            out["overlaps"] = pairs
        else:
            out["conflicts"] = conflicts
        return out

    def _wants_full_overlaps(self, step: CaseStep) -> bool:
        # The corpus lists every pair ("overlaps") for scheduler cases and a few gallocr
        # cases, only the both_live ones ("conflicts") elsewhere; follow the file.
        if step.expected is not None:
            return "overlaps" in step.expected
        return self.case.is_sched


def replay_case(case: Case, *, reclaim: bool = False, use_scheduler: bool = True) -> list[dict[str, Any]]:
    """Replay every step of ``case``; one golden-shaped result per step."""
    return CaseReplay(case, reclaim=reclaim, use_scheduler=use_scheduler).run()


def compare_results(case: Case, results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every difference between the recorded results of ``case`` and ``results``."""
    diffs: list[str] = []
    for step, got in zip(case.steps, results):
        exp = step.expected
        if exp is None:
            continue
        where = f"step {step.index} ({step.action})"
        for key, want in exp.items():
            if key not in got:
                diffs.append(f"{where}: {key} not produced (expected {_short(want)})")
                continue
            have = got[key]
            if key == "tensors" and isinstance(want, dict):
                _compare_tensors(where, want, have, case, diffs)
            elif key == "plan" and isinstance(want, dict):
                for part in ("nodes", "leafs", "chunk_max_sizes"):
                    w, h = want.get(part), have.get(part)
                    if w != h:
                        if isinstance(w, list) and isinstance(h, list) and len(w) == len(h):
                            for j, (a, b) in enumerate(zip(w, h)):
                                if a != b:
                                    diffs.append(f"{where}: plan.{part}[{j}] expected {a}, got {b}")
                        else:
                            diffs.append(f"{where}: plan.{part} expected {_short(w)}, got {_short(h)}")
            elif want != have:
                diffs.append(f"{where}: {key} expected {_short(want)}, got {_short(have)}")
    if len(results) != len(case.steps):
        diffs.append(f"replayed {len(results)} steps, the case has {len(case.steps)}")
    return diffs


def _compare_tensors(where: str, want: Mapping[str, Any], have: Mapping[str, Any], case: Case,
                     diffs: list[str]) -> None:
    def name(k: str) -> str:
        i = int(k)
        return f"tensor {k} {case.tensors[i]['name']!r}" if i < len(case.tensors) else f"tensor {k}"

    for k, w in want.items():
        h = have.get(k)
        if h is None:
            diffs.append(f"{where}: {name(k)} has no data (expected {_short(w)})")
            continue
        for field, wv in w.items():
            if h.get(field) != wv:
                diffs.append(f"{where}: {name(k)} {field} expected {wv}, got {h.get(field)}")
    for k in have:
        if k not in want:
            diffs.append(f"{where}: {name(k)} has data but the case lists none ({_short(have[k])})")


def _short(v: Any) -> str:
    s = json.dumps(v, sort_keys=True)
    return s if len(s) <= 200 else s[:197] + "..."
