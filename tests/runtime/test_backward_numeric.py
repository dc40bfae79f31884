"""Gradients from the backward graph against finite differences, for every differentiable op.

Each case builds ``loss = sum(f(params) * R)`` (R a fixed random tensor, so no gradient is
trivially uniform), runs the backward graph on the CPU backend and compares every
parameter's gradient with central differences of the forward graph. Every tensor gets
its own bytes (``alloc_ctx_tensors``), so the check is about the gradient ops alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from vizalloc.runtime import Context, F32, I32, Graph, ops, set_loss, set_param
from vizalloc.runtime.backends import CPU_BUFFER_TYPE, CPUBackend, graph_compute
from vizalloc.runtime.backward import build_backward_expand, graph_get_grad, graph_reset
from vizalloc.runtime.alloc import TensorAllocator, alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_get, tensor_set
from vizalloc.runtime.tensor import Op, Tensor, UnaryOp

EPS = 1e-2
TOL = 2e-2  # max |analytic - numeric| / max(1, max |numeric|)


class Case:
    """Params with initial values, constant tensors, and the function under test."""

    def __init__(self) -> None:
        self.ctx = Context(name="grad-check")
        self.rng = np.random.default_rng(1234)
        self.values: list[tuple[Tensor, np.ndarray]] = []
        self.params: list[Tensor] = []

    def param(self, *ne: int, low: float = -1.0, high: float = 1.0, away_from_zero: bool = False) -> Tensor:
        t = self.ctx.new_tensor_impl(F32, ne, name=f"p{len(self.params)}")
        set_param(t)
        v = self.rng.uniform(low, high, size=tuple(reversed(ne))).astype(np.float32)
        if away_from_zero:  # kinks (abs, relu) must not sit within EPS of a sample
            v = np.where(np.abs(v) < 0.2, np.sign(v + 1e-9) * 0.2 + v, v).astype(np.float32)
        self.values.append((t, v))
        self.params.append(t)
        return t

    def const(self, *ne: int, values: Any = None, dtype: Any = F32) -> Tensor:
        t = self.ctx.new_tensor_impl(dtype, ne, name=f"c{len(self.values)}")
        if values is None:
            values = self.rng.uniform(-1.0, 1.0, size=tuple(reversed(ne)))
        self.values.append((t, np.asarray(values, dtype=dtype.numpy)))
        return t


#: where ggml's gradient is knowingly not the true one, the factor it is off by (vizalloc
#: reproduces ggml): ADD1's scalar operand gets ``mean(grad)``, not ``sum(grad)`` (ggml's
#: "TODO: should probably be sum instead of mean"), so 1/ne0 of the true gradient.
GGML_FACTORS: dict[str, dict[str, float]] = {"add1": {"p1": 1.0 / 5}}


def _check(build: Callable[[Case], Tensor], factors: dict[str, float] | None = None) -> None:
    case = Case()
    out = build(case)
    ctx = case.ctx
    if out.nelements == 1:
        loss = out
    else:
        weights = case.const(*out.ne)
        loss = ops.sum(ctx, ops.mul(ctx, out, weights))
    set_loss(loss)
    gf = Graph(grads=True)
    gf.build_forward_expand(loss)
    gb = gf.dup()
    build_backward_expand(ctx, gb)
    alloc_ctx_tensors(ctx, CPU_BUFFER_TYPE)
    for t, v in case.values:
        tensor_set(t, v)
    graph_reset(gb)
    backend = CPUBackend()
    graph_compute(backend, gb)
    analytic = {}
    for p in case.params:
        g = graph_get_grad(gb, p)
        assert g is not None, f"no gradient for {p.name}"
        analytic[p.name] = tensor_get(g).reshape(-1).astype(np.float64)

    def f() -> float:
        graph_compute(backend, gf)
        return float(tensor_get(loss).reshape(-1)[0])

    for p, v in ((p, v) for p, v in case.values if p in case.params):
        flat = v.reshape(-1).copy()
        numeric = np.zeros(flat.size)
        for i in range(flat.size):
            for sign in (1, -1):
                x = flat.copy()
                x[i] += sign * EPS
                tensor_set(p, x)
                numeric[i] += sign * f()
            numeric[i] /= 2 * EPS
        tensor_set(p, flat)
        numeric *= (factors or {}).get(p.name, 1.0)
        scale = max(1.0, float(np.max(np.abs(numeric))))
        err = float(np.max(np.abs(analytic[p.name] - numeric))) / scale
        assert err < TOL, f"{p.name}: analytic {analytic[p.name]} vs numeric {numeric} (error {err:.3g})"


def _unary(fn: UnaryOp, **kw: Any) -> Callable[[Case], Tensor]:
    return lambda c: ops.unary(c.ctx, c.param(4, 3, **kw), fn)


CASES: dict[str, Callable[[Case], Tensor]] = {
    "dup": lambda c: ops.dup(c.ctx, c.param(3, 2)),
    "add": lambda c: ops.add(c.ctx, c.param(4, 3), c.param(4, 3)),
    "add_broadcast": lambda c: ops.add(c.ctx, c.param(4, 3, 2), c.param(4, 1, 2)),
    "add1": lambda c: ops.add1(c.ctx, c.param(5), c.param(1)),
    "acc": lambda c: ops.acc(c.ctx, c.param(6, 4), c.param(3, 2), 24, 96, 96, 8),
    "sub": lambda c: ops.sub(c.ctx, c.param(4, 3), c.param(4, 3)),
    "mul": lambda c: ops.mul(c.ctx, c.param(4, 3), c.param(4, 3)),
    "mul_broadcast": lambda c: ops.mul(c.ctx, c.param(4, 3), c.param(4, 1)),
    "div": lambda c: ops.div(c.ctx, c.param(4, 3), c.param(4, 3, low=0.5, high=1.5)),
    "sqr": lambda c: ops.sqr(c.ctx, c.param(4, 3)),
    "sqrt": lambda c: ops.sqrt(c.ctx, c.param(4, 3, low=0.5, high=2.0)),
    "log": lambda c: ops.log(c.ctx, c.param(4, 3, low=0.5, high=2.0)),
    "sin": lambda c: ops.sin(c.ctx, c.param(4, 3)),
    "cos": lambda c: ops.cos(c.ctx, c.param(4, 3)),
    "sum": lambda c: ops.sum(c.ctx, ops.sqr(c.ctx, c.param(4, 3))),
    "sum_rows": lambda c: ops.sum_rows(c.ctx, c.param(4, 3)),
    "mean": lambda c: ops.mean(c.ctx, c.param(4, 3)),
    "repeat": lambda c: ops.repeat(c.ctx, c.param(2, 3), c.const(4, 6)),
    "repeat_back": lambda c: ops.repeat_back(c.ctx, c.param(4, 6), c.const(2, 3)),
    "rms_norm": lambda c: ops.rms_norm(c.ctx, c.param(5, 3), 1e-5),
    "mul_mat": lambda c: ops.mul_mat(c.ctx, c.param(5, 4), c.param(5, 3)),
    "mul_mat_broadcast": lambda c: ops.mul_mat(c.ctx, c.param(3, 2, 2), c.param(3, 4, 4)),
    "scale": lambda c: ops.scale(c.ctx, c.param(4, 3), 0.7),
    "set": lambda c: ops.set_2d(c.ctx, c.param(6, 4), c.param(3, 2), 24, 8),
    "cpy": lambda c: ops.cpy(c.ctx, c.param(4, 3), c.const(3, 4)),
    "cont_transpose": lambda c: ops.cont(c.ctx, ops.transpose(c.ctx, c.param(4, 3))),
    "reshape": lambda c: ops.reshape_2d(c.ctx, c.param(6, 2), 3, 4),
    "view": lambda c: ops.view_2d(c.ctx, c.param(6, 4), 3, 2, 24, 8),
    "permute": lambda c: ops.cont(c.ctx, ops.permute(c.ctx, c.param(2, 3, 4), 2, 0, 1, 3)),
    "transpose_reshape": lambda c: ops.reshape_1d(c.ctx, ops.cont(c.ctx, ops.transpose(c.ctx, c.param(4, 3))), 12),
    "get_rows": lambda c: ops.get_rows(c.ctx, c.param(4, 6), c.const(5, values=[1, 3, 3, 0, 5], dtype=I32)),
    "diag_mask_zero": lambda c: ops.diag_mask_zero(c.ctx, c.param(4, 4), 1),
    "soft_max": lambda c: ops.soft_max(c.ctx, c.param(5, 3)),
    "soft_max_ext_masked": lambda c: ops.soft_max_ext(
        c.ctx, ops.diag_mask_inf(c.ctx, c.param(4, 4), 0), None, 0.7, 0.0
    ),
    "cross_entropy_loss": lambda c: ops.cross_entropy_loss(
        c.ctx, c.param(5, 3), c.const(5, 3, values=np.full((3, 5), 0.2))
    ),
    "abs": _unary(UnaryOp.ABS, away_from_zero=True),
    "neg": _unary(UnaryOp.NEG),
    "relu": _unary(UnaryOp.RELU, away_from_zero=True),
    "silu": _unary(UnaryOp.SILU),
    "exp": _unary(UnaryOp.EXP),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name: str) -> None:
    _check(CASES[name], GGML_FACTORS.get(name))


def test_every_differentiable_op_is_checked() -> None:
    """The list above covers every op ggml's backward pass handles and vizalloc computes."""
    checked_ops: set[Op] = set()
    checked_unary: set[UnaryOp] = set()
    for build in CASES.values():
        case = Case()
        out = build(case)
        g = Graph()
        g.build_forward_expand(out)
        for n in g.nodes:
            checked_ops.add(n.op)
            if n.op is Op.UNARY:
                checked_unary.add(n.op_params[0])
    differentiable = {
        Op.DUP, Op.ADD, Op.ADD1, Op.ACC, Op.SUB, Op.MUL, Op.DIV, Op.SQR, Op.SQRT, Op.LOG, Op.SIN, Op.COS, Op.SUM,
        Op.SUM_ROWS, Op.MEAN, Op.REPEAT, Op.REPEAT_BACK, Op.RMS_NORM, Op.MUL_MAT, Op.SCALE, Op.SET, Op.CPY,
        Op.CONT, Op.RESHAPE, Op.VIEW, Op.PERMUTE, Op.TRANSPOSE, Op.GET_ROWS, Op.DIAG_MASK_INF, Op.DIAG_MASK_ZERO,
        Op.SOFT_MAX, Op.UNARY, Op.CROSS_ENTROPY_LOSS,
    }
    assert differentiable <= checked_ops, differentiable - checked_ops
    assert {UnaryOp.ABS, UnaryOp.NEG, UnaryOp.RELU, UnaryOp.SILU, UnaryOp.EXP} <= checked_unary


def test_piecewise_constant_ops_stop_gradients() -> None:
    """SGN and STEP have no gradient: their source gets none (ggml ignores it)."""
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    b = ctx.new_tensor_1d(F32, 4, name="b")
    set_param(a)
    set_param(b)
    loss = ops.sum(ctx, ops.add(ctx, ops.sgn(ctx, a), ops.sqr(ctx, b)))
    set_loss(loss)
    gb = Graph(grads=True)
    gb.build_forward_expand(loss)
    build_backward_expand(ctx, gb)
    assert graph_get_grad(gb, a) is None
    assert graph_get_grad(gb, b) is not None


def test_mlp_gradients_through_the_scheduler() -> None:
    """A two-layer MLP with cross-entropy, its backward graph planned by the graph
    allocator through the scheduler (in-place reuse and all), against finite differences."""
    from vizalloc.runtime.sched import Scheduler

    rng = np.random.default_rng(7)
    ctx_w = Context(name="weights")
    ctx = Context(name="compute")
    x = ctx_w.new_tensor_2d(F32, 6, 4, name="x")
    labels = ctx_w.new_tensor_2d(F32, 3, 4, name="labels")
    w1 = ctx_w.new_tensor_2d(F32, 6, 5, name="w1")
    b1 = ctx_w.new_tensor_1d(F32, 5, name="b1")
    w2 = ctx_w.new_tensor_2d(F32, 5, 3, name="w2")
    params = [w1, b1, w2]
    for p in params:
        set_param(p)
    h = ops.unary(ctx, ops.add(ctx, ops.mul_mat(ctx, w1, x), b1), UnaryOp.SILU)
    loss = ops.cross_entropy_loss(ctx, ops.mul_mat(ctx, w2, h), labels)
    set_loss(loss)
    gf = Graph(grads=True)
    gf.build_forward_expand(loss)
    gb = gf.dup()
    build_backward_expand(ctx, gb)
    # the loss accumulator lives with the weights (static), as ggml-opt keeps it
    acc = gb.grad_accs[loss.id]
    alloc_ctx_tensors(ctx_w, CPU_BUFFER_TYPE)
    values = {p.name: rng.uniform(-1, 1, size=tuple(reversed(p.ne[:2]))).astype(np.float32) for p in params}
    for p in params:
        tensor_set(p, values[p.name])
    tensor_set(x, rng.uniform(-1, 1, size=(4, 6)))
    onehot = np.eye(3, dtype=np.float32)[[0, 2, 1, 2]]
    tensor_set(labels, onehot)

    sched = Scheduler([CPUBackend()])
    # the accumulator was made in the compute context: give it memory in its own buffer
    acc_buf = CPU_BUFFER_TYPE.alloc_buffer(32)
    TensorAllocator(acc_buf).alloc(acc)
    assert sched.alloc_graph(gb)
    graph_reset(gb)
    sched.graph_compute(gb)
    analytic = {p.name: tensor_get(graph_get_grad(gb, p)).astype(np.float64) for p in params}  # type: ignore[arg-type]

    # numeric gradients from a separately allocated forward graph (fresh tensors)
    def loss_at(vals: dict[str, np.ndarray]) -> float:
        c = Context(name="fwd")
        hh = ops.unary(c, ops.add(c, ops.mul_mat(c, w1, x), b1), UnaryOp.SILU)
        ll = ops.cross_entropy_loss(c, ops.mul_mat(c, w2, hh), labels)
        g = Graph()
        g.build_forward_expand(ll)
        for p in params:
            tensor_set(p, vals[p.name])
        s = Scheduler([CPUBackend()])
        s.graph_compute(g)
        return float(tensor_get(ll).reshape(-1)[0])

    for p in params:
        base = values[p.name]
        numeric = np.zeros(base.size)
        for i in range(base.size):
            for sign in (1, -1):
                vals = dict(values)
                v = base.reshape(-1).copy()
                v[i] += sign * EPS
                vals[p.name] = v.reshape(base.shape)
                numeric[i] += sign * loss_at(vals)
            numeric[i] /= 2 * EPS
        got = analytic[p.name].reshape(-1)
        err = float(np.max(np.abs(got - numeric))) / max(1.0, float(np.max(np.abs(numeric))))
        assert err < TOL, f"{p.name}: {got} vs {numeric}"
