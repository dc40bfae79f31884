"""The golden seed loop on real ggml (the ggml 0.15.3 of ggml-python 0.0.45) traced with
``vizalloc run --``, twice: as a Python program calling ggml through ggml-python, and as a C
program compiled here with the system C compiler against the ggml headers and shared
libraries that ggml-python's wheel installs (``<prefix>/include``, ``<prefix>/lib``).

``programs/seed_loop.py`` and ``programs/seed_loop.c`` train the golden ``seed_A_*`` MLP
through ``ggml_backend_sched`` with the forward and backward graphs sharing tensors (their
data differ: the numbers are each program's own). Every expectation here is read from
the golden case of its variant (tests/data/golden/seed_A_*.json, made from real ggml at the
commit whose allocator ggml-python bundles): where the allocator placed each tensor, which
pairs of tensors are live together in the same bytes, the buffer sizes, and which steps
compute wrong numbers.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, VIZALLOC

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
#: the program's --fix -> the golden case of the same loop
VARIANTS = {"none": "seed_A_stale", "clear": "seed_A_fix_clear", "dup": "seed_A_fix_dupgraph"}


def ggml_python_prefix() -> Path:
    """Where ggml-python's wheel put ggml's headers and shared libraries (its own RECORD says)."""
    files = importlib.metadata.files("ggml-python") or []
    headers = [f for f in files if str(f) == "include/ggml.h"]
    assert headers, "ggml-python's wheel installs include/ggml.h; this one does not (is ggml-python 0.0.45 installed?)"
    prefix = Path(str(headers[0].locate())).parents[1]
    assert (prefix / "lib" / "libggml.so").is_file(), f"no libggml.so beside the headers in {prefix / 'lib'}"
    return prefix


@pytest.fixture(scope="module")
def seed_loop_c(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """programs/seed_loop.c, built against the installed ggml (a missing compiler fails, as in conftest)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on PATH: install gcc or set CC"
    prefix = ggml_python_prefix()
    binary = tmp_path_factory.mktemp("seed_loop_c") / "seed_loop"
    lib = prefix / "lib"
    done = subprocess.run([cc, "-std=c11", "-O1", "-Wall", "-Wextra", str(PROGRAMS / "seed_loop.c"),
                           f"-I{prefix / 'include'}", f"-L{lib}", f"-Wl,-rpath,{lib}",
                           "-lggml", "-lggml-base", "-lggml-cpu", "-lm", "-o", str(binary)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return binary


@dataclass
class Traced:
    language: str
    fix: str
    golden: dict[str, Any]
    run: subprocess.CompletedProcess[str]
    check: subprocess.CompletedProcess[str]
    trace: Path

    @property
    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line.split(" ", 1)[1]) for line in self.run.stdout.splitlines() if line.startswith("record ")]

    @property
    def trajectory(self) -> dict[str, Any]:
        (line,) = [ln for ln in self.run.stdout.splitlines() if ln.startswith("trajectory ")]
        return json.loads(line.split(" ", 1)[1])

    @property
    def hazards(self) -> dict[str, Any]:
        return json.loads(self.check.stdout)


@pytest.fixture(scope="module", params=[(language, fix) for language in ("python", "c") for fix in sorted(VARIANTS)],
                ids=lambda p: "-".join(p))
def traced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Traced:
    language, fix = request.param
    if language == "python":
        program = [sys.executable, str(PROGRAMS / "seed_loop.py")]
    else:
        program = [str(request.getfixturevalue("seed_loop_c"))]
    out = tmp_path_factory.mktemp(f"seed_{language}_{fix}")
    trace = out / f"seed_{fix}.vztrace"
    run = subprocess.run([*VIZALLOC, "run", "-o", str(trace), "--", *program, "--fix", fix], cwd=out,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    check = subprocess.run([*VIZALLOC, "check", "--json", str(trace)], cwd=out, capture_output=True, text=True,
                           timeout=300)
    golden = json.loads((GOLDEN / f"{VARIANTS[fix]}.json").read_text())
    return Traced(language, fix, golden, run, check, trace)


def _alloc_steps(golden: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in golden["steps"] if s["action"] == "sched_alloc_graph"]


def test_every_placement_is_replayed_without_a_difference(traced: Traced) -> None:
    lib = ggml_python_prefix() / ("ggml/lib" if traced.language == "python" else "lib") / "libggml-base.so"
    assert f"ggml 0.15.3 from {lib}" in traced.run.stderr
    events = load(traced.trace).events
    # the graph allocator's 117, and every placement of ggml's tensor allocator (the weights)
    tallocr = sum(isinstance(e, ev.TensorPlaced) and e.by is ev.PlacedBy.TALLOCR for e in events)
    assert tallocr > 0
    assert f"{117 + tallocr} placements checked: 0 replay difference(s)" in traced.run.stderr, traced.run.stderr
    assert not [e for e in events if isinstance(e, ev.ReplayMismatch)]
    assert traced.hazards["counts"]["replay-mismatch"] == 0
    # stale pointers into the freed forward buffer stay in that buffer, as in the replay: no
    # tensor is attributed to memory of no ggml buffer
    assert not [e for e in events if isinstance(e, ev.BufferAllocated) and e.buft == "host memory"]


def test_the_real_allocator_placed_every_tensor_where_the_golden_case_says(traced: Traced) -> None:
    """The compute tensors each sched_alloc_graph placed (by name, its k-th binding in the
    trace) sit at the golden step's offsets, and the compute buffer grows as it did there."""
    events = load(traced.trace).events
    names = {e.tensor_id: e.name for e in events if isinstance(e, ev.TensorCreated)}
    placed: dict[int, dict[str, int]] = {}
    for e in events:
        if isinstance(e, ev.TensorPlaced) and e.by is ev.PlacedBy.GALLOCR:
            placed.setdefault(e.binding_id, {})[names[e.tensor_id]] = e.offset
    tensors = traced.golden["tensors"]
    steps = _alloc_steps(traced.golden)
    assert len(steps) == 6 and set(placed) <= set(range(6))
    for k, step in enumerate(steps):
        expected = {tensors[int(i)]["name"]: v["offset"] for i, v in step["result"]["tensors"].items()
                    if v["buffer"] == 0 and not v["kept"] and tensors[int(i)]["view_src"] is None}
        assert placed.get(k, {}) == expected, f"binding {k} (golden step {step['index']})"
    compute_buffers = [e.nbytes for e in events if isinstance(e, ev.BufferAllocated) and e.pool_id >= 0]
    golden_buffers = [b["size"] for b in traced.golden["buffer_instances"] if not b["external"]]
    assert compute_buffers == golden_buffers


def test_losses_and_updates_go_wrong_exactly_where_the_golden_case_says(traced: Traced) -> None:
    """The program checks every compute against a numpy reference of the same step with the
    golden match rule. The data are the program's own (the golden file does not carry its
    parameters or batches), so what is compared is where the numbers go wrong, the compute
    buffer at each step and the trajectory's divergence, not the values."""
    golden = traced.golden["numerics"]
    records = traced.records
    assert [(r["iteration"], r["graph"], r["match"]) for r in records] == [
        (g["iteration"], g["graph"], g["match"]) for g in golden["records"]]
    assert traced.trajectory["mismatching_records"] == golden["mismatching_records"]
    steps = traced.golden["steps"]
    assert [r["buffer_size"] for r in records] == [steps[g["alloc_step"]]["result"]["buffer_sizes"][0]
                                                  for g in golden["records"]]
    for r, g in zip(records, golden["records"]):
        # the forward pass (and the loss read after the backward one) is right in every variant
        assert r["loss_abs_diff"] <= 1e-5 * max(1.0, abs(r["loss_ref"])) and r["logits_max_abs_diff"] <= 1e-4
        if g["match"]:
            assert r["params_after_max_abs_diff"] <= 1e-5
        else:  # a wrong update, as large as the golden run's (0.05 to 0.08 there)
            assert g["params_after_max_abs_diff"] > 1e-2 and r["params_after_max_abs_diff"] > 1e-2
    ours, theirs = traced.trajectory, golden["trajectory"]

    def diverged(t: dict[str, Any]) -> list[bool]:
        return [abs(a - b) > 1e-5 * max(1.0, abs(b)) for a, b in zip(t["loss"], t["loss_reference_trajectory"])]

    assert diverged(ours) == diverged({"loss": theirs["loss"][::2],
                                       "loss_reference_trajectory": theirs["loss_reference_trajectory"][::2]})
    assert (ours["final_params_max_abs_diff_vs_reference_trajectory"] > 1e-2) == (
        theirs["final_params_max_abs_diff_vs_reference_trajectory"] > 1e-2)


def test_check_verdict(traced: Traced) -> None:
    """No fix: the stale overlaps of the golden case, pair by pair and step by step (the
    golden both_live pairs of each sched_alloc_graph are the stale-overlap hazards of that
    binding), exit code 1. The fixes: no memory hazard at all (re-plans are warnings), exit 0."""
    hazards = traced.hazards
    counts = {k: n for k, n in hazards["counts"].items() if n}
    tensors = traced.golden["tensors"]
    expected = {(k, frozenset((tensors[o["a"]]["name"], tensors[o["b"]]["name"])))
                for k, step in enumerate(_alloc_steps(traced.golden))
                for o in step["result"]["overlaps"] if o["both_live"]}
    found = {(k, frozenset((h["tensor"]["name"], h["other"]["name"])))
             for h in hazards["hazards"] if h["kind"] == "stale-overlap" for k in h["steps"]}
    assert found == expected
    # tensors a bound graph keeps in a freed buffer: the golden steps' "live": false entries
    stale = {tensors[i]["name"] for step in _alloc_steps(traced.golden)
             for i in (*step["graph"]["nodes"], *step["graph"]["leafs"])
             if not step["result"]["tensors"].get(str(i), {"live": True})["live"]}
    assert {h["tensor"]["name"] for h in hazards["hazards"] if h["kind"] == "dangling"} == stale
    if traced.fix == "none":
        assert len(expected) == 12 and len(stale) == 8  # 4 pairs at each of the 3 backward bindings
        assert traced.check.returncode == 1
    else:
        assert expected == set()
        assert set(counts) <= {"replan"}, counts
        assert traced.check.returncode == 0, traced.check.stdout


@pytest.mark.parametrize("traced", [("python", fix) for fix in sorted(VARIANTS)], indirect=True,
                         ids=lambda p: "-".join(p))
def test_vizalloc_runtime_computes_what_real_ggml_computed(traced: Traced) -> None:
    """seed_loop.py draws its data as vizalloc's own scenario does (same generator, seed 0), so
    vizalloc's model of the loop (its runtime and scheduler, no ggml) must produce the real
    process's numbers: the same losses and the same wrong updates without a fix. (The C
    program draws other data; its numbers are checked against its own reference above.)"""
    from vizalloc.scenarios import shared_tensors

    model = shared_tensors.run(traced.fix, steps=3, seed=0)
    forward = [r for r in traced.records if r["graph"] == "forward"]
    backward = [r for r in traced.records if r["graph"] == "backward"]
    assert [r["loss"] for r in forward] == pytest.approx(model.losses, abs=1e-5)
    assert [r["params_after_max_abs_diff"] for r in backward] == pytest.approx(
        [r.update_max_abs_diff for r in model.records], abs=1e-5)
    assert model.diverged() == (traced.fix == "none")


@pytest.mark.parametrize("language", ["python", "c"])
def test_with_stock_memory_the_no_fix_loop_dies_and_the_trace_keeps_what_led_there(
        language: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Without the quarantine the first backward step writes the batch into, and computes in,
    the forward buffer ggml has just freed: the golden C harness died of heap corruption there
    (seed_A_stale_realfree, in step 5). So does each program here, killed by a signal before it
    prints the backward record. The trace written up to the crash holds that step's binding with
    the golden case's stale overlaps and no replay difference."""
    golden = json.loads((GOLDEN / "seed_A_stale_realfree.json").read_text())
    assert golden["crash"]["in_progress"]["action"] == "compute"
    program = [sys.executable, str(PROGRAMS / "seed_loop.py")] if language == "python" else [
        str(request.getfixturevalue("seed_loop_c"))]
    run = subprocess.run([*VIZALLOC, "run", "-o", "t.vztrace", "--", *program, "--fix", "none", "--memory", "stock"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode > 128 and "killed by signal" in run.stderr, run.stderr
    assert [json.loads(ln.split(" ", 1)[1])["graph"] for ln in run.stdout.splitlines() if ln.startswith("record ")] == [
        "forward"]
    assert "0 replay difference(s)" in run.stderr
    check = subprocess.run([*VIZALLOC, "check", "--json", "t.vztrace"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 1
    tensors = golden["tensors"]
    expected = {(k, frozenset((tensors[o["a"]]["name"], tensors[o["b"]]["name"])))
                for k, step in enumerate(_alloc_steps(golden)) for o in step["result"]["overlaps"] if o["both_live"]}
    found = {(k, frozenset((h["tensor"]["name"], h["other"]["name"])))
             for h in json.loads(check.stdout)["hazards"] if h["kind"] == "stale-overlap" for k in h["steps"]}
    assert len(expected) == 4 and found == expected


@pytest.mark.parametrize("traced", [("python", "none")], indirect=True, ids=["python-none"])
def test_each_scheduler_compute_is_one_split_on_the_cpu_backend(traced: Traced) -> None:
    """The scheduler ran each graph as one split (one backend here): the trace has the split
    with the nodes the backend computed, in order."""
    events = load(traced.trace).events
    splits = [e for e in events if isinstance(e, ev.SchedSplit)]
    computes = [e for e in events if isinstance(e, ev.ComputeBegin)]
    assert len(splits) == len(computes) == len(_alloc_steps(traced.golden))
    assert {(s.split_index, s.backend) for s in splits} == {(0, "CPU")}
    for split in splits:
        i = events.index(split)
        begin = next(e for e in events[i:] if isinstance(e, ev.ComputeBegin))
        assert begin.backend == "CPU"
        computed = [e.tensor_id for e in events[i:] if isinstance(e, ev.NodeCompute)
                    and e.compute_id == begin.compute_id]
        assert computed and set(computed) <= set(split.nodes)


@pytest.mark.parametrize("traced", [("python", "none"), ("c", "none")], indirect=True, ids=["python-none", "c-none"])
def test_every_reset_names_the_scheduler_of_the_splits(traced: Traced) -> None:
    """ggml_backend_sched_new resets the scheduler it makes before the capture records it:
    that first reset names the same scheduler as every later reset and split (it was
    "scheduler #-1" in the timeline)."""
    events = load(traced.trace).events
    resets = [e.sched_id for e in events if isinstance(e, ev.SchedReset)]
    splits = {e.sched_id for e in events if isinstance(e, ev.SchedSplit)}
    assert len(resets) > 1 and splits == set(resets) == {0}
