"""Kernels work on the real bytes: tensors placed on the same bytes see each other's
writes, in-place ops and views write their root's memory, and a node that clobbers an
input changes what a later node reads — as in C."""

from __future__ import annotations

import numpy as np
import pytest

from vizalloc.errors import NoMemoryError
from vizalloc.runtime import F16, F32, Context, Graph, ops, set_param
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.kernels import compute_forward
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_alloc, tensor_array, tensor_get, tensor_set


def run(*outs: object) -> None:
    g = Graph()
    for o in outs:
        g.build_forward_expand(o)  # type: ignore[arg-type]
    for n in g.nodes:
        compute_forward(n)


def test_two_tensors_on_the_same_bytes_see_each_others_writes() -> None:
    ctx = Context(name="alias")
    x = ctx.new_tensor_1d(F32, 4, name="x")
    y1 = ops.scale(ctx, x, 2.0)
    y2 = ops.neg(ctx, x)
    y1.set_name("y1")
    y2.set_name("y2")
    buf = BufferType("CPU").alloc_buffer(64)
    tensor_alloc(buf, x, buf.base)
    tensor_alloc(buf, y1, buf.base + 32)
    tensor_alloc(buf, y2, buf.base + 32)  # the same 16 bytes as y1
    tensor_set(x, np.array([1, 2, 3, 4], np.float32))
    compute_forward(y1)
    assert tensor_get(y2).tolist() == [2.0, 4.0, 6.0, 8.0]   # y2 never computed, reads y1's bytes
    compute_forward(y2)
    assert tensor_get(y1).tolist() == [-1.0, -2.0, -3.0, -4.0]  # y2's write clobbered y1
    raw = buf.mem[32:48].view(np.float32)
    assert raw.tolist() == [-1.0, -2.0, -3.0, -4.0]


def test_partial_overlap_clobbers_a_later_read() -> None:
    """A node placed over an input it does not read changes what a later node computes."""
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    b = ctx.new_tensor_1d(F32, 4, name="b")
    s = ops.add(ctx, a, a)        # placed over b's second half
    t = ops.mul(ctx, b, b)        # reads b after s was written
    buf = BufferType("CPU").alloc_buffer(96)
    tensor_alloc(buf, a, buf.base)
    tensor_alloc(buf, b, buf.base + 32)
    tensor_alloc(buf, s, buf.base + 40)
    tensor_alloc(buf, t, buf.base + 64)
    tensor_set(a, np.array([1, 2, 3, 4], np.float32))
    tensor_set(b, np.array([5, 6, 7, 8], np.float32))
    run(s, t)
    assert tensor_get(b).tolist() == [5.0, 6.0, 2.0, 4.0]
    assert tensor_get(t).tolist() == [25.0, 36.0, 4.0, 16.0]


def test_inplace_ops_write_the_source_memory() -> None:
    ctx = Context()
    a = ctx.new_tensor_2d(F32, 3, 2, name="a")
    r = ops.relu_inplace(ctx, ops.scale_inplace(ctx, a, -1.0))
    alloc_ctx_tensors(ctx, BufferType("CPU"))
    tensor_set(a, np.array([[1, -2, 3], [-4, 5, -6]], np.float32))
    run(r)
    assert r.data == a.data
    assert tensor_get(a).tolist() == [[0.0, 2.0, 0.0], [4.0, 0.0, 6.0]]


def test_view_with_offset_writes_inside_its_root() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 8, name="a")
    v = ops.view_1d(ctx, a, 3, 2 * 4)                 # elements 2, 3, 4
    w = ops.add1_inplace(ctx, v, ctx.new_tensor_1d(F32, 1, name="one"))
    alloc_ctx_tensors(ctx, BufferType("CPU"))
    tensor_set(a, np.arange(8, dtype=np.float32))
    tensor_set(ctx.get_tensor("one"), np.array([100], np.float32))  # type: ignore[arg-type]
    run(w)
    assert tensor_get(a).tolist() == [0, 1, 102, 103, 104, 5, 6, 7]


def test_cpy_into_a_strided_view_of_b() -> None:
    ctx = Context()
    src = ctx.new_tensor_2d(F32, 2, 3, name="src")
    b = ctx.new_tensor_2d(F32, 4, 3, name="b")
    cols = ops.view_2d(ctx, b, 2, 3, b.nb[1], 4)      # columns 1..2 of every row of b
    c = ops.cpy(ctx, src, cols)
    alloc_ctx_tensors(ctx, BufferType("CPU"))
    tensor_set(src, np.array([[1, 2], [3, 4], [5, 6]], np.float32))
    tensor_set(b, np.zeros((3, 4), np.float32))
    run(c)
    assert c.name == "b (view) (copy of src)"
    assert tensor_get(b).tolist() == [[0, 1, 2, 0], [0, 3, 4, 0], [0, 5, 6, 0]]


def test_kernels_read_the_current_bytes_through_views() -> None:
    ctx = Context()
    a = ctx.new_tensor_2d(F32, 3, 2, name="a")
    t = ops.cont(ctx, ops.transpose(ctx, a))
    alloc_ctx_tensors(ctx, BufferType("CPU"))
    tensor_set(a, np.array([[1, 2, 3], [4, 5, 6]], np.float32))
    run(t)
    assert tensor_get(t).tolist() == [[1, 4], [2, 5], [3, 6]]
    tensor_array(a)[0, 0, 1, 2] = 60.0   # change one byte range of a, recompute
    compute_forward(t)
    assert tensor_get(t).tolist() == [[1, 4], [2, 5], [3, 60]]


def test_optimizer_step_result_is_the_parameter() -> None:
    ctx = Context()
    w = ctx.new_tensor_1d(F32, 3, name="w")
    set_param(w)
    g = ctx.new_tensor_1d(F32, 3, name="g")
    p = ctx.new_tensor_1d(F32, 2, name="p")
    step = ops.opt_step_sgd(ctx, w, g, p)
    alloc_ctx_tensors(ctx, BufferType("CPU"))
    tensor_set(w, np.array([1, 2, 3], np.float32))
    tensor_set(g, np.array([10, 10, 10], np.float32))
    tensor_set(p, np.array([0.1, 0.0], np.float32))
    run(step)
    assert step.data == w.data
    np.testing.assert_allclose(tensor_get(w), [0.0, 1.0, 2.0], atol=1e-6)


def test_f16_tensor_bytes_are_f16() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    h = ops.cast(ctx, a, F16)
    buf = alloc_ctx_tensors(ctx, BufferType("CPU"))
    tensor_set(a, np.array([1.0, 0.1, 65504, 1e-8], np.float32))
    run(h)
    off = h.data - buf.base  # type: ignore[union-attr,operator]
    raw = buf.mem[off:off + 8].view(np.float16)  # type: ignore[union-attr]
    assert raw.tolist() == np.array([1.0, 0.1, 65504, 1e-8], np.float32).astype(np.float16).tolist()


def test_computing_without_memory_is_a_no_memory_error() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    y = ops.relu(ctx, a)
    with pytest.raises(NoMemoryError, match="has no memory"):
        compute_forward(y)


def test_empty_ops_touch_nothing() -> None:
    ctx = Context()
    a = ctx.new_tensor_2d(F32, 3, 2, name="a")
    views = [ops.transpose(ctx, a), ops.reshape_1d(ctx, a, 6), ops.permute(ctx, a, 1, 0, 2, 3),
             ops.view_1d(ctx, a, 2, 0), ops.view_tensor(ctx, a)]
    buf = alloc_ctx_tensors(ctx, BufferType("CPU"))
    tensor_set(a, np.arange(6, dtype=np.float32))
    before = buf.mem.copy()  # type: ignore[union-attr]
    for v in views:
        compute_forward(v)
    assert (buf.mem == before).all()  # type: ignore[union-attr]


@pytest.mark.parametrize("slot", [0, 1])
def test_in_place_placement_on_either_source_keeps_the_math(slot: int) -> None:
    """The graph allocator may put an in-place-capable node on src0 or src1 (same layout);
    the kernels must still compute the right values."""
    rng = np.random.default_rng(slot)
    dyv = rng.standard_normal((3, 5)).astype(np.float32)
    yv = rng.uniform(0, 1, (3, 5)).astype(np.float32)
    want = {}
    for placed in (False, True):
        ctx = Context()
        dy = ctx.new_tensor_2d(F32, 5, 3, name="dy")
        y = ctx.new_tensor_2d(F32, 5, 3, name="y")
        outs = [ops.soft_max_ext_back(ctx, dy, y, 0.5, 0.0), ops.silu_back(ctx, dy, y),
                ops.rms_norm_back(ctx, dy, y, 1e-6), ops.mul(ctx, dy, y), ops.div(ctx, dy, y)]
        buf = BufferType("CPU").alloc_buffer(64 * 8)
        tensor_alloc(buf, dy, buf.base)
        tensor_alloc(buf, y, buf.base + 64)
        for k, o in enumerate(outs):
            target = (dy, y)[slot] if placed else None
            tensor_alloc(buf, o, target.data if target is not None else buf.base + 128 + 64 * k)  # type: ignore
        for k, o in enumerate(outs):
            tensor_set(dy, dyv)
            tensor_set(y, yv)
            compute_forward(o)
            want.setdefault(k, tensor_get(o))
            np.testing.assert_allclose(tensor_get(o), want[k], rtol=1e-6, err_msg=f"{o.op.name} on src{slot}")
