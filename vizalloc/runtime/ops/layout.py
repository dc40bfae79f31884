"""Ops that copy, view or rearrange data: dup, cpy, cast, cont, view, reshape, permute,
transpose, get_rows, concat, repeat, acc, set — with ggml's shapes, strides and names.

    >>> from vizalloc.runtime import Context, F32, ops
    >>> ctx = Context(); a = ctx.new_tensor_2d(F32, 4, 3, name="a")
    >>> t = ops.transpose(ctx, a)
    >>> t.name, t.ne, t.nb, t.view_src is a
    ('a (transposed)', (3, 4, 1, 1), (16, 4, 48, 48), True)
"""

from __future__ import annotations

from vizalloc.errors import BoundsError
from vizalloc.runtime.buffer import whole_number
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.ops._common import (
    MAX_DIMS, alive, can_repeat, dup_or_view, fail, fmt_name, is_contiguous, is_empty,
    is_matrix, is_vector, nelements, new_result, view_result,
)
from vizalloc.runtime.tensor import Op, Tensor, contiguous_strides
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

# -- copies -------------------------------------------------------------------------------

def _dup_impl(ctx: Context, a: Tensor, inplace: bool) -> Tensor:
    alive(a)
    return dup_or_view(ctx, a, inplace, Op.DUP, [a])


def dup(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_dup``: a contiguous copy of ``a`` (op DUP)."""
    return _dup_impl(ctx, a, False)


def dup_inplace(ctx: Context, a: Tensor) -> Tensor:
    return _dup_impl(ctx, a, True)


def cpy(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_cpy``: copy ``a`` into ``b``; the result is a *view of b* with op CPY."""
    alive(a, b)
    if nelements(a) != nelements(b):
        raise fail("cpy", f"a has {nelements(a)} elements, b has {nelements(b)}; they must be equal", a=a, b=b)
    name = f"{b.name} (copy of {a.name})" if b.name else f"{a.name} (copy)"
    return view_result(ctx, b, Op.CPY, [a, b], name=name)


def cast(ctx: Context, a: Tensor, dtype: DType) -> Tensor:
    """``ggml_cast``: a new ``dtype`` tensor of ``a``'s shape, op CPY, ``src = [a, itself]``.

    ggml makes the result its own second source (for backends that expect cpy's
    ``src[1]``); the graph allocator counts that self-reference, so it is kept.
    The ``TensorCreated`` event cannot name an id that does not exist yet, so the
    self-reference is recorded right after it as a ``TensorSrcSet``.
    """
    alive(a)
    t = new_result(ctx, dtype, a.ne, Op.CPY, [a], name=f"{a.name} (copy)")
    t.src.append(t)
    if recorder.active():
        recorder.emit(ev.TensorSrcSet, t.id, 1, t.id)
    return t


def cont(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_cont``: a contiguous copy (op CONT), named ``"<a> (cont)"``."""
    alive(a)
    return new_result(ctx, a.type, a.ne, Op.CONT, [a], name=f"{a.name} (cont)")


def cont_4d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
    """``ggml_cont_4d``: contiguous copy with a new shape of the same element count."""
    alive(a)
    if nelements(a) != ne0 * ne1 * ne2 * ne3:
        raise fail("cont_4d", f"new shape {[ne0, ne1, ne2, ne3]} has {ne0 * ne1 * ne2 * ne3} elements, "
                   f"a has {nelements(a)}", a=a)
    return new_result(ctx, a.type, (ne0, ne1, ne2, ne3), Op.CONT, [a], name=f"{a.name} (cont)")


def cont_1d(ctx: Context, a: Tensor, ne0: int) -> Tensor:
    return cont_4d(ctx, a, ne0, 1, 1, 1)


def cont_2d(ctx: Context, a: Tensor, ne0: int, ne1: int) -> Tensor:
    return cont_4d(ctx, a, ne0, ne1, 1, 1)


def cont_3d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
    return cont_4d(ctx, a, ne0, ne1, ne2, 1)


# -- views ----------------------------------------------------------------------------------

def _view_impl(ctx: Context, a: Tensor, ne: tuple[int, ...], nb: tuple[int, int, int, int], offset: int) -> Tensor:
    alive(a)
    if offset < 0 or any(n < 0 for n in ne):
        raise fail("view", f"shape {list(ne)} and offset {offset} must be non-negative", a=a)
    return ctx.new_tensor_impl(
        a.type, ne, a, offset, nb=nb, op=Op.VIEW, src=[a], op_params=(offset,),
        name=fmt_name(f"{a.name} (view)"),
    )


def view_1d(ctx: Context, a: Tensor, ne0: int, offset: int) -> Tensor:
    """``ggml_view_1d``: ``ne0`` elements of ``a`` from byte ``offset`` (op VIEW)."""
    ne = (ne0, 1, 1, 1)
    return _view_impl(ctx, a, (ne0,), contiguous_strides(a.type, ne), offset)


def view_2d(ctx: Context, a: Tensor, ne0: int, ne1: int, nb1: int, offset: int) -> Tensor:
    """``ggml_view_2d``: rows ``nb1`` bytes apart; ``nb2 = nb3 = nb1 * ne1``."""
    ts = a.type.type_size
    return _view_impl(ctx, a, (ne0, ne1), (ts, nb1, nb1 * ne1, nb1 * ne1), offset)


def view_3d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, nb1: int, nb2: int, offset: int) -> Tensor:
    """``ggml_view_3d``: given ``nb1, nb2``; ``nb3 = nb2 * ne2``."""
    ts = a.type.type_size
    return _view_impl(ctx, a, (ne0, ne1, ne2), (ts, nb1, nb2, nb2 * ne2), offset)


def view_4d(
    ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, nb1: int, nb2: int, nb3: int, offset: int
) -> Tensor:
    """``ggml_view_4d``: every stride given."""
    ts = a.type.type_size
    return _view_impl(ctx, a, (ne0, ne1, ne2, ne3), (ts, nb1, nb2, nb3), offset)


def view_tensor(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_view_tensor``: an op-NONE view with ``a``'s shape and strides."""
    alive(a)
    return view_result(ctx, a, Op.NONE, [])


def _reshape_impl(ctx: Context, a: Tensor, ne: tuple[int, ...], opname: str) -> Tensor:
    alive(a)
    if not is_contiguous(a):
        raise fail(opname, f"a must be contiguous (strides {list(a.nb)}); make it so with ops.cont first", a=a)
    n = 1
    for x in ne:
        n *= x
    if n != nelements(a):
        raise fail(opname, f"new shape {list(ne)} has {n} elements, a has {nelements(a)}", a=a)
    return ctx.new_tensor_impl(a.type, ne, a, 0, op=Op.RESHAPE, src=[a], name=fmt_name(f"{a.name} (reshaped)"))


def reshape(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_reshape``: ``a`` seen with ``b``'s shape (only b's shape matters)."""
    alive(b)
    return _reshape_impl(ctx, a, b.ne, "reshape")


def reshape_1d(ctx: Context, a: Tensor, ne0: int) -> Tensor:
    return _reshape_impl(ctx, a, (ne0,), "reshape_1d")


def reshape_2d(ctx: Context, a: Tensor, ne0: int, ne1: int) -> Tensor:
    return _reshape_impl(ctx, a, (ne0, ne1), "reshape_2d")


def reshape_3d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
    return _reshape_impl(ctx, a, (ne0, ne1, ne2), "reshape_3d")


def reshape_4d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
    return _reshape_impl(ctx, a, (ne0, ne1, ne2, ne3), "reshape_4d")


def permute(ctx: Context, a: Tensor, axis0: int, axis1: int, axis2: int, axis3: int) -> Tensor:
    """``ggml_permute``: source dimension ``i`` becomes result dimension ``axis_i``."""
    alive(a)
    given = (axis0, axis1, axis2, axis3)
    axes = tuple(-1 if v is None else v for v in map(whole_number, given))
    if sorted(axes) != [0, 1, 2, 3]:
        raise fail("permute", f"axes {list(given)!r:.60} must be a permutation of 0..3", a=a)
    ne = [0] * MAX_DIMS
    nb = [0] * MAX_DIMS
    for i, ax in enumerate(axes):
        ne[ax] = a.ne[i]
        nb[ax] = a.nb[i]
    return ctx.new_tensor_impl(
        a.type, tuple(ne), a, 0, nb=tuple(nb), op=Op.PERMUTE, src=[a], op_params=axes,
        name=fmt_name(f"{a.name} (permuted)"),
    )


def transpose(ctx: Context, a: Tensor) -> Tensor:
    """``ggml_transpose``: swap dimensions 0 and 1 (a view, op TRANSPOSE)."""
    alive(a)
    ne = (a.ne[1], a.ne[0], a.ne[2], a.ne[3])
    nb = (a.nb[1], a.nb[0], a.nb[2], a.nb[3])
    return ctx.new_tensor_impl(a.type, ne, a, 0, nb=nb, op=Op.TRANSPOSE, src=[a],
                               name=fmt_name(f"{a.name} (transposed)"))


# -- gathering and tiling ---------------------------------------------------------------------

def get_rows(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_get_rows``: rows of ``a`` picked by the i32 indices ``b``; f32 result (i32 for i32 ``a``)."""
    alive(a, b)
    if b.type is not DType.I32:
        raise fail("get_rows", f"indices must be i32, got {b.type.label}", a=a, b=b)
    if a.ne[2] != b.ne[1] or a.ne[3] != b.ne[2] or b.ne[3] != 1:
        raise fail("get_rows", "need a.ne[2] == b.ne[1], a.ne[3] == b.ne[2] and b.ne[3] == 1", a=a, b=b)
    dtype = DType.I32 if a.type is DType.I32 else DType.F32
    return new_result(ctx, dtype, (a.ne[0], b.ne[0], b.ne[1], b.ne[2]), Op.GET_ROWS, [a, b])


def get_rows_back(ctx: Context, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """``ggml_get_rows_back``: scatter-add rows of ``a`` at indices ``b`` into a ``c``-shaped f32 tensor."""
    alive(a, b, c)
    if not (is_matrix(a) and is_vector(b) and b.type is DType.I32):
        raise fail("get_rows_back", "a must be a matrix and b an i32 vector", a=a, b=b)
    if not (is_matrix(c) and a.ne[0] == c.ne[0]):
        raise fail("get_rows_back", "c must be a matrix with c.ne[0] == a.ne[0]", a=a, c=c)
    return new_result(ctx, DType.F32, (c.ne[0], c.ne[1]), Op.GET_ROWS_BACK, [a, b])


def concat(ctx: Context, a: Tensor, b: Tensor, dim: int) -> Tensor:
    """``ggml_concat``: ``a`` then ``b`` along ``dim``; every other dimension must match."""
    alive(a, b)
    d = whole_number(dim)
    if d is None or not 0 <= d < MAX_DIMS:
        raise fail("concat", f"dim {dim!r:.20} must be in 0..3", a=a, b=b)
    dim = d
    if a.type is not b.type:
        raise fail("concat", "a and b must have the same type", a=a, b=b)
    ne = []
    for d in range(MAX_DIMS):
        if d == dim:
            ne.append(a.ne[d] + b.ne[d])
        elif a.ne[d] != b.ne[d]:
            raise fail("concat", f"dimension {d} differs ({a.ne[d]} vs {b.ne[d]}); only dim {dim} may", a=a, b=b)
        else:
            ne.append(a.ne[d])
    return new_result(ctx, a.type, ne, Op.CONCAT, [a, b], (dim,))


def repeat(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_repeat``: tile ``a`` to ``b``'s shape (every ``b.ne[i]`` a multiple of ``a.ne[i]``)."""
    alive(a, b)
    if not can_repeat(a, b):
        raise fail("repeat", "every dimension of b must be a multiple of a's (ggml_can_repeat)", a=a, b=b)
    return new_result(ctx, a.type, b.ne, Op.REPEAT, [a])


def repeat_4d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
    """``ggml_repeat_4d``: tile ``a`` to the given shape."""
    alive(a)
    ne = (ne0, ne1, ne2, ne3)
    if not (is_empty(a) or all(ne[i] % a.ne[i] == 0 for i in range(MAX_DIMS))):
        raise fail("repeat_4d", f"shape {list(ne)} is not a multiple of a's in every dimension", a=a)
    return new_result(ctx, a.type, ne, Op.REPEAT, [a])


def repeat_back(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_repeat_back``: sum the tiles of ``a`` down to ``b``'s shape."""
    alive(a, b)
    if not can_repeat(b, a):
        raise fail("repeat_back", "every dimension of a must be a multiple of b's (ggml_can_repeat)", a=a, b=b)
    return new_result(ctx, a.type, b.ne, Op.REPEAT_BACK, [a])


# -- acc and set --------------------------------------------------------------------------------

def check_window(op: str, a: Tensor, b: Tensor, nb: tuple[int, int, int], offset: int) -> None:
    """The window of ``a`` that acc/set write ``b`` into (``b``'s shape, element size of
    ``a``, row strides ``nb``, byte ``offset``) must lie inside ``a``'s own bytes."""
    es = a.type.type_size
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (*nb, offset)):
        raise BoundsError(f"{op}: offset {offset!r:.40} and strides {list(nb)!r:.80} must be whole numbers of bytes")
    if 0 in b.ne:
        return
    if offset < 0 or min(nb) < 0:
        raise BoundsError(f"{op}: offset {offset} and strides {list(nb)} must be 0 or more (ggml's size_t)")
    end = offset + es + (b.ne[0] - 1) * es + (b.ne[1] - 1) * nb[0] + (b.ne[2] - 1) * nb[1] + (b.ne[3] - 1) * nb[2]
    if end > a.nbytes:
        raise BoundsError(
            f"{op}: the window at offset {offset} with strides {list(nb)} for b {list(b.ne)} reaches byte "
            f"{end}, beyond tensor {a.name or a.id!r}'s {a.nbytes} bytes"
        )


def _acc_impl(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int,
              inplace: bool) -> Tensor:
    alive(a, b)
    name = "acc_inplace" if inplace else "acc"
    if nelements(b) > nelements(a):
        raise fail(name, f"b has more elements ({nelements(b)}) than a ({nelements(a)})", a=a, b=b)
    if not is_contiguous(a):
        raise fail(name, "a must be contiguous", a=a)
    if a.type is not DType.F32 or b.type is not DType.F32:
        raise fail(name, "a and b must be f32", a=a, b=b)
    check_window(name, a, b, (nb1, nb2, nb3), offset)
    return dup_or_view(ctx, a, inplace, Op.ACC, [a, b], (nb1, nb2, nb3, offset, 1 if inplace else 0))


def acc(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int) -> Tensor:
    """``ggml_acc``: ``a`` with ``b`` added into the view (nb1, nb2, nb3, offset) of it."""
    return _acc_impl(ctx, a, b, nb1, nb2, nb3, offset, False)


def acc_inplace(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int) -> Tensor:
    return _acc_impl(ctx, a, b, nb1, nb2, nb3, offset, True)


def _set_impl(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int,
              inplace: bool) -> Tensor:
    alive(a, b)
    name = "set_inplace" if inplace else "set"
    if nelements(a) < nelements(b):
        raise fail(name, f"b has more elements ({nelements(b)}) than a ({nelements(a)})", a=a, b=b)
    if not 0 <= offset < (1 << 30):
        raise fail(name, f"offset {offset} must be in [0, 2**30)", a=a)
    check_window(name, a, b, (nb1, nb2, nb3), offset)
    return dup_or_view(ctx, a, inplace, Op.SET, [a, b], (nb1, nb2, nb3, offset, 1 if inplace else 0))


def set(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int) -> Tensor:  # noqa: A001
    """``ggml_set``: ``a`` with the view (nb1, nb2, nb3, offset) of it overwritten by ``b``."""
    return _set_impl(ctx, a, b, nb1, nb2, nb3, offset, False)


def set_inplace(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int) -> Tensor:
    return _set_impl(ctx, a, b, nb1, nb2, nb3, offset, True)


def set_1d(ctx: Context, a: Tensor, b: Tensor, offset: int) -> Tensor:
    return _set_impl(ctx, a, b, a.nb[1], a.nb[2], a.nb[3], offset, False)


def set_1d_inplace(ctx: Context, a: Tensor, b: Tensor, offset: int) -> Tensor:
    return _set_impl(ctx, a, b, a.nb[1], a.nb[2], a.nb[3], offset, True)


def set_2d(ctx: Context, a: Tensor, b: Tensor, nb1: int, offset: int) -> Tensor:
    return _set_impl(ctx, a, b, nb1, a.nb[2], a.nb[3], offset, False)


def set_2d_inplace(ctx: Context, a: Tensor, b: Tensor, nb1: int, offset: int) -> Tensor:
    return _set_impl(ctx, a, b, nb1, a.nb[2], a.nb[3], offset, True)


__all__ = [
    "acc", "acc_inplace", "cast", "concat", "cont", "cont_1d", "cont_2d", "cont_3d", "cont_4d", "cpy", "dup",
    "dup_inplace", "get_rows", "get_rows_back", "permute", "repeat", "repeat_4d", "repeat_back", "reshape",
    "reshape_1d", "reshape_2d", "reshape_3d", "reshape_4d", "set", "set_1d", "set_1d_inplace", "set_2d",
    "set_2d_inplace", "set_inplace", "transpose", "view_1d", "view_2d", "view_3d", "view_4d", "view_tensor",
]
