"""``plan_entries_not_applied``: when ``alloc_graph`` binds a graph with a plan made for
another graph of the same counts, the entries that reach an already-bound tensor with
another address are listed (corpus README, "Format additions") and ``--check`` compares them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vizalloc import cli
from vizalloc.casefile import compare_results, parse_case, replay_case


def _tensor(i: int, name: str, op: str = "NONE", src: list[int] | None = None, flags_raw: int = 0,
            unary: str | None = None) -> dict[str, Any]:
    return {"id": i, "name": name, "type": "f32", "ne": [16, 1, 1, 1], "nb": [4, 64, 64, 64], "op": op,
            "unary_op": unary, "src": src or [], "view_src": None, "view_offs": 0, "flags": [],
            "flags_raw": flags_raw, "external": False}


def reused_plan_case() -> dict[str, Any]:
    """reserve(G: n1 = x + y, n2 = relu(n1)) then alloc_graph(G': m1 = p + p, m2 = relu(m1)):
    G' has G's counts and sizes, so G's plan is reused; its entry for m1's second source
    (y's place) reaches p, which the leaf entry already bound at x's place."""
    tensors = [
        _tensor(0, "x", flags_raw=1), _tensor(1, "y", flags_raw=1),
        _tensor(2, "n1", "ADD", [0, 1], 16), _tensor(3, "n2", "UNARY", [2], 16, "RELU"),
        _tensor(4, "p", flags_raw=1), _tensor(5, "q", flags_raw=1),
        _tensor(6, "m1", "ADD", [4, 4], 16), _tensor(7, "m2", "UNARY", [6], 16, "RELU"),
    ]
    return {
        "format": "vizalloc-golden/1", "name": "reused_plan", "description": "a plan reused for another graph",
        "driver": "ggml_gallocr", "buffer_types": [{"name": "CPU", "alignment": 32, "max_size": None}],
        "buffer_instances": [], "tensors": tensors,
        "steps": [
            {"index": 0, "action": "reserve", "graph": {"nodes": [2, 3], "leafs": [0, 1]},
             "node_buffer_ids": None, "leaf_buffer_ids": None},
            {"index": 1, "action": "alloc_graph", "graph": {"nodes": [6, 7], "leafs": [4, 5]},
             "node_buffer_ids": None, "leaf_buffer_ids": None},
        ],
    }


def test_entries_not_applied_are_listed() -> None:
    case = parse_case(reused_plan_case())
    results = replay_case(case)
    plan = results[0]["plan"]
    x_rec, y_rec = plan["leafs"]
    assert x_rec != y_rec
    assert results[1]["plan_entries_not_applied"] == [
        {"tensor": 4, "entry": "nodes[0].src[1]", "planned": y_rec, "bound_by": "leafs[0]", "bound": x_rec},
    ]
    # p really sits where x was planned
    assert results[1]["tensors"]["4"]["offset"] == x_rec[2]


def test_a_plan_made_for_the_graph_applies_every_entry() -> None:
    data = reused_plan_case()
    data["steps"][1]["graph"] = data["steps"][0]["graph"]
    results = replay_case(parse_case(data))
    assert results[1]["plan_entries_not_applied"] == []


def test_check_compares_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = reused_plan_case()
    got = replay_case(parse_case(data))
    data["steps"][1]["result"] = {"plan_entries_not_applied": got[1]["plan_entries_not_applied"]}
    path = tmp_path / "case.json"
    path.write_text(json.dumps(data))
    assert cli.main(["plan", str(path), "--check"]) == 0
    assert "all 1 recorded step(s) match" in capsys.readouterr().out
    data["steps"][1]["result"] = {"plan_entries_not_applied": []}
    path.write_text(json.dumps(data))
    assert cli.main(["plan", str(path), "--check"]) == 1
    out = capsys.readouterr().out
    assert "step 1 (alloc_graph): plan_entries_not_applied expected [], got [{" in out
    assert compare_results(parse_case(data), got) != []


def test_every_golden_alloc_step_has_the_field_empty() -> None:
    # the corpus never reuses a plan for a different graph: nothing is left unapplied
    golden = Path(__file__).resolve().parents[1] / "data" / "golden"
    seen = 0
    for path in sorted(golden.glob("*.json")):
        case = parse_case(path.read_bytes())
        for step, res in zip(case.steps, replay_case(case)):
            if step.action == "alloc_graph":
                seen += 1
                assert res["plan_entries_not_applied"] == [], (path.name, step.index)
    assert seen > 50
