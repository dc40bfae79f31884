"""The optimizer context's graphs, static context, build types, errors and events."""

from __future__ import annotations

import numpy as np
import pytest

from vizalloc.errors import UsageError
from vizalloc.runtime import Context, F32, ops, set_param
from vizalloc.runtime.backends import CPUBackend
from vizalloc.runtime.backward import graph_get_grad_acc
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_get, tensor_set
from vizalloc.runtime.opt import (
    BuildType, LossType, OptContext, OptimizerType, OptParams, OptResult, constant_optimizer_params,
    default_optimizer_params, default_params,
)
from vizalloc.runtime.sched import Scheduler
from vizalloc.runtime.tensor import Flag, Op, Tensor
from vizalloc.trace import events as ev


def make(loss_type: LossType = LossType.CROSS_ENTROPY, *, fix: str = "dup", build_type: BuildType = BuildType.OPT,
         optimizer: OptimizerType = OptimizerType.ADAMW, opt_period: int = 1,
         allocate_inputs: bool = True) -> tuple[OptContext, dict[str, Tensor]]:
    cs, cc = Context(name="static"), Context(name="compute")
    x = cs.new_tensor_2d(F32, 3, 2, name="x")
    w = cs.new_tensor_2d(F32, 3, 4, name="w")
    b = cs.new_tensor_1d(F32, 4, name="b")
    set_param(w)
    set_param(b)
    out = ops.add(cc, ops.mul_mat(cc, w, x), b)
    out.set_name("out")
    if allocate_inputs:
        alloc_ctx_tensors(cs, CPUBackend().buffer_type)
        tensor_set(w, np.linspace(-1, 1, 12))
        tensor_set(b, np.zeros(4))
        tensor_set(x, np.linspace(0, 1, 6))
    p: OptParams = default_params(Scheduler([CPUBackend()]), loss_type)
    p.ctx_compute, p.inputs, p.outputs = cc, x, out
    p.build_type, p.optimizer, p.opt_period = build_type, optimizer, opt_period
    return OptContext(p, fix=fix), {"x": x, "w": w, "b": b, "out": out}


def test_the_three_graphs_share_tensor_objects() -> None:
    opt, t = make()
    assert opt.gf is not None and opt.gb_grad is not None and opt.gb_opt is not None
    n_f, n_g = opt.gf.n_nodes, opt.gb_grad.n_nodes
    assert all(a is b for a, b in zip(opt.gf.nodes, opt.gb_grad.nodes[:n_f]))
    assert all(a is b for a, b in zip(opt.gb_grad.nodes, opt.gb_opt.nodes[:n_g]))
    # one optimizer step per parameter, going backwards over the forward nodes (b before w)
    steps = opt.gb_opt.nodes[n_g:]
    assert [s.name for s in steps] == ["adamw step for b", "adamw step for w"]
    assert all(s.op is Op.OPT_STEP_ADAMW and s.view_src is s.src[0] for s in steps)
    assert opt.opt_step_params is not None and opt.opt_step_params.name == "adamw_params"
    assert opt.opt_step_params.ne[0] == 7 and opt.opt_step_params.flags & Flag.INPUT
    assert t["x"].flags & Flag.INPUT and t["out"].flags & Flag.OUTPUT


def test_loss_chains_and_static_context_follow_ggml() -> None:
    names = {
        LossType.MEAN: ["loss_sum", "loss_mean"],
        LossType.SUM: ["loss_sum"],
        LossType.CROSS_ENTROPY: ["labels", "loss_cross_entropy", "pred", "", "ncorrect"],
        LossType.MEAN_SQUARED_ERROR: ["labels", "loss_error", "loss_squared_error", "loss_sum_squared_error",
                                      "loss_mean_squared_error"],
    }
    for loss_type, chain in names.items():
        opt, _ = make(loss_type)
        assert opt.ctx_static is not None and opt.loss is not None
        static = list(opt.ctx_static.tensors())
        # results first (static graphs), then the loss accumulator, then momenta per parameter
        got = [s.name for s in static[:len(chain)]]
        assert [g if c else "" for g, c in zip(got, chain)] == chain
        assert opt.loss.flags & Flag.LOSS and opt.loss.flags & Flag.OUTPUT
        assert opt.loss_per_datapoint is (loss_type is not LossType.SUM)
        rest = [s.name for s in static[len(chain):]]
        assert rest[1:] == ["AdamW m for w", "AdamW v for w", "AdamW m for b", "AdamW v for b"]
        assert graph_get_grad_acc(opt.gb_opt, opt.loss) is static[len(chain)]  # type: ignore[arg-type]
        # every static tensor has memory (buf_static), none of the compute tensors do
        assert all(s.data is not None for s in static)


def test_accumulators_exist_only_when_accumulating() -> None:
    opt1, t1 = make(opt_period=1)
    assert opt1.grad_acc(t1["w"]) is None  # static graphs with opt_period 1: plain gradients
    opt2, t2 = make(opt_period=3)
    acc = opt2.grad_acc(t2["w"])
    assert acc is not None and acc.ctx is opt2.ctx_static and acc.ne == t2["w"].ne


def test_build_types_limit_the_graphs() -> None:
    fwd, _ = make(build_type=BuildType.FORWARD)
    assert fwd.gb_grad is None and fwd.gb_opt is None and fwd.buf_static is not None
    fwd.alloc(backward=False)
    fwd.eval(OptResult())
    with pytest.raises(UsageError, match="no OPT graph"):
        fwd.alloc(backward=True)
    # ggml-opt aborts on a GRAD-only context (see the next test); vizalloc refuses likewise
    with pytest.raises(UsageError, match="build type GRAD"):
        make(build_type=BuildType.GRAD, opt_period=2)
    opt, _ = make(opt_period=2)
    opt.alloc(backward=True)  # first of two physical batches: the GRAD graph
    assert opt.allocated_graph is opt.gb_grad
    opt.eval(None)
    opt.alloc(backward=True)  # second: the OPT graph
    assert opt.allocated_graph is opt.gb_opt
    opt.eval(None)


_GGML_GRAD_ONLY = """
import ggml
backend = ggml.ggml_backend_cpu_init()
arr = (ggml.ggml_backend_t_ctypes * 1)(backend)
sched = ggml.ggml_backend_sched_new(arr, None, 1, 2048, False, True)
ip = ggml.ggml_init_params(mem_size=1 << 20, mem_buffer=None, no_alloc=True)
cs, cc = ggml.ggml_init(ip), ggml.ggml_init(ip)
x = ggml.ggml_new_tensor_1d(cs, ggml.GGML_TYPE_F32, 1)
w = ggml.ggml_new_tensor_1d(cs, ggml.GGML_TYPE_F32, 1)
ggml.ggml_set_param(w)
out = ggml.ggml_scale(cc, ggml.ggml_add(cc, x, w), 1.0)
buf = ggml.ggml_backend_alloc_ctx_tensors(cs, backend)
op = ggml.ggml_opt_default_params(sched, ggml.GGML_OPT_LOSS_TYPE_SUM)
op.ctx_compute, op.inputs, op.outputs = cc, x, out
op.build_type, op.opt_period = ggml.GGML_OPT_BUILD_TYPE_GRAD, 2
ggml.ggml_opt_init(op)
print("initialised")
"""


def test_ggml_itself_aborts_on_a_grad_only_context() -> None:
    """The behaviour the refusal above reproduces, observed in real ggml (a child process)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("ggml", reason="ggml-python 0.0.45 is the oracle")
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    proc = subprocess.run([sys.executable, "-c", _GGML_GRAD_ONLY], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode != 0 and "initialised" not in proc.stdout
    assert "GGML_ASSERT(opt_ctx->build_type_alloc == GGML_OPT_BUILD_TYPE_OPT) failed" in proc.stderr


def test_misuse_raises_usage_errors() -> None:
    opt, _ = make()
    with pytest.raises(UsageError, match="eval\\(\\) without alloc"):
        opt.eval(None)
    opt.alloc(backward=False)
    with pytest.raises(UsageError, match="alloc\\(\\) called twice"):
        opt.alloc(backward=False)
    opt.eval(None)
    with pytest.raises(UsageError, match="must already have memory"):
        make(allocate_inputs=False)
    with pytest.raises(UsageError, match="opt_period"):
        make(opt_period=0)
    with pytest.raises(UsageError, match="prepare_alloc is for dynamic graphs"):
        opt.prepare_alloc(Context(), opt.gf, opt.inputs, opt.outputs)  # type: ignore[arg-type]
    bad, _ = make()
    pars = default_optimizer_params(None)
    pars.adamw.alpha = 0.0
    bad.get_opt_pars, bad.get_opt_pars_ud = constant_optimizer_params, pars
    bad.alloc(backward=True)
    with pytest.raises(UsageError, match="invalid AdamW parameters"):
        bad.eval(None)
    with pytest.raises(ValueError):
        make(fix="sometimes")


def test_adamw_parameters_and_iteration_count() -> None:
    opt, _ = make()
    for i in range(3):
        opt.alloc(backward=True)
        opt.eval(None)
        params = tensor_get(opt.opt_step_params).reshape(-1)  # type: ignore[arg-type]
        beta1h = np.float32(1) / (np.float32(1) - np.float32(0.9) ** np.float32(i + 1))
        assert params[5] == pytest.approx(beta1h, rel=1e-6)
    assert opt.iter == 4
    opt.alloc(backward=False)
    opt.eval(None)
    assert opt.iter == 4  # forward batches do not count
    m = opt.grad_m[0] if opt.grad_m[0] is not None else next(x for x in opt.grad_m if x is not None)
    assert np.any(tensor_get(m) != 0)
    opt.reset(optimizer=True)
    assert opt.iter == 1 and not np.any(tensor_get(m))


def test_sgd_has_two_parameters_and_no_momenta() -> None:
    opt, _ = make(optimizer=OptimizerType.SGD)
    assert opt.opt_step_params is not None and opt.opt_step_params.ne[0] == 2
    assert opt.opt_step_params.name == "sgd_params"
    assert opt.gb_opt is not None and opt.gb_grad is not None
    assert not opt.grad_m and all(s.op is Op.OPT_STEP_SGD for s in opt.gb_opt.nodes[opt.gb_grad.n_nodes:])


def test_cross_entropy_results_count_correct_predictions() -> None:
    opt, t = make()
    opt.alloc(backward=False)
    logits_labels = np.eye(4, dtype=np.float32)[[1, 3]]
    assert opt.labels is not None
    tensor_set(opt.labels, logits_labels)
    r = OptResult()
    opt.eval(r)
    out_ref = (np.linspace(-1, 1, 12).reshape(4, 3) @ np.linspace(0, 1, 6).reshape(2, 3).T).T
    pred = list(np.argmax(out_ref, axis=1))
    assert r.pred() == pred
    assert r.ncorrect == sum(int(p == q) for p, q in zip(pred, [1, 3]))
    shifted = out_ref - out_ref.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert r.loss()[0] == pytest.approx(float(-(logits_labels * logp).sum() / 2), rel=1e-5)


def test_alloc_events_show_each_fix(recorded) -> None:  # type: ignore[no-untyped-def]
    for fix in ("dup", "clear", "none", "static"):
        recorded.events.clear()
        opt, _ = make(fix=fix)
        for backward in (False, True, False):
            opt.alloc(backward=backward)
            opt.eval(None)
        deep = [e for e in recorded.events if isinstance(e, ev.GraphCreated) and e.kind == "deep_copy"]
        cleared = [e for e in recorded.events if isinstance(e, ev.TensorCleared) and e.by == "clear"]
        resets = [e for e in recorded.events if isinstance(e, ev.SchedReset)]
        assert len(resets) >= 3  # one per graph switch
        assert (len(deep) == 3) is (fix == "dup")
        assert bool(cleared) is (fix == "clear")
        if fix == "static":
            assert opt.buf_shared is not None
            assert any(isinstance(e, ev.BufferAllocated) and e.buffer_id == opt.buf_shared.id for e in recorded.events)


def test_fit_reports_progress_like_ggml(capsys) -> None:  # type: ignore[no-untyped-def]
    from vizalloc.runtime.opt import OptDataset, fit

    cs, cc = Context(name="static"), Context(name="compute")
    x = cs.new_tensor_2d(F32, 1, 2, name="x")
    w = cs.new_tensor_1d(F32, 1, name="w")
    set_param(w)
    out = ops.add(cc, x, w)
    sched = Scheduler([CPUBackend()])
    alloc_ctx_tensors(cs, sched.get_backend(0).buffer_type)
    tensor_set(w, [0.5])
    ds = OptDataset(F32, F32, 1, 0, 8, 1)
    ds.data_array()[:, 0] = np.arange(8)
    fit(sched, cc, x, out, ds, LossType.SUM, OptimizerType.SGD, default_optimizer_params, 2, 4, 0.5, False)
    err = capsys.readouterr().err
    assert "fit: epoch 0001/0002:" in err and "fit: epoch 0002/0002:" in err
    assert "train: [" in err and "val:   [" in err and "data=0000004/0000004" in err
    assert "fit: training took 00:00:" in err
    # opt_period 2 (logical 4 / physical 2), one logical train batch and one validation batch
    # per epoch: SGD 1e-3 on gradient 2 (two datapoints) per step, two epochs
    assert float(tensor_get(w)[0]) == pytest.approx(0.5 - 2 * 1e-3 * 4, rel=1e-5)


def test_graph_reset_seeds_the_loss_and_zeroes_accumulators() -> None:
    from vizalloc.errors import NoMemoryError
    from vizalloc.runtime import Graph
    from vizalloc.runtime.backward import build_backward_expand, graph_reset

    opt, t = make(opt_period=2)
    assert opt.gb_opt is not None and opt.loss is not None
    loss_acc = graph_get_grad_acc(opt.gb_opt, opt.loss)
    w_acc = opt.grad_acc(t["w"])
    assert loss_acc is not None and w_acc is not None
    tensor_set(loss_acc, [7.0])
    tensor_set(w_acc, np.ones(12))
    graph_reset(opt.gb_opt)
    assert tensor_get(loss_acc).tolist() == [1.0]
    assert not np.any(tensor_get(w_acc))
    # without memory there is nothing to reset: a clear error, not a crash
    ctx = Context()
    p = ctx.new_tensor_1d(F32, 2, name="p")
    set_param(p)
    loss = ops.sum(ctx, ops.sqr(ctx, p))
    from vizalloc.runtime import set_loss

    set_loss(loss)
    g = Graph(grads=True)
    g.build_forward_expand(loss)
    build_backward_expand(ctx, g)
    with pytest.raises(NoMemoryError):
        graph_reset(g)
