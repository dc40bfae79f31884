"""The linear allocator and alloc_ctx_tensors (ggml semantics §2-3.1), placement rules,
tensor_set/get with byte ranges, real aliasing, and freed memory (poison / strict)."""

from __future__ import annotations

import numpy as np
import pytest

from vizalloc.errors import (
    AllocationError,
    BoundsError,
    DanglingPointerError,
    NoMemoryError,
    ShapeError,
)
from vizalloc.runtime import F16, F32, I32, Context
from vizalloc.runtime.buffer import POISON, BufferType, Usage, set_strict
from vizalloc.runtime.alloc import TensorAllocator, alloc_ctx_tensors
from vizalloc.runtime.memory import (
    clear_tensor_pointers,
    tensor_alloc,
    tensor_array,
    tensor_get,
    tensor_memset,
    tensor_set,
    view_init,
)
from vizalloc.trace import events as ev

CPU = BufferType("CPU", alignment=32)


@pytest.fixture
def strict():
    set_strict(True)
    yield
    set_strict(False)


# -- the linear allocator -------------------------------------------------------------

def test_tallocr_bumps_by_padded_size() -> None:
    ctx = Context()
    sizes = [3, 8, 1, 17]  # f32 elements: 12, 32, 4, 68 bytes
    ts = [ctx.new_tensor_1d(F32, n) for n in sizes]
    buf = CPU.alloc_buffer(1024)
    talloc = TensorAllocator(buf)
    for t in ts:
        talloc.alloc(t)
    assert [t.offset for t in ts] == [0, 32, 64, 96]
    assert talloc.offset == 96 + 96
    assert all(t.buffer is buf and t.data == buf.base + t.offset for t in ts)


def test_tallocr_out_of_space_names_tensor_and_sizes() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 8, name="a")
    b = ctx.new_tensor_1d(F32, 9, name="big")
    talloc = TensorAllocator(CPU.alloc_buffer(64))
    talloc.alloc(a)
    with pytest.raises(AllocationError) as info:
        talloc.alloc(b)
    assert "'big'" in str(info.value) and "64" in str(info.value) and "32" in str(info.value)
    assert info.value.requested == 64 and info.value.available == 32
    assert b.data is None


def test_tensor_alloc_refuses_what_ggml_asserts() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    buf = CPU.alloc_buffer(32)
    tensor_alloc(buf, a, buf.base)
    with pytest.raises(AllocationError, match="already has memory"):
        tensor_alloc(buf, a, buf.base)
    unplaced_root = ctx.new_tensor_1d(F32, 4)
    with pytest.raises(AllocationError, match="is a view"):
        tensor_alloc(buf, ctx.new_tensor_impl(F32, (2,), unplaced_root, 0), buf.base)
    c = ctx.new_tensor_1d(F32, 4, name="c")
    with pytest.raises(AllocationError, match="'c' needs 16 bytes at offset 24"):
        tensor_alloc(buf, c, buf.base + 24)


# -- alloc_ctx_tensors ----------------------------------------------------------------------

def test_alloc_ctx_tensors_creation_order_and_views() -> None:
    ctx = Context()
    a = ctx.new_tensor_2d(F32, 5, 3)            # 60 -> 64
    v = ctx.new_tensor_impl(F32, (5,), a, 20)   # a view: no bytes of its own
    b = ctx.new_tensor_1d(F16, 7)               # 14 -> 32
    c = ctx.new_tensor_1d(I32, 8)               # 32
    buf = alloc_ctx_tensors(ctx, CPU)
    assert buf is not None and not isinstance(buf, list)
    assert buf.nbytes == 64 + 32 + 32
    assert (a.offset, b.offset, c.offset) == (0, 64, 96)
    assert v.data == a.data + 20 and v.storage is buf


def test_alloc_ctx_tensors_skips_preallocated_and_binds_their_views() -> None:
    weights = Context()
    w = weights.new_tensor_1d(F32, 16)
    wbuf = alloc_ctx_tensors(weights, CPU)
    ctx = Context()
    x = ctx.new_tensor_1d(F32, 4)
    wv = ctx.new_tensor_impl(F32, (4,), w, 32)   # a view of a tensor that already has data
    y = ctx.new_tensor_1d(F32, 4)
    assert wv.data == w.data + 32 and wv.buffer is None  # bound at creation, no buffer yet
    buf = alloc_ctx_tensors(ctx, CPU)
    assert buf.nbytes == 64 and (x.offset, y.offset) == (0, 32)
    assert wv.storage is wbuf and wv.data == w.data + 32


def test_alloc_ctx_tensors_nothing_to_allocate_returns_none() -> None:
    ctx = Context()
    assert alloc_ctx_tensors(ctx, CPU) is None
    ctx.new_tensor_1d(F32, 4)
    alloc_ctx_tensors(ctx, CPU)
    assert alloc_ctx_tensors(ctx, CPU) is None  # every tensor has data now


def test_alloc_ctx_tensors_needs_no_alloc_context() -> None:
    ctx = Context(no_alloc=False, mem_size=1024)
    with pytest.raises(AllocationError, match="no_alloc"):
        alloc_ctx_tensors(ctx, CPU)


def test_alloc_ctx_tensors_splits_at_max_size() -> None:
    # ggml §3.1: close the range when cur > 0 and cur + this > max_size
    small = BufferType("SMALL", alignment=32, max_size=128)
    ctx = Context()
    sizes = [16, 16, 8, 24, 4]  # f32 elements -> padded bytes 64, 64, 32, 96, 32
    ts = [ctx.new_tensor_1d(F32, n, name=f"t{i}") for i, n in enumerate(sizes)]
    bufs = alloc_ctx_tensors(ctx, small, Usage.WEIGHTS)
    assert isinstance(bufs, list)
    # [t0, t1] = 128 fits exactly; t2 starts a new one, t3 fills it to 128; t4 starts a third
    assert [b.nbytes for b in bufs] == [128, 128, 32]
    assert [t.storage for t in ts] == [bufs[0], bufs[0], bufs[1], bufs[1], bufs[2]]
    assert [t.offset for t in ts] == [0, 64, 0, 32, 0]
    assert all(b.usage is Usage.WEIGHTS for b in bufs)


def test_alloc_ctx_tensors_refuses_a_tensor_over_max_size() -> None:
    # ggml asks the backend for a buffer of the tensor's own size; backends that set a
    # max_size (Vulkan, Metal) refuse it and alloc_ctx_tensors returns NULL
    small = BufferType("SMALL", alignment=32, max_size=128)
    ctx = Context()
    ctx.new_tensor_1d(F32, 16, name="fits")
    ctx.new_tensor_1d(F32, 40, name="big")
    with pytest.raises(AllocationError, match="'big' needs 160 bytes, more than the 128-byte max_size"):
        alloc_ctx_tensors(ctx, small)


def test_alloc_ctx_tensors_split_keeps_zero_size_entries_in_range() -> None:
    small = BufferType("SMALL", alignment=32, max_size=64)
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 16)                 # 64
    av = ctx.new_tensor_impl(F32, (4,), a, 16)     # view: contributes 0, stays in a's range
    b = ctx.new_tensor_1d(F32, 1)                  # 32 -> new buffer
    bufs = alloc_ctx_tensors(ctx, small)
    assert [x.nbytes for x in bufs] == [64, 32]
    assert av.storage is bufs[0] and av.data == a.data + 16
    assert b.storage is bufs[1]


def test_alloc_ctx_tensors_respects_alignment_and_alloc_size() -> None:
    padded = BufferType("PAD", alignment=128, alloc_size=lambda t: t.nbytes + 100)
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4)   # 16 + 100 -> 128
    b = ctx.new_tensor_1d(F32, 40)  # 160 + 100 -> 384
    buf = alloc_ctx_tensors(ctx, padded)
    assert (a.offset, b.offset, buf.nbytes) == (0, 128, 512)


def test_alloc_events(recorded) -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4)
    buf = alloc_ctx_tensors(ctx, CPU)
    allocs = [e for e in recorded.events if isinstance(e, ev.BufferAllocated)]
    placed = [e for e in recorded.events if isinstance(e, ev.TensorPlaced)]
    assert [(e.buffer_id, e.nbytes, e.buft) for e in allocs] == [(buf.id, 32, "CPU")]
    assert [(e.tensor_id, e.buffer_id, e.offset, e.by) for e in placed] == [(a.id, buf.id, 0, ev.PlacedBy.TALLOCR)]
    assert placed[0].loc is not None and placed[0].loc.file == __file__


# -- bytes in and out --------------------------------------------------------------------------

def test_tensor_set_get_whole_and_ranges() -> None:
    ctx = Context()
    t = ctx.new_tensor_2d(F32, 4, 3)
    alloc_ctx_tensors(ctx, CPU)
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor_set(t, values)
    np.testing.assert_array_equal(tensor_get(t), values)
    # bytes 8..24 of the tensor are elements 2..5
    raw = tensor_get(t, offset=8, nbytes=16)
    assert raw.dtype == np.uint8 and raw.size == 16
    np.testing.assert_array_equal(raw.view(np.float32), [2, 3, 4, 5])
    tensor_set(t, np.array([-1, -2], dtype=np.float32), offset=16)
    np.testing.assert_array_equal(tensor_get(t).reshape(-1)[3:7], [3, -1, -2, 6])
    # a byte count shorter than the data writes only that many bytes
    tensor_set(t, np.array([7, 8, 9], dtype=np.float32), offset=40, nbytes=8)
    np.testing.assert_array_equal(tensor_get(t).reshape(-1)[9:], [9, 7, 8])  # bytes 40..48: elements 10, 11


def test_tensor_set_get_errors() -> None:
    ctx = Context()
    t = ctx.new_tensor_1d(F32, 4, name="w")
    with pytest.raises(NoMemoryError, match="'w'"):
        tensor_set(t, np.zeros(4, dtype=np.float32))
    with pytest.raises(NoMemoryError, match="'w'"):
        tensor_get(t)
    alloc_ctx_tensors(ctx, CPU)
    with pytest.raises(ShapeError, match="'w' has 4 elements"):
        tensor_set(t, np.zeros(5, dtype=np.float32))
    with pytest.raises(BoundsError, match=r"bytes \[12, 20\) are outside tensor 'w'"):
        tensor_set(t, np.zeros(2, dtype=np.float32), offset=12)


def test_tensor_memset() -> None:
    ctx = Context()
    t = ctx.new_tensor_1d(I32, 3)
    alloc_ctx_tensors(ctx, CPU)
    tensor_memset(t, 1)
    assert tensor_get(t).tolist() == [0x01010101] * 3


def test_io_events(recorded) -> None:
    ctx = Context()
    t = ctx.new_tensor_1d(F32, 4)
    alloc_ctx_tensors(ctx, CPU)
    tensor_set(t, np.ones(4, dtype=np.float32))
    tensor_get(t, offset=4, nbytes=8)
    io = [(type(e).__name__, e.offset, e.nbytes) for e in recorded.events if isinstance(e, (ev.TensorSet, ev.TensorGet))]
    assert io == [("TensorSet", 0, 16), ("TensorGet", 4, 8)]


# -- aliasing is real --------------------------------------------------------------------------

def test_two_tensors_on_the_same_bytes_clobber_each_other() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4)
    b = ctx.new_tensor_1d(I32, 4)
    buf = CPU.alloc_buffer(32)
    tensor_alloc(buf, a, buf.base)
    tensor_alloc(buf, b, buf.base + 8)  # overlaps a's last two elements
    tensor_set(a, np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32))
    tensor_set(b, np.array([0, 0x3F800000, 5, 6], dtype=np.int32))  # 0x3F800000 is 1.0f
    assert tensor_get(a).tolist() == [1.0, 2.0, 0.0, 1.0]
    assert tensor_array(a).base is not None  # a strided view of the buffer, not a copy


def test_views_share_their_roots_bytes() -> None:
    ctx = Context()
    a = ctx.new_tensor_2d(F32, 3, 2)
    row1 = ctx.new_tensor_impl(F32, (3,), a, 12)
    col0 = ctx.new_tensor_impl(F32, (2,), a, 0, nb=(12, 12, 24, 24))
    alloc_ctx_tensors(ctx, CPU)
    tensor_set(a, np.arange(6, dtype=np.float32))
    assert tensor_get(row1).tolist() == [3, 4, 5]
    assert tensor_get(col0).tolist() == [0, 3]
    tensor_set(row1, np.array([9, 9, 9], dtype=np.float32))
    assert tensor_get(a).tolist() == [[0, 1, 2], [9, 9, 9]]


def test_view_init_needs_a_placed_root() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 8, name="root")
    v = ctx.new_tensor_impl(F32, (4,), a, 16, name="v")
    with pytest.raises(NoMemoryError, match="'root'.*'v'"):
        view_init(v)


# -- freed memory ------------------------------------------------------------------------------

def test_freed_buffer_reads_poison() -> None:
    ctx = Context()
    t = ctx.new_tensor_1d(I32, 4)
    buf = alloc_ctx_tensors(ctx, CPU)
    tensor_set(t, np.arange(4, dtype=np.int32))
    buf.free()
    assert buf.freed
    assert tensor_get(t).view(np.uint8).tolist() == [POISON] * 16


def test_freed_buffer_strict_raises(strict) -> None:
    ctx = Context()
    t = ctx.new_tensor_1d(F32, 4, name="dangling")
    buf = alloc_ctx_tensors(ctx, CPU)
    buf.free()
    with pytest.raises(DanglingPointerError, match=f"'dangling' points into buffer #{buf.id}"):
        tensor_get(t)
    with pytest.raises(DanglingPointerError):
        tensor_set(t, np.zeros(4, dtype=np.float32))


def test_freed_addresses_are_never_reused() -> None:
    a = CPU.alloc_buffer(256)
    a.free()
    b = CPU.alloc_buffer(256)
    assert b.base >= a.base + a.nbytes


def test_clear_tensor_pointers(recorded) -> None:
    ctx = Context()
    t = ctx.new_tensor_1d(F32, 4, name="t")
    alloc_ctx_tensors(ctx, CPU)
    clear_tensor_pointers(t, by="clear")
    assert t.data is None and t.buffer is None and t.storage is None
    assert [e.by for e in recorded.events if isinstance(e, ev.TensorCleared)] == ["clear"]
    with pytest.raises(NoMemoryError, match="'t'"):
        tensor_get(t)
