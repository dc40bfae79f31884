"""The shared-tensor loop through ggml-opt's optimizer context (``OptContext``).

    >>> from vizalloc.scenarios.shared_tensors import run
    >>> run("none", steps=3, driver="opt", presize=True).diverged()
    True
    >>> run("dup", steps=3, driver="opt", presize=True).diverged()
    False

Same MLP, data and SGD as ``shared_tensors``' own loop, but the graphs are ggml-opt's:
``gf`` (logits plus the cross-entropy loss chain, ``pred`` and ``ncorrect``), ``gb_grad``
and ``gb_opt`` sharing tensor objects, with static graphs (``ctx_compute``) so the
``fix`` strategy decides what happens at every switch. As in ggml-opt the input ``x``
lives in user memory and the labels, loss, pred and ncorrect in ``buf_static``; the
shared, scheduler-placed tensors are the hidden layer's and the logits.

What ``fix="none"`` does here depends on the buffer (measured, configs A and B):

* without ``presize`` the backward graph needs a bigger compute buffer, so the first
  switch reallocates it; the stale forward tensors then live on in the *freed* buffer,
  consistently among themselves (``h`` over ``h_pre`` is harmless because relu keeps
  the sign), and the numbers happen to come out right. It is still a use-after-free
  (ggml's own ``seed_A_stale_realfree`` aborts in glibc); a trace shows ``dangling``,
  ``stale-overlap`` and ``use-after-reuse`` hazards.
* with ``presize=True`` (the backward graph reserved first, so no switch reallocates)
  the backward tensors are planned over live forward tensors and the updates are wrong.
"""

from __future__ import annotations

from vizalloc.runtime import memory, ops
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F32
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.opt import (
    LossType, OptContext, OptimizerParams, OptimizerType, SGDParams, constant_optimizer_params, default_params,
)
from vizalloc.runtime.tensor import Tensor, set_param
from vizalloc.scenarios.shared_tensors import Batch, Config, Params, new_scheduler, scalar

PARAM_NAMES = ("W1", "b1", "W2", "b2")


class OptTrainer:
    """``shared_tensors.Trainer`` over an ``OptContext(fix=strategy)``."""

    def __init__(self, strategy: str, cfg: Config, init: Params, reserve_between: bool = False,
                 presize: bool = False) -> None:
        from vizalloc.runtime.backends import CPUBackend

        self.cfg = cfg
        self.sched = new_scheduler()  # OptContext turns reclaim on itself for "invalidate"
        buft = CPUBackend().buffer_type
        self.ctx_user = Context(name="user_static")
        cu = self.ctx_user
        self.x = cu.new_tensor_2d(F32, cfg.n_in, cfg.batch, "x")
        self.W1 = cu.new_tensor_2d(F32, cfg.n_in, cfg.n_hidden, "W1")
        self.b1 = cu.new_tensor_1d(F32, cfg.n_hidden, "b1")
        self.W2 = cu.new_tensor_2d(F32, cfg.n_hidden, cfg.n_out, "W2")
        self.b2 = cu.new_tensor_1d(F32, cfg.n_out, "b2")
        self.params = [self.W1, self.b1, self.W2, self.b2]
        for w in self.params:
            set_param(w)
        self.buf_user = alloc_ctx_tensors(cu, buft)
        for name, t in zip(PARAM_NAMES, self.params):
            memory.tensor_set(t, init[name])

        self.ctx_compute = Context(name="compute")
        self.logits = self._forward(self.ctx_compute, self.x)
        p = default_params(self.sched, LossType.CROSS_ENTROPY)
        p.ctx_compute, p.inputs, p.outputs = self.ctx_compute, self.x, self.logits
        p.optimizer = OptimizerType.SGD
        p.get_opt_pars = constant_optimizer_params
        p.get_opt_pars_ud = OptimizerParams(sgd=SGDParams(alpha=cfg.lr, wd=0.0))
        self.opt = OptContext(p, fix=strategy)
        shared = self.opt.buf_shared
        self.static_nbytes = 0 if shared is None else int(shared.nbytes)

        self.other: Graph | None = None
        if reserve_between:
            ctx_measure = Context(name="measure")
            xm = ctx_measure.new_tensor_2d(F32, cfg.n_in, 2 * cfg.batch, "x_measure")
            self.other = Graph()
            self.other.build_forward_expand(self._forward(ctx_measure, xm))
        if presize:
            assert self.opt.gb_opt is not None
            self.sched.reserve(self.opt.gb_opt)  # size the compute buffer for the largest graph first

    def _forward(self, ctx: Context, x: Tensor) -> Tensor:
        h = ops.relu(ctx, ops.add(ctx, ops.mul_mat(ctx, self.W1, x).set_name("h_mm"), self.b1).set_name("h_pre"))
        h.set_name("h")
        o = ops.mul_mat(ctx, self.W2, h).set_name("o_mm")
        return ops.add(ctx, o, self.b2).set_name("logits")

    def get_params(self) -> Params:
        return {name: memory.tensor_get(t) for name, t in zip(PARAM_NAMES, self.params)}

    def compute_nbytes(self) -> int:
        return int(self.sched.buffer_size(0))

    def step(self, backward: bool, batch: Batch) -> float:
        if self.other is not None:
            self.sched.reserve(self.other)  # another graph reserved between the switches
        self.opt.alloc(backward)
        memory.tensor_set(self.x, batch[0])
        assert self.opt.labels is not None and self.opt.loss is not None
        memory.tensor_set(self.opt.labels, batch[1])
        self.opt.eval()
        return scalar(self.opt.loss)

    def free(self) -> None:
        self.opt.free()
        self.ctx_compute.free()
        self.ctx_user.free()
        bufs = self.buf_user if isinstance(self.buf_user, list) else [self.buf_user]
        for b in bufs:
            if b is not None:
                b.free(cause="trainer freed")


__all__ = ["OptTrainer"]
