"""Graph diagrams: exact DOT for a small graph, edge kinds, stale/hazard marks, splits, folding, SVG."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET

import pytest

from tests.builders import TraceBuilder
from tests.export.scenarios import mlp_chain, seed_stale, two_backends
from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.errors import UsageError
from vizalloc.export.dot import GraphvizError, dot_text, graph_dot, prepare, svg_text
from vizalloc.export.findings import highlights
from vizalloc.export.graph_fold import fold_groups, limit_nodes
from vizalloc.export.graph_model import EdgeKind, NodeRole, build_graph_model
from vizalloc.trace import events as ev

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")

EXPECTED_THREE = '''digraph vizalloc {
  graph [label=<graph #0 binding #0, plan #0>, labelloc=t, fontname="Helvetica", fontsize=12, rankdir=TB, nodesep=0.25, ranksep=0.35];
  node [fontname="Helvetica", fontsize=9, margin="0.08,0.04"];
  edge [fontname="Helvetica", fontsize=8, arrowsize=0.7];
  t0 [label=<<B>a </B>(input)<BR/>NONE  f32 [4]<BR/>buf #0 CPU [0, 16) 16 B>, tooltip="a (tensor #0) (input)\\nNONE f32 [4]\\nbuffer #0 (CPU) bytes [0, 16)\\nplaced by gallocr in binding #0", shape=box, style="filled", fillcolor="#8dd3c7", color="#333333", penwidth=1];
  t1 [label=<<B>b </B>(input)<BR/>NONE  f32 [4]<BR/>buf #0 CPU [32, 48) 16 B>, tooltip="b (tensor #1) (input)\\nNONE f32 [4]\\nbuffer #0 (CPU) bytes [32, 48)\\nplaced by gallocr in binding #0", shape=box, style="filled", fillcolor="#8dd3c7", color="#333333", penwidth=1];
  t2 [label=<<B>c</B><BR/>ADD  f32 [4]<BR/>buf #0 CPU [64, 80) 16 B>, tooltip="c (tensor #2)\\nADD f32 [4]\\nbuffer #0 (CPU) bytes [64, 80)\\nplaced by gallocr in binding #0", shape=box, style="filled,rounded", fillcolor="#8dd3c7", color="#333333", penwidth=1];
  t3 [label=<<B>d </B>(output)<BR/>UNARY  f32 [4]<BR/>buf #0 CPU [64, 80) 16 B>, tooltip="d (tensor #3) (output)\\nUNARY f32 [4]\\nbuffer #0 (CPU) bytes [64, 80)\\nplaced by gallocr in binding #0", shape=box, style="filled,rounded", fillcolor="#8dd3c7", color="#333333", penwidth=1];
  t0 -> t2 [color="#444444"];
  t1 -> t2 [label="src1", color="#444444"];
  t2 -> t3 [label="in-place", style=bold, color="#1f5fbf", penwidth=2.5, arrowhead=diamond];
'''


def three_node_graph() -> TraceBuilder:
    """a, b leafs; c = add(a, b); d = relu(c) in place; bound by binding 0 into buffer 0."""
    b = TraceBuilder(auto_loc=False)
    b.emit(ev.ContextCreated, 0, "ctx", True)
    b.tensor("a", 4, tid=0, flags=1)
    b.tensor("b", 4, tid=1, flags=1)
    b.tensor("c", 4, tid=2, op="ADD", srcs=(0, 1))
    b.tensor("d", 4, tid=3, op="UNARY", srcs=(2,), flags=2)
    b.emit(ev.GraphCreated, 0, 2048, "new", -1)
    b.emit(ev.GraphExpanded, 0, (2, 3), (0, 1))
    b.emit(ev.Replan, 0, ev.ReplanCause.FIRST, "", -1, -1)
    b.emit(ev.PlanBegin, 0, 0, 0, 2, 2, (32,))
    b.emit(ev.PlanAlloc, 0, 0, 0, 0, 0, 32, 1, -1)
    b.emit(ev.PlanAlloc, 0, 1, 0, 0, 32, 32, 1, -1)
    b.emit(ev.PlanAlloc, 0, 2, 0, 0, 64, 32, 3, -1)
    b.emit(ev.PlanInplace, 0, 3, 2, 0, 0, 64)
    b.emit(ev.PlanEnd, 0, ((96,),))
    b.emit(ev.BufferAllocated, 0, "CPU", "CPU", 0x10000, 96, 32, "compute", 0, 0, 0, "reserve")
    b.emit(ev.BindingBegin, 0, 0, 0, 0)
    for tid, off in ((0, 0), (1, 32), (2, 64), (3, 64)):
        b.place(tid, 0, off, nbytes=16, by=ev.PlacedBy.GALLOCR, binding=0)
    b.emit(ev.BindingEnd, 0, True)
    return b


def test_three_node_graph_exact_dot():
    text = graph_dot(build_model(three_node_graph().events))
    assert text.startswith(EXPECTED_THREE)
    legend, end = text[len(EXPECTED_THREE):].splitlines()
    assert legend.startswith("  legend [shape=plaintext, label=<<TABLE")
    assert 'BGCOLOR="#8dd3c7"' in legend and "buffer #0 CPU compute 96 B" in legend and "CPU CPU" not in legend
    assert end == "}"


def test_view_edge_is_dashed_and_not_doubled_by_src0():
    b = TraceBuilder(auto_loc=False)
    b.tensor("a", 4, tid=0, flags=1)
    b.tensor("v", 4, tid=1, op="VIEW", srcs=(0,), view_src=0, view_offs=8)
    b.tensor("r", 4, tid=2, op="UNARY", srcs=(1,))
    b.emit(ev.GraphCreated, 0, 16, "new", -1)
    b.emit(ev.GraphExpanded, 0, (1, 2), (0,))
    gm = build_graph_model(build_model(b.events))
    kinds = {(e.src, e.dst): e.kind for e in gm.edges}
    assert kinds == {("t0", "t1"): EdgeKind.VIEW, ("t1", "t2"): EdgeKind.DATA}
    assert [e.label for e in gm.edges if e.kind is EdgeKind.VIEW] == ["view +8"]
    text = dot_text(gm)
    assert 't0 -> t1 [label="view +8", style=dashed' in text
    assert "(not bound)" in text and "no memory" in text


def test_stale_tensors_and_hazard_pairs_are_marked():
    model = build_model(seed_stale())
    first, second = sorted(model.bindings)
    found = highlights(find_hazards(model))
    gm = build_graph_model(model, highlights=found, prefer_bindings=[second])
    assert gm.selection.binding_id == second
    by_name = {n.name: n for n in gm.nodes}
    # x and t kept their bytes from the first binding; the second plan skipped them as external
    assert by_name["x"].stale.startswith(f"from binding #{first} (re-planned)")
    assert by_name["t"].stale and not by_name["y"].stale and not by_name["z"].stale
    hazard_edges = {(e.src, e.dst) for e in gm.edges if e.kind is EdgeKind.HAZARD}
    ids = {n.name: n.key for n in gm.nodes}
    assert hazard_edges == {(ids["y"], ids["x"]), (ids["t"], ids["y"])}
    assert any("stale-overlap with y" in h for h in by_name["x"].hazards)
    text = dot_text(gm)
    assert text.count("<B>STALE </B>") == 2
    assert "constraint=false" in text and "2 stale tensor(s); 2 finding(s)" in text


def test_default_selection_is_the_binding_with_findings():
    model = build_model(seed_stale())
    first, second = sorted(model.bindings)
    text = graph_dot(model, highlights=highlights(find_hazards(model)))
    assert f"binding #{second}, plan #{model.bindings[second].plan_id}" in text
    text0 = graph_dot(model, binding_id=first)
    assert f"binding #{first}, plan #{model.bindings[first].plan_id}" in text0 and "STALE" not in text0


def test_unknown_binding_or_graph_is_a_usage_error():
    model = build_model(seed_stale())
    first, second = sorted(model.bindings)
    with pytest.raises(UsageError, match=rf"binding #{second + 7} is not in the trace \(bindings: {first}, {second}\)"):
        graph_dot(model, binding_id=second + 7)
    with pytest.raises(UsageError, match="graph #1000000"):
        graph_dot(model, graph_id=10**6)
    with pytest.raises(UsageError, match="no graph"):
        graph_dot(build_model([]))


def test_scheduler_splits_are_clusters_with_their_copies():
    gm = build_graph_model(build_model(two_backends()))
    assert [c.label for c in gm.clusters] == ["split 0: SIM", "split 1: CPU", "split 2: SIM"]
    names = {n.key: n.name for n in gm.nodes}
    members = [sorted(names[k] for k in c.members) for c in gm.clusters]
    assert members == [["SIM#x#0", "h"], ["CPU#h#0", "r"], ["SIM#r#0", "o"]]
    copies = sorted((names[e.src], names[e.dst]) for e in gm.edges if e.kind is EdgeKind.COPY)
    assert copies == [("h", "CPU#h#0"), ("r", "SIM#r#0"), ("x", "SIM#x#0")]
    assert {n.name for n in gm.nodes if n.role is NodeRole.COPY} == {"SIM#x#0", "CPU#h#0", "SIM#r#0"}
    # colour by buffer: three buffers (SIM weights, SIM compute, CPU compute) in the legend
    assert sorted((b.backend, b.usage) for b in gm.buffers) == [("CPU", "compute"), ("SIM", "compute"),
                                                                 ("SIM", "weights")]
    text = dot_text(gm)
    assert text.count("subgraph cluster_split") == 3 and "border: backend SIM" in text


def test_fold_repeated_layers_into_one_box_each():
    gm = build_graph_model(build_model(mlp_chain(4)))
    folded = fold_groups(gm)
    boxes = sorted((n for n in folded.nodes if n.role is NodeRole.FOLD), key=lambda n: n.key)
    assert [(b.key, b.name) for b in boxes] == [("fold0", "blk.0"), ("fold1", "blk.1"), ("fold2", "blk.2"),
                                                ("fold3", "blk.3")]
    assert all(b.members == 5 for b in boxes)  # w, b, mm, add, relu
    keys = {n.key for n in folded.nodes}
    assert all(e.src in keys and e.dst in keys for e in folded.edges)
    chain = {(e.src, e.dst) for e in folded.edges if e.src.startswith("fold") and e.dst.startswith("fold")}
    assert chain == {("fold0", "fold1"), ("fold1", "fold2"), ("fold2", "fold3")}
    # a user regex with a group names the groups by the group
    by_layer = fold_groups(gm, r"blk\.(\d+)\.")
    assert sorted(n.name for n in by_layer.nodes if n.role is NodeRole.FOLD) == ["0", "1", "2", "3"]
    with pytest.raises(UsageError, match="not a valid regular expression"):
        fold_groups(gm, "blk.(")


def test_max_nodes_keeps_the_neighbourhood_of_findings():
    model = build_model(seed_stale())
    found = highlights(find_hazards(model))
    gm = build_graph_model(model, highlights=found, prefer_bindings=[max(model.bindings)])
    small = limit_nodes(gm, 4)
    assert len(small.nodes) == 4
    kept = {n.name for n in small.nodes if n.role is not NodeRole.SUMMARY}
    assert {"x", "t", "y"} <= kept
    summary = [n for n in small.nodes if n.role is NodeRole.SUMMARY]
    assert len(summary) == 1 and summary[0].members == len(gm.nodes) - 3
    assert any("hidden by --max-nodes 4" in note for note in small.notes)


def test_prepare_folds_blk_layers_only_when_over_the_cap():
    gm = build_graph_model(build_model(mlp_chain(3)))
    assert prepare(gm, max_nodes=300) is gm
    capped = prepare(gm, max_nodes=10)
    assert any(n.role is NodeRole.FOLD for n in capped.nodes) and len(capped.nodes) <= 10
    assert all(n.role is not NodeRole.FOLD for n in prepare(gm, fold="", max_nodes=10).nodes)


@needs_dot
def test_svg_parses_as_xml_and_keeps_tooltips():
    model = build_model(two_backends())
    svg = svg_text(graph_dot(model, highlights=highlights(find_hazards(model))))
    root = ET.fromstring(svg.encode("utf-8"))
    assert root.tag.endswith("svg")
    assert "split 1: CPU" in svg and "SIM#x#0" in svg


def test_svg_without_dot_raises_with_install_hint(monkeypatch):
    monkeypatch.setattr("vizalloc.export.dot.find_dot", lambda: None)
    with pytest.raises(GraphvizError, match="apt-get install graphviz"):
        svg_text("digraph { a }")


@needs_dot
def test_dot_errors_become_graphviz_error():
    with pytest.raises(GraphvizError, match="`dot` failed"):
        svg_text("digraph { a -> }")


def test_node_ids_never_contain_user_text():
    model = build_model(seed_stale(names=("x y", "t\"", "u;", "s}", "y{", "z->", "q]")))
    for line in dot_text(build_graph_model(model)).splitlines():
        m = re.match(r"\s+(\S+) (\[|->)", line)
        if m:
            assert re.fullmatch(r"t\d+|legend|fold\d+|hidden|graph|node|edge", m.group(1))
