"""The AdamW kernel against ggml's per-element C loop, operation by operation in float32,
and its reused scratch arrays (several steps of different shapes in one graph, in place
on real buffer bytes).

ggml (``ggml_compute_forward_opt_step_adamw_f32``) computes, per element, in float:
``m = m*beta1 + g*(1 - beta1)``; ``v = v*beta2 + g*g*(1 - beta2)``; ``mh = m*beta1h``;
``vh = sqrtf(v*beta2h) + eps``; ``w = w*keep - alpha*mh/vh`` (``alpha*mh`` first).
Each float32 numpy operation below rounds once, as each C operation does when the
compiler does not contract to FMA; the kernel must agree with that bit for bit. (The
ggml-python build contracts; ``test_kernels_ggml`` compares with it to a tolerance.)"""

from __future__ import annotations

import numpy as np

from vizalloc.runtime import F32, Context, Graph, ops, set_param
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.kernels import compute_forward
from vizalloc.runtime.kernels._util import scratch_f32
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_get, tensor_set

f32 = np.float32


def ggml_adamw(w: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, p: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    alpha, beta1, beta2, eps, wd, beta1h, beta2h = (f32(x) for x in p)
    keep = f32(1) - alpha * wd
    m2 = m * beta1 + g * (f32(1) - beta1)
    v2 = v * beta2 + (g * g) * (f32(1) - beta2)
    mh = m2 * beta1h
    vh = np.sqrt(v2 * beta2h) + eps
    w2 = w * keep - (alpha * mh) / vh
    return w2, m2, v2


def test_adamw_is_ggml_loop_bit_for_bit_across_shapes_and_steps() -> None:
    rng = np.random.default_rng(7)
    ctx = Context(name="adamw")
    shapes = [(33, 17), (5,), (64, 40), (3, 4)]  # growing and shrinking: the scratch is resized and sliced
    slots = []
    graph = Graph()
    params = ctx.new_tensor_1d(F32, 7, name="params")
    for k, shape in enumerate(shapes):
        ne = tuple(reversed(shape))
        w, g, m, v = (ctx.new_tensor(F32, ne, name=f"{n}{k}") for n in "wgmv")
        set_param(w)
        graph.build_forward_expand(ops.opt_step_adamw(ctx, w, g, m, v, params))
        slots.append((shape, w, g, m, v))
    alloc_ctx_tensors(ctx, BufferType("CPU"))
    # weight decay on: keep != 1 exercises the w*keep pass as well
    p = np.array([1e-2, 0.9, 0.999, 1e-8, 0.05, 1 / (1 - 0.9**2), 1 / (1 - 0.999**2)], dtype=np.float32)
    tensor_set(params, p)
    want = []
    for shape, w, g, m, v in slots:
        vals = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
        vals.append(rng.uniform(0, 1, shape).astype(np.float32))
        for t, a in zip((w, g, m, v), vals):
            tensor_set(t, a)
        want.append(ggml_adamw(*vals, p))
    for _ in range(2):  # twice: the second step starts from the first's m, v, w
        for node in graph.nodes:
            compute_forward(node)
        nxt = []
        for (shape, w, g, m, v), (w2, m2, v2) in zip(slots, want):
            assert np.array_equal(tensor_get(w).reshape(shape), w2)
            assert np.array_equal(tensor_get(m).reshape(shape), m2)
            assert np.array_equal(tensor_get(v).reshape(shape), v2)
            nxt.append(ggml_adamw(w2, tensor_get(g).reshape(shape), m2, v2, p))
        want = nxt


def test_scratch_slots_are_distinct_and_reused() -> None:
    a = scratch_f32(np, (4, 5), 0)
    b = scratch_f32(np, (4, 5), 1)
    assert a.shape == (4, 5) and a.dtype == np.float32 and a.flags.c_contiguous
    assert not np.shares_memory(a, b)
    a[...] = 1.0
    b[...] = 2.0
    assert float(a.sum()) == 20.0  # writing slot 1 left slot 0 alone
    small = scratch_f32(np, (3,), 0)
    assert np.shares_memory(small, a)  # a smaller request reuses the same memory
