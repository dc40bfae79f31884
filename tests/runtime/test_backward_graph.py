"""The backward graph's structure against ggml itself (ggml-python 0.0.45 as live oracle).

Every model is described once and built twice, through a small adapter: in vizalloc
and in real ggml. The node sequences (op, unary op, name, shape, strides, flags, view
root and offset, sources) and the leaf sequences must be identical; planned with the
graph allocator (vizalloc's ``GraphAllocator`` / ggml's ``ggml_gallocr``), the offset of
every tensor and the buffer size must be too.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import pytest

from vizalloc.errors import GraphError
from vizalloc.runtime import Context, F32, I32, Graph, ops, set_input, set_loss, set_param
from vizalloc.runtime.backward import build_backward_expand, graph_get_grad, graph_get_grad_acc
from vizalloc.runtime.tensor import Flag, Op, UnaryOp

ggml = pytest.importorskip("ggml", reason="ggml-python 0.0.45 is the oracle for backward graphs")


# -- one model description, two runtimes ---------------------------------------------

class VizApi:
    """Builds with vizalloc."""

    def __init__(self) -> None:
        self.ctx = Context(name="model")

    def tensor(self, dtype: str, *ne: int, name: str = "") -> Any:
        return self.ctx.new_tensor_impl({"f32": F32, "i32": I32}[dtype], ne, name=name)

    def param(self, t: Any) -> Any:
        set_param(t)
        return t

    def input(self, t: Any) -> Any:
        set_input(t)
        return t

    def loss(self, t: Any) -> Any:
        set_loss(t)
        return t

    def op(self, name: str, *args: Any) -> Any:
        return getattr(ops, name)(self.ctx, *args)

    def unary(self, name: str, a: Any) -> Any:
        return ops.unary(self.ctx, a, UnaryOp[name.upper()])

    def forward(self, out: Any) -> Graph:
        g = Graph(2048, grads=True)
        g.build_forward_expand(out)
        return g

    def backward(self, gf: Graph, accumulate: bool) -> Graph:
        gb = gf.dup()
        accs = None
        if accumulate:
            accs = [self.ctx.new_tensor(F32, n.ne) if n.flags & (Flag.PARAM | Flag.LOSS) else None for n in gf.nodes]
        build_backward_expand(self.ctx, gb, accs)
        return gb

    def allocate(self, g: Graph) -> tuple[dict[int, int], int]:
        """vizalloc's graph allocator on the CPU buffer type."""
        from vizalloc.runtime.alloc import GraphAllocator
        from vizalloc.runtime.backends import CPU_BUFFER_TYPE

        galloc = GraphAllocator(CPU_BUFFER_TYPE)
        assert galloc.alloc_graph(g)
        offsets = {}
        for i, t in enumerate([*g.leafs, *g.nodes]):
            if t.data is not None and t.buffer is not None:
                offsets[i] = t.offset
        return offsets, galloc.buffer_size(0)

    def describe(self, g: Graph) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        index = {t.id: i for i, t in enumerate([*g.leafs, *g.nodes])}

        def row(t: Any) -> tuple[Any, ...]:
            unary = t.op_params[0].name if t.op is Op.UNARY else None
            root = None if t.view_src is None else index.get(t.view_src.id, "external")
            srcs = tuple(None if s is None else index.get(s.id, "external") for s in t.src)
            return (t.op.name, unary, t.name, tuple(t.ne), tuple(t.nb), t.flags, root, t.view_offs, srcs)

        return [row(t) for t in g.nodes], [row(t) for t in g.leafs]


class GgmlApi:
    """Builds the same with real ggml."""

    def __init__(self) -> None:
        params = ggml.ggml_init_params(mem_size=64 * 1024 * 1024, mem_buffer=None, no_alloc=True)
        self.ctx = ggml.ggml_init(params)

    def close(self) -> None:
        galloc = getattr(self, "_galloc", None)
        if galloc is not None:
            ggml.ggml_gallocr_free(galloc)
        ggml.ggml_free(self.ctx)

    def tensor(self, dtype: str, *ne: int, name: str = "") -> Any:
        ty = {"f32": ggml.GGML_TYPE_F32, "i32": ggml.GGML_TYPE_I32}[dtype]
        nes = (ctypes.c_int64 * len(ne))(*ne)
        t = ggml.ggml_new_tensor(self.ctx, ty, len(ne), nes)
        if name:
            ggml.ggml_set_name(t, name.encode())
        return t

    def param(self, t: Any) -> Any:
        ggml.ggml_set_param(t)
        return t

    def input(self, t: Any) -> Any:
        ggml.ggml_set_input(t)
        return t

    def loss(self, t: Any) -> Any:
        ggml.ggml_set_loss(t)
        return t

    def op(self, name: str, *args: Any) -> Any:
        return getattr(ggml, f"ggml_{name}")(self.ctx, *args)

    def unary(self, name: str, a: Any) -> Any:
        return getattr(ggml, f"ggml_{name}")(self.ctx, a)

    def forward(self, out: Any) -> Any:
        g = ggml.ggml_new_graph_custom(self.ctx, 2048, True)
        ggml.ggml_build_forward_expand(g, out)
        return g

    def backward(self, gf: Any, accumulate: bool) -> Any:
        gb = ggml.ggml_graph_dup(self.ctx, gf, True)
        accs = None
        if accumulate:
            n = ggml.ggml_graph_n_nodes(gf)
            ptr = ctypes.POINTER(ggml.ggml_tensor)
            arr = (ptr * n)()
            for i in range(n):
                node = ggml.ggml_graph_node(gf, i)
                if node.contents.flags & (4 | 8):
                    arr[i] = ggml.ggml_new_tensor(self.ctx, ggml.GGML_TYPE_F32, 4, node.contents.ne)
            accs = ctypes.cast(arr, ctypes.POINTER(ptr))
        ggml.ggml_build_backward_expand(self.ctx, gb, accs)
        return gb

    def allocate(self, g: Any) -> tuple[dict[int, int], int]:
        """ggml_gallocr on the CPU buffer type: offset of every graph tensor, buffer size."""
        ggml.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python truncates it otherwise
        galloc = ggml.ggml_gallocr_new(ggml.ggml_backend_cpu_buffer_type())
        assert ggml.ggml_gallocr_alloc_graph(galloc, g)
        nodes, leafs = self.tensors(g)
        offsets = {}
        for i, t in enumerate([*leafs, *nodes]):
            c = t.contents
            if c.data and c.buffer:
                offsets[i] = c.data - ggml.ggml_backend_buffer_get_base(c.buffer)
        size = ggml.ggml_gallocr_get_buffer_size(galloc, 0)
        self._galloc = galloc  # keep the buffers alive while the caller compares
        return offsets, size

    @staticmethod
    def tensors(g: Any) -> tuple[list[Any], list[Any]]:
        nodes = [ggml.ggml_graph_node(g, i) for i in range(ggml.ggml_graph_n_nodes(g))]
        cg = g.contents
        leafs = [cg.leafs[i] for i in range(cg.n_leafs)]
        return nodes, leafs

    def describe(self, g: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        nodes, leafs = self.tensors(g)
        index = {ctypes.addressof(t.contents): i for i, t in enumerate([*leafs, *nodes])}

        def key(p: Any) -> Any:
            if not p:
                return None
            return index.get(ctypes.cast(p, ctypes.c_void_p).value, "external")

        def row(t: Any) -> tuple[Any, ...]:
            c = t.contents
            op = ggml.ggml_op_name(c.op).decode()
            unary = ggml.ggml_unary_op_name(ggml.ggml_get_unary_op(t)).decode() if op == "UNARY" else None
            srcs = [key(c.src[k]) for k in range(10)]
            while srcs and srcs[-1] is None:
                srcs.pop()
            return (op, unary, c.name.decode(), tuple(c.ne), tuple(c.nb), c.flags, key(c.view_src), c.view_offs,
                    tuple(srcs))

        return [row(t) for t in nodes], [row(t) for t in leafs]


# -- models ----------------------------------------------------------------------------

def mlp(api: Any) -> Any:
    x = api.input(api.tensor("f32", 8, 4, name="x"))
    w1 = api.param(api.tensor("f32", 8, 16, name="w1"))
    b1 = api.param(api.tensor("f32", 16, name="b1"))
    w2 = api.param(api.tensor("f32", 16, 3, name="w2"))
    b2 = api.param(api.tensor("f32", 3, name="b2"))
    labels = api.input(api.tensor("f32", 3, 4, name="labels"))
    h = api.unary("relu", api.op("add", api.op("mul_mat", w1, x), b1))
    logits = api.op("add", api.op("mul_mat", w2, h), b2)
    return api.loss(api.op("cross_entropy_loss", logits, labels))


def mlp_mse(api: Any) -> Any:
    """Two layers with silu and a mean squared error (sub, sqr, sum, scale)."""
    x = api.input(api.tensor("f32", 5, 6, name="x"))
    w1 = api.param(api.tensor("f32", 5, 7, name="w1"))
    w2 = api.param(api.tensor("f32", 7, 2, name="w2"))
    y = api.input(api.tensor("f32", 2, 6, name="y"))
    h = api.unary("silu", api.op("mul_mat", w1, x))
    out = api.op("mul_mat", w2, h)
    err = api.op("sqr", api.op("sub", out, y))
    return api.loss(api.op("scale", api.op("sum", err), 1.0 / 12))


def attention(api: Any, n_embd: int = 8, n_head: int = 2, n_tokens: int = 5, n_vocab: int = 11) -> Any:
    """One pre-norm self-attention block with a causal mask, an embedding and a tied output."""
    hd = n_embd // n_head
    tok_emb = api.param(api.tensor("f32", n_embd, n_vocab, name="tok_emb"))
    tokens = api.input(api.tensor("i32", n_tokens, name="tokens"))
    norm_w = api.param(api.tensor("f32", n_embd, name="norm_w"))
    wq = api.param(api.tensor("f32", n_embd, n_embd, name="wq"))
    wk = api.param(api.tensor("f32", n_embd, n_embd, name="wk"))
    wv = api.param(api.tensor("f32", n_embd, n_embd, name="wv"))
    wo = api.param(api.tensor("f32", n_embd, n_embd, name="wo"))
    targets = api.input(api.tensor("f32", n_vocab, n_tokens, name="targets"))

    x = api.op("get_rows", tok_emb, tokens)  # [n_embd, n_tokens]
    cur = api.op("mul", api.op("rms_norm", x, 1e-5), norm_w)
    q = api.op("reshape_3d", api.op("mul_mat", wq, cur), hd, n_head, n_tokens)
    k = api.op("reshape_3d", api.op("mul_mat", wk, cur), hd, n_head, n_tokens)
    v = api.op("reshape_3d", api.op("mul_mat", wv, cur), hd, n_head, n_tokens)
    q = api.op("permute", q, 0, 2, 1, 3)  # [hd, n_tokens, n_head]
    k = api.op("permute", k, 0, 2, 1, 3)
    kq = api.op("mul_mat", k, q)  # [n_tokens, n_tokens, n_head]
    kq = api.op("diag_mask_inf", kq, 0)
    kq = api.op("soft_max_ext", kq, None, 1.0 / hd ** 0.5, 0.0)
    vt = api.op("cont", api.op("permute", v, 1, 2, 0, 3))  # [n_tokens, hd, n_head]
    kqv = api.op("mul_mat", vt, kq)  # [hd, n_tokens, n_head]
    merged = api.op("cont", api.op("permute", kqv, 0, 2, 1, 3))  # [hd, n_head, n_tokens]
    attn = api.op("mul_mat", wo, api.op("reshape_2d", merged, n_embd, n_tokens))
    h = api.op("add", x, attn)
    logits = api.op("mul_mat", tok_emb, h)  # tied output: [n_vocab, n_tokens]
    return api.loss(api.op("cross_entropy_loss", logits, targets))


def elementwise(api: Any) -> Any:
    """Every element-wise / reduction op with a backward, chained so each needs a gradient."""
    a = api.param(api.tensor("f32", 4, 3, name="a"))
    b = api.param(api.tensor("f32", 4, 3, name="b"))
    c = api.param(api.tensor("f32", 4, 1, name="c"))
    d = api.param(api.tensor("f32", 12, name="d"))
    s = api.param(api.tensor("f32", 1, name="s"))
    t = api.op("add", a, c)  # broadcast -> repeat_back
    t = api.op("mul", t, b)
    # add1 only on vectors: ggml's ADD1 backward takes mean() of the gradient, a row mean
    e = api.op("reshape_2d", api.op("add1", api.op("sqr", d), s), 4, 3)
    t = api.op("div", t, e)
    t = api.op("sub", api.op("sin", t), api.op("cos", a))
    t = api.op("add", t, api.op("log", api.op("sqrt", api.op("add", api.op("sqr", a), e))))
    t = api.unary("abs", api.unary("neg", t))
    t = api.op("add", t, api.unary("exp", api.op("scale", b, 0.1)))
    t = api.op("sum_rows", api.op("transpose", t))
    t = api.op("mean", api.op("repeat", t, api.tensor("f32", 3, 4, name="shape")))
    return api.loss(api.op("sum", api.op("cpy", api.op("cont", t), api.tensor("f32", 1, 4, name="dst"))))


def views(api: Any) -> Any:
    """view, reshape, permute, set, acc and a view whose gradient lands in acc_or_set."""
    a = api.param(api.tensor("f32", 6, 4, name="a"))
    b = api.param(api.tensor("f32", 3, 2, name="b"))
    v = api.op("view_2d", a, 3, 2, 24, 8)
    t = api.op("mul", v, b)
    w = api.op("view_1d", a, 5, 4)
    r = api.op("reshape_2d", api.op("cont", api.op("permute", api.op("reshape_3d", a, 2, 3, 4), 1, 0, 2, 3)), 6, 4)
    s = api.op("set_2d", r, t, 24, 16)
    s = api.op("acc", s, b, 24, 96, 96, 0)
    total = api.op("add", api.op("sum", s), api.op("sum", api.op("sqr", w)))
    return api.loss(total)


MODELS: dict[str, Callable[[Any], Any]] = {
    "mlp": mlp, "mlp_mse": mlp_mse, "attention": attention, "elementwise": elementwise, "views": views,
}


def _build(api: Any, model: Callable[[Any], Any], accumulate: bool) -> tuple[Any, Any]:
    loss = model(api)
    gf = api.forward(loss)
    return gf, api.backward(gf, accumulate)


@pytest.mark.parametrize("accumulate", [False, True], ids=["plain", "grad_accs"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_backward_graph_matches_ggml(model: str, accumulate: bool) -> None:
    gapi = GgmlApi()
    try:
        _, gb_ref = _build(gapi, MODELS[model], accumulate)
        ref_nodes, ref_leafs = gapi.describe(gb_ref)
    finally:
        gapi.close()
    vapi = VizApi()
    _, gb = _build(vapi, MODELS[model], accumulate)
    nodes, leafs = vapi.describe(gb)
    assert len(nodes) == len(ref_nodes)
    for i, (mine, ref) in enumerate(zip(nodes, ref_nodes)):
        assert mine == ref, f"node {i} differs"
    assert leafs == ref_leafs
    # the backward pass really added gradient nodes
    assert sum(1 for row in nodes if row[2].startswith("grad for")) >= 2


@pytest.mark.parametrize("accumulate", [False, True], ids=["plain", "grad_accs"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_backward_graph_offsets_match_gallocr(model: str, accumulate: bool) -> None:
    """Planned with the graph allocator, every tensor of the backward graph lands at ggml's offset."""
    gapi = GgmlApi()
    try:
        _, gb_ref = _build(gapi, MODELS[model], accumulate)
        ref_offsets, ref_size = gapi.allocate(gb_ref)
    finally:
        gapi.close()
    vapi = VizApi()
    _, gb = _build(vapi, MODELS[model], accumulate)
    offsets, size = vapi.allocate(gb)
    assert size == ref_size
    assert len(offsets) == len(ref_offsets) == len(gb.nodes) + len(gb.leafs)
    assert offsets == ref_offsets


def test_gradient_slots_and_accumulators() -> None:
    api = VizApi()
    loss = mlp(api)
    gf = api.forward(loss)
    gb = api.backward(gf, accumulate=True)
    params = [t for t in gf.nodes if t.flags & Flag.PARAM]
    assert len(params) == 4
    for p in params:
        acc = graph_get_grad_acc(gb, p)
        grad = graph_get_grad(gb, p)
        assert acc is not None and acc.op is Op.NONE
        # the accumulation is an in-place add: a view of the accumulator
        assert grad is not None and grad.op is Op.ADD and grad.view_src is acc
    # without accumulators the loss still gets one, and parameters get plain gradient nodes
    gb2 = api.backward(gf, accumulate=False)
    assert graph_get_grad_acc(gb2, loss) is not None
    assert all(graph_get_grad_acc(gb2, p) is None and graph_get_grad(gb2, p) is not None for p in params)
    # a tensor outside the graph has no gradient
    assert graph_get_grad(gb2, api.tensor("f32", 2)) is None


def test_backward_errors_name_the_problem() -> None:
    ctx = Context()
    w = ctx.new_tensor_1d(F32, 4, name="w")
    loss = ops.sum(ctx, w)
    g = Graph(grads=True)
    g.build_forward_expand(loss)
    with pytest.raises(GraphError, match="set_param"):
        build_backward_expand(ctx, g)
    set_param(w)
    g2 = Graph(grads=True)
    g2.build_forward_expand(ops.sum(ctx, ops.sqr(ctx, w)))
    with pytest.raises(GraphError, match="set_loss"):
        build_backward_expand(ctx, g2)
    g3 = Graph(grads=False)
    l3 = ops.sum(ctx, ops.sqr(ctx, w))
    set_loss(l3)
    g3.build_forward_expand(l3)
    with pytest.raises(GraphError, match="grads=True"):
        build_backward_expand(ctx, g3)
    # in-place forward ops cannot be differentiated
    l4 = ops.sum(ctx, ops.sqr_inplace(ctx, ops.scale(ctx, w, 2.0)))
    set_loss(l4)
    g4 = Graph(grads=True)
    g4.build_forward_expand(l4)
    with pytest.raises(GraphError, match="in-place"):
        build_backward_expand(ctx, g4)
    # ggml asserts on ADD1 of a matrix (its backward takes a row mean); so does vizalloc
    m = ctx.new_tensor_2d(F32, 4, 3, name="m")
    s = ctx.new_tensor_1d(F32, 1, name="s")
    set_param(m)
    set_param(s)
    l5 = ops.sum(ctx, ops.add1(ctx, m, s))
    set_loss(l5)
    g5 = Graph(grads=True)
    g5.build_forward_expand(l5)
    with pytest.raises(GraphError, match="gradient of 's' has shape"):
        build_backward_expand(ctx, g5)
