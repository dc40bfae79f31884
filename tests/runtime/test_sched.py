"""The backend scheduler: single-CPU plans, splits and copies, user assignment, reset,
pipeline copies, compute and the eval callback."""

from __future__ import annotations

import numpy as np
import pytest

from vizalloc.errors import SchedulerError
from vizalloc.runtime import Context, F32, Graph, Usage, ops, set_input, set_output
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.backends import CPUBackend, SimBackend, alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_get, tensor_set
from vizalloc.runtime.sched import Scheduler, hash_size
from vizalloc.runtime.tensor import Flag, Op
from vizalloc.trace import events as ev


# -- graphs ---------------------------------------------------------------------------

def g_three_nodes() -> Graph:
    """semantics §8.1."""
    ctx = Context()
    a = ctx.new_tensor_2d(F32, 10, 3, "a")
    set_input(a)
    b = ctx.new_tensor_2d(F32, 10, 3, "b")
    n2 = ops.scale(ctx, ops.sum_rows(ctx, ops.mul(ctx, a, b)), 2.0)
    set_output(n2)
    g = Graph()
    g.build_forward_expand(n2)
    return g


def g_views() -> Graph:
    """semantics §8.2."""
    ctx = Context()
    x = ctx.new_tensor_1d(F32, 64, "x")
    set_input(x)
    h1 = ops.sqr(ctx, x)
    h2 = ops.add(ctx, x, h1)
    v = ops.view_1d(ctx, h2, 16, 0)
    c = ops.cont(ctx, v)
    s = ops.sum(ctx, h2)
    o = ops.add1(ctx, c, s)
    set_output(o)
    g = Graph()
    g.build_forward_expand(o)
    return g


def g_mlp() -> Graph:
    ctx = Context()
    x = ctx.new_tensor_2d(F32, 16, 8, "x")
    set_input(x)
    w1 = ctx.new_tensor_2d(F32, 16, 32, "w1")
    w2 = ctx.new_tensor_2d(F32, 32, 4, "w2")
    h = ops.relu(ctx, ops.mul_mat(ctx, w1, x))
    o = ops.soft_max(ctx, ops.mul_mat(ctx, w2, h))
    set_output(o)
    g = Graph()
    g.build_forward_expand(o)
    return g


def offsets(g: Graph) -> list[tuple[str, int | None]]:
    return [(t.name, t.offset) for t in (*g.leafs, *g.nodes)]


# -- single CPU backend: the scheduler adds nothing -----------------------------------

@pytest.mark.parametrize("build", [g_three_nodes, g_views, g_mlp])
def test_single_cpu_plan_equals_graph_allocator(build):
    g_sched, g_galloc = build(), build()
    sched = Scheduler([CPUBackend()])
    assert sched.alloc_graph(g_sched)
    galloc = GraphAllocator([CPUBackend().buffer_type])
    assert galloc.alloc_graph(g_galloc)
    assert offsets(g_sched) == offsets(g_galloc)
    assert sched.buffer_size(0) == galloc.buffer_size(0)
    # one split, no copies; the allocator saw the user graph itself
    assert sched.n_splits == 1 and sched.splits[0].inputs == []
    assert sched.graph.nodes == g_sched.nodes and sched.graph.leafs == g_sched.leafs
    assert set(sched.node_backend_ids[: sched.graph.n_nodes]) == {0}


def test_three_node_offsets_match_the_worked_example():
    g = g_three_nodes()
    sched = Scheduler([CPUBackend()])
    assert sched.alloc_graph(g)
    assert offsets(g) == [("a", 0), ("b", 128), ("node_0", 0), ("node_1", 128), ("node_2", 128)]
    assert sched.buffer_size(0) == 256


def test_constructor_checks():
    with pytest.raises(SchedulerError, match="last backend must be a CPU"):
        Scheduler([CPUBackend(), SimBackend()])
    with pytest.raises(SchedulerError):
        Scheduler([])
    assert hash_size(2048) == 2053 and hash_size(3) == 3
    s = Scheduler([SimBackend(), CPUBackend()], parallel=True)
    assert s.n_copies == 4 and s.n_backends == 2


def test_graph_larger_than_the_table_is_refused():
    sched = Scheduler([CPUBackend()], graph_size=4)
    with pytest.raises(SchedulerError, match="graph_size"):
        sched.alloc_graph(g_mlp())


# -- several backends ---------------------------------------------------------------------

class TwoBackends:
    """x (input, CPU) -> h = mul_mat(w, x) on SIM (w is a SIM weight) -> r = relu(h) on
    the CPU (SIM cannot relu) -> o = add(r, h) back on SIM."""

    def __init__(self, parallel: bool = False) -> None:
        self.sim = SimBackend("SIM", supported_ops={Op.MUL_MAT, Op.ADD})
        self.cpu = CPUBackend()
        self.wctx = Context(name="weights")
        self.w = self.wctx.new_tensor_2d(F32, 8, 8, "w")
        self.wbuf = alloc_ctx_tensors(self.wctx, self.sim, Usage.WEIGHTS)
        rng = np.random.default_rng(1)
        self.w_val = rng.standard_normal((8, 8)).astype(np.float32)
        self.x_val = rng.standard_normal((4, 8)).astype(np.float32)
        tensor_set(self.w, self.w_val)
        self.sched = Scheduler([self.sim, self.cpu], parallel=parallel)
        self.build()

    def build(self) -> None:
        ctx = self.ctx = Context(name="compute")
        self.x = ctx.new_tensor_2d(F32, 8, 4, "x")
        set_input(self.x)
        self.h = ops.mul_mat(ctx, self.w, self.x).set_name("h")
        self.r = ops.relu(ctx, self.h).set_name("r")
        self.o = ops.add(ctx, self.r, self.h).set_name("o")
        set_output(self.o)
        self.g = Graph()
        self.g.build_forward_expand(self.o)

    def expected(self) -> np.ndarray:
        h = self.x_val @ self.w_val.T
        return np.maximum(h, 0) + h


def test_splits_and_copies(recorded):
    m = TwoBackends()
    x_src_before = m.h.src[1]
    assert m.sched.alloc_graph(m.g)
    s = m.sched
    assert [(sp.backend_id, [n.name for n in m.g.nodes[sp.i_start:sp.i_end]], [i.name for i in sp.inputs])
            for sp in s.splits] == [(0, ["h"], ["x"]), (1, ["r"], ["h"]), (0, ["o"], ["r"])]
    # the user's nodes now read the copies (ggml mutates the graph it is given)
    assert x_src_before is m.x
    assert m.h.src[1].name == "SIM#x#0" and m.r.src[0].name == "CPU#h#0" and m.o.src[0].name == "SIM#r#0"
    assert m.o.src[1] is m.h  # same backend: no copy
    # the graph the allocator sees: (dependency view, copy) per input, then the split's nodes
    names = [t.name for t in s.graph.nodes]
    assert names == ["x (view)", "SIM#x#0", "h", "h (view)", "CPU#h#0", "r", "r (view)", "SIM#r#0", "o"]
    dep = s.graph.nodes[0]
    assert dep.op is Op.NONE and dep.view_src is m.x and dep.src == [m.x]
    assert s.node_backend_ids[: s.graph.n_nodes] == [1, 0, 0, 0, 1, 1, 1, 0, 0]
    assert [t.name for t in s.graph.leafs] == ["w", "x"]
    assert s.leaf_backend_ids[: s.graph.n_leafs] == [0, 1]
    # every copy lives in its split backend's compute buffer
    assert m.h.src[1].buffer.buft is m.sim.buffer_type
    assert m.r.src[0].buffer.buft is m.cpu.buffer_type
    assert s.buffer_size(m.sim) > 0 and s.buffer_size(m.cpu) > 0
    kinds = [type(e) for e in recorded.events]
    assert kinds.count(ev.SchedSplit) == 3 and kinds.count(ev.SchedCopy) == 3
    assert kinds.count(ev.TensorSrcSet) == 3 and kinds.count(ev.SchedAlloc) == 1
    splits = [e for e in recorded.events if isinstance(e, ev.SchedSplit)]
    assert [(e.backend, e.nodes, e.inputs) for e in splits] == [
        ("SIM", (m.h.id,), (m.x.id,)), ("CPU", (m.r.id,), (m.h.id,)), ("SIM", (m.o.id,), (m.r.id,))
    ]
    src_sets = [e for e in recorded.events if isinstance(e, ev.TensorSrcSet)]
    assert (src_sets[0].tensor_id, src_sets[0].slot, src_sets[0].src_id) == (m.h.id, 1, m.h.src[1].id)


def test_multi_backend_compute_matches_numpy(recorded):
    m = TwoBackends()
    assert m.sched.alloc_graph(m.g)
    tensor_set(m.x, m.x_val)
    m.sched.graph_compute(m.g)
    np.testing.assert_allclose(tensor_get(m.o), m.expected(), rtol=1e-5, atol=1e-5)
    copies = [e for e in recorded.events if isinstance(e, ev.TensorCopy)]
    assert [(e.src_id, e.dst_id) for e in copies] == [
        (m.x.id, m.h.src[1].id), (m.h.id, m.r.src[0].id), (m.r.id, m.o.src[0].id)
    ]
    computes = [e for e in recorded.events if isinstance(e, ev.ComputeBegin)]
    assert [e.backend for e in computes] == ["SIM", "CPU", "SIM"]


def test_user_assignment_and_reset_clears_it():
    m = TwoBackends()
    # put relu's consumer... the add, on the CPU by hand: one split less
    m.sched.set_tensor_backend(m.o, m.cpu)
    assert m.sched.get_tensor_backend(m.o) is m.cpu
    assert m.sched.alloc_graph(m.g)
    assert [sp.backend_id for sp in m.sched.splits] == [0, 1]
    tensor_set(m.x, m.x_val)
    m.sched.graph_compute(m.g)
    np.testing.assert_allclose(tensor_get(m.o), m.expected(), rtol=1e-5, atol=1e-5)
    m.sched.reset()
    assert m.sched.get_tensor_backend(m.o) is None  # user assignments are cleared too
    with pytest.raises(SchedulerError, match="not one of"):
        m.sched.set_tensor_backend(m.o, SimBackend("OTHER"))


def test_reset_leaves_tensor_pointers_alone(recorded):
    m = TwoBackends()
    assert m.sched.alloc_graph(m.g)
    n_events = len(recorded.events)
    tensors = [*m.sched.graph.nodes, *m.sched.graph.leafs]
    before = {t.id: (t.data, t.buffer) for t in tensors}
    srcs = [list(n.src) for n in m.g.nodes]
    m.sched.reset()
    assert {t.id: (t.data, t.buffer) for t in tensors} == before
    assert all(t.data is not None for t in tensors)
    assert [list(n.src) for n in m.g.nodes] == srcs  # rewritten sources stay rewritten
    assert m.sched.get_tensor_backend(m.h) is None and m.sched._copies == {}
    assert not m.sched.is_alloc and m.sched.is_reset
    assert [type(e) for e in recorded.events[n_events:]] == [ev.SchedReset]


def test_alloc_twice_without_reset_is_refused():
    m = TwoBackends()
    assert m.sched.alloc_graph(m.g)
    with pytest.raises(SchedulerError, match="reset"):
        m.sched.alloc_graph(m.g)


def test_compute_of_allocated_graph_ignores_its_argument():
    m = TwoBackends()
    assert m.sched.alloc_graph(m.g)
    tensor_set(m.x, m.x_val)
    other = g_three_nodes()  # never allocated: computing it would fail
    m.sched.graph_compute(other)
    np.testing.assert_allclose(tensor_get(m.o), m.expected(), rtol=1e-5, atol=1e-5)
    assert all(t.data is None for t in other.nodes)


def test_pipeline_copies():
    m = TwoBackends(parallel=True)
    s = m.sched
    assert s.n_copies == 4
    assert s.alloc_graph(m.g)
    assert s.cur_copy == 0 and s.next_copy == 1
    # the graph input x keeps copy slot 0 itself and is flagged INPUT and OUTPUT
    assert m.x.flags & Flag.INPUT and m.x.flags & Flag.OUTPUT
    leaf_names = [t.name for t in s.graph.leafs]
    assert leaf_names == ["x", "CPU#x#1", "CPU#x#2", "CPU#x#3", "SIM#x#0", "SIM#x#1", "SIM#x#2", "SIM#x#3",
                          "CPU#h#0", "CPU#h#1", "CPU#h#2", "CPU#h#3", "SIM#r#0", "SIM#r#1", "SIM#r#2", "SIM#r#3",
                          "w", "x"]
    for t in s.graph.leafs[1:16]:
        assert t.flags & Flag.INPUT and t.flags & Flag.OUTPUT and t.data is not None
    # every copy slot has its own bytes
    slots = {(t.buffer.id, t.offset) for t in s.graph.leafs[4:8]}
    assert len(slots) == 4
    tensor_set(m.x, m.x_val)
    s.graph_compute(m.g)
    np.testing.assert_allclose(tensor_get(m.o), m.expected(), rtol=1e-5, atol=1e-5)
    # the next allocation uses copy slot 1 (no synchronize while allocated)
    s.reset()
    m.build()
    assert s.alloc_graph(m.g)
    assert s.cur_copy == 1 and m.h.src[1].name == "SIM#x#1"
    tensor_set(m.x, m.x_val)
    s.graph_compute(m.g)
    np.testing.assert_allclose(tensor_get(m.o), m.expected(), rtol=1e-5, atol=1e-5)


def test_eval_callback_sees_nodes_and_can_stop():
    m = TwoBackends()
    seen: list[tuple[str, bool]] = []

    def cb(t, ask):
        seen.append((t.name, ask))
        return True if ask else t.name != "h"  # stop after h: the rest of split 0 (nothing) is skipped

    m.sched.set_eval_callback(cb)
    assert m.sched.alloc_graph(m.g)
    tensor_set(m.x, m.x_val)
    m.sched.graph_compute(m.g)
    assert seen == [("h", True), ("h", False), ("r", True), ("r", False), ("o", True), ("o", False)]
    np.testing.assert_allclose(tensor_get(m.o), m.expected(), rtol=1e-5, atol=1e-5)


def test_reserve_then_smaller_graph_keeps_the_buffer():
    sched = Scheduler([CPUBackend()])
    big = g_mlp()
    assert sched.reserve(big)
    size = sched.buffer_size(0)
    assert size > 0 and big.nodes[0].data is None  # reserve binds nothing
    assert sched.is_reset and not sched.is_alloc
    assert sched.alloc_graph(g_three_nodes())
    assert sched.buffer_size(0) == size  # fits: no new buffer
    assert sched.reserve_size(g_mlp()) == [size]


def test_backend_change_forces_a_replan(recorded):
    sim, cpu = SimBackend("SIM"), CPUBackend()
    sched = Scheduler([sim, cpu])

    def build() -> tuple[Graph, object]:
        ctx = Context()
        a = ctx.new_tensor_1d(F32, 16, "a")
        b = ctx.new_tensor_1d(F32, 16, "b")
        n = ops.add(ctx, a, b)
        g = Graph()
        g.build_forward_expand(n)
        return g, n

    g, n = build()
    assert sched.alloc_graph(g)
    assert sched.node_backend_ids[:1] == [0] and n.buffer.buft is sim.buffer_type  # nothing pins it: SIM first
    sched.reset()
    g, n = build()
    sched.set_tensor_backend(n, cpu)  # same positions, another buffer type
    assert sched.alloc_graph(g)
    assert n.buffer.buft is cpu.buffer_type
    changed = [e for e in recorded.events if isinstance(e, ev.Replan) and e.cause is ev.ReplanCause.BACKEND_CHANGED]
    assert len(changed) == 1 and changed[0].tensor_id == n.id and changed[0].node_index == 0


def test_stale_tensor_after_reset_is_planned_over():
    """semantics §9.2: after a reset the shared tensor t keeps its address and a new
    graph's tensors are planned over it."""
    sched = Scheduler([CPUBackend()])
    ctx = Context()
    x = ctx.new_tensor_1d(F32, 64, "x")
    set_input(x)
    t = ops.sqr(ctx, x).set_name("t")
    u = ops.sqr(ctx, t)
    s = ops.sum(ctx, u)
    set_output(s)
    a = Graph()
    a.build_forward_expand(s)
    assert sched.alloc_graph(a)
    t_data = t.data
    y = ctx.new_tensor_1d(F32, 64, "y")
    set_input(y)
    z = ops.add(ctx, t, y).set_name("z")
    q = ops.sum(ctx, z)
    set_output(q)
    b = Graph()
    b.build_forward_expand(q)
    sched.reset()
    assert sched.alloc_graph(b)
    assert t.data == t_data
    assert (y.offset, z.offset, t.offset) == (0, 0, 0)


def test_unconsumed_unassigned_leaf_is_refused():
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, "lonely")
    g = Graph()
    g.build_forward_expand(a)
    with pytest.raises(SchedulerError, match="'lonely'.*no backend"):
        Scheduler([SimBackend(), CPUBackend()]).alloc_graph(g)
    s = Scheduler([SimBackend(), CPUBackend()])
    s.set_tensor_backend(a, 1)
    assert s.alloc_graph(g) and a.buffer.buft is s.bufts[1]
    set_input(a)  # inputs start on the CPU backend
    s2 = Scheduler([SimBackend(), CPUBackend()])
    assert s2.alloc_graph(g) and s2.leaf_backend_ids[:1] == [1]


def test_resplitting_a_rewritten_graph_is_refused():
    m = TwoBackends()
    assert m.sched.alloc_graph(m.g)
    m.sched.reset()
    with pytest.raises(SchedulerError, match="input copy made when this scheduler split the graph before"):
        m.sched.alloc_graph(m.g)
    m.build()  # a fresh graph is fine
    assert m.sched.alloc_graph(m.g)
    # a graph without cross-backend sources can be allocated again and again
    sched = Scheduler([CPUBackend()])
    g = g_mlp()
    for _ in range(3):
        assert sched.alloc_graph(g)
        sched.reset()


def test_format_assignments():
    m = TwoBackends()
    assert m.sched.alloc_graph(m.g)
    text = m.sched.format_assignments(m.g)
    assert text.splitlines()[0] == "## SPLIT #0: SIM # 1 inputs: [x (128 B)]"
    assert "node #  1 (UNARY): r (128 B) [CPU] <- CPU#h#0 [NULL]" in text
    assert text.count("## SPLIT") == 3
