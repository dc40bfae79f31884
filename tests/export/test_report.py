"""JSON report: every key docs/report-schema.md promises, with values that match the trace."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.export.scenarios import seed_stale, two_backends
from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.export.report import SCHEMA, report_dict, report_json

SCHEMA_DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"


def _report(events):
    model = build_model(events)
    hazards = find_hazards(model)
    return model, hazards, json.loads(report_json(model, hazards))


def test_top_level_and_summary():
    model, hazards, rep = _report(seed_stale())
    assert rep["schema"] == SCHEMA == "vizalloc.report/1"
    assert list(rep) == ["schema", "trace", "summary", "hazards", "plans", "bindings", "buffers"]
    assert rep["summary"]["n_hazards"] == len(hazards) == len(rep["hazards"])
    assert rep["summary"]["by_kind"] == {"replan": 1, "stale-overlap": 2}
    assert rep["trace"]["n_events"] == model.n_events and rep["trace"]["header"] is None


def test_plans_carry_quality_against_the_lower_bound():
    _, _, rep = _report(seed_stale())
    first, second = rep["plans"]
    assert first["chunk_nbytes"] == [[288]] and first["n_inplace"] == 2
    assert second["n_externals"] == 2 and second["refused"] == {"external": 1}
    assert [r["cause"] for r in second["replans"]] == ["n_leafs"]
    (q,) = first["quality"]
    assert {k: q[k] for k in ("slot", "plan_nbytes", "lower_bound_nbytes", "greedy_nbytes", "ratio",
                              "n_blocks", "overlapping_pairs")} == {
        "slot": 0, "plan_nbytes": 288, "lower_bound_nbytes": 288, "greedy_nbytes": 288, "ratio": 1.0,
        "n_blocks": 2, "overlapping_pairs": 0}
    assert [b["names"] for b in q["live_at_peak"]] == [["x", "t", "u"], ["s"]]


def test_bindings_and_buffers():
    model, _, rep = _report(two_backends())
    assert [b["binding_id"] for b in rep["bindings"]] == sorted(model.bindings)
    assert all(b["ok"] and b["sched_id"] >= 0 for b in rep["bindings"])
    usages = sorted((b["backend"], b["usage"]) for b in rep["buffers"])
    assert usages == [("CPU", "compute"), ("SIM", "compute"), ("SIM", "weights")]
    assert all(b["freed_seq"] is None for b in rep["buffers"])


def test_every_documented_key_is_present():
    doc = SCHEMA_DOC.read_text(encoding="utf-8")
    model = build_model(seed_stale())
    rep = report_dict(model, find_hazards(model))

    def table_keys(section: str) -> set[str]:
        body = doc.split(f"## `{section}`", 1)[1].split("\n## ", 1)[0].split("\n`Quality`", 1)[0]
        keys: set[str] = set()
        for row in re.findall(r"^\| (`[^|]+`) \|", body, re.M):
            keys |= set(re.findall(r"`([a-z_]+)`", row))
        return keys

    assert table_keys("trace") <= set(rep["trace"])
    assert table_keys("summary") <= set(rep["summary"])
    assert table_keys("hazards[]") <= set(rep["hazards"][1])
    assert table_keys("plans[]") <= set(rep["plans"][0])
    quality = doc.split("\n`Quality`", 1)[1].split("\n## ", 1)[0]
    for row in re.findall(r"^\| (`[^|]+`) \|", quality, re.M):
        assert set(re.findall(r"`([a-z_]+)`", row)) <= set(rep["plans"][0]["quality"][0])
    for key in re.findall(r"`([a-z_]+)`", doc.split("## `bindings[]`", 1)[1].split("\n## ", 1)[0]):
        assert key in rep["bindings"][0], key
    for key in re.findall(r"`([a-z_]+)`", doc.split("## `buffers[]`", 1)[1].split("\n## ", 1)[0]):
        if key not in ("any", "weights", "compute"):
            assert key in rep["buffers"][0], key
