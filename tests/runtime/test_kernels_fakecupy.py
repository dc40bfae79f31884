"""Every kernel through its non-numpy branches: the same graph computed in CPU memory and
in device memory emulated by numpy (``FakeCupy`` of test_backends_fakecupy, which makes
``t.storage.xp`` a module other than numpy) must give the same values. Real cupy on a
GPU is exercised by the backend's gpu-marked tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.runtime.test_backends_fakecupy import FakeCupy, fake, gpu  # noqa: F401  (fixtures)
from vizalloc.runtime import F16, F32, I32, Context, Graph, UnaryOp, ops, set_param
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.kernels import compute_forward
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_get, tensor_set


def build(ctx: Context) -> tuple[list[Any], dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)

    def new(name: str, shape: tuple[int, ...], dtype: Any = F32, lo: float = -2, hi: float = 2) -> Any:
        t = ctx.new_tensor_impl(dtype, tuple(reversed(shape)), name=name)
        if dtype is I32:
            vals[name] = rng.integers(0, shape[-1] if len(shape) else 1, size=shape).astype(np.int32)
        else:
            vals[name] = rng.uniform(lo, hi, size=shape).astype(dtype.numpy)
        return t

    vals: dict[str, np.ndarray] = {}
    a = new("a", (2, 3, 8))
    b = new("b", (1, 3, 1), lo=0.5)
    h = new("h", (3, 8), F16)
    w = new("w", (5, 8))
    w16 = new("w16", (5, 8), F16)
    mask = new("mask", (4, 8), F16)
    lab = new("lab", (2, 3, 8), lo=0, hi=1)
    idx = new("idx", (4,), I32)
    emb = new("emb", (6, 8))
    one = new("one", (1,))
    gscalar = new("gs", (1,))
    p = new("p", (3, 8))
    set_param(p)
    gp, m, v = new("gp", (3, 8)), new("m", (3, 8)), new("v", (3, 8), lo=0, hi=1)
    adam = new("adam", (7,), lo=0.01, hi=0.02)
    p2 = new("p2", (4,))
    set_param(p2)
    sgd = new("sgd", (2,), lo=0.01, hi=0.02)
    e16 = new("e16", (8, 3), F16)
    outs = [ops.add(ctx, a, b), ops.div(ctx, a, b), ops.mul(ctx, h, h), ops.add1(ctx, a, one),
            ops.scale_bias(ctx, a, 0.5, 1.0), ops.sqr(ctx, h), ops.log(ctx, ops.abs(ctx, a)),
            ops.silu_back(ctx, a, lab)]
    outs += [ops.unary(ctx, a, fn) for fn in UnaryOp] + [ops.unary(ctx, h, fn) for fn in UnaryOp]
    outs += [ops.cont(ctx, ops.permute(ctx, a, 2, 0, 1, 3)), ops.cast(ctx, a, F16), ops.dup(ctx, h),
             ops.cpy(ctx, ops.transpose(ctx, h), e16),
             ops.get_rows(ctx, emb, idx), ops.get_rows_back(ctx, ops.get_rows(ctx, emb, idx), idx, emb),
             ops.concat(ctx, a, a, 1), ops.repeat(ctx, b, a), ops.repeat_back(ctx, a, b),
             ops.acc(ctx, a, w, 32, 96, 96, 0), ops.set_1d(ctx, a, w, 16),
             ops.mul_mat(ctx, w, a), ops.mul_mat(ctx, w16, a), ops.mul_mat(ctx, w, ops.permute(ctx, a, 0, 2, 1, 3)),
             ops.out_prod(ctx, a, lab),
             ops.soft_max(ctx, a), ops.soft_max_ext(ctx, a, mask, 0.5, 4.0), ops.soft_max_ext_back(ctx, a, lab, 0.5, 0.0),
             ops.diag_mask_inf(ctx, a, 1), ops.diag_mask_zero_inplace(ctx, ops.scale(ctx, a, 1.0), 0),
             ops.norm(ctx, a, 1e-5), ops.rms_norm(ctx, a, 1e-6), ops.rms_norm_back(ctx, lab, a, 1e-6),
             ops.sum(ctx, a), ops.sum_rows(ctx, h), ops.mean(ctx, a), ops.argmax(ctx, w),
             ops.count_equal(ctx, idx, idx),
             ops.cross_entropy_loss(ctx, a, lab), ops.cross_entropy_loss_back(ctx, gscalar, a, lab),
             ops.opt_step_adamw(ctx, p, gp, m, v, adam), ops.opt_step_sgd(ctx, p2, ops.scale(ctx, p2, 1.0), sgd)]
    return outs, vals


def run_on(buft: BufferType) -> list[np.ndarray]:
    ctx = Context()
    outs, vals = build(ctx)
    alloc_ctx_tensors(ctx, buft)
    assert all(o.storage.xp is buft.device for o in outs)  # the kernels see this array module
    for name, values in vals.items():
        t = ctx.get_tensor(name)
        assert t is not None
        tensor_set(t, values)
    g = Graph()
    for o in outs:
        g.build_forward_expand(o)
    for node in g.nodes:
        compute_forward(node)
    return [tensor_get(o) for o in outs]


def test_every_kernel_on_emulated_device_memory_equals_cpu(gpu: Any, fake: FakeCupy) -> None:  # noqa: F811
    host = run_on(BufferType("CPU"))
    dev = run_on(gpu.buffer_type)
    assert len(host) == len(dev) > 60
    for k, (x, y) in enumerate(zip(host, dev)):
        assert type(y) is np.ndarray and x.dtype == y.dtype and x.shape == y.shape, k
        np.testing.assert_allclose(y.astype(np.float64), x.astype(np.float64), rtol=1e-6, atol=1e-6,
                                   err_msg=f"output {k}")
