"""A plan reserved for one graph and bound to another (ggml's size-only re-validation):
names are not structure (no plan-mismatch), every differing position is reported, and a
leaf that outgrew its plan entry is bound over its neighbours (plan-overflow)."""

from __future__ import annotations

from pathlib import Path

from vizalloc.analysis.hazards import HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.cli import main
from vizalloc.runtime import ops
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F32
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.tensor import set_input, set_output
from vizalloc.trace import api
from vizalloc.trace.recorder import ListRecorder

from tests.analysis.builders import TraceBuilder


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
    with ListRecorder() as rec:
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
    with ListRecorder() as rec:
        galloc = GraphAllocator(BufferType("CPU", alignment=32))
        assert galloc.reserve(_mlp_graph("r_"))
        for step in range(4):
            g = _mlp_graph(f"s{step}_")
            assert galloc.alloc_graph(g)
    model = build_model(rec.events)
    assert len(model.plans) == 1 and len(model.bindings) == 4
    assert find_hazards(model) == []
