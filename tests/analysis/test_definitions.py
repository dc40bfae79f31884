"""One definition per hazard kind: the README's table and every report state the same words,
and the reports of the demo satisfy the stale-overlap definition they state."""

from __future__ import annotations

import re
from pathlib import Path

from vizalloc.analysis import liveness
from vizalloc.analysis.hazards import DEFINITIONS, HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.scenarios.shared_tensors import run
from vizalloc.trace.recorder import StrictRecorder

from tests.analysis.test_hazards import stale_scenario

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_kind_has_a_definition_and_the_readme_table_says_it_word_for_word() -> None:
    assert set(DEFINITIONS) == set(HazardKind)
    section = README.read_text(encoding="utf-8").split("## Hazards\n", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| ([a-z-]+) \| (.+) \|$", section, re.M))
    rows.pop("kind", None)
    assert rows == {k.value: d for k, d in DEFINITIONS.items()}


def test_every_report_states_its_kinds_definition() -> None:
    tb, _ = stale_scenario()
    hazards = find_hazards(build_model(tb.events))
    assert {h.kind for h in hazards} >= {HazardKind.STALE_OVERLAP, HazardKind.USE_AFTER_REUSE, HazardKind.REPLAN}
    for h in hazards:
        lines = h.report().splitlines()
        assert lines[-2] == f"{h.kind.value}: {DEFINITIONS[h.kind]}"


def test_demo_stale_overlaps_satisfy_the_definition_they_state() -> None:
    """The pairs the user saw (both tensors from binding #0) are what the definition says:
    two roots of the bound graph, sharing the reported bytes, both live in it, at least one
    stale since an earlier binding; here both are, packed together by binding #0's plan."""
    rec = StrictRecorder()
    run("none", steps=2, seed=0, around_loop=lambda: rec)
    model = build_model(rec.events)
    stale = [h for h in find_hazards(model) if h.kind is HazardKind.STALE_OVERLAP]
    assert stale
    for h in stale:
        b = model.bindings[h.binding_id]
        assert b.graph is not None
        seq = b.end_seq
        spans = liveness.graph_spans(model, b.graph)
        assert h.tensor_id in spans and h.other_id in spans  # two memory roots of the bound graph
        px, py = model.placement_at(h.tensor_id, seq), model.placement_at(h.other_id, seq)
        assert px is not None and py is not None and px.buffer_id == py.buffer_id == h.buffer_id
        (lo, hi), = h.ranges
        assert (lo, hi) == (max(px.offset, py.offset), min(px.end, py.end)) and lo < hi  # they share these bytes
        assert liveness.both_live(spans[h.tensor_id], spans[h.other_id])  # both live in this graph
        assert px.stale_seq <= seq or py.stale_seq <= seq  # at least one stale
        assert px.binding_id < h.binding_id and py.binding_id < h.binding_id
        # the demo's case: both stale, from the same earlier binding, and the text says so
        assert px.stale_seq <= seq and py.stale_seq <= seq and px.binding_id == py.binding_id
        assert (f"both keep their placements from binding #{px.binding_id}, whose plan packed them together"
                in h.detail)
        assert f"stale-overlap: {DEFINITIONS[HazardKind.STALE_OVERLAP]}" in h.report()


def test_a_new_tensor_placed_over_a_stale_one_is_worded_as_such() -> None:
    tb, ids = stale_scenario()
    model = build_model(tb.events)
    pair = next(h for h in find_hazards(model) if h.kind is HazardKind.STALE_OVERLAP
                and {h.tensor_id, h.other_id} == {ids["x"], ids["y"]})
    assert pair.detail.startswith("'x' keeps its placement from binding #1 (stale since its allocator was "
                                  "re-planned at seq ")
    assert f"'y' was placed over it by this binding (#{pair.binding_id}), whose plan never saw its bytes" \
        in pair.detail
