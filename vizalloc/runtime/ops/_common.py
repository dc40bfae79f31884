"""Shared helpers of the op constructors: ggml's shape predicates, the two ways a
result is made (``ggml_dup_tensor`` / ``ggml_view_tensor``), and ShapeError messages.

    >>> from vizalloc.runtime import Context, F32
    >>> from vizalloc.runtime.ops._common import can_repeat, is_contiguous
    >>> ctx = Context(); a = ctx.new_tensor_2d(F32, 4, 3); b = ctx.new_tensor_1d(F32, 4)
    >>> can_repeat(b, a), is_contiguous(a)
    (True, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vizalloc.errors import ShapeError
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.tensor import MAX_NAME, Op, Tensor, label

#: GGML_MAX_DIMS
MAX_DIMS = 4


def describe(t: Tensor) -> str:
    """``'name' f32[4, 3, 1, 1]`` (``#id`` for an unnamed tensor) for error messages."""
    return f"{label(t)} {t.type.label}{list(t.ne)}"


def fail(op: str, message: str, **tensors: Tensor | None) -> ShapeError:
    """A ShapeError that names the op, the message, and every operand with its shape."""
    parts = [f"{role}={describe(t)}" for role, t in tensors.items() if t is not None]
    where = f" ({', '.join(parts)})" if parts else ""
    return ShapeError(f"{op}: {message}{where}")


def alive(*tensors: Tensor | None) -> None:
    """Every operand's context must still be alive (ContextError otherwise)."""
    for t in tensors:
        if t is not None:
            t.check_alive()


def fmt_name(name: str) -> str:
    """``ggml_format_name``: names are cut to 63 characters like vsnprintf into char[64]."""
    return name[: MAX_NAME - 1]


# -- ggml's predicates (src/ggml.c) -------------------------------------------------

def nelements(t: Tensor) -> int:
    ne = t.ne
    return ne[0] * ne[1] * ne[2] * ne[3]


def is_scalar(t: Tensor) -> bool:
    return t.ne == (1, 1, 1, 1)


def is_vector(t: Tensor) -> bool:
    return t.ne[1] == 1 and t.ne[2] == 1 and t.ne[3] == 1


def is_matrix(t: Tensor) -> bool:
    return t.ne[2] == 1 and t.ne[3] == 1


def is_empty(t: Tensor) -> bool:
    return 0 in t.ne


def is_transposed(t: Tensor) -> bool:
    return t.nb[0] > t.nb[1]


def _is_contiguous_m_n(t: Tensor, m: int, n: int) -> bool:
    # ggml_is_contiguous_m_n: a dimension of size 1 may have any stride
    next_nb = t.type.type_size
    if t.ne[0] != t.type.blck_size and t.nb[0] != next_nb:
        return False
    next_nb *= t.ne[0] // t.type.blck_size
    for i in range(1, n):
        if i > m:
            if t.ne[i] != 1 and t.nb[i] != next_nb:
                return False
            next_nb *= t.ne[i]
        else:
            next_nb = t.ne[i] * t.nb[i]
    return True


def is_contiguous(t: Tensor) -> bool:
    """``ggml_is_contiguous`` (= ``_0``): rows packed, size-1 dimensions may have any stride.

    Differs from ``Tensor.is_contiguous``, which demands the exact strides of a fresh tensor.
    """
    return _is_contiguous_m_n(t, 0, MAX_DIMS)


def is_contiguous_1(t: Tensor) -> bool:
    return _is_contiguous_m_n(t, 1, MAX_DIMS)


def is_contiguous_rows(t: Tensor) -> bool:
    return t.ne[0] == t.type.blck_size or t.nb[0] == t.type.type_size


def is_padded_1d(t: Tensor) -> bool:
    return t.nb[0] == t.type.type_size and t.nb[2] == t.nb[1] * t.ne[1] and t.nb[3] == t.nb[2] * t.ne[2]


def are_same_shape(a: Tensor, b: Tensor) -> bool:
    return a.ne == b.ne


def can_repeat(t0: Tensor, t1: Tensor) -> bool:
    """``ggml_can_repeat``: ``t1`` is a whole-number tiling of ``t0`` in every dimension."""
    if is_empty(t0):
        return is_empty(t1)
    return all(t1.ne[i] % t0.ne[i] == 0 for i in range(MAX_DIMS))


def can_repeat_rows(t0: Tensor, t1: Tensor) -> bool:
    return t0.ne[0] == t1.ne[0] and can_repeat(t0, t1)


# -- making results -------------------------------------------------------------------

def new_result(
    ctx: Any, dtype: DType, ne: Sequence[int], op: Op, src: Sequence[Tensor | None],
    params: tuple[Any, ...] = (), name: str = "",
) -> Tensor:
    """A fresh contiguous tensor carrying ``op`` (``ggml_new_tensor`` then op fields)."""
    return ctx.new_tensor_impl(dtype, tuple(ne), op=op, src=src, op_params=params, name=fmt_name(name))


def view_result(
    ctx: Any, a: Tensor, op: Op, src: Sequence[Tensor | None], params: tuple[Any, ...] = (),
    name: str | None = None,
) -> Tensor:
    """``ggml_view_tensor(a)`` with ``op`` set: same shape and strides, named ``"<a> (view)"``."""
    return ctx.new_tensor_impl(
        a.type, a.ne, a, 0, nb=a.nb, op=op, src=src, op_params=params,
        name=fmt_name(f"{a.name} (view)" if name is None else name),
    )


def dup_or_view(
    ctx: Any, a: Tensor, inplace: bool, op: Op, src: Sequence[Tensor | None], params: tuple[Any, ...] = (),
) -> Tensor:
    """``inplace ? ggml_view_tensor(ctx, a) : ggml_dup_tensor(ctx, a)`` with the op set."""
    if inplace:
        return view_result(ctx, a, op, src, params)
    return new_result(ctx, a.type, a.ne, op, src, params)
