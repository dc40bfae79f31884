"""Layout SVG: one panel per buffer, one rectangle per root, stale blocks grey, collisions red,
peak and bound lines inside their own panel, labels that never run into each other."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import re

from tests.export.scenarios import mlp_chain, seed_stale, two_backends
from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.export.findings import highlights
from vizalloc.export.layout import CHAR_WIDTH, build_layout, layout_svg
from vizalloc.export.selection import select
from vizalloc.trace.recorder import StrictRecorder

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
    # q holds [256, 260), 32 bytes with the alignment: every figure counts reserved bytes
    assert panel.figures.highest == 288 == panel.figures.size
    # the analysis's bound for plan #2, slot 0: y's chain (256 B) and q (32 B padded) are
    # live together in the planner's decision order (q is allocated before z is freed)
    assert panel.figures.lower_bound == 288
    assert panel.figures.max_live == 288 and panel.figures.max_live_step == 2


def test_seed_layout_svg_parses_with_titles_stale_blocks_collisions_and_lines():
    model, found, second = _seed()
    svg = layout_svg(model, binding_id=second, highlights=found)
    root = ET.fromstring(svg.encode("utf-8"))
    blocks = [g for g in root.iter(f"{SVG}g") if g.get("class", "").startswith("block")]
    assert len(blocks) == 5
    titles = [g.find(f"{SVG}title").text for g in blocks]
    assert any(t.startswith("x (tensor #") and "STALE" in t for t in titles)
    # stale blocks are grey; only the collisions are red
    stale = [g for g in blocks if g.find(f"{SVG}rect").get("fill") == "url(#stale)"]
    assert len(stale) == 2 and all(g.get("class") == "block stale" for g in stale)  # x and t
    assert not [g for g in blocks if g.find(f"{SVG}rect").get("fill") == "url(#hatch)"]
    collisions = [g for g in root.iter(f"{SVG}g") if g.get("class") == "collision"]
    assert len(collisions) == 2 and all(g.find(f"{SVG}rect").get("fill") == "url(#hatch)" for g in collisions)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "peak 288 B" in texts and "lower bound 288 B" in texts
    assert any(t and t.startswith("max live") for t in texts)
    assert f"drawn: binding #{second} as asked" in svg


def _panels(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == "buffer"]


def _assert_panels_sound(svg: str) -> None:
    """Every line and label of a panel inside that panel; titles without repeated words;
    no two block labels overlapping."""
    root = ET.fromstring(svg.encode("utf-8"))
    for g in _panels(root):
        frame = next(r for r in g.iter(f"{SVG}rect") if r.get("fill") == "#fafafa")
        top, height = float(frame.get("y")), float(frame.get("height"))
        for line in g.iter(f"{SVG}line"):
            if line.get("class") in ("peak", "lower-bound"):
                assert top - 0.01 <= float(line.get("y1")) <= top + height + 0.01, line.attrib
        for text in g.iter(f"{SVG}text"):
            if text.get("class") in ("peak", "lower-bound"):
                assert top <= float(text.get("y")) <= top + height, text.attrib
        title = "".join(next(t for t in g.iter(f"{SVG}text") if t.get("class") == "panel-title").itertext())
        words = title.split()
        assert all(a != b for a, b in zip(words, words[1:])), title
        boxes = []
        for text in g.iter(f"{SVG}text"):
            if text.get("pointer-events") == "none":
                x, y = float(text.get("x")), float(text.get("y"))
                boxes.append((x, x + len(text.text) * CHAR_WIDTH, y - 9, y + 2, text.text))
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not (a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]), (a, b)
        # the step axis: "in", steps, "out", centred on their columns, none running into the next
        steps = [(float(t.get("x")), t.text) for t in g.iter(f"{SVG}text") if t.get("class") == "step"]
        assert steps[0][1] == "in" and steps[-1][1] == "out", steps
        for (xa, a), (xb, b) in zip(steps, steps[1:]):
            assert xb - xa >= (len(a) + len(b)) * CHAR_WIDTH / 2 + 2, (a, b, xb - xa)


def test_seed_layout_panels_are_sound():
    model, found, second = _seed()
    for b in model.bindings:
        _assert_panels_sound(layout_svg(model, binding_id=b, highlights=found))


def test_a_freed_buffer_says_so_and_gets_no_lower_bound():
    """The demo loop with no fix: the backward graph outgrows the forward buffer, which is
    freed; the stale forward tensors stay in it (dangling). Its panel says FREED, draws no
    lower bound (the backward plan put nothing there), and every figure fits its buffer."""
    from vizalloc.scenarios.shared_tensors import run

    rec = StrictRecorder()
    run("none", steps=1, around_loop=lambda: rec)
    model = build_model(rec.events)
    found = highlights(find_hazards(model))
    backward = sorted(model.bindings)[1]
    lay = build_layout(model, binding_id=backward, highlights=found)
    by_id = {p.buffer_id: p for p in lay.panels}
    freed = [p for p in lay.panels if p.figures.freed]
    assert len(freed) == 1 and freed[0].figures.lower_bound is None
    assert all(b.stale.startswith("dangling") for b in freed[0].blocks)
    assert freed[0].collisions   # the real collisions, drawn over the merely dangling bytes
    for p in by_id.values():
        assert p.figures.max_live <= p.figures.highest <= p.figures.size
    svg = layout_svg(model, binding_id=backward, highlights=found)
    assert ">FREED<" in svg and "every tensor here dangles" in svg
    assert svg.count('class="lower-bound"') == 2   # one line and its label, in the plan's buffer only
    _assert_panels_sound(svg)


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
    assert sorted(p.title.split(" ", 2)[2] for p in lay.panels) == ["CPU compute 128 B", "SIM compute 256 B",
                                                                    "SIM weights 256 B"]
    # the weights buffer was not placed by a plan: no lower bound (not "0 B")
    weights = next(p for p in lay.panels if "weights" in p.title)
    assert weights.figures.lower_bound is None
    svg = layout_svg(model)
    assert "lower bound 0 B" not in svg and "no lower bound: plan #" in svg
    _assert_panels_sound(svg)


def test_without_findings_the_most_split_binding_is_drawn_and_named():
    """A trace without hazards: the transformer layer split between SIM and the CPU (12
    splits), then the same layer on the CPU alone. The picture is of the split run, and
    says why it was chosen."""
    from vizalloc.scenarios import transformer_block as tb

    with StrictRecorder() as rec:
        tb.run(tb.BlockConfig(d_model=8, n_head=2, d_ff=16, n_tokens=4))
    model = build_model(rec.events)
    assert not [h for h in find_hazards(model) if h.kind.value != "replan"]
    assert len(model.bindings) == 2
    split_run, cpu_only = sorted(model.bindings)   # the SIM+CPU run comes first
    sel = select(model)
    assert sel.binding_id == split_run and "most scheduler splits" in sel.reason
    assert select(model, binding_id=cpu_only).reason == f"binding #{cpu_only} as asked"
    svg = layout_svg(model)
    assert re.search(r"drawn: no finding; the binding with the most scheduler splits \(\d+\)", svg)
    backends = {model.buffers[p.buffer_id].backend for p in build_layout(model).panels}
    assert backends == {"SIM", "CPU"}


def test_a_binding_that_reuses_a_plan_made_for_another_graph_says_so():
    """ggml applies a plan by node position: after reserve(worst case), a smaller graph of
    the same structure is bound with the worst case's offsets (llama.cpp's prompt and token
    graphs). Its panel has no lower bound of its own, and says whose plan it reused instead
    of "placed no tensor here"; a big buffer's offsets read in MiB."""
    from vizalloc.runtime import BufferType, Context, F32, Graph, GraphAllocator, ops, set_input, set_output

    def chain(rows: int) -> Graph:
        ctx = Context(no_alloc=True)
        x = ctx.new_tensor_2d(F32, 4096, rows, "x")
        set_input(x)
        y = ops.relu(ctx, ops.scale(ctx, x, 2.0).set_name("s")).set_name("y")
        set_output(y)
        g = Graph()
        g.build_forward_expand(y)
        return g

    with StrictRecorder() as rec:
        ga = GraphAllocator([BufferType("CPU", alignment=32)])
        ga.reserve(chain(512))
        assert ga.alloc_graph(chain(7))
    model = build_model(rec.events)
    (binding,) = model.bindings
    (plan,) = model.plans.values()
    svg = layout_svg(model, binding_id=binding)
    assert f"no lower bound: this binding reused plan #{plan.plan_id}, made for graph #{plan.graph_id}" in svg
    assert "placed no tensor here" not in svg
    root = ET.fromstring(svg.encode("utf-8"))
    offsets = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "offset"]
    assert offsets[0] == "0 B" and offsets[-1] == "8.0 MiB", offsets
    _assert_panels_sound(svg)


def test_big_graph_layout_labels_only_where_room():
    model = build_model(mlp_chain(40))
    svg = layout_svg(model)
    root = ET.fromstring(svg.encode("utf-8"))
    blocks = [g for g in root.iter(f"{SVG}g") if g.get("class", "").startswith("block")]
    labels = [t for t in root.iter(f"{SVG}text") if t.get("pointer-events") == "none"]
    assert len(blocks) > 100 and len(labels) < len(blocks)
    _assert_panels_sound(svg)
