"""The worst-case plan as a picture: a reserve (``ggml_gallocr_reserve``, llama.cpp's
``sched_reserve``) gives offsets to a graph that is never bound; the bindings that follow
(the prompt, each token) reuse the plan with graphs that fill a fraction of the buffer. The
layout draws that plan at its offsets, by default when it set the compute buffer's size,
and for ``--graph N``/``--plan N``; weights and the compute buffer are live there (the trace
frees them only when the process ends)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.export.scenarios import mlp_chain, reserve_then_tokens, seed_stale
from vizalloc.analysis.model import build_model
from vizalloc.export.layout import BAND_MIN, build_layout, layout_svg
from vizalloc.trace import events as ev
from vizalloc.trace.api import save
from vizalloc.trace.value import Trace, TraceHeader

SVG = "{http://www.w3.org/2000/svg}"


def _model():  # type: ignore[no-untyped-def]
    model = build_model(reserve_then_tokens())
    (plan,) = model.plans.values()
    return model, plan


def _titles(svg: str) -> list[str]:
    root = ET.fromstring(svg.encode("utf-8"))
    return [g.find(f"{SVG}title").text or "" for g in root.iter(f"{SVG}g")  # type: ignore[union-attr]
            if g.get("class", "").startswith("block")]


def test_the_default_layout_is_the_reserve_that_set_the_buffer_size() -> None:
    model, plan = _model()
    lay = build_layout(model)
    sel = lay.selection
    assert sel.binding_id == -1 and sel.plan_id == plan.plan_id and sel.graph_id == plan.graph_id
    assert "worst-case reserve" in sel.reason and "20,480 B" in sel.reason
    # the compute buffer first, its tensors at the plan's offsets, the weights after it
    compute, weights = lay.panels
    assert model.buffers[compute.buffer_id].usage == "compute" and model.buffers[weights.buffer_id].usage == "weights"
    offsets = {d.tensor_id: d.offset for d in plan.decisions if isinstance(d, (ev.PlanAlloc, ev.PlanInplace))}
    planned = [b for b in compute.blocks if b.planned]
    assert planned and {b.tensor_id: b.offset for b in planned} == {b.tensor_id: offsets[b.tensor_id] for b in planned}
    names = {b.name for b in compute.blocks}
    assert {"kq-0", "kq-1", "kq-2", "inp_embd"} <= names
    # the plan fills the buffer it sized: the peak is the buffer (a token's binding uses little)
    assert compute.figures.highest == compute.figures.size == 20480
    assert compute.figures.lower_bound is not None and not compute.freed_note and not weights.freed_note
    # drawn with the planner's lifetimes (a tensor nothing frees holds its bytes to the end),
    # the most bytes live at once are the plan's lower bound
    assert compute.figures.max_live == compute.figures.lower_bound
    assert all(not b.stale for p in lay.panels for b in p.blocks)
    svg = layout_svg(model)
    assert f"plan #{plan.plan_id} (never bound" in svg and "FREED" not in svg
    assert any(t.startswith("kq-1 (tensor #") and f"placed by plan #{plan.plan_id} (never bound)" in t
               for t in _titles(svg))


def test_a_reserve_graph_asked_for_is_drawn_at_its_plan() -> None:
    model, plan = _model()
    by_graph = build_layout(model, graph_id=plan.graph_id)
    by_plan = build_layout(model, plan_id=plan.plan_id)
    for lay in (by_graph, by_plan):
        assert lay.selection.plan_id == plan.plan_id and lay.selection.binding_id == -1
        assert [p.buffer_id for p in lay.panels] == [p.buffer_id for p in by_plan.panels]
        assert not any(p.freed_note for p in lay.panels)   # the process freed them later, at exit
        assert any(b.planned for b in lay.panels[0].blocks)
    assert f"graph #{plan.graph_id} as asked: never bound" in by_graph.selection.reason
    # a binding asked for is still drawn as bound, with the token's small graph
    first = min(model.bindings)
    bound = build_layout(model, binding_id=first)
    assert bound.selection.binding_id == first and bound.panels[0].figures.highest < 20480


def test_bindings_with_findings_and_traces_without_reserves_keep_their_default() -> None:
    model = build_model(seed_stale())
    assert build_layout(model).selection.binding_id >= 0
    model = build_model(mlp_chain(4))
    assert build_layout(model).selection.binding_id >= 0


def test_the_max_live_band_is_visible_on_a_graph_of_hundreds_of_nodes() -> None:
    svg = layout_svg(build_model(mlp_chain(300)))
    root = ET.fromstring(svg.encode("utf-8"))
    bands = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "max-live"]
    assert bands and all(float(r.get("width", "0")) >= BAND_MIN for r in bands)
    edges = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "max-live-edge"]
    assert len(edges) == len(bands)


def test_a_plan_not_in_the_trace_is_named(tmp_path: Path) -> None:
    path = tmp_path / "r.vztrace"
    events = reserve_then_tokens()
    save(Trace(TraceHeader.new(), tuple(events)), path)
    (plan,) = [e for e in events if isinstance(e, ev.PlanBegin)]
    done = subprocess.run([sys.executable, "-m", "vizalloc", "export", str(path), "--format", "layout", "--plan", "77",
                           "-o", str(tmp_path / "x.svg")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"plan #77 is not in the trace (plans: {plan.plan_id})" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "-m", "vizalloc", "export", str(path), "--format", "layout",
                           "-o", str(tmp_path / "y.svg")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and f"drew graph #{plan.graph_id} plan #{plan.plan_id} (never bound" in done.stderr, \
        done.stderr


@pytest.mark.parametrize("fmt", ["minimalloc"])
def test_minimalloc_writes_the_worst_case_plan(fmt: str) -> None:
    from vizalloc.export.api import chosen

    model, plan = _model()
    sel = chosen(model, fmt)
    assert sel.plan_id == plan.plan_id and sel.binding_id == -1


def test_the_graph_diagram_of_a_reserve_gives_its_planned_offsets() -> None:
    from vizalloc.export.graph_model import build_graph_model

    model, plan = _model()
    g = build_graph_model(model, graph_id=plan.graph_id)
    offsets = {d.tensor_id: d.offset for d in plan.decisions if isinstance(d, (ev.PlanAlloc, ev.PlanInplace))}
    drawn = {n.tensor_id: n for n in g.nodes}
    compute = next(b.buffer_id for b in model.buffers.values() if b.usage == "compute")
    for tid, off in offsets.items():
        if tid in drawn:
            assert (drawn[tid].buffer_id, drawn[tid].offset) == (compute, off), drawn[tid]
    assert any(n.name == "kq-1" and n.offset == offsets[n.tensor_id] for n in g.nodes)
