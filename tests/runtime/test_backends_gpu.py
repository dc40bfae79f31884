"""The CUDA backend on a real GPU (cupy). Every test here is marked ``gpu`` and skips,
saying why, when cupy or a CUDA device is missing. Run on a GPU machine with::

    pip install 'vizalloc[cuda]' && python -m pytest tests/runtime/test_backends_gpu.py -m gpu
"""

from __future__ import annotations

import numpy as np
import pytest

from vizalloc.errors import BackendError, BackendUnavailableError
from vizalloc.runtime import F32, I32, Context, Graph, Op
from vizalloc.runtime.backends import (
    CPUBackend,
    CudaBackend,
    alloc_ctx_tensors,
    graph_compute,
    graph_copy,
    tensor_copy,
)
from vizalloc.runtime.buffer import POISON
from vizalloc.runtime.memory import tensor_alloc, tensor_array, tensor_get, tensor_set
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy", reason="the CUDA backend needs cupy: pip install 'vizalloc[cuda]'")


@pytest.fixture(scope="module")
def gpu() -> CudaBackend:
    try:
        return CudaBackend(0)
    except BackendUnavailableError as exc:
        pytest.skip(f"no usable CUDA device: {exc}")


def test_buffer_type_and_memory_are_on_the_device(gpu: CudaBackend) -> None:
    buft = gpu.buffer_type
    assert (gpu.name, buft.name, buft.alignment, buft.is_host) == ("CUDA0", "CUDA0", 128, False)
    assert CudaBackend(0).buffer_type is buft
    buf = gpu.alloc_buffer(1000)
    assert isinstance(buf.mem, cupy.ndarray) and buf.base % 128 == 0
    assert not CPUBackend().supports_buft(buft) and gpu.supports_buft(buft)


def test_set_get_roundtrip_and_byte_ranges(gpu: CudaBackend) -> None:
    ctx = Context()
    t = ctx.new_tensor_2d(F32, 4, 3)
    alloc_ctx_tensors(ctx, gpu)
    vals = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor_set(t, vals)
    assert isinstance(tensor_array(t), cupy.ndarray)
    np.testing.assert_array_equal(tensor_get(t), vals)
    tensor_set(t, np.array([-1, -2], dtype=np.float32), offset=8)
    np.testing.assert_array_equal(tensor_get(t, offset=4, nbytes=12).view(np.float32), [1, -1, -2])


def test_aliasing_on_device_buffers_is_real(gpu: CudaBackend) -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4)
    b = ctx.new_tensor_1d(I32, 4)
    buf = gpu.alloc_buffer(64)
    tensor_alloc(buf, a, buf.base)
    tensor_alloc(buf, b, buf.base + 8)
    tensor_set(a, np.array([1, 2, 3, 4], dtype=np.float32))
    tensor_set(b, np.array([0, 0x3F800000, 5, 6], dtype=np.int32))
    assert tensor_get(a).tolist() == [1.0, 2.0, 0.0, 1.0]


def test_tensor_copy_host_device_host(gpu: CudaBackend, recorded) -> None:
    host, dev = Context(), Context()
    h = host.new_tensor_1d(F32, 5)
    back = host.new_tensor_1d(F32, 5)
    d = dev.new_tensor_1d(F32, 5)
    alloc_ctx_tensors(host, CPUBackend())
    alloc_ctx_tensors(dev, gpu)
    tensor_set(h, np.arange(5, dtype=np.float32))
    tensor_copy(h, d)
    tensor_copy(d, back)
    assert tensor_get(back).tolist() == [0, 1, 2, 3, 4]
    assert [(e.src_id, e.dst_id) for e in recorded.events if isinstance(e, ev.TensorCopy)] == [(h.id, d.id), (d.id, back.id)]


def test_mlp_forward_on_cuda_equals_numpy(gpu: CudaBackend) -> None:
    from tests.runtime.test_compute import build_mlp, mlp_data, mlp_numpy

    x, layers = mlp_data(sizes=(64, 128, 128, 10), batch=32)
    graph, out, _keep = build_mlp(gpu, x, layers)
    assert out.storage.xp is cupy
    with StrictRecorder(capture_values=True) as rec:
        assert graph_compute(gpu, graph)
    # cupy may use TF32 for f32 GEMMs when asked to; tolerances allow for it
    np.testing.assert_allclose(tensor_get(out), mlp_numpy(x, layers), rtol=2e-3, atol=2e-3)
    assert {e.backend for e in rec.events if isinstance(e, ev.NodeCompute)} == {"CUDA0"}
    end = [e for e in rec.events if isinstance(e, ev.ValueSnapshot) and e.when == "end"]
    np.testing.assert_array_equal(np.frombuffer(end[0].data, dtype=np.float32).reshape(tensor_get(out).shape),
                                  tensor_get(out))


def test_graph_copy_from_cpu_to_cuda_computes_the_same(gpu: CudaBackend) -> None:
    from tests.runtime.test_compute import build_mlp, mlp_data

    x, layers = mlp_data(seed=5)
    graph, out, _keep = build_mlp(CPUBackend(), x, layers)
    copy = graph_copy(gpu, graph)
    graph_compute(CPUBackend(), graph)
    graph_compute(gpu, copy.graph)
    np.testing.assert_allclose(tensor_get(copy.graph.nodes[-1]), tensor_get(out), rtol=2e-3, atol=2e-3)
    copy.free()


def test_cpu_refuses_device_memory_and_freed_device_memory_is_poison(gpu: CudaBackend) -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    out = ctx.new_tensor_impl(F32, (4,), op=Op.SCALE, src=[a], op_params=(2.0, 0.0), name="out")
    g = Graph()
    g.build_forward_expand(out)
    buf = alloc_ctx_tensors(ctx, gpu)
    with pytest.raises(BackendError, match="which CPU cannot use"):
        graph_compute(CPUBackend(), g)
    buf.free()
    assert tensor_get(a).view(np.uint8).tolist() == [POISON] * 16
