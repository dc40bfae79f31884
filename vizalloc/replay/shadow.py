"""Proof by shadow execution: re-run a recorded graph compute twice from the values
captured at its start, once with every tensor in **private** memory and once with the
**recorded placements** (the same buffers, offsets and aliasing as the traced run), and
name the first node whose output differs.

Both runs rebuild the tensors from their ``TensorCreated`` records with
``ctx.new_tensor_impl`` and compute the nodes that ran (``NodeCompute``) with
``vizalloc.runtime.kernels.compute_forward``. The traced run captured only the graph's
inputs (``begin``) and results (``end``) (``capture_values=True``), so per-node values
of the traced run come from the recorded-placement run, which is checked against the
captured results (``reproduces_trace``). The private run is the correct computation;
the first node where the two differ is where the memory plan corrupted the numbers.

Every input the compute reads before writing it (leafs, op-NONE nodes such as ggml's
parameters, sources from outside the graph) is captured at its start, so both runs start
from the recorded values. Traces recorded before op-NONE nodes were captured lack some
of them: such an input takes the latest earlier snapshot of the same bytes (real values,
when nothing wrote there since); failing that, both runs get the same seeded synthetic
values, which still shows whether the plan corrupts the compute but is never
``conclusive`` (``synthetic_inputs`` names them).

    from vizalloc.analysis.model import build_model
    from vizalloc.replay.shadow import shadow_compute
    result = shadow_compute(build_model(trace), compute_id)
    print(result.summary())

Nothing here writes into the user's trace: events the runtime would emit while
replaying are dropped (the recorder is paused for the replay).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from vizalloc.analysis.model import TraceModel
from vizalloc.errors import UsageError, VizallocError
from vizalloc.replay.rebuild import Rebuilt
from vizalloc.runtime import memory
from vizalloc.runtime.buffer import Buffer, BufferType, Usage, pad
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.kernels import compute_forward
from vizalloc.trace import events as ev
from vizalloc.trace import recorder


@dataclass(frozen=True, slots=True)
class NodeDiff:
    """One node of the replay: the largest difference between the two runs' outputs."""

    index: int
    tensor_id: int
    name: str
    op: str
    max_abs_diff: float


@dataclass(frozen=True, slots=True)
class ShadowResult:
    """What shadow execution found for one compute.

    ``first_diverging`` is the node index (in the compute) of the first node whose
    output differs between the private and the recorded-placement runs (-1: none).
    ``output_diffs`` compares the private run with the captured results, per tensor id.
    ``reproduces_trace`` says whether the recorded-placement run gives the captured
    results (within ``tolerance``), i.e. the replay is faithful; ``notes`` say what could
    not be compared.
    """

    compute_id: int
    graph_id: int
    first_diverging: int
    first_tensor_id: int
    first_name: str
    max_abs_diff: float
    node_diffs: tuple[NodeDiff, ...]
    output_diffs: tuple[tuple[int, str, float], ...]
    reproduces_trace: bool
    tolerance: float
    notes: tuple[str, ...] = ()
    #: inputs with no recorded value, given seeded synthetic values in both runs
    synthetic_inputs: tuple[int, ...] = ()
    #: whether results were captured at the end, so that reproduction was checked
    results_checked: bool = True
    #: how reports name the compute's graph (``TraceModel.graph_name``)
    graph_name: str = ""

    @property
    def diverged(self) -> bool:
        return self.first_diverging >= 0 or any(d > self.tolerance for _, _, d in self.output_diffs)

    @property
    def conclusive(self) -> bool:
        """The replay started from recorded values only and its recorded-placement run
        reproduced the captured results, so its verdict holds for the traced run."""
        return self.reproduces_trace and self.results_checked and not self.synthetic_inputs

    def summary(self) -> str:
        lines = [f"shadow execution of compute #{self.compute_id} ({self.graph_name or f'graph #{self.graph_id}'}): "
                 f"{len(self.node_diffs)} nodes replayed"]
        if self.synthetic_inputs:
            lines.append("INCONCLUSIVE about the recorded values: some inputs were not captured (a trace recorded "
                         "before parameters were captured); record the trace again with capture_values=True")
        elif not self.results_checked:
            lines.append("INCONCLUSIVE: no results were captured at the end of the compute")
        elif not self.reproduces_trace:
            lines.append("INCONCLUSIVE about the recorded values: the replay with the recorded placements does "
                         "not reproduce the captured results")
        if self.first_diverging >= 0:
            lines.append(f"first diverging node: {self.first_diverging} '{self.first_name}' "
                         f"(#{self.first_tensor_id}), max abs diff {self.max_abs_diff:.6g}")
        else:
            lines.append("no node output differs between private memory and the recorded placements")
        for tid, name, diff in self.output_diffs:
            lines.append(f"captured result '{name}' (#{tid}) vs private run: max abs diff {diff:.6g}")
        if self.reproduces_trace:
            lines.append("the recorded placements reproduce the captured results")
        lines.extend(self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "compute_id": self.compute_id, "graph_id": self.graph_id, "first_diverging": self.first_diverging,
            "first_tensor_id": self.first_tensor_id, "first_name": self.first_name,
            "max_abs_diff": _json_float(self.max_abs_diff),
            "node_diffs": [{"index": d.index, "tensor_id": d.tensor_id, "name": d.name, "op": d.op,
                            "max_abs_diff": _json_float(d.max_abs_diff)} for d in self.node_diffs],
            "output_diffs": [{"tensor_id": t, "name": n, "max_abs_diff": _json_float(d)}
                             for t, n, d in self.output_diffs],
            "reproduces_trace": self.reproduces_trace, "conclusive": self.conclusive, "tolerance": self.tolerance,
            "synthetic_inputs": list(self.synthetic_inputs), "results_checked": self.results_checked,
            "notes": list(self.notes),
        }


def _json_float(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def _closure(model: TraceModel, ids: set[int]) -> set[int]:
    out: set[int] = set()
    stack = list(ids)
    while stack:
        t = stack.pop()
        if t in out or t < 0:
            continue
        out.add(t)
        info = model.tensors.get(t)
        if info is not None:
            stack.extend(s for s in info.srcs if s >= 0)
            if info.view_src >= 0:
                stack.append(info.view_src)
    return out


def _values(snap: ev.ValueSnapshot) -> np.ndarray:
    dt = DType.from_label(snap.dtype).numpy
    ne = tuple(snap.ne) + (1,) * (4 - len(snap.ne))
    return np.frombuffer(snap.data, dtype=dt).reshape(ne[3], ne[2], ne[1], ne[0])


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return math.inf
    if a.size == 0:
        return 0.0
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        nan_a, nan_b = np.isnan(a64), np.isnan(b64)
        if (nan_a != nan_b).any():
            return math.inf
        both = ~(nan_a | nan_b)
        if not both.any():
            return 0.0
        d = np.abs(a64[both] - b64[both])
        return float(d.max()) if d.size else 0.0
    return float(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())


def shadow_compute(model: TraceModel, compute_id: int, *, tolerance: float = 1e-5) -> ShadowResult:
    """Replay compute ``compute_id`` privately and with its recorded placements; compare."""
    comp = model.computes.get(compute_id)
    if comp is None:
        raise UsageError(f"shadow execution: the trace has no compute #{compute_id}")
    begin = {s.tensor_id: s for s in model.snapshots if s.compute_id == compute_id and s.when == "begin"}
    end = {s.tensor_id: s for s in model.snapshots if s.compute_id == compute_id and s.when == "end"}
    notes: list[str] = []
    if not begin and not end:
        raise UsageError(
            f"shadow execution: compute #{compute_id} has no captured values; record the trace with "
            "capture_values=True (vizalloc.trace(path, capture_values=True))"
        )
    written = [n.tensor_id for n in comp.nodes]
    produced = set(written)
    wanted = _closure(model, produced | set(begin) | set(end))
    # roots the compute reads before writing them: every one has a begin capture in traces
    # recorded by this version (op-NONE nodes included); older traces may lack some
    made = {model.root(t) for t in produced if model.tensors.get(t) is not None and not model.tensors[t].is_view}
    need = sorted({model.root(r) for n in comp.nodes for r in n.reads
                   if model.root(r) not in made and r not in begin and model.root(r) not in begin})
    missing = []
    for root in need:
        snap = _earlier_snapshot(model, root, comp.begin_seq)
        if snap is None:
            missing.append(root)
        else:
            begin[root] = snap
    if missing:
        # the same seeded values in both runs: whether the plan corrupts the compute does not
        # depend on the exact values, but the comparison with the captured results does
        rng = np.random.default_rng(compute_id)
        for root in missing:
            info = model.tensors[root]
            dt = DType.from_label(info.dtype).numpy
            if dt is None:
                raise UsageError(f"shadow execution: input '{model.label(root)}' is {info.dtype}, a type vizalloc "
                                 "cannot compute with; the trace has no captured values for it")
            n = 1
            for d in info.ne:
                n *= d
            vals = (rng.standard_normal(n) * 0.5).astype(dt) if dt.kind == "f" else \
                rng.integers(0, max(1, min(info.ne[0], 16)), n).astype(dt)
            begin[root] = ev.ValueSnapshot(-1, 0, None, root, compute_id, "synthetic", info.dtype, info.ne,
                                           vals.tobytes())
        notes.append("inputs without captured values (given seeded synthetic values in both runs): "
                     + ", ".join(f"'{model.label(t)}'" for t in missing[:8]))
    notes.append("per-node values of the traced run are not captured; they come from the recorded-placement "
                 "replay, checked against the captured results")
    with recorder.paused():
        private = _run(model, comp, wanted, begin, private=True)
        aliased = _run(model, comp, wanted, begin, private=False)
    diffs = []
    first = -1
    first_tid = -1
    first_name = ""
    first_diff = 0.0
    for (index, tid, a), (_, _, b) in zip(private.outputs, aliased.outputs):
        diff = _max_diff(a, b)
        out_info = model.tensors.get(tid)
        name = out_info.name if out_info else ""
        diffs.append(NodeDiff(index, tid, name, out_info.op if out_info else "?", diff))
        if first < 0 and diff > tolerance:
            first, first_tid, first_name, first_diff = index, tid, name, diff
    max_diff = max((d.max_abs_diff for d in diffs), default=0.0)
    out_diffs = []
    reproduces = True
    for tid, snap in sorted(end.items()):
        want = _values(snap)
        if tid in private.final:
            out_diffs.append((tid, model.label(tid), _max_diff(private.final[tid], want)))
        if tid in aliased.final and _max_diff(aliased.final[tid], want) > tolerance:
            reproduces = False
    if not end:
        notes.append("no results were captured at the end of the compute; reproduction not checked")
    if aliased.notes:
        notes.extend(aliased.notes)
    return ShadowResult(compute_id, comp.graph_id, first, first_tid, first_name,
                        first_diff if first >= 0 else max_diff, tuple(diffs), tuple(out_diffs), reproduces,
                        tolerance, tuple(notes), tuple(missing), bool(end), model.graph_name(comp.graph_id))


def _alias(model: TraceModel, tensor_id: int, seq: int) -> tuple[int, int] | None:
    """(buffer, offset) of a tensor's bytes at ``seq``, or None when it had none."""
    p = model.placement_at(tensor_id, seq)
    return None if p is None else (p.buffer_id, p.offset)


def _earlier_snapshot(model: TraceModel, root: int, seq: int) -> ev.ValueSnapshot | None:
    """The latest snapshot before ``seq`` of a tensor that covered exactly ``root``'s bytes then
    (a full view of it, or a deep copy aliasing it), with nothing written there since."""
    info = model.tensors.get(root)
    here = _alias(model, root, seq)
    if info is None or here is None:
        return None
    for snap in reversed(model.snapshots):
        if snap.seq >= seq:
            continue
        other = model.tensors.get(snap.tensor_id)
        if other is None or other.nbytes != info.nbytes or other.dtype != info.dtype:
            continue
        if _alias(model, snap.tensor_id, snap.seq) != here:
            continue
        # the bytes must not have been set by the user since (a value we do not know)
        if any(isinstance(e, ev.TensorSet) and model.root(e.tensor_id) == root
               for e in model.events[model.seq_index[snap.seq]:model.seq_index.get(seq, len(model.events))]):
            return None
        return ev.ValueSnapshot(snap.seq, snap.t_ns, snap.loc, root, snap.compute_id, "earlier", snap.dtype,
                                info.ne, snap.data)
    return None


@dataclass
class _RunResult:
    outputs: list[tuple[int, int, np.ndarray]]
    final: dict[int, np.ndarray]
    notes: list[str]


def _run(model: TraceModel, comp: Any, wanted: set[int], begin: dict[int, ev.ValueSnapshot], *,
         private: bool) -> _RunResult:
    rb = Rebuilt(model, "shadow execution")
    for tid in sorted(wanted):
        rb.make(tid)
    buffers: list[Buffer] = []
    notes: list[str] = []
    buft = BufferType("shadow", alignment=32)
    roots = [t for t in rb.tensors.values() if t.view_src is None]
    if private:
        for t in roots:
            buf = buft.alloc_buffer(max(pad(t.nbytes, 32), 32), Usage.COMPUTE, cause="shadow private")
            buffers.append(buf)
            memory.tensor_alloc(buf, t, buf.base)
    else:
        by_buffer: dict[int, Buffer] = {}
        for t_id, t in sorted(rb.tensors.items()):
            if t.view_src is not None:
                continue
            p = model.placement_at(t_id, comp.begin_seq)
            if p is None:
                # not placed at the start (it gets placed later?): private bytes, noted
                buf = buft.alloc_buffer(max(pad(t.nbytes, 32), 32), Usage.COMPUTE, cause="shadow unplaced")
                buffers.append(buf)
                memory.tensor_alloc(buf, t, buf.base)
                notes.append(f"'{model.label(t_id)}' had no placement at the compute's start; given private bytes")
                continue
            shared = by_buffer.get(p.buffer_id)
            if shared is None:
                info = model.buffers.get(p.buffer_id)
                size = info.nbytes if info is not None else p.offset + p.nbytes
                shared = by_buffer[p.buffer_id] = buft.alloc_buffer(max(size, 1), Usage.COMPUTE,
                                                                    cause="shadow aliased")
                buffers.append(shared)
            memory.tensor_alloc(shared, t, shared.base + p.offset)
    for t in rb.tensors.values():
        if t.view_src is not None and t.buffer is None and t.data is None:
            memory.view_init(t)
        elif t.view_src is not None and t.buffer is None:
            t.buffer = t.view_src.buffer
    # captured inputs, in capture order (leafs first, as the compute loop snapshots them)
    for snap in sorted(begin.values(), key=lambda s: s.seq):
        target = rb.tensors.get(snap.tensor_id)
        if target is not None and target.data is not None:
            memory.tensor_array(target)[...] = _values(snap)
    outputs = []
    try:
        for node in comp.nodes:
            t = rb.tensors[node.tensor_id]
            compute_forward(t)
            outputs.append((node.index, node.tensor_id, np.array(memory.tensor_array(t), copy=True)))
        final = {tid: np.array(memory.tensor_array(t), copy=True) for tid, t in rb.tensors.items()
                 if t.data is not None}
    except VizallocError as exc:
        notes.append(f"replay stopped: {exc}")
        final = {}
    finally:
        for buf in buffers:
            buf.free("shadow done")
    return _RunResult(outputs, final, notes)


def shadow_all(model: TraceModel, *, tolerance: float = 1e-5) -> list[ShadowResult]:
    """Shadow-execute every compute that has captured values, in order."""
    ids = sorted({s.compute_id for s in model.snapshots})
    return [shadow_compute(model, c, tolerance=tolerance) for c in ids if c in model.computes]
