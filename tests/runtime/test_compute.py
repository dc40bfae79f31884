"""The compute loop: results, skipped view ops, events and value snapshots, the eval
callback, and clear errors (no memory, freed context, wrong memory, unsupported op,
dangling pointers: poison by default, DanglingPointerError in strict mode)."""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from vizalloc.errors import (
    BackendError,
    ContextError,
    DanglingPointerError,
    NoMemoryError,
)
from vizalloc.runtime import F32, Context, Graph, Op, UnaryOp, set_output
from vizalloc.runtime.backends import (
    CPUBackend,
    SimBackend,
    alloc_ctx_tensors,
    graph_compute,
    graph_copy,
)
from vizalloc.runtime.buffer import POISON, set_strict
from vizalloc.runtime.memory import tensor_alloc, tensor_get, tensor_set
from vizalloc.runtime.tensor import Tensor
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder


@pytest.fixture(autouse=True)
def _not_strict() -> Iterator[None]:
    yield
    set_strict(False)


def _node(ctx: Context, op: Op, ne: tuple[int, ...], *src: Tensor, params: tuple = (), name: str = "") -> Tensor:
    return ctx.new_tensor_impl(F32, ne, op=op, src=list(src), op_params=params, name=name)


def _rand(t: Tensor, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal(t.nelements).astype(np.float32)
    tensor_set(t, values)
    return values


class Small:
    """relu(w·x + b) viewed as its second row, scaled by 2 — built by hand as ggml's ops would."""

    def __init__(self, ctx: Context) -> None:
        self.w = ctx.new_tensor_2d(F32, 5, 3, name="w")
        self.x = ctx.new_tensor_2d(F32, 5, 2, name="x")
        self.b = ctx.new_tensor_1d(F32, 3, name="b")
        self.mm = _node(ctx, Op.MUL_MAT, (3, 2), self.w, self.x, name="mm")
        self.add = _node(ctx, Op.ADD, (3, 2), self.mm, self.b, name="add")
        self.r = _node(ctx, Op.UNARY, (3, 2), self.add, params=(UnaryOp.RELU,), name="r")
        self.v = ctx.new_tensor_impl(F32, (3,), self.r, 12, op=Op.VIEW, src=[self.r], op_params=(12,), name="v")
        self.s = _node(ctx, Op.SCALE, (3,), self.v, params=(2.0, 0.0), name="s")
        set_output(self.s)
        self.graph = Graph()
        self.graph.build_forward_expand(self.s)

    def fill(self) -> None:
        self.w_np = _rand(self.w, 1).reshape(3, 5)
        self.x_np = _rand(self.x, 2).reshape(2, 5)
        self.b_np = _rand(self.b, 3)

    def expected(self) -> np.ndarray:
        r = np.maximum(self.x_np @ self.w_np.T + self.b_np, 0)
        return 2 * r[1]


def _allocated_small(backend=None) -> tuple[Context, Small]:
    ctx = Context()
    s = Small(ctx)
    alloc_ctx_tensors(ctx, backend or CPUBackend())
    s.fill()
    return ctx, s


# -- results ----------------------------------------------------------------------------

def test_small_graph_equals_numpy() -> None:
    _, s = _allocated_small()
    assert graph_compute(CPUBackend(), s.graph) is True
    np.testing.assert_allclose(tensor_get(s.s), s.expected(), rtol=1e-6)
    assert s.v.data == s.r.data + 12  # the view node computed nothing: it is r's second row


def test_sim_backend_computes_in_its_own_memory() -> None:
    sim = SimBackend()
    _, s = _allocated_small(sim)
    graph_compute(sim, s.graph)
    assert s.s.storage.buft is sim.buffer_type
    np.testing.assert_allclose(tensor_get(s.s), s.expected(), rtol=1e-6)


def test_graph_copy_computes_the_same_on_another_backend() -> None:
    _, s = _allocated_small()
    sim = SimBackend("GPU", alignment=128)
    copy = graph_copy(sim, s.graph)
    graph_compute(CPUBackend(), s.graph)
    graph_compute(sim, copy.graph)
    np.testing.assert_array_equal(tensor_get(copy.graph.nodes[-1]), tensor_get(s.s))
    copy.free()


def test_aliasing_in_compute_is_real() -> None:
    # place the relu's output on the bytes of its input, as an in-place plan would
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    scaled = _node(ctx, Op.SCALE, (4,), a, params=(3.0, 0.0), name="scaled")
    r = _node(ctx, Op.UNARY, (4,), scaled, params=(UnaryOp.RELU,), name="r")
    g = Graph()
    g.build_forward_expand(r)
    buf = CPUBackend().alloc_buffer(32)
    tensor_alloc(buf, a, buf.base)
    tensor_alloc(buf, scaled, buf.base + 16)
    tensor_alloc(buf, r, buf.base + 16)  # r and scaled share bytes
    tensor_set(a, np.array([-1, 2, -3, 4], dtype=np.float32))
    graph_compute(CPUBackend(), g)
    assert tensor_get(r).tolist() == [0, 6, 0, 12]
    assert tensor_get(scaled).tolist() == [0, 6, 0, 12]  # overwritten by its consumer


# -- events --------------------------------------------------------------------------------

def test_compute_events_name_nodes_reads_and_the_users_line() -> None:
    _, s = _allocated_small()
    with StrictRecorder() as rec:
        graph_compute(CPUBackend(), s.graph); line = sys._getframe().f_lineno
    kinds = [type(e).__name__ for e in rec.events]
    assert kinds == ["ComputeBegin"] + ["NodeCompute"] * 4 + ["ComputeEnd"]
    begin, *nodes, end = rec.events
    assert (begin.graph_id, begin.backend, begin.n_nodes) == (s.graph.id, "CPU", 5)
    # the VIEW node (index 3) computes nothing and reports nothing
    assert [(e.index, e.tensor_id, e.reads) for e in nodes] == [
        (0, s.mm.id, (s.w.id, s.x.id)), (1, s.add.id, (s.mm.id, s.b.id)), (2, s.r.id, (s.add.id,)),
        (4, s.s.id, (s.v.id,)),
    ]
    assert all(e.compute_id == begin.compute_id == end.compute_id and e.backend == "CPU" for e in nodes)
    assert all(e.wall_ns >= 0 for e in nodes) and end.wall_ns >= sum(e.wall_ns for e in nodes)
    assert begin.loc is not None and (begin.loc.file, begin.loc.line) == (__file__, line)
    assert all(e.loc is begin.loc for e in nodes + [end])  # looked up once per compute


def test_compute_ids_increase() -> None:
    _, s = _allocated_small()
    with StrictRecorder() as rec:
        graph_compute(CPUBackend(), s.graph)
        graph_compute(CPUBackend(), s.graph)
    ids = [e.compute_id for e in rec.events if isinstance(e, ev.ComputeBegin)]
    assert len(ids) == 2 and ids[0] < ids[1]


def test_value_snapshots_capture_inputs_and_results() -> None:
    _, s = _allocated_small()
    with StrictRecorder(capture_values=True) as rec:
        graph_compute(CPUBackend(), s.graph)
    snaps = [e for e in rec.events if isinstance(e, ev.ValueSnapshot)]
    begin = {e.tensor_id: e for e in snaps if e.when == "begin"}
    end = {e.tensor_id: e for e in snaps if e.when == "end"}
    assert set(begin) == {s.w.id, s.x.id, s.b.id}
    assert set(end) == {s.s.id}  # the output; every other node is read inside the graph
    e = end[s.s.id]
    assert (e.dtype, e.ne) == ("f32", (3, 1, 1, 1))
    np.testing.assert_array_equal(np.frombuffer(e.data, dtype=np.float32), tensor_get(s.s))
    np.testing.assert_array_equal(np.frombuffer(begin[s.x.id].data, dtype=np.float32), s.x_np.reshape(-1))
    compute_id = next(x for x in rec.events if isinstance(x, ev.ComputeBegin)).compute_id
    assert {x.compute_id for x in snaps} == {compute_id}
    # begin snapshots come before the first node, end snapshots after the last
    order = [type(x).__name__ for x in rec.events]
    assert order.index("NodeCompute") > max(i for i, x in enumerate(rec.events) if getattr(x, "when", "") == "begin")


def test_snapshots_of_a_graph_view_include_outside_sources() -> None:
    _, s = _allocated_small()
    graph_compute(CPUBackend(), s.graph)
    tail = s.graph.view(1, 3)  # add, r: no leafs; mm and b come from outside
    with StrictRecorder(capture_values=True) as rec:
        graph_compute(CPUBackend(), tail)
    begin = [e.tensor_id for e in rec.events if isinstance(e, ev.ValueSnapshot) and e.when == "begin"]
    end = [e.tensor_id for e in rec.events if isinstance(e, ev.ValueSnapshot) and e.when == "end"]
    assert begin == [s.mm.id, s.b.id] and end == [s.r.id]


def test_no_snapshots_without_capture_values() -> None:
    _, s = _allocated_small()
    with StrictRecorder() as rec:
        graph_compute(CPUBackend(), s.graph)
    assert not any(isinstance(e, ev.ValueSnapshot) for e in rec.events)


# -- the eval callback ------------------------------------------------------------------------

def test_callback_asks_for_every_node_and_observes_computed_values() -> None:
    _, s = _allocated_small()
    calls: list[tuple[str, bool]] = []
    seen: dict[str, np.ndarray] = {}

    def cb(t: Tensor, ask: bool) -> bool:
        calls.append((t.name, ask))
        if ask:
            return t.name in ("add", "s")
        seen[t.name] = tensor_get(t)
        return True

    assert graph_compute(CPUBackend(), s.graph, callback=cb) is True
    assert calls == [("mm", True), ("add", True), ("add", False), ("r", True), ("v", True), ("s", True), ("s", False)]
    np.testing.assert_allclose(seen["add"], s.x_np @ s.w_np.T + s.b_np, rtol=1e-6)
    np.testing.assert_allclose(seen["s"], s.expected(), rtol=1e-6)


@pytest.mark.parametrize("tracing", [False, True])
def test_callback_returning_false_stops_the_compute(tracing: bool) -> None:
    _, s = _allocated_small()
    tensor_set(s.s, np.full(3, 42, dtype=np.float32))
    cb = lambda t, ask: t.name != "r" if not ask else t.name == "r"
    rec = StrictRecorder(capture_values=True)
    with rec if tracing else contextlib.nullcontext():
        done = graph_compute(CPUBackend(), s.graph, callback=cb)
    assert done is False
    assert tensor_get(s.s).tolist() == [42, 42, 42]  # never computed
    if tracing:
        nodes = [e.index for e in rec.events if isinstance(e, ev.NodeCompute)]
        assert nodes == [0, 1, 2] and isinstance(rec.events[-1], ev.ComputeEnd)
        end = [e.tensor_id for e in rec.events if isinstance(e, ev.ValueSnapshot) and e.when == "end"]
        assert end == [s.r.id]  # the last node that ran, read by no node that ran


# -- errors ------------------------------------------------------------------------------------

def test_no_memory_names_the_tensor_and_node() -> None:
    ctx = Context()
    s = Small(ctx)
    with pytest.raises(NoMemoryError, match=r"node 'mm' \(MUL_MAT\) on CPU: its source 0 tensor 'w'"):
        graph_compute(CPUBackend(), s.graph)
    buf = CPUBackend().alloc_buffer(1024)
    for t in (s.w, s.x):
        tensor_alloc(buf, t, buf.base + (0 if t is s.w else 64))
    with pytest.raises(NoMemoryError, match=r"node 'mm' \(MUL_MAT\) on CPU: the node tensor 'mm'"):
        graph_compute(CPUBackend(), s.graph)


def test_freed_context_raises_context_error() -> None:
    ctx, s = _allocated_small()
    ctx.free()
    with pytest.raises(ContextError, match="'w' belongs to context .* which was freed"):
        graph_compute(CPUBackend(), s.graph)


def test_backend_refuses_memory_it_cannot_use() -> None:
    _, s = _allocated_small(CPUBackend())
    with pytest.raises(BackendError, match=r"node 'mm' \(MUL_MAT\) on SIM: its source 0 'w' lives in buffer #\d+ of type CPU"):
        graph_compute(SimBackend(), s.graph)
    sim = SimBackend()
    _, s2 = _allocated_small(sim)
    with pytest.raises(BackendError, match="type SIM, which CPU cannot use"):
        graph_compute(CPUBackend(), s2.graph)


def test_restricted_sim_backend_refuses_unsupported_ops() -> None:
    sim = SimBackend(supported_ops={Op.MUL_MAT, Op.ADD})
    _, s = _allocated_small(sim)
    with pytest.raises(BackendError, match=r"SIM does not support op UNARY \(node 'r'\)"):
        graph_compute(sim, s.graph)
    with StrictRecorder(), pytest.raises(BackendError, match="does not support op UNARY"):
        graph_compute(sim, s.graph)


# -- dangling pointers ------------------------------------------------------------------------

def _dangling_graph() -> tuple[Tensor, Tensor, Graph, object]:
    weights = Context()
    w = weights.new_tensor_1d(F32, 4, name="w")
    wbuf = alloc_ctx_tensors(weights, CPUBackend())
    tensor_set(w, np.ones(4, dtype=np.float32))
    ctx = Context()
    out = _node(ctx, Op.SCALE, (4,), w, params=(2.0, 0.0), name="out")
    g = Graph()
    g.build_forward_expand(out)
    alloc_ctx_tensors(ctx, CPUBackend())
    return w, out, g, wbuf


def test_dangling_source_reads_poison_by_default() -> None:
    _, out, g, wbuf = _dangling_graph()
    wbuf.free()
    graph_compute(CPUBackend(), g)
    poison = np.frombuffer(bytes([POISON]) * 16, dtype=np.float32)
    np.testing.assert_array_equal(tensor_get(out), 2 * poison)


def test_dangling_source_raises_in_strict_mode() -> None:
    _, _, g, wbuf = _dangling_graph()
    wbuf.free()
    set_strict(True)
    with pytest.raises(DanglingPointerError, match=f"'w' points into buffer #{wbuf.id}, which was freed"):
        graph_compute(CPUBackend(), g)
    with StrictRecorder(capture_values=True), pytest.raises(DanglingPointerError):
        graph_compute(CPUBackend(), g)


# -- through the real ops and the graph allocator ------------------------------------------------

def build_mlp(backend, x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]):
    """A relu MLP built with ``ops``, weights by alloc_ctx_tensors, the graph by GraphAllocator."""
    from vizalloc.runtime import ops
    from vizalloc.runtime.alloc import GraphAllocator

    wctx = Context(name="weights")
    params = [(wctx.new_tensor_2d(F32, w.shape[1], w.shape[0], name=f"w{i}"), wctx.new_tensor_1d(F32, b.shape[0], name=f"b{i}"))
              for i, (w, b) in enumerate(layers)]
    inp = wctx.new_tensor_2d(F32, x.shape[1], x.shape[0], name="x")
    alloc_ctx_tensors(wctx, backend)
    for (tw, tb), (w, b) in zip(params, layers):
        tensor_set(tw, w)
        tensor_set(tb, b)
    tensor_set(inp, x)
    ctx = Context(name="compute")
    h = inp
    for i, (tw, tb) in enumerate(params):
        h = ops.add(ctx, ops.mul_mat(ctx, tw, h), tb)
        if i < len(params) - 1:
            h = ops.relu(ctx, h)
    set_output(h)
    graph = Graph()
    graph.build_forward_expand(h)
    assert GraphAllocator(backend.buffer_type).alloc_graph(graph)
    return graph, h, (wctx, ctx)


def mlp_numpy(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    h = x
    for i, (w, b) in enumerate(layers):
        h = h @ w.T + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0)
    return h


def mlp_data(seed: int = 0, sizes: tuple[int, ...] = (12, 16, 16, 5), batch: int = 7):
    rng = np.random.default_rng(seed)
    layers = [(rng.standard_normal((o, i)).astype(np.float32), rng.standard_normal(o).astype(np.float32))
              for i, o in itertools.pairwise(sizes)]
    return rng.standard_normal((batch, sizes[0])).astype(np.float32), layers


@pytest.mark.parametrize("backend", [CPUBackend(), SimBackend("GPU", alignment=256)], ids=["cpu", "sim"])
def test_mlp_forward_equals_numpy(backend) -> None:
    x, layers = mlp_data()
    graph, out, _keep = build_mlp(backend, x, layers)
    assert graph_compute(backend, graph)
    np.testing.assert_allclose(tensor_get(out), mlp_numpy(x, layers), rtol=1e-5, atol=1e-5)
    # computing again from the same inputs gives the same bytes (the plan is stable)
    first = tensor_get(out)
    graph_compute(backend, graph)
    np.testing.assert_array_equal(tensor_get(out), first)


def test_mlp_forward_traced_equals_untraced() -> None:
    x, layers = mlp_data(seed=3)
    graph, out, _keep = build_mlp(CPUBackend(), x, layers)
    graph_compute(CPUBackend(), graph)
    plain = tensor_get(out)
    with StrictRecorder(capture_values=True) as rec:
        graph_compute(CPUBackend(), graph)
    np.testing.assert_array_equal(tensor_get(out), plain)
    nodes = [e for e in rec.events if isinstance(e, ev.NodeCompute)]
    assert [e.tensor_id for e in nodes] == [n.id for n in graph.nodes]  # no view ops in this graph
    end = [e for e in rec.events if isinstance(e, ev.ValueSnapshot) and e.when == "end"]
    assert [e.tensor_id for e in end] == [out.id]
    np.testing.assert_array_equal(np.frombuffer(end[0].data, dtype=np.float32).reshape(plain.shape), plain)


def test_view_ops_from_ops_are_skipped_and_read_through() -> None:
    from vizalloc.runtime import ops

    ctx = Context()
    a = ctx.new_tensor_2d(F32, 3, 2, name="a")
    t = ops.transpose(ctx, ops.reshape_2d(ctx, a, 2, 3))      # ne (3, 2), strided
    c = ops.cont(ctx, t)
    out = ops.relu(ctx, ops.view_1d(ctx, c, 3, 12))            # c's second row
    g = Graph()
    g.build_forward_expand(out)
    alloc_ctx_tensors(ctx, CPUBackend())
    vals = np.arange(-3, 3, dtype=np.float32)
    tensor_set(a, vals)
    with StrictRecorder() as rec:
        graph_compute(CPUBackend(), g)
    computed = [e.tensor_id for e in rec.events if isinstance(e, ev.NodeCompute)]
    assert [n.op for n in g.nodes] == [Op.RESHAPE, Op.TRANSPOSE, Op.CONT, Op.VIEW, Op.UNARY]
    assert computed == [c.id, out.id]
    np.testing.assert_array_equal(tensor_get(c), vals.reshape(3, 2).T)
    expected = np.maximum(vals.reshape(3, 2).T[1], 0)
    np.testing.assert_array_equal(tensor_get(out), expected)
