"""Backward graphs as ggml builds them (``ggml_build_backward_expand``, ``ggml_compute_backward``).

``build_backward_expand(ctx, graph, grad_accs)`` appends to ``graph`` the gradient nodes
that ggml appends: the same ops, in the same order, with the same shapes, names
("grad for <src>") and gradient accumulators. Gradients live in ``graph.grads`` and
``graph.grad_accs`` (tensor id -> tensor), ggml's ``grads[]`` / ``grad_accs[]``.

    >>> from vizalloc.runtime import Context, F32, Graph, ops, set_loss, set_param
    >>> from vizalloc.runtime.backward import build_backward_expand, graph_get_grad
    >>> ctx = Context()
    >>> w = ctx.new_tensor_1d(F32, 4); set_param(w)
    >>> loss = ops.sum(ctx, ops.sqr(ctx, w)); set_loss(loss)
    >>> g = Graph(grads=True); g.build_forward_expand(loss)
    >>> build_backward_expand(ctx, g)
    >>> graph_get_grad(g, w).op.name
    'SCALE'

Fidelity: a line-by-line port of ``src/ggml.c`` at d99724f2 for every op vizalloc has.
ggml keys gradients by hash-set slot; vizalloc keys them by tensor id, which gives the
same answers because each tensor owns exactly one slot in a graph. Ops vizalloc does not
model (ROPE, IM2COL, POOL_2D, WIN_PART, the EXPM1/SOFTPLUS unary ops) raise ``GraphError`` where
ggml would build a gradient, and every ``GGML_ASSERT``/``GGML_ABORT`` of the original is a
``GraphError`` naming the tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from vizalloc.errors import GraphError
from vizalloc.runtime import memory, ops
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.tensor import VIEW_OPS, Flag, Op, Tensor, UnaryOp, label

__all__ = ["build_backward_expand", "graph_get_grad", "graph_get_grad_acc", "graph_reset"]

#: ops whose result may be a view of a source without being an in-place op: the backward
#: pass differentiates them (ggml_build_backward_expand's in-place check)
_VIEW_RESULT_OPS = VIEW_OPS | {Op.CPY}


def graph_get_grad(graph: Graph, t: Tensor) -> Tensor | None:
    """``ggml_graph_get_grad``: the gradient of ``t`` in ``graph`` (None if none or not in the graph)."""
    if not graph.contains(t):
        return None
    return graph.grads.get(t.id)


def graph_get_grad_acc(graph: Graph, t: Tensor) -> Tensor | None:
    """``ggml_graph_get_grad_acc``: the gradient accumulator of ``t`` in ``graph``, or None."""
    if not graph.contains(t):
        return None
    return graph.grad_accs.get(t.id)


# -- the four ways ggml updates a source's gradient -------------------------------

def _finish(graph: Graph, src: Tensor, new_grad: Tensor) -> None:
    """Store the new gradient, name it as ggml does, and append it to the graph."""
    graph.grads[src.id] = new_grad
    new_grad.set_name(f"grad for {src.name}")
    graph.build_forward_expand(new_grad)


def _add_or_set(ctx: Context, graph: Graph, src: Tensor, t: Tensor) -> None:
    """``ggml_add_or_set``: accumulate in place into an accumulator, else add, else set."""
    cur = graph.grads.get(src.id)
    if cur is not None:
        inplace = src.id in graph.grad_accs
        new = ops.add_inplace(ctx, cur, t) if inplace else ops.add(ctx, cur, t)
    else:
        new = t
    _finish(graph, src, new)


def _acc_or_set(ctx: Context, graph: Graph, src: Tensor, t: Tensor, nb1: int, nb2: int, nb3: int,
                offset: int) -> None:
    """``ggml_acc_or_set``: the gradient of a view lands in a zero tensor shaped like the source."""
    cur = graph.grads.get(src.id)
    if cur is not None:
        if src.id in graph.grad_accs:
            new = ops.acc_inplace(ctx, cur, t, nb1, nb2, nb3, offset)
        else:
            new = ops.acc(ctx, cur, t, nb1, nb2, nb3, offset)
    else:
        a_zero = ops.scale(ctx, src, 0.0)  # ggml's FIXME: NaN if src holds inf/NaN
        new = ops.acc(ctx, a_zero, t, nb1, nb2, nb3, offset)
    _finish(graph, src, new)


def _add1_or_set(ctx: Context, graph: Graph, src: Tensor, t: Tensor) -> None:
    """``ggml_add1_or_set``: a scalar gradient broadcast over the source."""
    cur = graph.grads.get(src.id)
    if cur is not None:
        inplace = src.id in graph.grad_accs
        new = ops.add1_inplace(ctx, cur, t) if inplace else ops.add1(ctx, cur, t)
    else:
        new = ops.repeat(ctx, t, src)
    _finish(graph, src, new)


def _sub_or_set(ctx: Context, graph: Graph, src: Tensor, t: Tensor) -> None:
    """``ggml_sub_or_set``: subtract from the gradient, or set it to the negation."""
    cur = graph.grads.get(src.id)
    if cur is not None:
        inplace = src.id in graph.grad_accs
        new = ops.sub_inplace(ctx, cur, t) if inplace else ops.sub(ctx, cur, t)
    else:
        new = ops.neg(ctx, t)
    _finish(graph, src, new)


# -- op parameters, read as ggml reads its int32/float op_params --------------------

def _param(t: Tensor, i: int, default: object = None) -> object:
    if i < len(t.op_params):
        return t.op_params[i]
    if default is None:
        raise GraphError(f"tensor {label(t)} ({t.op.name}) lacks op parameter {i}; it was not built by vizalloc.ops")
    return default


def _int_param(t: Tensor, i: int) -> int:
    """ggml's ``ggml_get_op_params_i32``."""
    return int(cast(Any, _param(t, i)))


def _float_param(t: Tensor, i: int, default: float | None = None) -> float:
    """ggml's ``ggml_get_op_params_f32``."""
    return float(cast(Any, _param(t, i, default)))


def _src(t: Tensor, i: int) -> Tensor:
    """Source ``i`` of ``t``, which the op's backward rule reads (ggml reads ``t->src[i]`` unchecked)."""
    s = t.src[i] if i < len(t.src) else None
    if s is None:
        raise GraphError(f"backward of {t.op.name} {label(t)}: source {i} is missing; it was not built by vizalloc.ops")
    return s


def _opt_src(t: Tensor, i: int) -> Tensor | None:
    """Source ``i`` of ``t`` where the op allows none (a mask, freq factors)."""
    return t.src[i] if i < len(t.src) else None


def _unary_op(t: Tensor) -> UnaryOp:
    p = _param(t, 0)
    if isinstance(p, UnaryOp):
        return p
    return UnaryOp(str(getattr(p, "value", p)).upper())


def _same_shape(a: Tensor, b: Tensor) -> bool:
    return a.ne == b.ne


def _is_contiguous(t: Tensor) -> bool:
    """``ggml_is_contiguous``: strides of a fresh tensor, ignoring dimensions of size 1."""
    next_nb = t.type.type_size
    if t.ne[0] != 1 and t.nb[0] != next_nb:
        return False
    next_nb *= t.ne[0]
    for i in range(1, 4):
        if t.ne[i] != 1:
            if t.nb[i] != next_nb:
                return False
            next_nb *= t.ne[i]
    return True


# -- ggml_compute_backward ------------------------------------------------------------

def _compute_backward(ctx: Context, graph: Graph, tensor: Tensor, grads_needed: set[int]) -> None:
    grad = graph_get_grad(graph, tensor)
    if grad is None:
        return
    op = tensor.op
    if op is Op.NONE:
        return  # a leaf: nothing upstream

    def needs(i: int) -> bool:
        s = _opt_src(tensor, i)
        return s is not None and graph.contains(s) and s.id in grads_needed

    n0, n1, n2 = needs(0), needs(1), needs(2)
    src0 = _src(tensor, 0)  # every op with a backward rule has one

    if op is Op.DUP:
        if n0:
            _add_or_set(ctx, graph, src0, grad)
    elif op is Op.ADD:
        src1 = _src(tensor, 1)
        if n0:
            _add_or_set(ctx, graph, src0, grad)
        if n1:
            tmp = grad
            if not _same_shape(src0, src1):
                tmp = ops.repeat_back(ctx, tmp, src1)
            _add_or_set(ctx, graph, src1, tmp)
    elif op is Op.ADD1:
        src1 = _src(tensor, 1)
        if n0:
            _add_or_set(ctx, graph, src0, grad)
        if n1:
            _add_or_set(ctx, graph, src1, ops.mean(ctx, grad))  # ggml's TODO: sum would be right
    elif op is Op.ACC:
        src1 = _src(tensor, 1)
        if n0:
            _add_or_set(ctx, graph, src0, grad)
        if n1:
            nb1, nb2, nb3, offset = (_int_param(tensor, k) for k in range(4))
            view = ops.view_4d(ctx, grad, *src1.ne, nb1, nb2, nb3, offset)
            _add_or_set(ctx, graph, src1, ops.reshape(ctx, ops.cont(ctx, view), src1))
    elif op is Op.SUB:
        src1 = _src(tensor, 1)
        if n0:
            _add_or_set(ctx, graph, src0, grad)
        if n1:
            _sub_or_set(ctx, graph, src1, grad)
    elif op is Op.MUL:
        src1 = _src(tensor, 1)
        if n0:
            _add_or_set(ctx, graph, src0, ops.mul(ctx, grad, src1))
        if n1:
            tmp = ops.mul(ctx, src0, grad)
            if not _same_shape(src0, src1):
                tmp = ops.repeat_back(ctx, tmp, src1)
            _add_or_set(ctx, graph, src1, tmp)
    elif op is Op.DIV:
        src1 = _src(tensor, 1)
        if n0:
            _add_or_set(ctx, graph, src0, ops.div(ctx, grad, src1))
        if n1:
            _sub_or_set(ctx, graph, src1, ops.mul(ctx, grad, ops.div(ctx, tensor, src1)))
    elif op is Op.SQR:
        if n0:
            _add_or_set(ctx, graph, src0, ops.scale(ctx, ops.mul(ctx, src0, grad), 2.0))
    elif op is Op.SQRT:
        if n0:
            _add_or_set(ctx, graph, src0, ops.scale(ctx, ops.div(ctx, grad, tensor), 0.5))
    elif op is Op.LOG:
        if n0:
            _add_or_set(ctx, graph, src0, ops.div(ctx, grad, src0))
    elif op is Op.SIN:
        if n0:
            _add_or_set(ctx, graph, src0, ops.mul(ctx, grad, ops.cos(ctx, src0)))
    elif op is Op.COS:
        if n0:
            _sub_or_set(ctx, graph, src0, ops.mul(ctx, grad, ops.sin(ctx, src0)))
    elif op is Op.SUM:
        if n0:
            _add1_or_set(ctx, graph, src0, grad)
    elif op is Op.SUM_ROWS:
        if n0:
            _add_or_set(ctx, graph, src0, ops.repeat(ctx, grad, src0))
    elif op is Op.MEAN:
        if n0:
            _add1_or_set(ctx, graph, src0, ops.scale(ctx, grad, 1.0 / src0.ne[0]))
    elif op is Op.REPEAT:
        if n0:
            _add_or_set(ctx, graph, src0, ops.repeat_back(ctx, grad, src0))
    elif op is Op.REPEAT_BACK:
        if n0:
            _add_or_set(ctx, graph, src0, ops.repeat(ctx, grad, src0))
    elif op is Op.RMS_NORM:
        if n0:
            eps = _float_param(tensor, 0)
            _add_or_set(ctx, graph, src0, ops.rms_norm_back(ctx, grad, src0, eps))
    elif op is Op.MUL_MAT:
        src1 = _src(tensor, 1)
        _backward_mul_mat(ctx, graph, tensor, grad, src0, src1, n0, n1)
    elif op is Op.SCALE:
        if n0:
            s = _float_param(tensor, 0)
            _add_or_set(ctx, graph, src0, ops.scale(ctx, grad, s))
    elif op is Op.SET:
        src1 = _src(tensor, 1)
        _backward_set(ctx, graph, tensor, grad, src0, src1, n0, n1)
    elif op is Op.CPY:
        # cpy overwrites src1 with src0: tensor = src0 * 1 + src1 * 0
        if n0:
            _add_or_set(ctx, graph, src0, ops.reshape(ctx, grad, src0))
    elif op is Op.CONT:
        if n0:
            cur = graph.grads.get(src0.id)
            if cur is not None and not _is_contiguous(cur):
                raise GraphError(f"backward of CONT {label(tensor)}: the gradient of {label(src0)} is not contiguous")
            if not _is_contiguous(grad) or grad.nelements != src0.nelements:
                raise GraphError(f"backward of CONT {label(tensor)}: gradient {label(grad)} does not fit the source")
            _add_or_set(ctx, graph, src0, grad if _same_shape(tensor, src0) else ops.reshape(ctx, grad, src0))
    elif op is Op.RESHAPE:
        if n0:
            grad_cont = grad if _is_contiguous(grad) else ops.cont(ctx, grad)
            _add_or_set(ctx, graph, src0, ops.reshape(ctx, grad_cont, src0))
    elif op is Op.VIEW:
        if n0:
            _backward_view(ctx, graph, tensor, grad, src0)
    elif op is Op.PERMUTE:
        if n0:
            axes = [_int_param(tensor, k) & 0x3 for k in range(4)]
            axb = [0, 0, 0, 0]
            for k, axis in enumerate(axes):
                axb[axis] = k
            _add_or_set(ctx, graph, src0, ops.permute(ctx, grad, axb[0], axb[1], axb[2], axb[3]))
    elif op is Op.TRANSPOSE:
        if n0:
            _add_or_set(ctx, graph, src0, ops.transpose(ctx, grad))
    elif op is Op.GET_ROWS:
        src1 = _src(tensor, 1)
        if n0:
            _add_or_set(ctx, graph, src0, ops.get_rows_back(ctx, grad, src1, src0))
    elif op in (Op.DIAG_MASK_INF, Op.DIAG_MASK_ZERO):
        if n0:
            n_past = _int_param(tensor, 0)
            _add_or_set(ctx, graph, src0, ops.diag_mask_zero(ctx, grad, n_past))
    elif op is Op.SOFT_MAX:
        if n0:
            scale = _float_param(tensor, 0, 1.0)
            max_bias = _float_param(tensor, 1, 0.0)
            _add_or_set(ctx, graph, src0, ops.soft_max_ext_back(ctx, grad, tensor, scale, max_bias))
        if n1:  # the mask
            raise GraphError(
                f"backward of SOFT_MAX {label(tensor)}: gradients for the mask are not implemented (as in ggml)"
            )
    elif op is Op.ROPE:
        if n0:
            # ggml builds ggml_rope_ext_back / ggml_rope_multi_back here: ops vizalloc does not model
            raise GraphError(f"backward of ROPE {label(tensor)}: vizalloc has no rope ops to build the gradient with")
        if n2:  # freq factors
            raise GraphError(
                f"backward of ROPE {label(tensor)}: gradients for freq factors are not implemented (as in ggml)"
            )
    elif op is Op.UNARY:
        _backward_unary(ctx, graph, tensor, grad, src0, n0)
    elif op is Op.CROSS_ENTROPY_LOSS:
        src1 = _src(tensor, 1)
        if n0:
            _add_or_set(ctx, graph, src0, ops.cross_entropy_loss_back(ctx, grad, src0, src1))
        if n1:
            raise GraphError(
                f"backward of CROSS_ENTROPY_LOSS {label(tensor)}: no gradient for the labels (as in ggml)"
            )
    elif op is Op.GLU:
        _backward_glu(ctx, graph, tensor, grad, src0, _opt_src(tensor, 1), n0, n1)
    else:
        raise GraphError(f"unsupported op for the backward pass: {op.name} (tensor {label(tensor)})")

    for i, n in enumerate((n0, n1, n2)):
        if n:
            src = _src(tensor, i)
            g = graph.grads.get(src.id)
            if g is None or not _same_shape(src, g):
                raise GraphError(
                    f"backward of {op.name} {label(tensor)}: gradient of {label(src)} has shape "
                    f"{None if g is None else list(g.ne)}, expected {list(src.ne)}"
                )


def _backward_mul_mat(ctx: Context, graph: Graph, tensor: Tensor, grad: Tensor, src0: Tensor, src1: Tensor,
                      n0: bool, n1: bool) -> None:
    # tensor [m,p,qq,rr] = src0 [n,m,q1,r1] x src1 [n,p,qq,rr]
    if n0:
        if grad.ne[2] != src1.ne[2] or grad.ne[3] != src1.ne[3]:
            raise GraphError(f"backward of MUL_MAT {label(tensor)}: gradient batch dims do not match src1")
        tmp = ops.out_prod(ctx, src1, grad)  # [n,m,qq,rr]
        if not _same_shape(tmp, src0):
            if tmp.ne[0] != src0.ne[0] or tmp.ne[1] != src0.ne[1] or tmp.ne[3] != 1:
                raise GraphError(f"backward of MUL_MAT {label(tensor)}: broadcast gradient shape {list(tmp.ne)}")
            nr2 = tmp.ne[2] // src0.ne[2]
            nb2 = tmp.nb[2] * nr2
            nb3 = tmp.nb[2]
            tmp = ops.view_4d(ctx, tmp, src0.ne[0], src0.ne[1], src0.ne[2], nr2, tmp.nb[1], nb2, nb3, 0)
            tmp = ops.repeat_back(ctx, tmp, src0)
        _add_or_set(ctx, graph, src0, tmp)
    if n1:
        # transpose the (usually smaller) gradient instead of src0, then out_prod
        _add_or_set(ctx, graph, src1, ops.out_prod(ctx, src0, ops.transpose(ctx, grad)))


def _backward_set(ctx: Context, graph: Graph, tensor: Tensor, grad: Tensor, src0: Tensor, src1: Tensor,
                  n0: bool, n1: bool) -> None:
    nb1, nb2, nb3, offset = (_int_param(tensor, k) for k in range(4))
    if not (n0 or n1):
        return
    if src0.type is not tensor.type:
        raise GraphError(f"backward of SET {label(tensor)}: source type {src0.type.label} != {tensor.type.label}")
    view = ops.view_4d(ctx, grad, *src1.ne, nb1, nb2, nb3, offset)
    if n0:
        tmp = ops.neg(ctx, view)
        _add_or_set(ctx, graph, src0, ops.acc(ctx, grad, tmp, nb1, nb2, nb3, offset))
    if n1:
        _add_or_set(ctx, graph, src1, ops.reshape(ctx, ops.cont(ctx, view), src1))


def _backward_view(ctx: Context, graph: Graph, tensor: Tensor, grad: Tensor, src0: Tensor) -> None:
    offset = _int_param(tensor, 0)
    nb1, nb2, nb3 = tensor.nb[1], tensor.nb[2], tensor.nb[3]
    cur = graph.grads.get(src0.id)
    if cur is not None and src0.type is not cur.type:
        # the gradient is usually f32 while src0 may be another type: rescale the strides
        ng, n0 = cur.type.type_size, src0.type.type_size
        if offset % n0 or nb1 % n0 or nb2 % n0 or nb3 % n0:
            raise GraphError(f"backward of VIEW {label(tensor)}: strides are not multiples of the element size")
        offset, nb1, nb2, nb3 = (offset // n0) * ng, (nb1 // n0) * ng, (nb2 // n0) * ng, (nb3 // n0) * ng
    _acc_or_set(ctx, graph, src0, grad, nb1, nb2, nb3, offset)


def _backward_unary(ctx: Context, graph: Graph, tensor: Tensor, grad: Tensor, src0: Tensor, n0: bool) -> None:
    uop = _unary_op(tensor)
    if uop in (UnaryOp.SGN, UnaryOp.STEP):
        return  # piecewise constant
    if uop is UnaryOp.ABS:
        if n0:
            _add_or_set(ctx, graph, src0, ops.mul(ctx, ops.sgn(ctx, src0), grad))
    elif uop is UnaryOp.NEG:
        if n0:
            _sub_or_set(ctx, graph, src0, grad)
    elif uop is UnaryOp.RELU:
        if n0:
            _add_or_set(ctx, graph, src0, ops.mul(ctx, ops.step(ctx, src0), grad))
    elif uop is UnaryOp.SILU:
        if n0:
            _add_or_set(ctx, graph, src0, ops.silu_back(ctx, grad, src0))
    elif uop is UnaryOp.EXP:
        if n0:
            _add_or_set(ctx, graph, src0, ops.mul(ctx, tensor, grad))
    else:
        raise GraphError(f"unsupported unary op for the backward pass: {uop.name} (tensor {label(tensor)})")


def _backward_glu(ctx: Context, graph: Graph, tensor: Tensor, grad: Tensor, src0: Tensor, src1: Tensor | None,
                  n0: bool, n1: bool) -> None:
    glu = _param(tensor, 0)
    name = str(getattr(glu, "name", glu)).upper()
    if name != "SWIGLU":
        raise GraphError(f"unsupported glu op for the backward pass: {name} (tensor {label(tensor)})")
    if n0:
        if src1 is None:
            raise GraphError(f"backward of GLU {label(tensor)}: only implemented for split swiglu (as in ggml)")
        _add_or_set(ctx, graph, src0, ops.silu_back(ctx, ops.mul(ctx, grad, src1), src0))
    if n1 and src1 is not None:  # n1 says src1 is there
        _add_or_set(ctx, graph, src1, ops.mul(ctx, ops.silu(ctx, src0), grad))


# -- ggml_build_backward_expand ------------------------------------------------------

def _ignored_sources(node: Tensor) -> tuple[bool, ...]:
    """Sources whose gradient cannot affect the output's gradient (ggml's ignore_src)."""
    ignore = [False] * len(node.src)
    if node.op is Op.UNARY and node.src:
        if _unary_op(node) in (UnaryOp.SGN, UnaryOp.STEP):
            ignore[0] = True  # piecewise constant
    elif node.op in (Op.CPY, Op.GET_ROWS, Op.GET_ROWS_BACK, Op.ROPE) and len(ignore) > 1:
        ignore[1] = True  # copy target, row indices, positions
    return tuple(ignore)


def build_backward_expand(ctx: Context, graph: Graph, grad_accs: Sequence[Tensor | None] | None = None) -> None:
    """``ggml_build_backward_expand``: append the backward pass of ``graph`` to ``graph``.

    Args:
        ctx: where the gradient tensors are made.
        graph: a forward graph built with ``Graph(grads=True)`` holding a PARAM and a LOSS node.
        grad_accs: optional accumulators, indexed like ``graph.nodes`` (ggml-opt passes one per
            PARAM node when accumulating, and one for the loss). A node with an accumulator
            gets its gradients added *in place* into it (views of the accumulator).

    The loss gets a fresh f32 accumulator in ``ctx`` when none is given; ``graph_reset``
    writes 1 into it before the first compute.
    """
    if not graph.nodes:
        raise GraphError(f"build_backward_expand: graph #{graph.id} has no nodes; expand the forward pass first")
    if not graph.has_grads:
        raise GraphError(
            f"build_backward_expand: graph #{graph.id} has no gradient slots; create it with Graph(grads=True) "
            "or copy it with dup() from such a graph"
        )
    nodes_f = list(graph.nodes)
    graph.grads.clear()
    graph.grad_accs.clear()
    grads_needed: set[int] = set()

    if not any(n.flags & Flag.PARAM for n in nodes_f):
        raise GraphError("build_backward_expand: no trainable parameters found; call set_param on the weights")
    if not any(n.flags & Flag.LOSS for n in nodes_f):
        raise GraphError("build_backward_expand: no training loss found; call set_loss on the loss")

    for i, node in enumerate(nodes_f):
        if node.type is DType.I32:
            continue
        node_needs_grad = bool(node.flags & (Flag.PARAM | Flag.LOSS))
        ignore = _ignored_sources(node)
        for j, s in enumerate(node.src):
            if s is None or ignore[j] or s.id not in grads_needed:
                continue
            if s.type not in (DType.F32, DType.F16):
                raise GraphError(f"build_backward_expand: {label(s)} needs a gradient but is {s.type.label}")
            node_needs_grad = True
            break
        if not node_needs_grad:
            continue
        if node.view_src is not None and node.op not in _VIEW_RESULT_OPS:
            raise GraphError(
                f"build_backward_expand: in-place op {node.op.name} ({label(node)}) in the forward pass; "
                "use the out-of-place op for tensors that need gradients"
            )
        acc = grad_accs[i] if grad_accs is not None and i < len(grad_accs) else None
        if acc is not None:
            graph.grad_accs[node.id] = acc
            graph.grads[node.id] = acc
        elif node.flags & Flag.LOSS:
            # a loss always needs an accumulator (graph_reset seeds it with 1)
            acc = ctx.new_tensor(DType.F32, node.ne)
            graph.grad_accs[node.id] = acc
            graph.grads[node.id] = acc
        grads_needed.add(node.id)

    for node in reversed(nodes_f):
        # in-place gradient updates only for accumulators; the allocator makes the rest in place
        _compute_backward(ctx, graph, node, grads_needed)


def graph_reset(graph: Graph) -> None:
    """``ggml_graph_reset``: loss gradients to 1, other accumulators to 0, AdamW momenta to 0.

    Needs the accumulators (and momenta) to have memory; raises ``NoMemoryError`` otherwise.
    """
    if not graph.has_grads:
        raise GraphError(f"graph_reset: graph #{graph.id} has no gradient slots")
    for node in graph.nodes:
        grad_acc = graph.grad_accs.get(node.id)
        if node.op is Op.OPT_STEP_ADAMW:
            _set_zero(node.src[2])  # m
            _set_zero(node.src[3])  # v
        if grad_acc is None:
            continue
        if node.flags & Flag.LOSS:
            if grad_acc.type is not DType.F32 or grad_acc.nelements != 1:
                raise GraphError(f"graph_reset: loss accumulator {label(grad_acc)} must be a scalar f32")
            memory.tensor_set(grad_acc, [1.0])
        else:
            _set_zero(grad_acc)


def _set_zero(t: Tensor | None) -> None:
    """``ggml_set_zero`` (through the buffer when the tensor has one, else its data pointer)."""
    if t is None or t.nbytes == 0:
        return
    memory.tensor_memset(t, 0)
