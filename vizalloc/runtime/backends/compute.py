"""The compute loop every backend shares: run a graph's nodes in order, checking memory.

For each node, as ggml's CPU backend does, view-only ops (NONE, VIEW, RESHAPE,
PERMUTE, TRANSPOSE) and empty tensors are skipped; otherwise every source and the
node itself must have memory (``NoMemoryError`` names the tensor), a live context
(``ContextError``) and memory this backend can address (``BackendError``), and then
``kernels.compute_forward(node)`` writes the node's bytes. A tensor whose buffer was
freed reads poisoned bytes, or raises ``DanglingPointerError`` in strict mode.

While a trace records, the loop emits ``ComputeBegin``, one ``NodeCompute`` per
computed node and ``ComputeEnd``; the user's source line is looked up once per
compute. With ``capture_values`` it also snapshots the graph's inputs at the start
(leafs, op-NONE nodes such as parameters, and sources no node of the graph produces)
and its results at the end (nodes flagged OUTPUT or read by no other node). A snapshot holds the tensor's elements in
ggml order (``ne0`` fastest), packed, whatever its strides.

    >>> import numpy as np
    >>> from vizalloc.runtime import Context, F32, Graph, ops
    >>> from vizalloc.runtime.backends import CPUBackend, alloc_ctx_tensors, graph_compute
    >>> from vizalloc.runtime.memory import tensor_get, tensor_set
    >>> ctx = Context(); a = ctx.new_tensor_1d(F32, 3); y = ops.relu(ctx, a)
    >>> g = Graph(); g.build_forward_expand(y); _ = alloc_ctx_tensors(ctx, CPUBackend())
    >>> tensor_set(a, np.array([-1, 0, 2], dtype=np.float32)); graph_compute(CPUBackend(), g)
    True
    >>> tensor_get(y).tolist()
    [0.0, 0.0, 2.0]
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from vizalloc.errors import BackendError, NoMemoryError
from vizalloc.runtime.backends.base import NOOP_OPS, Backend, EvalCallback
from vizalloc.runtime.buffer import is_strict
from vizalloc.runtime.memory import tensor_array
from vizalloc.runtime.tensor import Flag, Op, Tensor, label
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

if TYPE_CHECKING:
    from vizalloc.runtime.graph import Graph

_compute_ids = itertools.count()


def check_operand(backend: Backend, node: Tensor, t: Tensor, role: str) -> None:
    """Raise a clear error unless ``backend`` may compute with ``t`` (a source of ``node``, or ``node``)."""
    storage = t.storage
    if t.data is None or storage is None:
        try:
            tensor_array(t)
        except NoMemoryError as exc:
            raise NoMemoryError(f"cannot compute node {label(node)} ({node.op.name}) on {backend.name}: "
                                f"{role} {exc}") from None
    t.check_alive()
    if storage.freed and is_strict():  # type: ignore[union-attr]
        storage.check_usable(t)  # type: ignore[union-attr]
    buft = getattr(storage, "buft", None)
    if buft is not None and not backend.can_read(buft):
        raise BackendError(
            f"cannot compute node {label(node)} ({node.op.name}) on {backend.name}: {role} {label(t)} lives in "
            f"buffer #{storage.id} of type {buft.name}, which {backend.name} cannot use; copy it into "  # type: ignore[union-attr]
            f"{backend.name}'s memory first (backends.tensor_copy), or compute through the scheduler"
        )


def _check_node(backend: Backend, t: Tensor) -> None:
    for slot, s in enumerate(t.src):
        if s is not None:
            check_operand(backend, t, s, f"its source {slot}")
    check_operand(backend, t, t, "the node")


def run_graph(backend: Backend, graph: Graph, callback: EvalCallback | None = None) -> bool:
    """Compute ``graph``'s nodes in order on ``backend``.

    Args:
        backend: runs the nodes; every operand must be in memory it can use.
        graph: an allocated graph.
        callback: ``callback(t, ask)`` as ``ggml_backend_sched_eval_callback``: asked
            with ``ask=True`` before each node whether the caller wants to observe it;
            if so, called again with ``ask=False`` once the node is computed, and
            returning False there stops the compute. Asked for view nodes too, as ggml.

    Returns:
        True if every node ran, False if the callback stopped the compute.
    """
    from vizalloc.runtime.kernels import compute_forward

    if recorder.active():
        return _run_traced(backend, graph, callback, compute_forward)
    supports = backend.supports_op if backend.restricts_ops else None
    for t in graph.nodes:
        need = callback(t, True) if callback is not None else False
        if t.op not in NOOP_OPS and t.nelements:
            if supports is not None and not supports(t):
                raise _unsupported(backend, t)
            _check_node(backend, t)
            compute_forward(t)
        if need:
            backend.synchronize()
            if not callback(t, False):  # type: ignore[misc]
                return False
    return True


def _unsupported(backend: Backend, t: Tensor) -> BackendError:
    return BackendError(
        f"backend {backend.name} does not support op {t.op.name} (node {label(t)}); "
        "compute it on another backend or through the scheduler"
    )


def _run_traced(backend: Backend, graph: Graph, callback: EvalCallback | None, forward: Any) -> bool:
    """The same loop, reporting every step (kept apart so the plain loop stays lean)."""
    nodes = graph.nodes
    loc = recorder.user_location()
    compute_id = next(_compute_ids)
    name = backend.name
    capture = recorder.capturing_values()
    t_begin = time.perf_counter_ns()
    recorder.emit(ev.ComputeBegin, compute_id, graph.id, name, len(nodes), loc=loc)
    done = len(nodes)
    completed = True
    # device backends queue work: wait after each node so its wall time is its own
    # (the host backends' synchronize does nothing, so skip the call there)
    sync = None if type(backend).synchronize is Backend.synchronize else backend.synchronize
    clock = time.perf_counter_ns
    emit, node_compute = recorder.emit, ev.NodeCompute
    try:
        if capture:
            for t in _inputs(graph):
                _snapshot(t, compute_id, "begin", loc)
        for index, t in enumerate(nodes):
            need = callback(t, True) if callback is not None else False
            if t.op not in NOOP_OPS and t.nelements:
                if backend.restricts_ops and not backend.supports_op(t):
                    raise _unsupported(backend, t)
                _check_node(backend, t)
                t0 = clock()
                forward(t)
                if sync is not None:
                    sync()
                wall_ns = clock() - t0
                reads = tuple([s.id for s in t.src if s is not None])
                emit(node_compute, compute_id, index, t.id, name, reads, wall_ns, loc=loc)
            if need:
                backend.synchronize()
                if not callback(t, False):  # type: ignore[misc]
                    done, completed = index + 1, False
                    break
        if capture:
            for t in _results(nodes[:done]):
                _snapshot(t, compute_id, "end", loc)
    finally:
        recorder.emit(ev.ComputeEnd, compute_id, time.perf_counter_ns() - t_begin, loc=loc)
    return completed


def _inputs(graph: Graph) -> list[Tensor]:
    """Leafs, op-NONE nodes, then sources no node of the graph produces (weights, inputs,
    stale tensors).

    An op-NONE node (ggml puts parameters, ``Flag.PARAM``, among the nodes) computes
    nothing: its bytes predate the compute exactly as a leaf's do, so it is an input too.
    """
    produced = {t.id for t in graph.nodes if t.op is not Op.NONE}
    seen: set[int] = set()
    out: list[Tensor] = []
    for t in graph.leafs:
        if t.id not in seen:
            seen.add(t.id)
            out.append(t)
    for t in graph.nodes:
        if t.op is Op.NONE and t.id not in seen:
            seen.add(t.id)
            out.append(t)
    for node in graph.nodes:
        for s in node.src:
            if s is not None and s.id not in produced and s.id not in seen:
                seen.add(s.id)
                out.append(s)
    return out


def _results(nodes: list[Tensor]) -> list[Tensor]:
    """Nodes flagged OUTPUT, or read by no other node of ``nodes``."""
    consumed = {s.id for t in nodes for s in t.src if s is not None}
    return [t for t in nodes if t.flags & Flag.OUTPUT or t.id not in consumed]


def _snapshot(t: Tensor, compute_id: int, when: str, loc: ev.Location | None) -> None:
    if t.data is None or t.storage is None:
        return  # nothing to capture; computing with it raises NoMemoryError
    arr = tensor_array(t)
    xp = t.storage.xp
    host = np.ascontiguousarray(arr) if xp is np else xp.asnumpy(arr)
    recorder.emit(ev.ValueSnapshot, t.id, compute_id, when, t.type.label, t.ne, host.tobytes(), loc=loc)
