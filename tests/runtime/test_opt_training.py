"""Training an MLP with the optimizer context: against real ggml-opt (ggml-python 0.0.45),
and under every stale-tensor ``fix``.

The model is small but has what the stale-tensor bug needs: forward intermediates that
ggml's planner puts on the same bytes in the forward-only graph (in-place add and silu),
one of which (silu's input) the backward pass reads again. A forward-only batch runs
first, so the forward graph is planned before the training graph.
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest

from vizalloc.runtime import Context, F32, Graph, ops, set_param
from vizalloc.errors import ContextError, SchedulerError
from vizalloc.runtime.backends import Backend, CPUBackend, SimBackend
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_get, tensor_set
from vizalloc.runtime.opt import (
    EpochCallback, LossType, OptContext, OptDataset, OptimizerType, OptResult, constant_optimizer_params,
    default_optimizer_params, default_params, epoch,
)
from vizalloc.runtime.sched import Scheduler
from vizalloc.runtime.tensor import Op, Tensor, UnaryOp


@dataclasses.dataclass(frozen=True)
class Setup:
    loss_type: LossType = LossType.CROSS_ENTROPY
    optimizer: OptimizerType = OptimizerType.ADAMW
    n_in: int = 6
    n_hidden: int = 8
    n_out: int = 3
    batch: int = 4
    ndata: int = 24
    idata_split: int = 16
    epochs: int = 3
    opt_period: int = 1
    shuffle: bool = False
    forward_first: bool = True
    seed: int = 0


@dataclasses.dataclass
class Outcome:
    losses: list[tuple[float, float, float, float]]  # train loss, val loss, val accuracy, train unc
    weights: list[np.ndarray]
    preds: list[int]
    #: the scheduler's compute buffer size after the first forward and the first backward alloc
    buffer_sizes: tuple[int, int] = (0, 0)


def _data(s: Setup) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(s.seed)
    data = rng.normal(size=(s.ndata, s.n_in)).astype(np.float32)
    labels = np.eye(s.n_out, dtype=np.float32)[rng.integers(0, s.n_out, s.ndata)]
    if s.loss_type is not LossType.CROSS_ENTROPY:
        labels = rng.normal(size=(s.ndata, s.n_out)).astype(np.float32)
    weights = [
        rng.normal(scale=0.5, size=shape).astype(np.float32)
        for shape in ((s.n_hidden, s.n_in), (s.n_hidden,), (s.n_out, s.n_hidden))
    ]
    return data, labels, weights


def _opt_pars(optimizer: OptimizerType):  # type: ignore[no-untyped-def]
    pars = default_optimizer_params(None)
    pars.sgd.alpha = 0.05
    return pars


def train_vizalloc(s: Setup, fix: str = "dup", *, reserve_between: bool = False,
                   backends: list[Backend] | None = None,
                   callbacks: tuple[EpochCallback | None, EpochCallback | None] = (None, None),
                   ) -> tuple[Outcome, OptContext]:
    data, labels, init = _data(s)
    supervised = s.loss_type in (LossType.CROSS_ENTROPY, LossType.MEAN_SQUARED_ERROR)
    ds = OptDataset(F32, F32, s.n_in, s.n_out if supervised else 0, s.ndata, 1)
    ds.data_array()[...] = data
    if supervised:
        ds.labels_array()[...] = labels
    cs, cc = Context(name="static"), Context(name="compute")
    x = cs.new_tensor_2d(F32, s.n_in, s.batch, name="x")
    w1 = cs.new_tensor_2d(F32, s.n_in, s.n_hidden, name="w1")
    b1 = cs.new_tensor_1d(F32, s.n_hidden, name="b1")
    w2 = cs.new_tensor_2d(F32, s.n_hidden, s.n_out, name="w2")
    params: list[Tensor] = [w1, b1, w2]
    for p in params:
        set_param(p)
    h = ops.unary(cc, ops.add(cc, ops.mul_mat(cc, w1, x), b1), UnaryOp.SILU)
    out = ops.mul_mat(cc, w2, h)
    sched = Scheduler(backends or [CPUBackend()])
    # parameters and inputs live on the first backend, as test-opt.cpp allocates them
    alloc_ctx_tensors(cs, sched.get_backend(0).buffer_type)
    for p, v in zip(params, init):
        tensor_set(p, v)
    op = default_params(sched, s.loss_type)
    op.ctx_compute, op.inputs, op.outputs = cc, x, out
    op.optimizer, op.opt_period = s.optimizer, s.opt_period
    op.get_opt_pars, op.get_opt_pars_ud = constant_optimizer_params, _opt_pars(s.optimizer)
    opt = OptContext(op, fix=fix)
    if s.forward_first:
        opt.alloc(backward=False)
        ds.get_batch(x, opt.labels, 0)
        opt.eval(None)
    size_fwd, size_bwd = sched.buffer_size(0), 0
    losses = []
    preds: list[int] = []
    for _ in range(s.epochs):
        if s.shuffle:
            ds.shuffle(opt, s.idata_split)
        rt, rv = OptResult(), OptResult()
        if reserve_between:
            # another graph reserved on the scheduler between two allocations of the loop
            sched.reserve(opt.gf)  # type: ignore[arg-type]
        epoch(opt, ds, rt, rv, s.idata_split, *callbacks)
        acc = rv.accuracy()[0]
        losses.append((rt.loss()[0], rv.loss()[0], acc, rt.loss()[1]))
        preds.extend(rv.pred())
        if len(losses) == 1:
            size_bwd = sched.buffer_size(0)
    return Outcome(losses, [tensor_get(p) for p in params], preds, (size_fwd, size_bwd)), opt


# -- the same in real ggml-opt ------------------------------------------------------------

def _ggml_params(ggml, cs, s: Setup) -> list[object]:  # type: ignore[no-untyped-def]
    """The MLP's trainable tensors ``[w1, b1, w2]`` in ggml context ``cs``."""
    params = [
        ggml.ggml_new_tensor_2d(cs, ggml.GGML_TYPE_F32, s.n_in, s.n_hidden),
        ggml.ggml_new_tensor_1d(cs, ggml.GGML_TYPE_F32, s.n_hidden),
        ggml.ggml_new_tensor_2d(cs, ggml.GGML_TYPE_F32, s.n_hidden, s.n_out),
    ]
    for p in params:
        ggml.ggml_set_param(p)
    return params


def _ggml_opt_params(ggml, sched, s: Setup, cc, x, out):  # type: ignore[no-untyped-def]
    """``ggml_opt_default_params`` for setup ``s``: compute context ``cc``, inputs ``x``, outputs ``out``."""
    loss_type = {
        LossType.CROSS_ENTROPY: ggml.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY,
        LossType.MEAN_SQUARED_ERROR: ggml.GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR,
        LossType.MEAN: ggml.GGML_OPT_LOSS_TYPE_MEAN, LossType.SUM: ggml.GGML_OPT_LOSS_TYPE_SUM,
    }[s.loss_type]
    op = ggml.ggml_opt_default_params(sched, loss_type)
    op.ctx_compute, op.inputs, op.outputs, op.opt_period = cc, x, out, s.opt_period
    op.optimizer = (ggml.GGML_OPT_OPTIMIZER_TYPE_ADAMW if s.optimizer is OptimizerType.ADAMW
                    else ggml.GGML_OPT_OPTIMIZER_TYPE_SGD)
    return op


def _ggml_constant_opt_pars(ggml, op, optimizer: OptimizerType):  # type: ignore[no-untyped-def]
    """Make ggml-opt params ``op`` use :func:`_opt_pars` through ggml's own constant-params
    function; returns the C struct ``op`` points at (the caller keeps it alive)."""
    pars = _opt_pars(optimizer)
    cpars = ggml.ggml_opt_optimizer_params()
    cpars.adamw.alpha, cpars.adamw.beta1, cpars.adamw.beta2 = pars.adamw.alpha, pars.adamw.beta1, pars.adamw.beta2
    cpars.adamw.eps, cpars.adamw.wd = pars.adamw.eps, pars.adamw.wd
    cpars.sgd.alpha, cpars.sgd.wd = pars.sgd.alpha, pars.sgd.wd
    # ctypes callbacks cannot return structs: hand ggml its own C function
    c_fn = ctypes.cast(ggml.ggml.lib.ggml_opt_get_constant_optimizer_params, ctypes.c_void_p).value
    op.get_opt_pars = ctypes.cast(c_fn, ggml.ggml_opt_get_optimizer_params)
    op.get_opt_pars_ud = ctypes.cast(ctypes.pointer(cpars), ctypes.c_void_p)
    return cpars


def _ggml_weights(ggml, params, init: list[np.ndarray]) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """The values of ggml tensors ``params``, read into arrays shaped like ``init``."""
    weights = []
    for p, v in zip(params, init):
        got = np.zeros_like(v)
        ggml.ggml_backend_tensor_get(p, got.ctypes.data_as(ctypes.c_void_p), 0, got.nbytes)
        weights.append(got)
    return weights


def train_ggml(s: Setup, calls: list[tuple[bool, int, int, int]] | None = None) -> Outcome:
    """The same training in real ggml-opt; with ``calls``, its epoch callbacks append
    ``(train, ibatch, ibatch_max, ndata of the result)`` there."""
    ggml = pytest.importorskip("ggml", reason="ggml-python 0.0.45 is the oracle for ggml-opt")
    ggml.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p
    ggml.ggml_backend_alloc_buffer.restype = ctypes.c_void_p
    f32p = ctypes.POINTER(ctypes.c_float)
    data, labels, init = _data(s)
    backend = ggml.ggml_backend_cpu_init()
    arr = (ggml.ggml_backend_t_ctypes * 1)(backend)
    sched = ggml.ggml_backend_sched_new(arr, None, 1, 2048, False, True)
    supervised = s.loss_type in (LossType.CROSS_ENTROPY, LossType.MEAN_SQUARED_ERROR)
    ds = ggml.ggml_opt_dataset_init(ggml.GGML_TYPE_F32, ggml.GGML_TYPE_F32, s.n_in, s.n_out if supervised else 0,
                                    s.ndata, 1)
    d = ggml.ggml_opt_dataset_data(ds)
    np.ctypeslib.as_array(ctypes.cast(d.contents.data, f32p), shape=data.shape)[...] = data
    if supervised:
        lab = ggml.ggml_opt_dataset_labels(ds)
        np.ctypeslib.as_array(ctypes.cast(lab.contents.data, f32p), shape=labels.shape)[...] = labels
    ip = ggml.ggml_init_params(mem_size=16 * 1024 * 1024, mem_buffer=None, no_alloc=True)
    cs, cc = ggml.ggml_init(ip), ggml.ggml_init(ip)
    x = ggml.ggml_new_tensor_2d(cs, ggml.GGML_TYPE_F32, s.n_in, s.batch)
    params = _ggml_params(ggml, cs, s)
    w1, b1, w2 = params
    h = ggml.ggml_silu(cc, ggml.ggml_add(cc, ggml.ggml_mul_mat(cc, w1, x), b1))
    out = ggml.ggml_mul_mat(cc, w2, h)
    buf = ggml.ggml_backend_alloc_ctx_tensors(cs, backend)
    for p, v in zip(params, init):
        ggml.ggml_backend_tensor_set(p, v.ctypes.data_as(ctypes.c_void_p), 0, v.nbytes)
    op = _ggml_opt_params(ggml, sched, s, cc, x, out)
    cpars = _ggml_constant_opt_pars(ggml, op, s.optimizer)  # noqa: F841 (op points at it: keep it alive)
    octx = ggml.ggml_opt_init(op)
    null_cb = ggml.ggml_opt_epoch_callback()
    if calls is not None:
        def record(train, octx_, ds_, result, ibatch, ibatch_max, t_start_us):  # type: ignore[no-untyped-def]
            nd = ctypes.c_int64()
            ggml.ggml_opt_result_ndata(result, ctypes.byref(nd))
            calls.append((bool(train), ibatch, ibatch_max, nd.value))
        null_cb = ggml.ggml_opt_epoch_callback(record)
    if s.forward_first:
        ggml.ggml_opt_alloc(octx, False)
        ggml.ggml_opt_dataset_get_batch(ds, x, ggml.ggml_opt_labels(octx), 0)
        ggml.ggml_opt_eval(octx, None)
    size_fwd = ggml.ggml_backend_sched_get_buffer_size(sched, backend)
    size_bwd = 0
    losses = []
    preds: list[int] = []
    for _ in range(s.epochs):
        if s.shuffle:
            ggml.ggml_opt_dataset_shuffle(octx, ds, s.idata_split)
        rt, rv = ggml.ggml_opt_result_init(), ggml.ggml_opt_result_init()
        ggml.ggml_opt_epoch(octx, ds, rt, rv, s.idata_split, null_cb, null_cb)
        lt, ut, lv, uv, acc, acc_u = (ctypes.c_double() for _ in range(6))
        ggml.ggml_opt_result_loss(rt, ctypes.byref(lt), ctypes.byref(ut))
        ggml.ggml_opt_result_loss(rv, ctypes.byref(lv), ctypes.byref(uv))
        ggml.ggml_opt_result_accuracy(rv, ctypes.byref(acc), ctypes.byref(acc_u))
        losses.append((lt.value, lv.value, acc.value, ut.value))
        nd = ctypes.c_int64()
        ggml.ggml_opt_result_ndata(rv, ctypes.byref(nd))
        if s.loss_type is LossType.CROSS_ENTROPY:
            pr = (ctypes.c_int32 * nd.value)()
            ggml.ggml_opt_result_pred(rv, pr)
            preds.extend(pr)
        ggml.ggml_opt_result_free(rt)
        ggml.ggml_opt_result_free(rv)
        if len(losses) == 1:
            size_bwd = ggml.ggml_backend_sched_get_buffer_size(sched, backend)
    weights = _ggml_weights(ggml, params, init)
    ggml.ggml_opt_free(octx)
    ggml.ggml_backend_buffer_free(buf)
    ggml.ggml_free(cs)
    ggml.ggml_free(cc)
    ggml.ggml_opt_dataset_free(ds)
    ggml.ggml_backend_sched_free(sched)
    ggml.ggml_backend_free(backend)
    return Outcome(losses, weights, preds, (size_fwd, size_bwd))


def test_epoch_callbacks_count_batches_as_ggml_opt() -> None:
    """Each of the epoch's two loops counts its own batches from 1, and hands its callback
    its own result (ndata grows by the batch size), as ``ggml_opt_epoch`` does."""
    s = Setup(epochs=1)
    expected: list[tuple[bool, int, int, int]] = []
    train_ggml(s, expected)
    calls: list[tuple[bool, int, int, int]] = []

    def record(train: bool, opt: OptContext, ds: OptDataset, result: OptResult, ibatch: int, ibatch_max: int,
               t_start_us: int) -> None:
        calls.append((train, ibatch, ibatch_max, result.ndata))

    train_vizalloc(s, callbacks=(record, record))
    assert calls == expected
    assert calls == [(True, i, 4, 4 * i) for i in range(1, 5)] + [(False, i, 2, 4 * i) for i in range(1, 3)]


SETUPS = {
    "ce_adamw": Setup(),
    "ce_adamw_shuffle": Setup(shuffle=True),
    "ce_sgd": Setup(optimizer=OptimizerType.SGD),
    "mse_adamw_accumulate": Setup(loss_type=LossType.MEAN_SQUARED_ERROR, opt_period=2),
    "mean_sgd": Setup(loss_type=LossType.MEAN, optimizer=OptimizerType.SGD, forward_first=False),
}


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_training_matches_ggml_opt(name: str) -> None:
    s = SETUPS[name]
    ref = train_ggml(s)
    got, _ = train_vizalloc(s)
    # ggml's SIMD kernels sum in another order than numpy: agree to float32 rounding
    np.testing.assert_allclose(np.array(got.losses), np.array(ref.losses), rtol=2e-5, atol=1e-6)
    for mine, theirs in zip(got.weights, ref.weights):
        np.testing.assert_allclose(mine, theirs, rtol=2e-5, atol=1e-6)
    assert got.preds == ref.preds
    # the same graphs, planned the same way: the compute buffer has ggml's size at each stage
    assert got.buffer_sizes == ref.buffer_sizes and got.buffer_sizes[1] > 0
    # training happened: the weights moved
    assert not np.allclose(got.weights[0], _data(s)[2][0])


def _ggml_compute_context_rows(s: Setup) -> list[tuple[object, ...]]:
    """What ggml_opt_init leaves in the user's compute context, in creation order."""
    ggml = pytest.importorskip("ggml", reason="ggml-python 0.0.45 is the oracle for ggml-opt")
    backend = ggml.ggml_backend_cpu_init()
    arr = (ggml.ggml_backend_t_ctypes * 1)(backend)
    sched = ggml.ggml_backend_sched_new(arr, None, 1, 2048, False, True)
    ip = ggml.ggml_init_params(mem_size=16 << 20, mem_buffer=None, no_alloc=True)
    cs, cc = ggml.ggml_init(ip), ggml.ggml_init(ip)
    x = ggml.ggml_new_tensor_2d(cs, ggml.GGML_TYPE_F32, s.n_in, s.batch)
    w1 = ggml.ggml_new_tensor_2d(cs, ggml.GGML_TYPE_F32, s.n_in, s.n_hidden)
    b1 = ggml.ggml_new_tensor_1d(cs, ggml.GGML_TYPE_F32, s.n_hidden)
    w2 = ggml.ggml_new_tensor_2d(cs, ggml.GGML_TYPE_F32, s.n_hidden, s.n_out)
    for t, name in ((x, b"x"), (w1, b"w1"), (b1, b"b1"), (w2, b"w2")):
        ggml.ggml_set_name(t, name)
    for p in (w1, b1, w2):
        ggml.ggml_set_param(p)
    out = ggml.ggml_mul_mat(cc, w2, ggml.ggml_silu(cc, ggml.ggml_add(cc, ggml.ggml_mul_mat(cc, w1, x), b1)))
    buf = ggml.ggml_backend_alloc_ctx_tensors(cs, backend)
    op = _ggml_opt_params(ggml, sched, s, cc, x, out)
    octx = ggml.ggml_opt_init(op)
    rows = []
    t = ggml.ggml_get_first_tensor(cc)
    while t:
        c = t.contents
        rows.append((ggml.ggml_op_name(c.op).decode(), c.name.decode(), tuple(c.ne), tuple(c.nb), c.flags))
        t = ggml.ggml_get_next_tensor(cc, t)
    ggml.ggml_opt_free(octx)
    ggml.ggml_backend_buffer_free(buf)
    ggml.ggml_free(cs)
    ggml.ggml_free(cc)
    ggml.ggml_backend_sched_free(sched)
    ggml.ggml_backend_free(backend)
    return rows


@pytest.mark.parametrize("name", ["ce_adamw", "ce_sgd", "mse_adamw_accumulate", "mean_sgd"])
def test_compute_context_matches_ggml_opt_build(name: str) -> None:
    """The gradient and optimizer-step tensors ggml_opt_build adds to the compute context:
    the same ops, names, shapes, strides and flags, in the same creation order."""
    s = dataclasses.replace(SETUPS[name], epochs=0, forward_first=False)
    _, opt = train_vizalloc(s)
    assert opt.ctx_compute is not None
    mine = [(t.op.name, t.name, t.ne, t.nb, t.flags) for t in opt.ctx_compute.tensors()]
    assert mine == _ggml_compute_context_rows(s)


# -- the fix strategies ---------------------------------------------------------------------

def test_fix_none_corrupts_silently_and_the_fixes_do_not() -> None:
    s = Setup()
    ref, _ = train_vizalloc(s, "dup")
    bad, _ = train_vizalloc(s, "none")
    # the stale shared tensors give other numbers, and no error
    assert not all(np.array_equal(a, b) for a, b in zip(bad.weights, ref.weights))
    assert bad.losses != ref.losses
    for fix in ("clear", "invalidate", "static"):
        got, _ = train_vizalloc(s, fix)
        assert got.losses == ref.losses, fix
        assert all(np.array_equal(a, b) for a, b in zip(got.weights, ref.weights)), fix


def test_fix_invalidate_is_defeated_by_a_reserve_in_between() -> None:
    """The maintainers' counter-example to PR #999: a reserve starts a new plan and forgets
    the last binding, so the next allocation no longer reclaims the stale tensors."""
    s = Setup()
    ref, _ = train_vizalloc(s, "dup", reserve_between=True)
    plain, _ = train_vizalloc(s, "dup")
    assert ref.losses == plain.losses  # reserving changes nothing for ggml's own strategy
    got, _ = train_vizalloc(s, "invalidate", reserve_between=True)
    assert got.losses != ref.losses


def test_fix_dup_never_gives_the_originals_memory() -> None:
    _, opt = train_vizalloc(Setup(epochs=1), "dup")
    assert opt.ctx_compute is not None
    assert all(t.data is None for t in opt.ctx_compute.tensors() if t.view_src is None)
    assert opt.allocated_graph_copy is not opt.allocated_graph
    # the copies alias the static tensors (loss, accumulators) and own the rest
    copy = opt.allocated_graph_copy
    assert copy is not None and all(t.data is not None for t in copy.nodes)


def test_fix_none_and_clear_allocate_the_shared_originals() -> None:
    for fix in ("none", "clear"):
        _, opt = train_vizalloc(Setup(epochs=1), fix)
        assert opt.allocated_graph_copy is opt.allocated_graph
        assert opt.outputs is not None and opt.outputs.data is not None


def test_fix_clear_leaves_static_memory_alone() -> None:
    _, opt = train_vizalloc(Setup(epochs=1), "clear")
    opt.alloc(backward=False)  # a switch gb_opt -> gf clears every compute tensor first
    assert opt.loss is not None and opt.loss.data is not None  # static (ctx_static)
    assert opt.ctx_static is not None
    assert all(t.data is not None for t in opt.ctx_static.tensors())
    gb_only = [t for t in opt.gb_opt.nodes if not opt.gf.contains(t) and t.view_src is None]  # type: ignore[union-attr]
    assert gb_only and all(t.data is None for t in gb_only)


def test_fix_static_keeps_shared_tensors_out_of_the_scheduler() -> None:
    _, opt = train_vizalloc(Setup(epochs=1), "static")
    shared = [t for t in opt.shared_tensors() if t.view_src is None]
    assert shared and opt.buf_shared is not None
    assert all(t.buffer is opt.buf_shared for t in shared)
    # everything in the forward graph is shared; the gradient nodes are planned by the scheduler
    assert opt.gf is not None and all(t.buffer is opt.buf_shared for t in opt.gf.nodes
                                      if t.view_src is None and t.ctx is opt.ctx_compute)
    assert opt.gb_opt is not None
    planned = [t for t in opt.gb_opt.nodes
               if t.ctx is opt.ctx_compute and t.view_src is None and t.buffer is not opt.buf_shared]
    assert planned and all(t.buffer is not None and t.buffer.usage.value == "compute" for t in planned)


def test_several_backends_with_dup_train_exactly_as_one() -> None:
    """A simulated device first (every op but silu and its backward), the CPU last: the
    scheduler splits the graphs and copies inputs across; ggml's deep copy keeps the results
    exact."""
    s = Setup()
    ref, _ = train_vizalloc(s, "dup")
    no_silu = [op for op in Op if op not in (Op.UNARY, Op.SILU_BACK)]
    got, opt = train_vizalloc(s, "dup", backends=[SimBackend("SIM", supported_ops=no_silu), CPUBackend()])
    assert opt.sched.n_splits >= 2
    assert got.losses == ref.losses
    assert all(np.array_equal(a, b) for a, b in zip(got.weights, ref.weights))


@pytest.mark.parametrize("fix", ["none", "clear", "static", "invalidate"])
def test_fixes_on_the_originals_break_with_several_backends(fix: str) -> None:
    """With several backends the scheduler rewrites sources of the graph it allocates to its
    input copies, which die at the next split (semantics 7.5, "mutations persist"). Only the
    deep copy confines that; the other fixes allocate the originals and reach the dead copies
    (a use-after-free in ggml, an error here)."""
    with pytest.raises((ContextError, SchedulerError), match="freed|died"):
        train_vizalloc(Setup(), fix, backends=[SimBackend("SIM"), CPUBackend()])


# -- dynamic graphs (ggml_opt_prepare_alloc) -------------------------------------------------

def _dynamic_steps(s: Setup) -> list[tuple[bool, int]]:
    """(backward, batch index) for each step: one forward-only batch in every three."""
    return [(i % 3 != 2, i % (s.ndata // s.batch)) for i in range(7)]


def train_dynamic_vizalloc(s: Setup) -> tuple[list[float], list[np.ndarray]]:
    data, labels, init = _data(s)
    cs = Context(name="static")
    w1 = cs.new_tensor_2d(F32, s.n_in, s.n_hidden, name="w1")
    b1 = cs.new_tensor_1d(F32, s.n_hidden, name="b1")
    w2 = cs.new_tensor_2d(F32, s.n_hidden, s.n_out, name="w2")
    params = [w1, b1, w2]
    for p in params:
        set_param(p)
    alloc_ctx_tensors(cs, CPUBackend().buffer_type)
    for p, v in zip(params, init):
        tensor_set(p, v)
    op = default_params(Scheduler([CPUBackend()]), s.loss_type)
    op.get_opt_pars, op.get_opt_pars_ud = constant_optimizer_params, _opt_pars(s.optimizer)
    opt = OptContext(op)
    assert not opt.static_graphs
    losses = []
    for backward, ib in _dynamic_steps(s):
        cc = Context(name="compute")
        x = cc.new_tensor_2d(F32, s.n_in, s.batch, name="x")
        out = ops.mul_mat(cc, w2, ops.unary(cc, ops.add(cc, ops.mul_mat(cc, w1, x), b1), UnaryOp.SILU))
        gf = Graph(grads=True)
        gf.build_forward_expand(out)
        opt.prepare_alloc(cc, gf, x, out)
        opt.alloc(backward)
        tensor_set(x, data[ib * s.batch:(ib + 1) * s.batch])
        assert opt.labels is not None
        tensor_set(opt.labels, labels[ib * s.batch:(ib + 1) * s.batch])
        r = OptResult()
        opt.eval(r)
        losses.append(r.loss()[0])
        assert opt.gf is None and opt.allocated_graph is None  # dynamic mode forgets its graphs
        cc.free()
    return losses, [tensor_get(p) for p in params]


def train_dynamic_ggml(s: Setup) -> tuple[list[float], list[np.ndarray]]:
    ggml = pytest.importorskip("ggml", reason="ggml-python 0.0.45 is the oracle for ggml-opt")
    data, labels, init = _data(s)
    backend = ggml.ggml_backend_cpu_init()
    arr = (ggml.ggml_backend_t_ctypes * 1)(backend)
    sched = ggml.ggml_backend_sched_new(arr, None, 1, 2048, False, True)
    ip = ggml.ggml_init_params(mem_size=1 << 20, mem_buffer=None, no_alloc=True)
    cs = ggml.ggml_init(ip)
    params = _ggml_params(ggml, cs, s)
    w1, b1, w2 = params
    buf = ggml.ggml_backend_alloc_ctx_tensors(cs, backend)
    for p, v in zip(params, init):
        ggml.ggml_backend_tensor_set(p, v.ctypes.data_as(ctypes.c_void_p), 0, v.nbytes)
    op = ggml.ggml_opt_default_params(sched, ggml.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY)
    cpars = _ggml_constant_opt_pars(ggml, op, s.optimizer)  # noqa: F841 (op points at it: keep it alive)
    octx = ggml.ggml_opt_init(op)
    losses = []
    for backward, ib in _dynamic_steps(s):
        cc = ggml.ggml_init(ggml.ggml_init_params(mem_size=1 << 22, mem_buffer=None, no_alloc=True))
        x = ggml.ggml_new_tensor_2d(cc, ggml.GGML_TYPE_F32, s.n_in, s.batch)
        out = ggml.ggml_mul_mat(cc, w2, ggml.ggml_silu(cc, ggml.ggml_add(cc, ggml.ggml_mul_mat(cc, w1, x), b1)))
        gf = ggml.ggml_new_graph_custom(cc, 2048, True)
        ggml.ggml_build_forward_expand(gf, out)
        ggml.ggml_opt_prepare_alloc(octx, cc, gf, x, out)
        ggml.ggml_opt_alloc(octx, backward)
        xb = np.ascontiguousarray(data[ib * s.batch:(ib + 1) * s.batch])
        lb = np.ascontiguousarray(labels[ib * s.batch:(ib + 1) * s.batch])
        ggml.ggml_backend_tensor_set(x, xb.ctypes.data_as(ctypes.c_void_p), 0, xb.nbytes)
        ggml.ggml_backend_tensor_set(ggml.ggml_opt_labels(octx), lb.ctypes.data_as(ctypes.c_void_p), 0, lb.nbytes)
        r = ggml.ggml_opt_result_init()
        ggml.ggml_opt_eval(octx, r)
        lv, lu = ctypes.c_double(), ctypes.c_double()
        ggml.ggml_opt_result_loss(r, ctypes.byref(lv), ctypes.byref(lu))
        losses.append(lv.value)
        ggml.ggml_opt_result_free(r)
        ggml.ggml_free(cc)
    weights = _ggml_weights(ggml, params, init)
    ggml.ggml_opt_free(octx)
    ggml.ggml_backend_buffer_free(buf)
    ggml.ggml_free(cs)
    ggml.ggml_backend_sched_free(sched)
    ggml.ggml_backend_free(backend)
    return losses, weights


@pytest.mark.parametrize("optimizer", [OptimizerType.ADAMW, OptimizerType.SGD], ids=lambda o: o.value)
def test_dynamic_graphs_match_ggml_opt(optimizer: OptimizerType) -> None:
    """Fresh graphs handed over with prepare_alloc before every step, forward and backward mixed."""
    s = Setup(optimizer=optimizer)
    ref_losses, ref_weights = train_dynamic_ggml(s)
    losses, weights = train_dynamic_vizalloc(s)
    np.testing.assert_allclose(losses, ref_losses, rtol=2e-5, atol=1e-6)
    for mine, theirs in zip(weights, ref_weights):
        np.testing.assert_allclose(mine, theirs, rtol=2e-5, atol=1e-6)


# -- what the analysis sees -----------------------------------------------------------------

def test_traced_training_shows_hazards_only_without_a_fix() -> None:
    """Traced and analysed, the same training has stale-overlap and use-after-reuse hazards
    under ``fix="none"`` and none under any fix (re-plans are expected at every switch)."""
    from vizalloc.analysis import HazardKind, build_model, find_hazards
    from vizalloc.trace.api import trace

    found = {}
    for fix in ("none", "dup", "clear", "invalidate", "static"):
        with trace() as t:
            train_vizalloc(Setup(epochs=1), fix)
        found[fix] = {h.kind for h in find_hazards(build_model(t.trace))}
    assert {HazardKind.STALE_OVERLAP, HazardKind.USE_AFTER_REUSE} <= found["none"]
    for fix in ("dup", "clear", "invalidate", "static"):
        assert found[fix] <= {HazardKind.REPLAN}, (fix, found[fix])
