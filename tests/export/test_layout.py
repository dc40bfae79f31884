"""Layout SVG: one panel per buffer, one rectangle per root, stale/collisions hatched, peak and bound lines."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tests.export.scenarios import mlp_chain, seed_stale, two_backends
from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.export.findings import highlights
from vizalloc.export.layout import Block, build_layout, layout_svg, lower_bound

SVG = "{http://www.w3.org/2000/svg}"


def _seed():
    model = build_model(seed_stale())
    found = highlights(find_hazards(model))
    return model, found, max(model.bindings)


def test_seed_layout_blocks():
    model, found, second = _seed()
    lay = build_layout(model, binding_id=second, highlights=found)
    assert lay.n_steps == 3
    (panel,) = lay.panels
    blocks = {b.name: b for b in panel.blocks}
    assert set(blocks) == {"x", "t", "y", "z", "q"}
    # live ranges from the graph's structure: x is read by t at node 0, t by z at 1, ...
    assert (blocks["x"].first, blocks["x"].last) == (-1, 0)
    assert (blocks["t"].first, blocks["t"].last) == (0, 1)
    assert (blocks["y"].first, blocks["y"].last) == (-1, 1)
    assert (blocks["q"].first, blocks["q"].last) == (2, 3)  # an output lives to the end
    assert blocks["x"].stale and blocks["t"].stale and not blocks["y"].stale
    assert {(a.name, b.name) for a, b, _ in panel.collisions} == {("x", "y"), ("y", "t")}
    assert panel.peak_nbytes == 260
    # the analysis's bound for plan #2, slot 0: y's chain (256 B) and q (32 B padded) are
    # live together in the planner's decision order (q is allocated before z is freed)
    assert panel.lower_bound == 288


def test_seed_layout_svg_parses_with_titles_hatching_and_lines():
    model, found, second = _seed()
    svg = layout_svg(model, binding_id=second, highlights=found)
    root = ET.fromstring(svg.encode("utf-8"))
    blocks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "block"]
    assert len(blocks) == 5
    titles = [g.find(f"{SVG}title").text for g in blocks]
    assert any(t.startswith("x (tensor #") and "STALE" in t for t in titles)
    hatched = [g for g in blocks if g.find(f"{SVG}rect").get("fill") == "url(#hatch)"]
    assert len(hatched) == 2  # x and t
    collisions = [g for g in root.iter(f"{SVG}g") if g.get("class") == "collision"]
    assert len(collisions) == 2
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "peak 260 B" in texts and "lower bound 288 B" in texts
    assert any(t and t.startswith("max live") for t in texts)


def test_first_binding_has_no_stale_blocks():
    model, found, second = _seed()
    lay = build_layout(model, binding_id=min(model.bindings), highlights=found)
    assert not any(b.stale for p in lay.panels for b in p.blocks)
    assert all(not p.collisions for p in lay.panels)


def test_one_panel_per_buffer_of_the_graph():
    model = build_model(two_backends(compute=False))
    lay = build_layout(model)
    kinds = sorted((model.buffers[p.buffer_id].backend, model.buffers[p.buffer_id].usage) for p in lay.panels)
    assert kinds == [("CPU", "compute"), ("SIM", "compute"), ("SIM", "weights")]
    ET.fromstring(layout_svg(model).encode("utf-8"))


def test_lower_bound_uses_both_live_gaps():
    def blk(first: int, last: int, nbytes: int) -> Block:
        return Block(0, "b", "ADD", "f32", (1,), 0, nbytes, first, last, True, "", "gallocr", 0)

    # [0, 2] and [2, 4] may share bytes (a write at the other's last read); [1, 3] may not
    assert lower_bound([blk(0, 2, 100), blk(2, 4, 100)], 5) == (100, 0)
    assert lower_bound([blk(0, 2, 100), blk(1, 3, 50)], 5) == (150, 1)
    assert lower_bound([blk(0, 2, 10)], 5, alignment=32) == (32, 0)


def test_big_graph_layout_labels_only_where_room():
    model = build_model(mlp_chain(40))
    svg = layout_svg(model)
    root = ET.fromstring(svg.encode("utf-8"))
    blocks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "block"]
    labels = [t for t in root.iter(f"{SVG}text") if t.get("pointer-events") == "none"]
    assert len(blocks) > 100 and len(labels) < len(blocks)
