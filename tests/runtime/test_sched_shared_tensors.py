"""The shared-tensor training loop through the scheduler: every fix strategy against the
fresh-scheduler reference, the invalidate counter-example, and the golden seed sizes."""

from __future__ import annotations

import pytest

from vizalloc.errors import UsageError
from vizalloc.scenarios import shared_tensors as st
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder


@pytest.mark.parametrize("config", ["A", "B"])
def test_none_diverges_from_the_reference(config):
    r = st.run("none", steps=4, seed=0, config=config)
    # the first forward pass is still right; the first update already is not
    assert r.records[0].loss == r.records[0].reference_loss
    assert r.records[0].update_max_abs_diff > 1e-3
    assert r.max_abs_loss_diff > 1e-3
    assert r.final_params_max_abs_diff > 1e-3
    assert r.diverged()


@pytest.mark.parametrize("config", ["A", "B"])
@pytest.mark.parametrize("strategy", ["invalidate", "clear", "dup", "static"])
def test_fixes_match_the_reference(strategy, config):
    r = st.run(strategy, steps=4, seed=0, config=config)
    assert r.max_abs_loss_diff <= 1e-6
    assert r.max_update_diff <= 1e-6
    assert r.final_params_max_abs_diff <= 1e-6
    assert not r.diverged()
    # the loss read after the backward graph is the forward loss (nothing overwrote it)
    assert all(abs(rec.loss_after_backward - rec.loss) <= 1e-6 for rec in r.records)
    # and training does something: the losses are not all equal
    assert len(set(r.losses)) > 1


def test_buffer_sizes_match_the_golden_seed_cases():
    # seed_A_stale: the stale run never grows the buffer to what gb needs (4768 vs 5536);
    # config B stays at 9728 B instead of 13344 B (golden README, seed scenario)
    assert st.run("none", steps=2, config="A").compute_nbytes == 4768
    assert st.run("dup", steps=2, config="A").compute_nbytes == 5536
    assert st.run("clear", steps=2, config="A").compute_nbytes == 5536
    assert st.run("none", steps=2, config="B").compute_nbytes == 9728
    assert st.run("dup", steps=2, config="B").compute_nbytes == 13344


def test_config_b_loss_after_backward_is_wrong_with_none():
    # B: the backward tensors are placed on live forward tensors, so even the loss
    # read after the backward graph is wrong (golden: 0.171 instead of 1.487)
    r = st.run("none", steps=2, config="B")
    assert all(abs(rec.loss_after_backward - rec.loss) > 0.1 for rec in r.records)


def test_static_costs_memory():
    r = st.run("static", steps=2, config="A")
    assert r.static_nbytes > 0


def test_invalidate_is_defeated_by_a_reserve_in_between():
    plain = st.run("invalidate", steps=4, seed=1, reserve_between=False)
    assert not plain.diverged()
    defeated = st.run("invalidate", steps=4, seed=1, reserve_between=True)
    assert defeated.diverged()
    assert defeated.max_update_diff > 1e-3
    # the robust fixes survive the same program
    for strategy in sorted(st.ROBUST_STRATEGIES):
        assert not st.run(strategy, steps=4, seed=1, reserve_between=True).diverged(), strategy


def test_the_reference_does_not_depend_on_the_strategy():
    a = st.run("none", steps=3, seed=3)
    b = st.run("dup", steps=3, seed=3)
    assert a.reference_losses == b.reference_losses
    assert b.losses == b.reference_losses


def test_around_loop_sees_only_the_strategy_loop():
    rec = StrictRecorder()
    st.run("none", steps=2, around_loop=lambda: rec)
    kinds = {type(e) for e in rec.events}
    assert ev.SchedAlloc in kinds and ev.SchedReset in kinds and ev.NodeCompute in kinds
    # 2 steps x 2 graphs, one scheduler: the reference runs (fresh schedulers) are not recorded
    assert sum(isinstance(e, ev.SchedAlloc) for e in rec.events) == 4
    assert len({e.sched_id for e in rec.events if isinstance(e, ev.SchedAlloc)}) == 1


def test_none_trace_shows_stale_tensors_kept_across_the_reset():
    rec = StrictRecorder()
    st.run("none", steps=1, around_loop=lambda: rec)
    cleared = [e for e in rec.events if isinstance(e, ev.TensorCleared)]
    assert cleared == []  # nobody clears anything
    rec2 = StrictRecorder()
    st.run("clear", steps=1, around_loop=lambda: rec2)
    assert any(isinstance(e, ev.TensorCleared) and e.by == "clear" for e in rec2.events)
    rec3 = StrictRecorder()
    st.run("invalidate", steps=1, around_loop=lambda: rec3)
    assert any(isinstance(e, ev.TensorCleared) and e.by == "invalidate" for e in rec3.events)


def test_bad_arguments():
    with pytest.raises(UsageError, match="unknown strategy"):
        st.run("nope")
    with pytest.raises(UsageError, match="steps"):
        st.run("dup", steps=0)
    with pytest.raises(UsageError, match="config"):
        st.run("dup", config="Z")
    with pytest.raises(UsageError):
        st.Config(n_in=0)


def test_result_as_dict():
    d = st.run("dup", steps=2).to_dict()
    assert d["strategy"] == "dup" and len(d["losses"]) == 2 and d["diverged"] is False
    assert {"final_loss", "reference_loss", "max_abs_loss_diff", "steps"} <= d.keys()


# -- the same loop through ggml-opt's OptContext --------------------------------------

@pytest.mark.parametrize("strategy", ["invalidate", "clear", "dup", "static"])
def test_opt_driver_fixes_match_the_reference(strategy):
    for presize in (False, True):
        r = st.run(strategy, steps=3, seed=0, driver="opt", presize=presize)
        assert not r.diverged(), (strategy, presize)
        assert r.driver == "opt" and len(set(r.losses)) > 1


def test_opt_driver_none_is_wrong_once_the_buffer_is_presized():
    r = st.run("none", steps=3, seed=0, driver="opt", presize=True)
    assert r.diverged() and r.max_update_diff > 1e-3


def test_opt_driver_none_without_presize_is_a_use_after_free_with_right_numbers():
    """Measured, not assumed: the first switch reallocates the compute buffer, the stale
    forward tensors keep computing in the freed one, and the numbers happen to be right.
    The trace still shows the dangling pointers."""
    from vizalloc.trace import api
    from vizalloc.analysis import hazards
    from vizalloc.analysis import model
    holder = {}

    def around():
        holder["t"] = api.trace(None)
        return holder["t"]

    r = st.run("none", steps=2, seed=0, driver="opt", around_loop=around)
    assert not r.diverged()
    found = {h.kind.value for h in hazards.find_hazards(model.build_model(holder["t"].trace))}
    assert "dangling" in found and "stale-overlap" in found


def test_opt_driver_invalidate_defeated():
    assert st.run("invalidate", steps=3, seed=0, driver="opt", config="B", reserve_between=True).diverged()


def test_bad_driver():
    with pytest.raises(UsageError, match="driver"):
        st.run("dup", driver="bogus")
