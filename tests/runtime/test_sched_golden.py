"""Golden ``seed_*`` cases (real ggml_backend_sched) replayed through vizalloc's Scheduler,
and the scenario's own training loop placed byte for byte where ggml placed it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vizalloc.runtime.backends import CPUBackend
from vizalloc.casefile import CaseReplay, compare_results, parse_case
from vizalloc.runtime.memory import clear_tensor_pointers
from vizalloc.runtime.sched import Scheduler
from vizalloc.scenarios import shared_tensors as st
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
SEED_CASES = sorted(p.name for p in GOLDEN.glob("seed_*.json"))


def load(name: str):
    return parse_case(json.loads((GOLDEN / name).read_text()))


def test_seed_cases_exist():
    assert {"seed_A_stale.json", "seed_A_fix_clear.json", "seed_A_fix_dupgraph.json"} <= set(SEED_CASES)


@pytest.mark.parametrize("name", SEED_CASES)
def test_seed_case_replays_exactly_through_the_scheduler(name):
    case = load(name)
    assert case.is_sched
    with StrictRecorder() as rec:
        replay = CaseReplay(case)
        assert isinstance(replay.sched, Scheduler)
        results = replay.run()
    assert compare_results(case, results) == []
    n_alloc_steps = sum(s.action == "sched_alloc_graph" for s in case.steps)
    allocs = [e for e in rec.events if isinstance(e, ev.SchedAlloc)]
    assert len(allocs) == n_alloc_steps and all(e.ok for e in allocs)
    assert sum(isinstance(e, ev.SchedReset) for e in rec.events) >= n_alloc_steps


def _golden_positions(case, step) -> list[tuple[str, int, int | None]]:
    """(kind, position, offset in the compute buffer or None) of a step's graph."""
    out = []
    tensors = step.expected["tensors"]
    for kind, ids in (("node", step.nodes), ("leaf", step.leafs)):
        for i, tid in enumerate(ids):
            entry = tensors.get(str(tid))
            off = entry["offset"] if entry is not None and entry["buffer"] == 0 else None
            out.append((kind, i, off))
    return out


@pytest.mark.parametrize("case_name,strategy", [("seed_A_stale.json", "none"), ("seed_A_fix_clear.json", "clear")])
def test_scenario_loop_places_tensors_like_ggml(case_name, strategy):
    """The scenario builds its graphs with the runtime's own API (not from the file); its
    scheduler still puts every compute tensor at ggml's offset, step by step."""
    case = load(case_name)
    cfg = st.CONFIGS["A"]
    net = st.Net(cfg, st.init_params(cfg, np.random.default_rng(0)), CPUBackend().buffer_type)
    sched = Scheduler([CPUBackend()])
    alloc_steps = [s for s in case.steps if s.action == "sched_alloc_graph"]
    assert len(alloc_steps) == 6
    for k, step in enumerate(alloc_steps):
        graph = net.gf if k % 2 == 0 else net.gb
        assert (graph.n_nodes, graph.n_leafs) == (len(step.nodes), len(step.leafs))
        # same ops at the same positions as ggml's graph
        assert [n.op.name for n in graph.nodes] == [case.tensors[i].op.name for i in step.nodes]
        sched.reset()
        if strategy == "clear":
            for t in net.ctx.tensors():
                clear_tensor_pointers(t, by="clear")
        assert sched.alloc_graph(graph)
        ours = [(kind, i, t.offset if t.storage is not None and t.storage is not net.buf_static else None)
                for kind, ts in (("node", graph.nodes), ("leaf", graph.leafs)) for i, t in enumerate(ts)]
        assert ours == _golden_positions(case, step), f"alloc step {step.index}"
        assert sched.buffer_size(0) == step.expected["buffer_sizes"][0]
