"""The golden corpus as an oracle for the binding-time check: every ``both_live`` pair real
ggml produced is reported as a hazard at the same step when the case is replayed with
tracing, and cases (and steps) without such a pair give none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vizalloc.analysis.hazards import HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.casefile import CaseReplay, parse_case
from vizalloc.trace.recorder import StrictRecorder

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
CASES = sorted(p.stem for p in GOLDEN.glob("*.json"))
PAIR_KINDS = (HazardKind.STALE_OVERLAP, HazardKind.USE_AFTER_REUSE)


def golden_pairs(data: dict) -> list[set[frozenset[int]]]:
    """Per allocation step that lists overlaps: the both_live pairs (golden tensor ids)."""
    out = []
    for step in data["steps"]:
        result = step.get("result") or {}
        if "overlaps" in result or "conflicts" in result:
            pairs = result.get("overlaps") or result.get("conflicts") or []
            out.append({frozenset((p["a"], p["b"])) for p in pairs if p.get("both_live")})
    return out


def replay(name: str):
    data = json.loads((GOLDEN / f"{name}.json").read_text())
    with StrictRecorder() as rec:
        rp = CaseReplay(parse_case(data))
        rp.run()
    ids = {t.id: i for i, t in enumerate(rp.tensors)}
    model = build_model(rec.events)
    return data, ids, model, find_hazards(model)


def test_the_corpus_has_both_live_cases():
    with_pairs = [n for n in CASES if any(golden_pairs(json.loads((GOLDEN / f"{n}.json").read_text())))]
    assert {"seed_A_stale", "seq05_gallocr_fwd_bwd_stale", "vt01_view_tensor_leaf_consumed"} <= set(with_pairs)


@pytest.mark.parametrize("name", CASES)
def test_golden_both_live_pairs_are_hazards(name: str) -> None:
    data, ids, model, hazards = replay(name)
    want = golden_pairs(data)
    bindings = sorted((b for b in model.bindings.values() if b.ok), key=lambda b: b.begin_seq)
    per_binding: dict[int, set[frozenset[int]]] = {b.binding_id: set() for b in bindings}
    for h in hazards:
        if h.kind in PAIR_KINDS and h.binding_id >= 0:
            pair = frozenset((ids[h.tensor_id], ids[h.other_id]))
            for step in h.steps:
                per_binding.setdefault(step, set()).add(pair)
    got = [per_binding[b.binding_id] for b in bindings]
    all_want = set().union(*want) if want else set()
    all_got = set().union(*got) if got else set()
    assert all_got == all_want
    # step by step where the file lists overlaps for every binding
    if len(want) == len(got):
        assert got == want


@pytest.mark.parametrize("name", ["seed_A_fix_clear", "seed_A_fix_dupgraph", "seq06_gallocr_fwd_bwd_cleared"])
def test_fixed_cases_have_no_memory_hazards(name: str) -> None:
    _, _, _, hazards = replay(name)
    assert [h for h in hazards if h.kind is not HazardKind.REPLAN] == []
