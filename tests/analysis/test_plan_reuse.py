"""A plan reserved for one graph and bound to another (ggml's size-only re-validation):
names are not structure (no plan-mismatch), every differing position is reported, and a
leaf that outgrew its plan entry is bound over its neighbours (plan-overflow)."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vizalloc.analysis.hazards import HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.cli import main
from vizalloc.runtime import ops
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.backends import CPUBackend, graph_compute
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F32
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.memory import tensor_get, tensor_set
from vizalloc.runtime.tensor import Tensor, set_input, set_output
from vizalloc.trace import api
from vizalloc.trace.recorder import StrictRecorder

from tests.builders import TraceBuilder


def _mlp_graph(prefix: str, ops_: tuple[str, str, str] = ("add", "mul", "sub")) -> Graph:
    """x -> relu -> op0(h, x) -> op1(., x) -> op2(., x) -> sum, every tensor named with ``prefix``."""
    ctx = Context(name=f"graph {prefix}")
    x = ctx.new_tensor_1d(F32, 16, name=f"{prefix}x")
    set_input(x)
    y = ops.relu(ctx, x).set_name(f"{prefix}h")
    for i, op in enumerate(ops_):
        y = getattr(ops, op)(ctx, y, x).set_name(f"{prefix}y{i}")
    out = ops.sum(ctx, y).set_name(f"{prefix}out")
    set_output(out)
    g = Graph()
    g.build_forward_expand(out)
    return g


def _reserve_then_bind(first: Graph, second: Graph) -> None:
    galloc = GraphAllocator(BufferType("CPU", alignment=32))
    assert galloc.reserve(first)
    assert galloc.alloc_graph(second)


def test_a_graph_rebuilt_with_other_names_is_no_plan_mismatch(tmp_path: Path, capsys) -> None:
    """ggml binds a plan by position and size; names play no part, so none may in the signature."""
    path = tmp_path / "renamed.vztrace"
    with api.trace(path):
        _reserve_then_bind(_mlp_graph("a_"), _mlp_graph("b_"))
    model = build_model(api.load(path).events)
    assert len(model.plans) == 1 and len(model.bindings) == 1  # the plan really was reused
    binding = next(iter(model.bindings.values()))
    plan = model.plans[binding.plan_id]
    assert plan.graph is not None and binding.graph is not None
    names = [model.tensors[t].name for t in binding.graph.nodes]
    assert names != [model.tensors[t].name for t in plan.graph.nodes]  # other names at every position
    assert find_hazards(model) == []
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("-> ok")


def test_plan_mismatch_lists_every_position_that_differs() -> None:
    with StrictRecorder() as rec:
        _reserve_then_bind(_mlp_graph("a_", ("add", "mul", "sub")), _mlp_graph("b_", ("mul", "mul", "add")))
    hazards = [h for h in find_hazards(build_model(rec.events)) if h.kind is not HazardKind.REPLAN]
    assert [h.kind for h in hazards] == [HazardKind.PLAN_MISMATCH]
    text = hazards[0].report()
    assert "2 position(s) differ" in text
    # node 0 is the relu; nodes 1 and 3 changed op, node 2 did not
    assert "node 1: the plan was made for 'a_y0' (ADD" in text and "'b_y0' (MUL" in text
    assert "node 3: the plan was made for 'a_y2' (SUB" in text and "'b_y2' (ADD" in text
    assert "op ADD -> MUL" in text and "op SUB -> ADD" in text
    assert "node 2:" not in text


def test_plan_mismatch_names_a_changed_source_position() -> None:
    """Same ops, types and flags; only where a source comes from changed: the text says so."""
    tb = TraceBuilder()
    buf = tb.buffer(512, pool=0)

    def build(second_src_is_leaf: bool) -> tuple[int, list[int]]:
        a = tb.tensor("a", 16, flags=1)
        b = tb.node("b", "RELU", a)
        c = tb.node("c", "ADD", b, a if second_src_is_leaf else b)
        return tb.graph([b, c], [a]), [a, b, c]

    g1, t1 = build(True)
    plan = tb.plan(0, g1, [(t1[0], 0, 64), (t1[1], 64, 64), (t1[2], 128, 64)], n_nodes=2, n_leafs=1)
    tb.bind(0, plan, g1, [(t1[0], buf, 0), (t1[1], buf, 64), (t1[2], buf, 128)])
    g2, t2 = build(False)
    tb.bind(0, plan, g2, [(t2[0], buf, 0), (t2[1], buf, 64), (t2[2], buf, 128)])
    hz = [h for h in find_hazards(build_model(tb.events)) if h.kind is HazardKind.PLAN_MISMATCH]
    assert len(hz) == 1
    assert "1 position(s) differ" in hz[0].detail
    assert "node 1:" in hz[0].detail and "sources (node 0, leaf 0) -> (node 0, node 0)" in hz[0].detail


def test_same_structure_rebuilt_again_is_not_reported_twice_as_new() -> None:
    """Rebinding the same renamed structure over and over stays clean (the decode-loop shape)."""
    with StrictRecorder() as rec:
        galloc = GraphAllocator(BufferType("CPU", alignment=32))
        assert galloc.reserve(_mlp_graph("r_"))
        for step in range(4):
            g = _mlp_graph(f"s{step}_")
            assert galloc.alloc_graph(g)
    model = build_model(rec.events)
    assert len(model.plans) == 1 and len(model.bindings) == 4
    assert find_hazards(model) == []


# -- plan-overflow: a leaf nobody consumes that outgrew its plan entry ----------------------

def _graph_with_unused_leaf(n_unused: int) -> tuple[Graph, dict[str, Tensor]]:
    """leafs [unused (F32[n_unused], consumed by no node), c (input F32[16])]; nodes [relu(c), sum]."""
    ctx = Context(name=f"unused {n_unused}")
    unused = ctx.new_tensor_1d(F32, n_unused, name="unused")
    c = ctx.new_tensor_1d(F32, 16, name="c")
    set_input(c)
    r = ops.relu(ctx, c).set_name("r")
    s = ops.sum(ctx, r).set_name("s")
    set_output(s)
    g = Graph()
    g.build_forward_expand(unused)  # a leaf of the graph that no node reads
    g.build_forward_expand(s)
    return g, dict(unused=unused, c=c, r=r, s=s)


def _offsets(ts: dict[str, Tensor]) -> dict[str, tuple[int, int]]:
    return {k: (t.data - t.buffer.base, t.nbytes) for k, t in ts.items()}  # type: ignore[operator, union-attr]


def overflow_run() -> tuple[list[Any], dict[str, tuple[int, int]], float]:
    """reserve(G) with a 64-byte unused leaf, then alloc_graph(G') where it has 128 bytes:
    ggml re-validates only node and source entries, so G' is bound to G's plan."""
    with StrictRecorder() as rec:
        galloc = GraphAllocator(BufferType("CPU", alignment=32))
        assert galloc.reserve(_graph_with_unused_leaf(16)[0])
        g, ts = _graph_with_unused_leaf(32)
        assert galloc.alloc_graph(g)
        tensor_set(ts["c"], np.arange(16, dtype=np.float32) - 8)
        tensor_set(ts["unused"], np.ones(32, dtype=np.float32))
        graph_compute(CPUBackend(), g)
        total = float(tensor_get(ts["s"])[0])
    return rec.events, _offsets(ts), total


def test_a_grown_unconsumed_leaf_bound_over_live_tensors_is_a_plan_overflow() -> None:
    events, offsets, total = overflow_run()
    # the runtime binds it as ggml does (the oracle test below): unused [0, 128) over c and r at 64
    assert offsets == {"unused": (0, 128), "c": (64, 64), "r": (64, 64), "s": (128, 4)}
    assert total == 16.0  # relu(c) summed is 28; c's bytes held the ones written into 'unused'
    model = build_model(events)
    assert len(model.plans) == 1 and len(model.bindings) == 1  # no re-plan: the plan was reused
    hazards = find_hazards(model)
    over = [h for h in hazards if h.kind is HazardKind.PLAN_OVERFLOW]
    assert len(over) == 1
    h = over[0]
    names = model.tensors
    assert names[h.tensor_id].name == "unused" and names[h.other_id].name == "c"
    assert h.ranges == ((64, 128),) and h.node_index == 0
    assert "64 bytes past the entry, [64, 128), cover 'c' [64, 128), 'r' [64, 128)" in h.detail
    assert h.report().startswith("==vizalloc== ERROR: plan-overflow on tensor 'unused'")


def test_plan_overflow_is_reported_even_if_nobody_reads_the_covered_bytes() -> None:
    """The same binding with no compute and no set at all: the overlap alone is the finding."""
    with StrictRecorder() as rec:
        galloc = GraphAllocator(BufferType("CPU", alignment=32))
        assert galloc.reserve(_graph_with_unused_leaf(16)[0])
        assert galloc.alloc_graph(_graph_with_unused_leaf(32)[0])
    hazards = find_hazards(build_model(rec.events))
    assert [h.kind for h in hazards] == [HazardKind.PLAN_OVERFLOW]


def test_a_leaf_that_shrank_or_kept_its_size_is_no_plan_overflow() -> None:
    for n in (8, 16):
        with StrictRecorder() as rec:
            galloc = GraphAllocator(BufferType("CPU", alignment=32))
            assert galloc.reserve(_graph_with_unused_leaf(16)[0])
            assert galloc.alloc_graph(_graph_with_unused_leaf(n)[0])
        assert find_hazards(build_model(rec.events)) == []


def test_real_ggml_binds_the_grown_leaf_at_its_old_offset() -> None:
    """ggml-python 0.0.45 (real ggml-alloc.c): the same two graphs, reserve then alloc_graph,
    give the same offsets as the runtime: the 128-byte leaf at 0, over c and relu(c) at 64."""
    ggml = pytest.importorskip("ggml", reason="ggml-python 0.0.45 is the oracle (pip install ggml-python==0.0.45)")
    ggml.lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p
    ggml.lib.ggml_backend_buffer_get_base.restype = ctypes.c_void_p
    ggml.lib.ggml_backend_buffer_get_base.argtypes = [ctypes.c_void_p]
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=1 << 20, mem_buffer=None, no_alloc=True))
    galloc = ggml.ggml_gallocr_new(ctypes.c_void_p(ggml.lib.ggml_backend_cpu_buffer_type()))
    try:
        def build(n_unused: int) -> tuple[Any, dict[str, Any]]:
            unused = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, n_unused)
            c = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 16)
            ggml.ggml_set_input(c)
            r = ggml.ggml_relu(ctx, c)
            s = ggml.ggml_sum(ctx, r)
            ggml.ggml_set_output(s)
            gf = ggml.ggml_new_graph(ctx)
            ggml.ggml_build_forward_expand(gf, unused)
            ggml.ggml_build_forward_expand(gf, s)
            return gf, dict(unused=unused, c=c, r=r, s=s)

        assert ggml.ggml_gallocr_reserve(galloc, build(16)[0])
        gf, ts = build(32)
        assert ggml.ggml_gallocr_alloc_graph(galloc, gf)
        got = {k: (t.contents.data - ggml.lib.ggml_backend_buffer_get_base(t.contents.buffer), ggml.ggml_nbytes(t))
               for k, t in ts.items()}
        assert got == overflow_run()[1] == {"unused": (0, 128), "c": (64, 64), "r": (64, 64), "s": (128, 4)}
        assert ggml.ggml_gallocr_get_buffer_size(galloc, 0) == 160  # no re-plan grew it
    finally:
        ggml.ggml_gallocr_free(galloc)
        ggml.ggml_free(ctx)
