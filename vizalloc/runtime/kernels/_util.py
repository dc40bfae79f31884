"""The kernel registry and the array helpers every kernel uses.

Kernels are written once against the array module ``xp`` of the destination's memory
(``t.storage.xp``: numpy, or cupy for CUDA buffers) and read and write the real bytes
through ``vizalloc.runtime.memory.tensor_array``.

    >>> from vizalloc.runtime.kernels._util import split_for_tiling
    >>> split_for_tiling((1, 1, 6, 4), (1, 1, 2, 4))    # ggml repeats b 3 times along rows
    ((1, 1, 3, 2, 4), (1, 1, 1, 2, 4))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vizalloc.runtime.dtype import DType
from vizalloc.runtime.memory import tensor_array
from vizalloc.runtime.tensor import Op, Tensor

Kernel = Callable[[Tensor], None]
Supports = Callable[[Tensor], bool]

#: op -> (kernel, predicate saying whether the kernel handles this tensor's types)
KERNELS: dict[Op, tuple[Kernel, Supports]] = {}

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
FLOAT_TYPES = frozenset({DType.F32, DType.F16})

arr = tensor_array


def register(op: Op, supports: Supports) -> Callable[[Kernel], Kernel]:
    def deco(fn: Kernel) -> Kernel:
        KERNELS[op] = (fn, supports)
        return fn
    return deco


def src_types(t: Tensor, *allowed: frozenset[DType] | set[DType]) -> bool:
    """Whether source ``k`` has a type in ``allowed[k]`` for every ``k`` given (None slots fail)."""
    for k, types in enumerate(allowed):
        if k >= len(t.src) or t.src[k] is None or t.src[k].type not in types:  # type: ignore[union-attr]
            return False
    return True


def all_float(t: Tensor) -> bool:
    """Destination and every source f32 or f16."""
    if t.type not in FLOAT_TYPES:
        return False
    return all(s is None or s.type in FLOAT_TYPES for s in t.src)


def only_f32(t: Tensor) -> bool:
    """ggml CPU computes this op for f32 sources only."""
    return t.src[0] is not None and t.src[0].type is DType.F32


def xp_of(t: Tensor) -> Any:
    return t.storage.xp  # type: ignore[union-attr]


def as_f32(x: Any) -> Any:
    """``x`` as f32 (a copy only when it is not f32 already)."""
    return x if x.dtype == F32 else x.astype(F32)


#: slot -> the flat f32 numpy scratch array kernels reuse between calls
_SCRATCH: dict[int, np.ndarray] = {}


def scratch_f32(xp: Any, shape: tuple[int, ...], slot: int = 0) -> Any:
    """A contiguous f32 work array of ``shape``, reused between calls (ggml's ``wdata``).

    Kernels write intermediates here instead of allocating fresh temporaries: a fresh
    multi-megabyte array costs page faults on every call. ``slot`` tells apart the
    arrays one kernel needs at the same time. The contents are garbage on entry. Only
    numpy arrays are kept (cupy's memory pool already makes device temporaries cheap,
    and a kept one would be tied to one device).
    """
    if xp is not np:
        return xp.empty(shape, dtype=F32)
    n = 1
    for d in shape:
        n *= d
    buf = _SCRATCH.get(slot)
    if buf is None or buf.size < n:
        buf = np.empty(n, dtype=F32)
        _SCRATCH[slot] = buf
    return buf[:n].reshape(shape)


def split_for_tiling(big: tuple[int, ...], small: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Shapes that turn ggml's modulo repetition into numpy broadcasting.

    ggml repeats ``small`` over ``big`` by index modulo (``i % ne_small``), which numpy
    broadcasting only does for sizes 1 and equal. Every other axis is split into
    ``(big / small, small)`` for ``big`` and ``(1, small)`` for ``small``. None when plain
    broadcasting already agrees.
    """
    return _split_axes(big, small, repeat_outer=True)


def split_for_blocks(big: tuple[int, ...], small: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Like ``split_for_tiling`` but for ggml's *block* broadcast of mul_mat / out_prod
    (``i_small = i_big / (ne_big / ne_small)``): axes split into ``(small, big / small)``."""
    return _split_axes(big, small, repeat_outer=False)


def _split_axes(big: tuple[int, ...], small: tuple[int, ...],
                repeat_outer: bool) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Split every axis where ``small`` neither equals ``big`` nor is 1 into a repeat axis
    (size ``big / small``; 1 for ``small``) and an axis of ``small``'s size, the repeat
    axis outside (tiling) or inside (blocks). None when no axis needs splitting."""
    b_out: list[int] = []
    s_out: list[int] = []
    plain = True
    for nb, ns in zip(big, small):
        if ns == nb or ns == 1:
            b_out.append(nb)
            s_out.append(ns)
        elif repeat_outer:
            b_out += [nb // ns, ns]
            s_out += [1, ns]
            plain = False
        else:
            b_out += [ns, nb // ns]
            s_out += [ns, 1]
            plain = False
    return None if plain else (tuple(b_out), tuple(s_out))


def raw_view(t: Tensor, byte_offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    """An array over ``t``'s memory from ``t.data + byte_offset`` with any shape and byte strides."""
    storage = t.storage
    assert storage is not None and t.data is not None
    start = t.data - storage.base + byte_offset
    xp = storage.xp
    if xp is np:
        return np.ndarray(shape, dtype=t.type.numpy, buffer=storage.mem, offset=start, strides=strides)
    return xp.ndarray(shape, dtype=t.type.numpy, memptr=storage.mem.data + start, strides=strides)


def blasable(x: Any) -> bool:
    """Whether numpy's matmul can hand the last two axes of ``x`` to BLAS without its slow loop."""
    if x.ndim < 2:
        return True
    rows, cols = x.shape[-2], x.shape[-1]
    s0, s1 = x.strides[-2], x.strides[-1]
    size = int(x.itemsize)

    def ok(is1: int, is2: int, d2: int) -> bool:
        return is2 == size and is1 % size == 0 and is1 // size >= d2

    return ok(s0, s1, cols) or ok(s1, s0, rows)
