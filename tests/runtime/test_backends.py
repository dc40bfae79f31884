"""Backends: capabilities (ops, buffer types, offload), tensor_copy between memories,
graph_copy (checked against ggml-python's ggml_backend_graph_copy), CUDA availability."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from vizalloc.errors import (
    BackendUnavailableError,
    GraphError,
    NoMemoryError,
    ShapeError,
    UsageError,
    VizallocError,
)
from vizalloc.runtime import F16, F32, Context, Graph, Op, UnaryOp, set_output
from vizalloc.runtime.backends import (
    CPU_BUFFER_TYPE,
    CPUBackend,
    CudaBackend,
    SimBackend,
    alloc_ctx_tensors,
    graph_copy,
    tensor_copy,
)
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.memory import tensor_get, tensor_set
from vizalloc.runtime.tensor import Tensor
from vizalloc.trace import events as ev


def _node(ctx: Context, op: Op, ne: tuple[int, ...], *src: Tensor, params: tuple = (), name: str = "") -> Tensor:
    return ctx.new_tensor_impl(F32, ne, op=op, src=list(src), op_params=params, name=name)


# -- capabilities -----------------------------------------------------------------------

def test_cpu_backend_is_ggmls_cpu() -> None:
    cpu = CPUBackend()
    assert cpu.name == "CPU" and cpu.is_cpu
    buft = cpu.buffer_type
    assert (buft.name, buft.alignment, buft.is_host) == ("CPU", 32, True)
    assert buft.max_size == 2**64 - 1
    assert CPUBackend().buffer_type is buft is CPU_BUFFER_TYPE  # one shared buffer type, as in ggml


def test_cpu_uses_any_host_memory_only() -> None:
    cpu = CPUBackend()
    sim = SimBackend()
    assert cpu.supports_buft(CPU_BUFFER_TYPE)
    assert cpu.supports_buft(BufferType("HOST_PINNED", alignment=64))
    assert not cpu.supports_buft(sim.buffer_type)
    assert sim.supports_buft(sim.buffer_type)
    assert not sim.supports_buft(CPU_BUFFER_TYPE)
    assert not sim.supports_buft(SimBackend().buffer_type)  # another device's memory


def test_sim_backend_buffer_type_is_configurable() -> None:
    sim = SimBackend("GPU", alignment=256, max_size=4096, buft_name="GPU_Private")
    buft = sim.buffer_type
    assert (sim.name, buft.name, buft.backend_name) == ("GPU", "GPU_Private", "GPU")
    assert (buft.alignment, buft.max_size, buft.is_host) == (256, 4096, False)
    assert not sim.is_cpu
    buf = sim.alloc_buffer(1000)
    assert buf.buft is buft and buf.nbytes == 1000
    with pytest.raises(UsageError, match="not a power of two"):
        SimBackend(alignment=48)


def test_sim_backend_op_subsets() -> None:
    ctx = Context()
    a = ctx.new_tensor_2d(F32, 4, 4)
    b = ctx.new_tensor_2d(F32, 4, 4)
    mm = _node(ctx, Op.MUL_MAT, (4, 4), a, b)
    add = _node(ctx, Op.ADD, (4, 4), a, b)
    relu = _node(ctx, Op.UNARY, (4, 4), a, params=(UnaryOp.RELU,))
    gelu = _node(ctx, Op.UNARY, (4, 4), a, params=(UnaryOp.GELU,))
    view = ctx.new_tensor_impl(F32, (4,), a, 0, op=Op.VIEW, src=[a])
    sim = SimBackend(supported_ops={Op.MUL_MAT, "add", UnaryOp.RELU})
    assert sim.restricts_ops and sim.supported_ops == frozenset({Op.MUL_MAT, Op.ADD})
    assert sim.supports_op(view)  # view-only ops cost nothing: always supported
    verdicts = {t.op.name + str(t.op_params): sim.supports_op(t) for t in (mm, add, relu, gelu)}
    assert verdicts == {
        "MUL_MAT()": True, "ADD()": True, "UNARY(UnaryOp.RELU,)": True, "UNARY(UnaryOp.GELU,)": False,
    }
    only_mm = SimBackend(supported_ops=["MUL_MAT"])
    assert [only_mm.supports_op(t) for t in (mm, add, relu)] == [True, False, False]
    with pytest.raises(ValueError, match="'FROB' names no op"):
        SimBackend(supported_ops=["FROB"])


def test_offload_op_follows_ggml_cuda_batch_rule() -> None:
    ctx = Context()
    w = ctx.new_tensor_2d(F32, 8, 8)
    small = _node(ctx, Op.MUL_MAT, (8, 31), w, ctx.new_tensor_2d(F32, 8, 31))
    big = _node(ctx, Op.MUL_MAT, (8, 32), w, ctx.new_tensor_2d(F32, 8, 32))
    rows = ctx.new_tensor_impl(F32, (8, 64), op=Op.GET_ROWS, src=[w, ctx.new_tensor_1d(F32, 64)])
    sim = SimBackend()
    assert [sim.offload_op(t) for t in (small, big, rows)] == [False, True, False]
    assert not CPUBackend().offload_op(big)
    assert not SimBackend(offload_min_batch=None).offload_op(big)


def test_alloc_ctx_tensors_with_a_backend() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 3)
    b = ctx.new_tensor_1d(F32, 3)
    sim = SimBackend(alignment=128)
    buf = alloc_ctx_tensors(ctx, sim)
    assert buf.buft is sim.buffer_type and (a.offset, b.offset, buf.nbytes) == (0, 128, 256)


# -- tensor_copy ------------------------------------------------------------------------

def test_tensor_copy_between_cpu_and_sim(recorded) -> None:
    host, dev = Context(), Context()
    h = host.new_tensor_2d(F32, 3, 2, name="h")
    d = dev.new_tensor_2d(F32, 3, 2, name="d")
    back = host.new_tensor_2d(F32, 3, 2, name="back")
    alloc_ctx_tensors(host, CPUBackend())
    sim = SimBackend()
    dbuf = alloc_ctx_tensors(dev, sim)
    tensor_set(h, np.arange(6, dtype=np.float32))
    tensor_copy(h, d)
    tensor_copy(d, back)
    assert d.storage is dbuf
    np.testing.assert_array_equal(tensor_get(back), np.arange(6, dtype=np.float32).reshape(2, 3))
    copies = [(e.src_id, e.dst_id, e.nbytes) for e in recorded.events if isinstance(e, ev.TensorCopy)]
    assert copies == [(h.id, d.id, 24), (d.id, back.id, 24)]


def test_tensor_copy_of_strided_views_copies_the_span() -> None:
    ctx = Context()
    a = ctx.new_tensor_2d(F32, 4, 2)
    b = ctx.new_tensor_2d(F32, 4, 2)
    col_a = ctx.new_tensor_impl(F32, (1, 2), a, 4, nb=(4, 16, 32, 32))
    col_b = ctx.new_tensor_impl(F32, (1, 2), b, 4, nb=(4, 16, 32, 32))
    alloc_ctx_tensors(ctx, CPUBackend())
    tensor_set(a, np.arange(8, dtype=np.float32))
    tensor_copy(col_a, col_b)
    # ggml copies the byte span [data, data + nbytes): elements 1..5 of the root
    assert tensor_get(b).reshape(-1).tolist() == [0, 1, 2, 3, 4, 5, 0, 0]


def test_tensor_copy_errors() -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    b = ctx.new_tensor_1d(F16, 4, name="b")
    c = ctx.new_tensor_1d(F32, 4, name="c")
    with pytest.raises(ShapeError, match="'a' is f32.*'b' is f16"):
        tensor_copy(a, b)
    with pytest.raises(NoMemoryError, match="source tensor 'a'"):
        tensor_copy(a, c)
    tensor_copy(a, a)  # the same tensor: nothing to do, as in ggml


def test_tensor_copy_overlapping_ranges_is_a_memmove() -> None:
    ctx = Context()
    root = ctx.new_tensor_1d(F32, 6)
    lo = ctx.new_tensor_impl(F32, (4,), root, 0)
    hi = ctx.new_tensor_impl(F32, (4,), root, 8)
    alloc_ctx_tensors(ctx, CPUBackend())
    tensor_set(root, np.arange(6, dtype=np.float32))
    tensor_copy(lo, hi)
    assert tensor_get(root).tolist() == [0, 1, 0, 1, 2, 3]


# -- graph_copy ---------------------------------------------------------------------------

def _small_graph(ctx: Context) -> tuple[Graph, dict[str, Tensor]]:
    """w·x + b, relu, a 1-d view of it, scaled: the graph of the ggml-python oracle below."""
    w = ctx.new_tensor_2d(F32, 5, 3, name="w")
    x = ctx.new_tensor_2d(F32, 5, 2, name="x")
    b = ctx.new_tensor_1d(F32, 3, name="b")
    mm = _node(ctx, Op.MUL_MAT, (3, 2), w, x, name="mm")
    add = _node(ctx, Op.ADD, (3, 2), mm, b, name="add")
    r = _node(ctx, Op.UNARY, (3, 2), add, params=(UnaryOp.RELU,), name="r")
    v = ctx.new_tensor_impl(F32, (3,), r, 4, op=Op.VIEW, src=[r], op_params=(4,), name="v")
    s = _node(ctx, Op.SCALE, (3,), v, params=(2.0, 0.0), name="s")
    set_output(s)
    g = Graph()
    g.build_forward_expand(s)
    return g, {"w": w, "x": x, "b": b, "mm": mm, "add": add, "r": r, "v": v, "s": s}


def _ggml_graph_copy_offsets() -> dict[str, int]:
    """Run ggml's own ggml_backend_graph_copy on the same graph; offsets of the copies by name."""
    ggml = pytest.importorskip("ggml", reason="ggml-python is the oracle for graph_copy offsets")
    params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 64 + ggml.ggml_graph_overhead(),
                                   mem_buffer=None, no_alloc=True)
    ctx = ggml.ggml_init(params)
    f32 = ggml.GGML_TYPE_F32
    w = ggml.ggml_new_tensor_2d(ctx, f32, 5, 3)
    x = ggml.ggml_new_tensor_2d(ctx, f32, 5, 2)
    b = ggml.ggml_new_tensor_1d(ctx, f32, 3)
    mm = ggml.ggml_mul_mat(ctx, w, x)
    add = ggml.ggml_add(ctx, mm, b)
    r = ggml.ggml_relu(ctx, add)
    v = ggml.ggml_view_1d(ctx, r, 3, 4)
    s = ggml.ggml_scale(ctx, v, 2.0)
    for t, name in ((w, b"w"), (x, b"x"), (b, b"b"), (mm, b"mm"), (add, b"add"), (r, b"r"), (v, b"v"), (s, b"s")):
        ggml.ggml_set_name(t, name)
    g = ggml.ggml_new_graph(ctx)
    ggml.ggml_build_forward_expand(g, s)
    backend = ggml.ggml_backend_cpu_init()
    buf = ggml.ggml_backend_alloc_ctx_tensors(ctx, backend)
    copy = ggml.ggml_backend_graph_copy_(backend, g)
    base = ggml.ggml_backend_buffer_get_base(copy.buffer)
    out: dict[str, int] = {"<size>": ggml.ggml_backend_buffer_get_size(copy.buffer)}
    stack = [ggml.ggml_graph_node(copy.graph, i) for i in range(ggml.ggml_graph_n_nodes(copy.graph))]
    while stack:
        t = stack.pop().contents
        out[t.name.decode()] = t.data - base
        stack.extend(t.src[i] for i in range(10) if t.src[i])
    ggml.ggml_backend_graph_copy_free(copy)
    ggml.ggml_backend_buffer_free(buf)
    ggml.ggml_backend_free(backend)
    ggml.ggml_free(ctx)
    return out


def test_graph_copy_offsets_match_ggml() -> None:
    ctx = Context()
    g, _ = _small_graph(ctx)
    alloc_ctx_tensors(ctx, CPUBackend())
    copy = graph_copy(CPUBackend(), g)
    ours = {c.name: c.offset for c in _all_tensors(copy.graph)}
    ours["<size>"] = copy.buffer.nbytes
    expected = _ggml_graph_copy_offsets()
    assert ours == expected
    # ggml's pre-order: mm before its sources w and x; the view at r + 4
    assert expected == {"<size>": 288, "mm": 0, "w": 32, "x": 96, "add": 160, "b": 192, "r": 224, "v": 228, "s": 256}


def _all_tensors(g: Graph) -> list[Tensor]:
    seen: dict[int, Tensor] = {}
    stack = list(g.nodes)
    while stack:
        t = stack.pop()
        if t.id not in seen:
            seen[t.id] = t
            stack.extend(s for s in t.src if s is not None)
    return list(seen.values())


def test_graph_copy_structure_values_and_contexts(recorded) -> None:
    ctx = Context()
    g, ts = _small_graph(ctx)
    alloc_ctx_tensors(ctx, CPUBackend())
    for name in ("w", "x", "b", "mm", "add", "r", "s"):
        t = ts[name]
        tensor_set(t, np.random.default_rng(t.id).standard_normal(t.nelements).astype(np.float32))
    sim = SimBackend("GPU", alignment=64)
    copy = graph_copy(sim, g)
    assert copy.graph.n_nodes == g.n_nodes and copy.graph.n_leafs == 0  # ggml copies nodes only
    by_name = {c.name: c for c in _all_tensors(copy.graph)}
    for name, orig in ts.items():
        c = by_name[name]
        assert c is not orig and (c.op, c.ne, c.nb, c.flags, c.op_params) == (orig.op, orig.ne, orig.nb, orig.flags, orig.op_params)
        assert [s.name for s in c.src if s is not None] == [s.name for s in orig.src if s is not None]
        assert c.storage.buft is sim.buffer_type
        np.testing.assert_array_equal(tensor_get(c), tensor_get(orig))
        assert (c.ctx is copy.ctx_unallocated) == (name == "v")
    assert by_name["v"].view_src is by_name["r"] and by_name["v"].data == by_name["r"].data + 4
    assert [t.name for t in copy.ctx_allocated.tensors()] == ["mm", "w", "x", "add", "b", "r", "s"]
    # every tensor here is at most 64 bytes: with alignment 64 each takes one slot
    assert [t.offset for t in copy.ctx_allocated.tensors()] == [0, 64, 128, 192, 256, 320, 384]
    kinds = [e for e in recorded.events if isinstance(e, ev.GraphCreated) and e.kind == "deep_copy"]
    assert [(k.graph_id, k.source_graph) for k in kinds] == [(copy.graph.id, g.id)]
    created = {e.tensor_id: e for e in recorded.events if isinstance(e, ev.TensorCreated)}
    assert {created[c.id].copy_of for c in by_name.values()} == {t.id for t in ts.values()}
    src_set = {(e.tensor_id, e.slot, e.src_id) for e in recorded.events if isinstance(e, ev.TensorSrcSet)}
    assert (by_name["mm"].id, 1, by_name["x"].id) in src_set
    copied = {e.src_id for e in recorded.events if isinstance(e, ev.TensorCopy)}
    assert copied == {t.id for n, t in ts.items() if n != "v"}  # views are bound, not copied
    copy.free()
    assert copy.ctx_allocated.freed and copy.ctx_unallocated.freed and copy.buffer.freed


def test_graph_copy_needs_an_allocated_graph() -> None:
    ctx = Context()
    g, _ = _small_graph(ctx)
    with pytest.raises(GraphError, match=r"tensor 'mm' \(MUL_MAT\) has no memory; the graph must be allocated"):
        graph_copy(CPUBackend(), g)


def test_graph_copy_onto_a_size_limited_device_splits_buffers() -> None:
    ctx = Context()
    g, _ = _small_graph(ctx)
    alloc_ctx_tensors(ctx, CPUBackend())
    copy = graph_copy(SimBackend(max_size=96), g)
    assert isinstance(copy.buffer, list)
    # padded sizes in pre-order: mm 32, w 64, x 64, add 32, b 32, r 32, s 32
    assert [b.nbytes for b in copy.buffer] == [96, 96, 96]  # mm+w | x+add | b+r+s
    assert [t.storage for t in copy.ctx_allocated.tensors()] == [copy.buffer[i] for i in (0, 0, 1, 1, 2, 2, 2)]


def test_graph_copy_of_a_deep_chain_needs_no_recursion() -> None:
    ctx = Context()
    t = ctx.new_tensor_1d(F32, 1, name="x0")
    for i in range(3000):
        t = _node(ctx, Op.SCALE, (1,), t, params=(1.0, 0.0), name=f"n{i}")
    g = Graph(size=4096)
    g.build_forward_expand(t)
    alloc_ctx_tensors(ctx, CPUBackend())
    copy = graph_copy(CPUBackend(), g)
    assert copy.graph.n_nodes == 3000
    # pre-order from node 0 (n0, then x0), then each later node
    assert [t.name for t in list(copy.ctx_allocated.tensors())[:3]] == ["n0", "x0", "n1"]


# -- CUDA -------------------------------------------------------------------------------------

def test_cuda_backend_unavailable_says_how_to_install() -> None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(BackendUnavailableError, match=r"pip install 'vizalloc\[cuda\]'") as info:
            CudaBackend()
        assert isinstance(info.value, VizallocError)
    else:
        pytest.skip("cupy is installed here; tests/runtime/test_backends_gpu.py covers the CUDA backend")



def _fake_cupy(count) -> types.SimpleNamespace:
    def get_device_count() -> int:
        if isinstance(count, Exception):
            raise count
        return count

    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=get_device_count)))


@pytest.mark.parametrize(("count", "device", "message"), [
    (0, 0, "found no CUDA device"),
    (RuntimeError("cudaErrorNoDevice"), 0, "found no CUDA device"),
    (2, 5, r"CUDA device 5 does not exist; this machine has 2 \(0..1\)"),
    (2, -1, "CUDA device -1 does not exist"),
])
def test_cuda_backend_without_a_usable_device(monkeypatch: pytest.MonkeyPatch, count, device: int, message: str) -> None:
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(count))
    with pytest.raises(BackendUnavailableError, match=message):
        CudaBackend(device)
