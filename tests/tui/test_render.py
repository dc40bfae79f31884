"""The TUI's pure parts, without an App: pre-scan, tensor rows, map blocks, grid drawing."""

from __future__ import annotations

from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.trace.value import Trace
from vizalloc.tui.graphrows import graph_rows
from vizalloc.tui.history import history_rows
from vizalloc.tui.mapdata import Block, Panel, build_binding_map, default_panel, find_overlaps
from vizalloc.tui.render import (
    COLLISION_CHAR, FREE_CHAR, STALE_CHAR, MapGeometry, cell_blocks, fit_bytes_per_row, fit_step_width, gutter,
    header_row, map_row,
)
from vizalloc.tui.steps import Prescan, StepKind, count_hazards
from vizalloc.tui.tensorrows import TensorState, build_tensor_rows

from tests.tui.fixture_trace import G1, G2, G3, H, LOSS, NAMES, W, X, Y, YV


def _block(tid: int, offset: int, nbytes: int, first: int, last: int, stale: str = "") -> Block:
    return Block(tid, f"t{tid}", "ADD", "f32", "[4]", offset, nbytes, first, last, stale, "gallocr", 0, not stale)


def test_prescan_finds_every_step_kind(trace: Trace) -> None:
    scan = Prescan()
    half = len(trace.events) // 2
    scan.feed(trace.events[:half])
    scan.feed(trace.events[half:])
    kinds = [s.kind for s in scan.steps]
    assert kinds == [StepKind.RESET, StepKind.REPLAN, StepKind.PLAN, StepKind.BINDING, StepKind.COMPUTE,
                     StepKind.RESET, StepKind.REPLAN, StepKind.PLAN, StepKind.BINDING, StepKind.COMPUTE]
    plan1 = scan.steps[7]
    assert plan1.chunk_sizes == ((384,),) and plan1.binding_id == 1 and plan1.n_nodes == 7
    binding0 = scan.steps[3]
    assert binding0.graph_id == 1 and binding0.n_nodes == 3 and binding0.buffer_bytes == 384
    assert scan.steps[9].binding_id == 1 and scan.steps[9].wall_ns == 7000
    assert scan.n_events == len(trace.events)


def test_hazards_counted_at_their_steps(trace: Trace) -> None:
    scan = Prescan()
    scan.feed(trace.events)
    hazards = find_hazards(build_model(trace))
    count_hazards(scan.steps, hazards)
    by_kind = {(s.kind, s.step_id): s.n_hazards for s in scan.steps}
    assert by_kind[(StepKind.BINDING, 1)] == 3       # three stale-overlaps at binding #1
    assert by_kind[(StepKind.COMPUTE, 1)] == 2       # two use-after-reuse in compute #1
    assert by_kind[(StepKind.BINDING, 0)] == 0
    assert sum(s.n_hazards for s in scan.steps) == len(hazards)


def test_tensor_states(trace: Trace) -> None:
    rows = build_tensor_rows(build_model(trace))
    state = {rows.ids[i]: rows.states[i] for i in range(len(rows))}
    assert state[W] is TensorState.EXTERNAL
    assert state[X] is TensorState.STALE and state[H] is TensorState.STALE
    assert state[YV] is TensorState.VIEW
    assert state[G1] is TensorState.FRESH
    assert rows.names[rows.row_of[LOSS]] == NAMES[LOSS]
    # first/last use are compute seqs
    r = rows.row_of[X]
    assert 0 < rows.first_use[r] < rows.last_use[r]


def test_binding_map_marks_stale_and_collisions(trace: Trace) -> None:
    bmap = build_binding_map(build_model(trace), 1)
    panel = bmap.panel(1)
    assert panel is not None and panel.n_steps == 7
    stale = {b.tensor_id for b in panel.blocks if b.stale}
    assert {X, H, LOSS} <= stale and G1 not in stale
    pairs = {frozenset((panel.blocks[i].tensor_id, panel.blocks[j].tensor_id)) for i, j in panel.overlaps}
    # the same pairs as the analysis's stale-overlaps: x under blk.0.grad_y, h under y (in place on h in
    # the forward graph, both live in the backward one), loss under the wide-named gradW
    assert pairs == {frozenset((X, G1)), frozenset((H, Y)), frozenset((LOSS, G3))}
    assert default_panel(bmap).buffer_id == 1


def test_find_overlaps_uses_both_live() -> None:
    blocks = [_block(1, 0, 64, -1, 5), _block(2, 32, 64, 3, 6), _block(3, 0, 32, 5, 7), _block(4, 200, 8, 0, 9)]
    blocks.sort(key=lambda b: (b.offset, b.first, b.tensor_id))
    found = {frozenset((blocks[i].tensor_id, blocks[j].tensor_id)) for i, j in find_overlaps(blocks)}
    # 1 and 2 share [32, 64) while both live; 1 ends its reads at 5 where 3 starts: not both live
    assert found == {frozenset((1, 2))}


def test_geometry() -> None:
    g = MapGeometry(n_steps=10, bytes_per_row=32, step_width=2)
    assert g.n_cols == 24 and g.steps_of(0) == (-1, -1) and g.steps_of(3) == (0, 0) and g.col_of(9) == 20
    folded = MapGeometry(n_steps=10, bytes_per_row=32, steps_per_col=4)
    assert folded.n_cols == 3 and folded.steps_of(0) == (-1, 2) and folded.steps_of(2) == (7, 10)
    assert folded.zoom_steps(True).steps_per_col == 2 and g.zoom_steps(False).step_width == 1
    assert fit_bytes_per_row(1664, 40) == 64 and fit_bytes_per_row(1, 40) == 1
    assert fit_step_width(23, 100).step_width == 4 and fit_step_width(400, 100).steps_per_col == 8
    assert header_row(MapGeometry(3, 1, step_width=3), 0, 15) == "in 0  1  2  out"


def test_gutter_offsets_read_in_mib_when_rows_are_mib() -> None:
    # llama.cpp's 94.3 MiB compute buffer in 4 MiB rows: "20.0 MiB", not "20971520"
    big = MapGeometry(n_steps=820, bytes_per_row=4 << 20)
    assert gutter(big, 5, 98848800) == "  20.0 MiB\u2502"
    assert gutter(big, 30, 98848800).strip() == "\u2502"   # past the buffer's top: blank
    small = MapGeometry(n_steps=23, bytes_per_row=64)
    assert gutter(small, 10, 1664) == "       640\u2502"


def test_map_row_draws_blocks_stale_collisions_and_free_bytes() -> None:
    panel = Panel(1, "buffer #1", 256, 4, [_block(1, 0, 64, -1, 3, stale="stale"), _block(2, 0, 64, 1, 2),
                                           _block(3, 128, 64, 0, 1)])
    panel.overlaps = find_overlaps(panel.blocks)
    g = MapGeometry(4, 64)
    row0 = "".join(text for text, _ in map_row(panel, g, 0, 0, g.n_cols))
    # in, 0: only the stale block 1 (its label "t1" on its first row); 1, 2: collision; 3: stale; out: free
    assert row0 == "t1" + COLLISION_CHAR * 2 + STALE_CHAR + FREE_CHAR
    row1 = "".join(text for text, _ in map_row(panel, g, 1, 0, g.n_cols))
    assert row1 == FREE_CHAR * 6
    row2 = map_row(panel, g, 2, 0, g.n_cols, selected=frozenset({3}), cursor=(2, 5))
    text2 = "".join(t for t, _ in row2)
    assert text2[1:3] == "t3" and text2[5] == FREE_CHAR
    assert [style for _, style in row2][-1].endswith("reverse")
    assert [b.tensor_id for b in cell_blocks(panel, g, 0, 2)] == [1, 2]


def test_map_row_labels_are_inert() -> None:
    b = Block(7, "\x1b[31m[bold]", "ADD", "f32", "[4]", 0, 64, 0, 20, "", "gallocr", 0, True)
    panel = Panel(1, "b", 64, 20, [b])
    text = "".join(t for t, _ in map_row(panel, MapGeometry(20, 64), 0, 0, 22))
    assert "\x1b" not in text and text[1:].startswith("\\x1b[31m[bold")


def test_graph_rows_fold_layers(trace: Trace) -> None:
    m = build_model(trace)
    snap = m.bindings[1].graph
    assert snap is not None
    rows = graph_rows(nodes=snap.nodes, leafs=snap.leafs, info=m.tensors.get, inplace={Y: H})
    layer = [r for r in rows if r.kind == "layer"]
    assert len(layer) == 1 and layer[0].group == "blk.0" and layer[0].members == 2
    assert not any(r.tensor_id in (G1, G2) for r in rows)
    open_rows = graph_rows(nodes=snap.nodes, leafs=snap.leafs, info=m.tensors.get, inplace={Y: H},
                           expanded=frozenset({"blk.0"}))
    assert {G1, G2} <= {r.tensor_id for r in open_rows}
    y = next(r for r in rows if r.tensor_id == Y)
    assert "in-place on [bold]h[/bold]" in y.relation
    view = next(r for r in rows if r.tensor_id == YV)
    assert view.relation.startswith("view of \\x1b[31my")


def test_history_rows(trace: Trace) -> None:
    rows = history_rows(build_model(trace), X)
    kinds = [r.kind for r in rows]
    assert kinds[0] == "created" and "placed" in kinds and "read" in kinds and "set" in kinds
    placed = next(r for r in rows if r.kind == "placed")
    assert "buffer #1 [0, 128) by gallocr in binding #0" in placed.what and placed.where == "train.py:31 in step"
    stale = next(r for r in rows if r.kind == "stale")
    assert stale.seq == 45 and "went stale: reset" in stale.what
    external = [r for r in rows if r.kind == "external"]
    assert len(external) == 1 and "plan #1" in external[0].what and "while its placement was stale" in external[0].what
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
