"""Shadow execution on real runs of the shared-tensor training loop."""

from __future__ import annotations

import pytest

from vizalloc.analysis.hazards import HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.errors import UsageError
from vizalloc.replay.shadow import shadow_all, shadow_compute
from vizalloc.scenarios.shared_tensors import run
from vizalloc.trace.recorder import StrictRecorder


def traced(strategy: str, steps: int = 3):
    rec = StrictRecorder(capture_values=True)
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
        checked += 1
        assert s.conclusive and s.reproduces_trace and not s.synthetic_inputs, s.summary()
        assert s.first_diverging >= 0, s.summary()
        node = model.computes[cid].nodes[[n.index for n in model.computes[cid].nodes].index(s.first_diverging)]
        victims = {h.tensor_id for h in hazards if h.kind is HazardKind.USE_AFTER_REUSE and cid in h.steps}
        # the first node that computes a wrong value reads a tensor whose bytes were reused
        assert set(node.reads) & victims, (s.summary(), [model.label(v) for v in victims])
        # and the wrong value reaches a parameter update, which is what moves the next loss
        bad_updates = [name for _, name, d in s.output_diffs if d > s.tolerance]
        assert bad_updates and all(name.startswith("sgd step for") for name in bad_updates)
    assert checked == 3  # the first backward step too: the parameters are captured at its start


@pytest.mark.parametrize("strategy", ["clear", "dup", "static"])
def test_fixed_strategies_do_not_diverge(strategy: str) -> None:
    result, model = traced(strategy)
    assert result.max_abs_loss_diff < 1e-6
    shadows = shadow_all(model)
    assert len(shadows) == 6
    for s in shadows:
        assert s.conclusive, s.summary()
        assert not s.diverged, s.summary()


def test_without_captured_values_the_replay_says_so():
    rec = StrictRecorder(capture_values=False)
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


def demo_trace(strategy: str, steps: int = 2):
    """The demo's run traced through the public API, values captured."""
    from vizalloc.trace import api

    sessions = []

    def around():
        sessions.append(api.trace(capture_values=True))
        return sessions[-1]

    run(strategy, steps=steps, seed=0, around_loop=around)
    return build_model(sessions[0].trace)


def test_parameters_are_captured_at_compute_begin():
    model = demo_trace("none", steps=1)
    cid = backward_computes(model)[0]
    begin = {model.label(s.tensor_id) for s in model.snapshots if s.compute_id == cid and s.when == "begin"}
    # op-NONE PARAM nodes are nodes of the graph, not leafs: captured like the inputs
    assert {"W1", "b1", "W2", "b2", "x", "labels"} <= begin
    params = [t for t in model.computes[cid].graph.nodes if model.tensors[t].flags & 4]
    assert {model.label(t) for t in params} == {"W1", "b1", "W2", "b2"}


def test_demo_none_first_compute_after_setting_parameters_replays_conclusively():
    model = demo_trace("none")
    hazards = find_hazards(model)
    first_bwd = backward_computes(model)[0]
    s = shadow_compute(model, first_bwd)
    assert s.conclusive and not s.synthetic_inputs, s.summary()
    assert "INCONCLUSIVE" not in s.summary() and "synthetic" not in " ".join(s.notes)
    assert s.first_name == "grad for W1"
    node = next(n for n in model.computes[first_bwd].nodes if n.index == s.first_diverging)
    assert node.tensor_id == s.first_tensor_id
    victims = {h.tensor_id for h in hazards if h.kind is HazardKind.USE_AFTER_REUSE and first_bwd in h.steps}
    assert set(node.reads) & victims
    # every node before it agrees between private memory and the recorded placements
    assert all(d.max_abs_diff <= s.tolerance for d in s.node_diffs if d.index < s.first_diverging)
    # the demo's fixed strategy replays conclusively with no divergence
    fixed = demo_trace("dup")
    f = shadow_compute(fixed, backward_computes(fixed)[0])
    assert f.conclusive and f.first_diverging == -1, f.summary()


def test_traces_without_parameter_captures_fall_back_and_say_so():
    """A trace recorded before op-NONE nodes were captured: the parameters' values are unknown,
    the replay uses seeded values in both runs (the plan's corruption still shows) and is
    never conclusive."""
    from vizalloc.trace import events as ev

    model = demo_trace("none")
    cid = backward_computes(model)[0]
    params = {t for t in model.computes[cid].graph.nodes if model.tensors[t].flags & 4}
    old = [e for e in model.events if not (isinstance(e, ev.ValueSnapshot) and e.tensor_id in params)]
    s = shadow_compute(build_model(old), cid)
    assert set(s.synthetic_inputs) == params and not s.conclusive
    assert "INCONCLUSIVE" in s.summary() and s.to_dict()["conclusive"] is False
    assert s.first_name == "grad for W1"
