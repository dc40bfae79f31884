"""Every golden case (real ggml results) replays exactly through ``vizalloc plan --check``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vizalloc import cli
from vizalloc.casefile import compare_results, parse_case, replay_case

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
CASES = sorted(GOLDEN.glob("*.json"))


def test_corpus_is_present() -> None:
    assert len(CASES) == 60


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden_case_replays_exactly(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["plan", str(path), "--check"])
    out = capsys.readouterr().out
    assert rc == 0, out


@pytest.mark.parametrize("path", [p for p in CASES if p.stem.startswith("seed_")], ids=lambda p: p.stem)
def test_scheduler_cases_also_replay_through_plain_gallocr(path: Path) -> None:
    # semantics §6.4: with one CPU backend the scheduler adds nothing to the plan
    case = parse_case(json.loads(path.read_text()))
    assert compare_results(case, replay_case(case, use_scheduler=False)) == []


def test_check_reports_every_difference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((GOLDEN / "ew01_unary_chain_inplace.json").read_text())
    res = data["steps"][0]["result"]
    res["buffer_sizes"] = [4096]
    res["tensors"]["3"]["offset"] = 64
    bad = tmp_path / "case.json"
    bad.write_text(json.dumps(data))
    rc = cli.main(["plan", str(bad), "--check"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "buffer_sizes expected [4096], got [2048]" in out
    assert "tensor 3 'relu' offset expected 64, got 0" in out


def test_json_output_has_the_result_shape(capsys: pytest.CaptureFixture[str]) -> None:
    path = GOLDEN / "mb03_same_buft_twice.json"
    assert cli.main(["plan", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = json.loads(path.read_text())["steps"]
    assert [s["result"]["plan"] for s in got if "plan" in s["result"]] == [want[0]["result"]["plan"]]
    assert got[1]["result"]["tensors"] == want[1]["result"]["tensors"]


def test_table_output_escapes_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((GOLDEN / "ew02_parent_used_twice.json").read_text())
    data["tensors"][2]["name"] = "[red]x[/red]"
    p = tmp_path / "c.json"
    p.write_text(json.dumps(data))
    assert cli.main(["plan", str(p)]) == 0
    assert "[red]x[/red]" in capsys.readouterr().out


@pytest.mark.parametrize("use_scheduler", [True, False])
def test_reclaim_turns_the_stale_run_into_the_cleared_one(use_scheduler: bool) -> None:
    # seed_A_stale with GraphAllocator(reclaim=True) places every tensor where real ggml
    # placed it in seed_A_fix_clear (pointers cleared by hand after each reset), with no
    # tensors live at the same time on the same bytes
    stale = parse_case(json.loads((GOLDEN / "seed_A_stale.json").read_text()))
    clear = parse_case(json.loads((GOLDEN / "seed_A_fix_clear.json").read_text()))
    got = [r for s, r in zip(stale.steps, replay_case(stale, reclaim=True, use_scheduler=use_scheduler))
           if s.action == "sched_alloc_graph"]
    want = [s.expected for s in clear.steps if s.action == "sched_alloc_graph"]
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        assert w is not None
        assert g["buffer_sizes"] == w["buffer_sizes"]
        assert g["conflicting_pairs"] == w["conflicting_pairs"] == 0
        # (tensors outside the step's graph keep their old pointers here; clearing wiped them)
        where = {k: (v["buffer"], v["offset"]) for k, v in g["tensors"].items() if k in w["tensors"]}
        assert where == {k: (v["buffer"], v["offset"]) for k, v in w["tensors"].items()}
    # and without the fix the same replay has live overlaps
    plain = [r for s, r in zip(stale.steps, replay_case(stale, use_scheduler=use_scheduler))
             if s.action == "sched_alloc_graph"]
    assert sum(r["conflicting_pairs"] for r in plain) == 12
