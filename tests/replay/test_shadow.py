"""Shadow execution on real runs of the shared-tensor training loop."""

from __future__ import annotations

import pytest

from vizalloc.analysis.hazards import HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.errors import UsageError
from vizalloc.replay.shadow import shadow_all, shadow_compute
from vizalloc.scenarios.shared_tensors import run
from vizalloc.trace.recorder import ListRecorder


def traced(strategy: str, steps: int = 3):
    rec = ListRecorder(capture_values=True)
    result = run(strategy, steps=steps, seed=0, around_loop=lambda: rec)
    return result, build_model(rec.events)


def backward_computes(model):
    """Computes of the backward graph (the ones with optimizer steps), in order."""
    out = []
    for c in sorted(model.computes.values(), key=lambda c: c.begin_seq):
        if any(model.tensors[n.tensor_id].op == "OPT_STEP_SGD" for n in c.nodes):
            out.append(c.compute_id)
    return out


def test_none_first_corrupted_node_is_a_reader_of_a_reused_tensor():
    result, model = traced("none")
    assert result.max_abs_loss_diff > 1e-3  # the loss really diverges
    hazards = find_hazards(model)
    shadows = {s.compute_id: s for s in shadow_all(model)}
    checked = 0
    for cid in backward_computes(model):
        s = shadows[cid]
        if any("without captured values" in n for n in s.notes):
            continue  # the first backward step: the parameters' initial values were never captured
        checked += 1
        assert s.reproduces_trace, s.summary()
        assert s.first_diverging >= 0, s.summary()
        node = model.computes[cid].nodes[[n.index for n in model.computes[cid].nodes].index(s.first_diverging)]
        victims = {h.tensor_id for h in hazards if h.kind is HazardKind.USE_AFTER_REUSE and cid in h.steps}
        # the first node that computes a wrong value reads a tensor whose bytes were reused
        assert set(node.reads) & victims, (s.summary(), [model.label(v) for v in victims])
        # and the wrong value reaches a parameter update, which is what moves the next loss
        bad_updates = [name for _, name, d in s.output_diffs if d > s.tolerance]
        assert bad_updates and all(name.startswith("sgd step for") for name in bad_updates)
    assert checked >= 2


@pytest.mark.parametrize("strategy", ["clear", "dup", "static"])
def test_fixed_strategies_do_not_diverge(strategy: str) -> None:
    result, model = traced(strategy)
    assert result.max_abs_loss_diff < 1e-6
    shadows = shadow_all(model)
    faithful = [s for s in shadows if not any("without captured values" in n for n in s.notes)]
    assert len(faithful) >= 4
    for s in faithful:
        assert s.reproduces_trace, s.summary()
        assert not s.diverged, s.summary()


def test_without_captured_values_the_replay_says_so():
    rec = ListRecorder(capture_values=False)
    run("none", steps=1, seed=0, around_loop=lambda: rec)
    model = build_model(rec.events)
    cid = next(iter(model.computes))
    with pytest.raises(UsageError, match="capture_values=True"):
        shadow_compute(model, cid)


def test_summary_and_dict():
    _, model = traced("none")
    s = shadow_compute(model, backward_computes(model)[1])
    text = s.summary()
    assert "first diverging node" in text and "grad for W1" in text
    d = s.to_dict()
    assert d["first_name"] == s.first_name and len(d["node_diffs"]) == len(s.node_diffs)


def test_uncaptured_inputs_get_synthetic_values_and_the_plan_still_shows():
    """The first backward step's parameters were set before any capture; with seeded values
    in both runs the corruption by the plan still shows (and the verdict says it does not
    reproduce the recorded values)."""
    _, broken = traced("none", steps=2)
    _, fixed = traced("dup", steps=2)
    first_broken = shadow_compute(broken, backward_computes(broken)[0])
    first_fixed = shadow_compute(fixed, backward_computes(fixed)[0])
    assert not first_broken.conclusive and not first_fixed.conclusive
    assert first_broken.first_name == "grad for W1"
    assert first_fixed.first_diverging == -1
    assert "synthetic" in " ".join(first_broken.notes)
