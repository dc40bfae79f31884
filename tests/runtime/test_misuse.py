"""Misuse of the runtime API: every case raises a VizallocError that names the tensor, the
sizes and the bounds — never a bare numpy/Python exception, never a silent write or read
outside the tensor's own bytes. Writing through a stale pointer stays possible: that is a
bug vizalloc exists to show, not one it refuses."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from vizalloc.errors import (
    AllocationError,
    BoundsError,
    ContextError,
    ShapeError,
    UsageError,
    VizallocError,
)
from vizalloc.runtime import F32, I32, Context, Graph, ops
from vizalloc.runtime.backends import CPUBackend, graph_compute
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_alloc, tensor_get, tensor_memset, tensor_set

CPU = BufferType("CPU", alignment=32)


class World:
    """Two neighbouring f32 tensors 'w' (4 elements) and 'n' in one buffer, a 3x4 'm',
    an i32 'idx', an embedding table 'table' (5 rows) and a view-able 'big'."""

    def __init__(self) -> None:
        self.ctx = Context(name="misuse")
        c = self.ctx
        self.w = c.new_tensor_1d(F32, 4, name="w")
        self.n = c.new_tensor_1d(F32, 4, name="n")
        self.m = c.new_tensor_2d(F32, 4, 3, name="m")
        self.idx = c.new_tensor_1d(I32, 3, name="idx")
        self.table = c.new_tensor_2d(F32, 2, 5, name="table")
        self.big = c.new_tensor_1d(F32, 16, name="big")
        self.buf = alloc_ctx_tensors(c, CPU)
        tensor_set(self.n, [9.0, 9.0, 9.0, 9.0])


@dataclass(frozen=True)
class Misuse:
    name: str
    run: Callable[[World], object]
    error: type[VizallocError]
    #: every pattern must appear in the message (the tensor, the sizes, the bounds)
    says: tuple[str, ...]


def _compute(w: World, t: object) -> None:
    g = Graph()
    g.build_forward_expand(t)  # type: ignore[arg-type]
    from vizalloc.runtime.alloc import GraphAllocator

    GraphAllocator(CPU).alloc_graph(g)
    graph_compute(CPUBackend(), g)


def _get_rows(w: World, rows: list[int]) -> None:
    tensor_set(w.idx, rows)
    ctx = Context(name="compute")
    _compute(w, ops.get_rows(ctx, w.table, w.idx))


def _get_rows_back(w: World, rows: list[int]) -> None:
    tensor_set(w.idx, rows)
    ctx = Context(name="compute")
    grads = ctx.new_tensor_2d(F32, 2, 3, name="grads")
    alloc_ctx_tensors(ctx, CPU)
    tensor_set(grads, np.ones(6))
    out = ops.get_rows_back(ctx, grads, w.idx, w.table)
    _compute(w, out)


def _freed(w: World, fn: Callable[[World], object]) -> object:
    w.ctx.free()
    return fn(w)


MISUSES = [
    # -- byte ranges of tensor_set / tensor_get ------------------------------------------
    Misuse("set offset -4", lambda w: tensor_set(w.w, np.ones(1, np.float32), offset=-4), BoundsError,
           ("'w'", r"\[-4, 0\)", r"\[0, 16\)")),
    Misuse("set past the end", lambda w: tensor_set(w.w, np.ones(2, np.float32), offset=12), BoundsError,
           ("'w'", r"\[12, 20\)", r"\[0, 16\)")),
    Misuse("set more bytes than the data", lambda w: tensor_set(w.w, np.ones(1, np.float32), offset=0, nbytes=8),
           BoundsError, ("'w'", "8 bytes", "has 4")),
    Misuse("set negative nbytes", lambda w: tensor_set(w.w, np.ones(1, np.float32), offset=0, nbytes=-4),
           BoundsError, ("'w'", r"\[0, -4\)")),
    Misuse("set float offset", lambda w: tensor_set(w.w, np.ones(1, np.float32), offset=4.0), BoundsError,
           ("'w'", "offset must be an integer")),
    Misuse("get offset -4", lambda w: tensor_get(w.w, offset=-4, nbytes=4), BoundsError, ("'w'", r"\[-4, 0\)")),
    Misuse("get past the end", lambda w: tensor_get(w.w, offset=8, nbytes=16), BoundsError,
           ("'w'", r"\[8, 24\)", r"\[0, 16\)")),
    Misuse("get negative nbytes", lambda w: tensor_get(w.w, offset=0, nbytes=-1), BoundsError, ("'w'",)),
    Misuse("get offset past the end", lambda w: tensor_get(w.w, offset=20), BoundsError, ("'w'", r"\[20, 16\)")),
    Misuse("get string nbytes", lambda w: tensor_get(w.w, offset=0, nbytes="4"), BoundsError, ("'w'", "nbytes")),
    # -- values given to tensor_set -------------------------------------------------------
    Misuse("set a string", lambda w: tensor_set(w.w, "1234"), ShapeError, ("'w'", "numbers")),
    Misuse("set strings", lambda w: tensor_set(w.w, ["a", "b", "c", "d"]), ShapeError, ("'w'", "<U1")),
    Misuse("set objects", lambda w: tensor_set(w.w, [{}, {}, {}, {}]), ShapeError, ("'w'", "object")),
    Misuse("set a ragged list", lambda w: tensor_set(w.m, [[1, 2, 3, 4], [1, 2]]), ShapeError, ("'m'", "rectangular")),
    Misuse("set complex", lambda w: tensor_set(w.w, np.ones(4, np.complex64)), ShapeError, ("'w'", "complex")),
    Misuse("set too many elements", lambda w: tensor_set(w.w, np.ones(5, np.float32)), ShapeError,
           ("'w'", "4 elements", "got 5")),
    Misuse("set NaN into i32", lambda w: tensor_set(w.idx, [0.0, float("nan"), 1.0]), ShapeError,
           ("'idx'", "i32", "nan")),
    Misuse("set a fraction into i32", lambda w: tensor_set(w.idx, np.array([0.5, 1, 2])), ShapeError,
           ("'idx'", "0.5")),
    Misuse("set 2**40 into i32", lambda w: tensor_set(w.idx, [0, 2**40, 1]), ShapeError,
           ("'idx'", "1099511627776", "2147483647")),
    Misuse("set a transposed array", lambda w: tensor_set(w.m, np.ones((4, 3), np.float32)), ShapeError,
           ("'m'", r"\(3, 4\)", r"\(4, 3\)", "transposed")),
    Misuse("memset 300", lambda w: tensor_memset(w.w, 300), ShapeError, ("'w'", "0..255")),
    # -- a freed context ----------------------------------------------------------------------
    Misuse("get after ctx.free", lambda w: _freed(w, lambda w: tensor_get(w.w)), ContextError, ("'w'", "misuse")),
    Misuse("set after ctx.free", lambda w: _freed(w, lambda w: tensor_set(w.w, np.ones(4))), ContextError,
           ("'w'", "freed")),
    Misuse("memset after ctx.free", lambda w: _freed(w, lambda w: tensor_memset(w.w)), ContextError, ("'w'",)),
    Misuse("view after ctx.free", lambda w: _freed(w, lambda w: ops.view_1d(Context(), w.big, 2, 0)),
           ContextError, ("'big'", "freed")),
    # -- views --------------------------------------------------------------------------------
    Misuse("view negative offset", lambda w: ops.view_1d(w.ctx, w.big, 2, -4), ShapeError, ("offset -4",)),
    Misuse("view float offset", lambda w: ops.view_1d(w.ctx, w.big, 2, 4.0), BoundsError, ("offset 4.0",)),
    Misuse("view past the source", lambda w: ops.view_1d(w.ctx, w.big, 4, 56), ShapeError, (r"\[56, 72\)", "64")),
    Misuse("view negative stride", lambda w: ops.view_2d(w.ctx, w.big, 2, 2, -8, 32), BoundsError,
           ("nb\\[1\\]", "-8")),
    Misuse("view stride past the source", lambda w: ops.view_2d(w.ctx, w.big, 2, 4, 32, 0), BoundsError,
           ("'big'", r"\[0, 104\)", "64 bytes")),
    Misuse("view huge stride", lambda w: ops.view_4d(w.ctx, w.big, 1, 1, 1, 2, 4, 4, 2**40, 0), BoundsError,
           ("'big'", "outside")),
    Misuse("view float stride", lambda w: ops.view_2d(w.ctx, w.big, 2, 2, 8.0, 0), BoundsError, ("8.0",)),
    Misuse("view of a view past the root", lambda w: ops.view_1d(w.ctx, ops.view_1d(w.ctx, w.big, 8, 32), 8, 16),
           ShapeError, ("exceed", "64")),
    # -- shapes and op arguments ----------------------------------------------------------------
    Misuse("float dimension", lambda w: Context().new_tensor_1d(F32, 4.0, name="f"), ShapeError, ("'f'", "4.0")),
    Misuse("bool dimension", lambda w: Context().new_tensor_2d(F32, 4, True, name="f"), ShapeError, ("'f'", "True")),
    Misuse("negative dimension", lambda w: Context().new_tensor_1d(F32, -1, name="f"), ShapeError, ("'f'", "-1")),
    Misuse("dimension 2**62", lambda w: Context().new_tensor_1d(F32, 2**62, name="f"), ShapeError, ("'f'", "64-bit")),
    Misuse("float permute axis", lambda w: ops.permute(w.ctx, w.m, 1.5, 0, 2, 3), ShapeError, ("permute", "1.5")),
    Misuse("float concat dim", lambda w: ops.concat(w.ctx, w.m, w.m, 0.5), ShapeError, ("concat", "0.5")),
    Misuse("acc window past a", lambda w: ops.acc(w.ctx, w.big, w.w, 16, 16, 16, 60), BoundsError,
           ("acc", "offset 60", "64 bytes")),
    Misuse("acc negative stride", lambda w: ops.acc(w.ctx, w.big, w.m, -16, 48, 48, 0), BoundsError,
           ("acc", "-16")),
    Misuse("set_1d past a", lambda w: ops.set_1d(w.ctx, w.big, w.w, 56), BoundsError, ("set", "64 bytes")),
    # -- kernels' indices ------------------------------------------------------------------------
    Misuse("get_rows index -1", lambda w: _get_rows(w, [0, -1, 2]), BoundsError,
           ("get_rows", "index -1", "'idx'", "5 rows", "'table'")),
    Misuse("get_rows index past the rows", lambda w: _get_rows(w, [0, 5, 2]), BoundsError,
           ("index 5", "0..4")),
    Misuse("get_rows_back index past the rows", lambda w: _get_rows_back(w, [0, 1, 7]), BoundsError,
           ("get_rows_back", "index 7")),
    # -- buffers and buffer types -----------------------------------------------------------------
    Misuse("alloc_buffer(-64)", lambda w: CPU.alloc_buffer(-64), AllocationError, ("-64", "CPU")),
    Misuse("alloc_buffer(1.5)", lambda w: CPU.alloc_buffer(1.5), AllocationError, ("1.5",)),
    Misuse("context pool of -1 bytes", lambda w: Context(no_alloc=False, mem_size=-1), AllocationError, ("-1",)),
    Misuse("max_size 0", lambda w: BufferType("X", max_size=0), UsageError, ("'X'", "max_size 0")),
    Misuse("max_size -1", lambda w: BufferType("X", max_size=-1), UsageError, ("max_size -1",)),
    Misuse("alignment 48", lambda w: BufferType("X", alignment=48), UsageError, ("alignment 48",)),
    Misuse("tensor over max_size", lambda w: _over_max(), AllocationError,
           ("'big1'", "160 bytes", "128-byte max_size")),
    Misuse("place outside the buffer", lambda w: _outside(), AllocationError, ("'p'", "16 bytes", "offset 24")),
]


def _over_max() -> None:
    ctx = Context()
    ctx.new_tensor_1d(F32, 40, name="big1")
    alloc_ctx_tensors(ctx, BufferType("SMALL", alignment=32, max_size=128))


def _outside() -> None:
    ctx = Context()
    p = ctx.new_tensor_1d(F32, 4, name="p")
    buf = CPU.alloc_buffer(32)
    tensor_alloc(buf, p, buf.base + 24)


@pytest.mark.parametrize("case", MISUSES, ids=lambda c: c.name)
def test_misuse_is_a_clear_error(case: Misuse) -> None:
    world = World()
    before = tensor_get(world.n).copy() if not world.ctx.freed else None
    with pytest.raises(VizallocError) as exc:
        case.run(world)
    assert isinstance(exc.value, case.error), f"{type(exc.value).__name__}: {exc.value}"
    message = str(exc.value)
    for pattern in case.says:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"
    if not world.ctx.freed:
        # the neighbour of 'w' was not touched
        np.testing.assert_array_equal(tensor_get(world.n), before)


def test_the_campaign_counts() -> None:
    assert len(MISUSES) >= 50


def test_float64_and_int_data_are_converted_explicitly() -> None:
    w = World()
    tensor_set(w.w, np.array([0.1, 1e40, -2.5, 3.0]))  # float64 rounds to f32 (1e40: inf, as a C cast)
    assert tensor_get(w.w).tolist()[0] == pytest.approx(0.1) and np.isinf(tensor_get(w.w)[1])
    tensor_set(w.idx, [1.0, 2.0, -3.0])  # whole floats are fine in i32
    assert tensor_get(w.idx).tolist() == [1, 2, -3]
    tensor_set(w.m, np.arange(12).reshape(4, 3).T)  # a transposed array of the right shape, taken by value
    assert tensor_get(w.m).tolist() == np.arange(12).reshape(4, 3).T.tolist()
    tensor_set(w.m, np.arange(12))  # flat data in memory order
    tensor_set(w.m, np.arange(12).reshape(1, 3, 4))  # extra dimensions of 1
    assert tensor_get(w.m).tolist() == np.arange(12).reshape(3, 4).tolist()


def test_a_stale_pointer_still_writes_the_new_owner() -> None:
    # vizalloc shows this bug, so it must stay possible: 'old' keeps its address after its
    # buffer's bytes went to 'new'; writing through 'old' changes 'new'
    buf = CPU.alloc_buffer(64)
    ctx = Context()
    old = ctx.new_tensor_1d(F32, 4, name="old")
    new = ctx.new_tensor_1d(F32, 4, name="new")
    tensor_alloc(buf, old, buf.base)
    tensor_alloc(buf, new, buf.base)  # the allocator reused the bytes; 'old' was never cleared
    tensor_set(new, [1.0, 2.0, 3.0, 4.0])
    tensor_set(old, [7.0, 7.0, 7.0, 7.0])
    assert tensor_get(new).tolist() == [7.0, 7.0, 7.0, 7.0]


def test_a_block_type_takes_and_gives_raw_bytes() -> None:
    from vizalloc.runtime.dtype import DType

    ctx = Context()
    q = ctx.new_tensor_1d(DType.Q8_0, 64, name="q")  # 2 blocks of 32 elements, 34 bytes each
    alloc_ctx_tensors(ctx, CPU)
    assert q.nbytes == 68
    with pytest.raises(ShapeError, match="'q' is q8_0 .*raw bytes as a uint8 array, got float64"):
        tensor_set(q, np.ones(64))
    raw = np.arange(68, dtype=np.uint8)
    tensor_set(q, raw)
    assert tensor_get(q).tolist() == raw.tolist()
    assert tensor_get(q, offset=34, nbytes=2).tolist() == [34, 35]


def test_a_buffer_without_bytes_is_named() -> None:
    from vizalloc.errors import NoMemoryError
    from vizalloc.runtime.buffer import VIRTUAL

    ctx = Context()
    v = ctx.new_tensor_1d(F32, 4, name="v")
    alloc_ctx_tensors(ctx, BufferType("CAPTURED", device=VIRTUAL))
    with pytest.raises(NoMemoryError, match="'v' lives in buffer #.*no bytes"):
        tensor_set(v, np.ones(4, np.float32))
    with pytest.raises(NoMemoryError, match="no bytes"):
        tensor_get(v)
