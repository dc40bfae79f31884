"""Reductions: sum, sum_rows, mean, argmax, count_equal.

    >>> from vizalloc.runtime import Context, F32, ops
    >>> ctx = Context(); x = ctx.new_tensor_2d(F32, 5, 3)
    >>> ops.sum_rows(ctx, x).ne, ops.argmax(ctx, x).type.label
    ((1, 3, 1, 1), 'i32')
"""

from __future__ import annotations

from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.ops._common import alive, are_same_shape, fail, is_matrix, new_result
from vizalloc.runtime.tensor import Op, Tensor


def sum(ctx: Context, a: Tensor) -> Tensor:  # noqa: A001
    """``ggml_sum``: one element of ``a``'s type holding the sum of all of ``a``."""
    alive(a)
    return new_result(ctx, a.type, (1,), Op.SUM, [a])


def sum_rows(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_sum_rows``: ``[1, ne1, ne2, ne3]``, each row summed."""
    alive(a)
    return new_result(ctx, a.type, (1, a.ne[1], a.ne[2], a.ne[3]), Op.SUM_ROWS, [a])


def mean(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_mean``: f32 ``[1, ne1, ne2, ne3]``, each row averaged."""
    alive(a)
    return new_result(ctx, DType.F32, (1, a.ne[1], a.ne[2], a.ne[3]), Op.MEAN, [a])


def argmax(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_argmax``: i32 ``[ne1]``, the index of each row's maximum (a must be a matrix)."""
    alive(a)
    if not is_matrix(a):
        raise fail("argmax", "a must be a matrix (ne[2] == ne[3] == 1)", a=a)
    if a.ne[0] > 2**31 - 1:
        raise fail("argmax", "rows longer than INT32_MAX", a=a)
    return new_result(ctx, DType.I32, (a.ne[1],), Op.ARGMAX, [a])


def count_equal(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_count_equal``: how many elements of ``a`` and ``b`` are equal.

    Known difference: ggml's result is one **i64** (8 bytes); vizalloc has no i64 type,
    so the result is one **i32** (4 bytes, nb0 = 4). Counts above 2**31-1 do not fit, and
    a planner sees a 4-byte tensor where ggml sees 8.
    """
    alive(a, b)
    if not are_same_shape(a, b):
        raise fail("count_equal", "a and b must have the same shape", a=a, b=b)
    return new_result(ctx, DType.I32, (1,), Op.COUNT_EQUAL, [a, b])


__all__ = ["argmax", "count_equal", "mean", "sum", "sum_rows"]
