"""Op constructors with ggml's names, shape rules, strides, view semantics, op params
and result names (``ggml_add`` is ``ops.add(ctx, a, b)``). They only build tensors; the
numbers come from ``vizalloc.runtime.kernels`` when a graph is computed.

    >>> from vizalloc.runtime import Context, F32, Graph, ops
    >>> ctx = Context()
    >>> w = ctx.new_tensor_2d(F32, 8, 4, name="w"); x = ctx.new_tensor_2d(F32, 8, 2, name="x")
    >>> y = ops.relu(ctx, ops.mul_mat(ctx, w, x))
    >>> g = Graph(); g.build_forward_expand(y)
    >>> [n.op.name for n in g.nodes], y.ne
    (['MUL_MAT', 'UNARY'], (4, 2, 1, 1))

Where vizalloc knowingly differs from ggml: ``count_equal`` returns i32 (ggml: i64);
``cast``'s self-reference in ``src[1]`` is set after the TensorCreated event.
Shape errors raise ``vizalloc.errors.ShapeError`` naming the op and every operand
(ggml would abort in ``GGML_ASSERT``).
"""

from __future__ import annotations

from vizalloc.runtime.ops._common import can_repeat, is_contiguous
from vizalloc.runtime.ops.arith import *  # noqa: F403
from vizalloc.runtime.ops.arith import __all__ as _arith_all
from vizalloc.runtime.ops.layout import *  # noqa: F403
from vizalloc.runtime.ops.layout import __all__ as _layout_all
from vizalloc.runtime.ops.nn import *  # noqa: F403
from vizalloc.runtime.ops.nn import __all__ as _nn_all
from vizalloc.runtime.ops.reduce import *  # noqa: F403
from vizalloc.runtime.ops.reduce import __all__ as _reduce_all
from vizalloc.runtime.tensor import UnaryOp

__all__ = sorted([*_arith_all, *_layout_all, *_nn_all, *_reduce_all, "UnaryOp", "can_repeat", "is_contiguous"])
