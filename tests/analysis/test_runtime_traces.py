"""Hazards in traces the real runtime records (ops, graph allocator, backends, scenario)."""

from __future__ import annotations

import numpy as np
import pytest

from vizalloc.analysis.hazards import HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.analysis.records import PlacementState
from vizalloc.replay.shadow import shadow_compute
from vizalloc.runtime import ops
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.backends import CPUBackend, graph_compute
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F32, I32
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_get, tensor_set
from vizalloc.runtime.tensor import set_input, set_output
from vizalloc.scenarios.shared_tensors import STRATEGIES, run
from vizalloc.trace.recorder import StrictRecorder

D, V, N = 4, 16, 8


def index_leaf_run(capture: bool = False):
    """spinel #1449's shape: an index leaf is used by the forward get_rows and freed there; the
    backward graph (sharing the forward tensors, allocated without a fix) puts a new leaf on
    its bytes, and the backward pass still reads the index.

    The new leaf's values are small integers viewed as float32 (denormals), so the clobbered
    index stays in range: the corruption is silent, as in the bug report, not a crash."""
    buft = BufferType("CPU", alignment=32)
    rng = np.random.default_rng(1)
    with StrictRecorder(capture_values=capture) as rec:
        wctx = Context(name="weights")
        emb = wctx.new_tensor_2d(F32, D, V, name="emb")
        big = wctx.new_tensor_2d(F32, 64, 16, name="big")
        alloc_ctx_tensors(wctx, buft)
        tensor_set(emb, rng.standard_normal(D * V).astype(np.float32))
        ctx = Context(name="compute")
        idx = ctx.new_tensor_1d(I32, N, name="idx")
        set_input(idx)
        rows = ops.get_rows(ctx, emb, idx)
        set_output(rows)
        gf = Graph()
        gf.build_forward_expand(rows)
        # a forward-only output that makes gf's buffer big enough for gb (no reallocation)
        side = ops.sqr(ctx, ops.scale(ctx, big, 0.5))
        set_output(side)
        gf.build_forward_expand(side)
        m = ctx.new_tensor_2d(F32, D, N, name="m")
        set_input(m)
        grad = ops.get_rows_back(ctx, ops.add(ctx, rows, m), idx, emb)
        set_output(grad)
        m_sum = ops.sum(ctx, m)  # a second consumer keeps the add from taking m's bytes in place
        set_output(m_sum)
        gb = Graph()  # the backward graph shares rows and idx with gf
        gb.build_forward_expand(grad)
        gb.build_forward_expand(m_sum)
        galloc = GraphAllocator(buft)
        backend = CPUBackend()
        ids = rng.integers(0, V, N).astype(np.int32)
        assert galloc.alloc_graph(gf)
        tensor_set(idx, ids)
        graph_compute(backend, gf)
        assert galloc.alloc_graph(gb)  # no reset, no clear: gf's tensors keep their pointers
        tensor_set(idx, ids)
        tensor_set(m, rng.integers(0, V, D * N).astype(np.int32).view(np.float32))
        graph_compute(backend, gb)
        tensor_get(grad)
    return rec.events, dict(idx=idx.id, rows=rows.id, m=m.id, grad=grad.id)


def test_index_leaf_reused_while_the_backward_pass_reads_it():
    events, ids = index_leaf_run()
    model = build_model(events)
    hazards = find_hazards(model)
    uar = [h for h in hazards if h.kind is HazardKind.USE_AFTER_REUSE and h.tensor_id == ids["idx"]]
    assert len(uar) == 1, [h.report() for h in hazards]
    h = uar[0]
    assert h.other_id == ids["m"] and h.ranges == ((0, 32),)
    # read twice with the wrong bytes: by the recomputed get_rows and by the backward get_rows_back
    assert h.occurrences == 2 and "GET_ROWS" in h.access
    comp = max(model.computes.values(), key=lambda c: c.begin_seq)
    readers = [n.tensor_id for n in comp.nodes if ids["idx"] in n.reads]
    assert model.tensors[readers[-1]].op == "GET_ROWS_BACK"
    # the stale idx also overlaps the leaf the backward plan placed on it
    assert any(x.kind is HazardKind.STALE_OVERLAP and {x.tensor_id, x.other_id} == {ids["idx"], ids["m"]}
               for x in hazards)
    # the memory map at the backward compute shows idx stale under a live tensor
    p = model.placement_at(ids["idx"], comp.begin_seq)
    assert p is not None and model.placement_state(p, comp.begin_seq) is PlacementState.STALE
    rows = model.memory_map(p.buffer_id, comp.begin_seq)
    assert any(r.tensor_id == ids["m"] and r.state is PlacementState.LIVE and r.offset < p.end for r in rows)


def test_index_leaf_shadow_execution_finds_the_corruption():
    events, ids = index_leaf_run(capture=True)
    model = build_model(events)
    comp = max(model.computes.values(), key=lambda c: c.begin_seq)
    s = shadow_compute(model, comp.compute_id)
    assert s.reproduces_trace, s.summary()
    assert s.first_diverging >= 0, s.summary()
    assert any(t == ids["grad"] and d > s.tolerance for t, _, d in s.output_diffs), s.summary()


def mismatch_run(op_b: str):
    """llama.cpp #28448's shape: a plan reserved for one graph, then a graph whose node at one
    position is another op with the same sizes: the size-only check reuses the plan."""
    buft = BufferType("CPU", alignment=32)
    with StrictRecorder() as rec:
        galloc = GraphAllocator(buft)
        graphs = []
        for op in ("add", op_b):
            ctx = Context(name=f"graph {op}")
            x = ctx.new_tensor_1d(F32, 16, name="x")
            set_input(x)
            h = ops.relu(ctx, x)
            y = getattr(ops, op)(ctx, h, x)
            out = ops.sum(ctx, y)
            set_output(out)
            g = Graph()
            g.build_forward_expand(out)
            graphs.append(g)
        assert galloc.reserve(graphs[0])
        assert galloc.alloc_graph(graphs[1])
    return rec.events


def test_plan_reused_for_a_graph_whose_node_changed():
    hazards = find_hazards(build_model(mismatch_run("mul")))
    mm = [h for h in hazards if h.kind is HazardKind.PLAN_MISMATCH]
    assert len(mm) == 1, [h.report() for h in hazards]
    assert "MUL" in mm[0].detail and "ADD" in mm[0].detail
    assert not [h for h in hazards if h.kind is HazardKind.REPLAN]  # the size-only check did not re-plan


def test_plan_reused_for_the_same_structure_is_fine():
    hazards = find_hazards(build_model(mismatch_run("add")))
    assert [h for h in hazards if h.kind is not HazardKind.REPLAN] == []


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_demo_strategies(strategy: str) -> None:
    rec = StrictRecorder()
    result = run(strategy, steps=3, seed=0, around_loop=lambda: rec)
    hazards = find_hazards(build_model(rec.events))
    memory = {h.kind for h in hazards if h.kind is not HazardKind.REPLAN}
    if strategy == "none":
        assert {HazardKind.STALE_OVERLAP, HazardKind.USE_AFTER_REUSE} <= memory
        assert result.max_abs_loss_diff > 1e-3
    else:
        assert memory == set(), [h.report() for h in hazards if h.kind is not HazardKind.REPLAN]
        assert result.max_abs_loss_diff < 1e-6


def test_invalidate_defeated_by_a_reserve_in_between():
    rec = StrictRecorder()
    result = run("invalidate", steps=3, seed=0, reserve_between=True, around_loop=lambda: rec)
    hazards = find_hazards(build_model(rec.events))
    kinds = {h.kind for h in hazards}
    assert result.max_update_diff > 1e-6
    assert HazardKind.STALE_OVERLAP in kinds or HazardKind.USE_AFTER_REUSE in kinds


def test_demo_config_b_matches_what_real_ggml_showed():
    """golden README, seed scenario config B (no reallocation): 14 both_live pairs per backward
    step, and even the loss read after the backward step is wrong."""
    rec = StrictRecorder()
    run("none", steps=2, seed=0, config="B", around_loop=lambda: rec)
    model = build_model(rec.events)
    hazards = find_hazards(model)
    stale = [h for h in hazards if h.kind is HazardKind.STALE_OVERLAP]
    assert len(stale) == 14
    backward = sorted(b.binding_id for b in model.bindings.values())[1::2]
    assert all(set(h.steps) == set(backward) for h in stale)
    clobbered = [h for h in hazards if h.kind is HazardKind.CLOBBERED_OUTPUT]
    assert [model.tensors[h.tensor_id].name for h in clobbered] == ["loss"]


def test_two_backends_with_input_copies_are_clean():
    """Scheduler input copies are written when their split starts: two copies that share
    bytes at different times are no hazard (found as a false alarm before this rule)."""
    from tests.runtime.test_sched import TwoBackends

    with StrictRecorder() as rec:
        m = TwoBackends()
        for _ in range(3):
            m.sched.reset()
            m.build()
            assert m.sched.alloc_graph(m.g)
            tensor_set(m.x, m.x_val)
            m.sched.graph_compute(m.g)
            tensor_get(m.o)
    model = build_model(rec.events)
    assert model.input_copies and len(model.computes) == 9
    last = sorted(e.copy_id for s in model.scheds.values() for e in s.copies)[-3:]  # the last split's copies
    placed = [model.placement_at(c, model.events[-1].seq) for c in last]
    # the planner really did put two copies of one graph on the same bytes (else this proves nothing)
    spots = [(p.buffer_id, p.offset) for p in placed if p is not None]
    assert len(spots) > len(set(spots))
    assert find_hazards(model) == []


def test_cast_and_cpy_destinations_are_not_reads():
    """ggml_cast lists the result as its own second source and ggml_cpy(a, b) lists b: both
    are destinations the kernel writes, so no uninitialized read (a false alarm before)."""
    from vizalloc.runtime.dtype import F16

    buft = BufferType("CPU", alignment=32)
    with StrictRecorder() as rec:
        ctx = Context(name="compute")
        a = ctx.new_tensor_1d(F32, 16, name="a")
        set_input(a)
        dst = ctx.new_tensor_1d(F16, 16, name="dst")
        c = ops.cast(ctx, a, F16)
        d = ops.cpy(ctx, a, dst)
        out = ops.add(ctx, ops.cast(ctx, c, F32), ops.cast(ctx, d, F32))
        set_output(out)
        g = Graph()
        g.build_forward_expand(out)
        assert GraphAllocator(buft).alloc_graph(g)
        tensor_set(a, np.arange(16, dtype=np.float32))
        graph_compute(CPUBackend(), g)
        assert tensor_get(out).tolist() == [2.0 * i for i in range(16)]
    model = build_model(rec.events)
    assert any(model.tensors[n.tensor_id].op == "CPY" and n.tensor_id in n.reads
               for c_ in model.computes.values() for n in c_.nodes)  # the cast reads "itself"
    assert find_hazards(model) == []
