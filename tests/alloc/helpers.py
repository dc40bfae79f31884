"""Small graph-building helpers for allocator tests (shapes given explicitly, no ops module)."""

from __future__ import annotations

from collections.abc import Sequence

from vizalloc.runtime import BufferType, Context, F32, Graph
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.tensor import Flag, Op, Tensor, UnaryOp, contiguous_strides


def cpu(max_size: int | None = None, alignment: int = 32, name: str = "CPU") -> BufferType:
    return BufferType(name, alignment=alignment, max_size=max_size)


def leaf(ctx: Context, *ne: int, name: str = "", flags: int = 0, dtype: DType = F32) -> Tensor:
    t = ctx.new_tensor_impl(dtype, ne, name=name)
    t.flags = flags
    return t


def node(ctx: Context, op: Op, srcs: Sequence[Tensor | None], ne: Sequence[int] | None = None, *,
         name: str = "", flags: int = 0, dtype: DType | None = None) -> Tensor:
    """A compute node with fresh contiguous memory (shape defaults to the first source's)."""
    first = next(s for s in srcs if s is not None)
    params = (UnaryOp.RELU,) if op is Op.UNARY else ()
    t = ctx.new_tensor_impl(dtype or first.type, tuple(ne) if ne is not None else first.ne, op=op, src=list(srcs),
                            op_params=params, name=name)
    t.flags = flags
    return t


def view(ctx: Context, a: Tensor, ne: Sequence[int], offset: int = 0, op: Op = Op.VIEW, name: str = "",
         nb: Sequence[int] | None = None) -> Tensor:
    ne4 = tuple(ne) + (1,) * (4 - len(ne))
    strides = nb or contiguous_strides(a.type, ne4)  # type: ignore[arg-type]
    return ctx.new_tensor_impl(a.type, ne4, a, offset, nb=strides, op=op, src=[a], name=name)


def graph(*roots: Tensor) -> Graph:
    g = Graph()
    for r in roots:
        g.build_forward_expand(r)
    return g


INPUT = int(Flag.INPUT)
OUTPUT = int(Flag.OUTPUT)
