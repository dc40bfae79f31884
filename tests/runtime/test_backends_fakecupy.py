"""The CUDA backend's code paths with cupy *emulated by numpy* (no GPU needed).

The emulation gives arrays cupy's extra surface (``.data`` device pointers with
offsets, ``get``/``set``, ``.device``, ``cupy.ndarray(memptr=...)``, ``asnumpy``,
``cuda.Device`` contexts, ``cuda.runtime.getDeviceCount``) over numpy memory, so
``CudaBackend``, its buffer type, device-side tensor views, host/device copies and the
kernels' non-numpy branches all run here. It proves vizalloc's plumbing, not the GPU:
``test_backends_gpu.py`` runs the same kind of checks with real cupy on a device.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from typing_extensions import Self

from vizalloc.errors import BackendError
from vizalloc.runtime import F32, Context, Graph, Op
from vizalloc.runtime.backends import (
    CPUBackend,
    CudaBackend,
    alloc_ctx_tensors,
    graph_compute,
    graph_copy,
    tensor_copy,
)
from vizalloc.runtime.backends import cuda as cuda_module
from vizalloc.runtime.buffer import POISON
from vizalloc.runtime.memory import tensor_alloc, tensor_array, tensor_get, tensor_set
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder


class _MemPtr:
    """cupy.cuda.MemoryPointer: a device address that supports ``+ offset``."""

    def __init__(self, owner: np.ndarray, offset: int) -> None:
        self.owner, self.offset = owner, offset

    def __add__(self, n: int) -> _MemPtr:
        return _MemPtr(self.owner, self.offset + n)


class _Device:
    def __init__(self, fake: FakeCupy, index: int = 0) -> None:
        self.fake, self.id = fake, index

    def __enter__(self) -> Self:
        self.fake.current.append(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.current.pop()

    def synchronize(self) -> None:
        self.fake.syncs += 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Device) and other.id == self.id

    def __hash__(self) -> int:
        return self.id


class DeviceArray(np.ndarray):
    """numpy memory standing in for device memory, with cupy's methods."""

    device_id: int = 0

    def __array_finalize__(self, obj: Any) -> None:
        self.device_id = getattr(obj, "device_id", FakeCupy.instance.current[-1])

    @property  # type: ignore[override]
    def data(self) -> _MemPtr:
        return _MemPtr(self, 0)

    @property
    def device(self) -> _Device:
        return _Device(FakeCupy.instance, self.device_id)

    def get(self) -> np.ndarray:
        FakeCupy.instance.transfers.append("d2h")
        return np.array(self.view(np.ndarray))

    def set(self, host: np.ndarray) -> None:
        assert type(host) is np.ndarray, "set() takes a host array"
        FakeCupy.instance.transfers.append("h2d")
        self.view(np.ndarray)[...] = host


class FakeCupy(types.ModuleType):
    instance: FakeCupy

    def __init__(self, n_devices: int = 2) -> None:
        super().__init__("cupy")
        FakeCupy.instance = self
        self.current = [0]
        self.syncs = 0
        self.transfers: list[str] = []
        self.alloc_devices: list[int] = []
        self.uint8, self.float32 = np.uint8, np.float32
        self.cuda = types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDeviceCount=lambda: n_devices),
            Device=lambda i=0: _Device(self, i),
        )

    def zeros(self, shape: Any, dtype: Any = np.float32) -> DeviceArray:
        self.alloc_devices.append(self.current[-1])
        return np.zeros(shape, dtype=dtype).view(DeviceArray)

    def empty(self, shape: Any, dtype: Any = np.float32) -> DeviceArray:
        return np.empty(shape, dtype=dtype).view(DeviceArray)

    def asarray(self, a: Any, dtype: Any = None) -> DeviceArray:
        if isinstance(a, DeviceArray):
            return a if dtype is None else a.astype(dtype)
        return np.array(a, dtype=dtype).view(DeviceArray)

    def asnumpy(self, a: Any) -> np.ndarray:
        return np.array(a.view(np.ndarray) if isinstance(a, np.ndarray) else a)

    def ndarray(self, shape: Any, dtype: Any = None, memptr: _MemPtr | None = None, strides: Any = None) -> DeviceArray:
        assert memptr is not None
        base = memptr.owner.view(np.ndarray)
        view = np.ndarray(shape, dtype=dtype, buffer=base, offset=memptr.offset, strides=strides).view(DeviceArray)
        view.device_id = memptr.owner.device_id
        return view

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)  # ufuncs and the rest work on DeviceArray as on numpy


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeCupy]:
    mp = pytest.MonkeyPatch()
    cupy = FakeCupy()
    mp.setitem(sys.modules, "cupy", cupy)
    mp.setattr(cuda_module, "_bufts", {})  # buffer types made here must not outlive the fake
    yield cupy
    mp.undo()


@pytest.fixture
def gpu(fake: FakeCupy) -> CudaBackend:
    return CudaBackend(0)


def test_backend_and_buffer_type(gpu: CudaBackend, fake: FakeCupy) -> None:
    buft = gpu.buffer_type
    assert (gpu.name, buft.name, buft.alignment, buft.is_host, buft.device) == ("CUDA0", "CUDA0", 128, False, fake)
    assert gpu.xp is fake and not gpu.is_cpu
    assert CudaBackend(0).buffer_type is buft and CudaBackend(1).buffer_type is not buft
    assert gpu.supports_buft(buft) and not gpu.supports_buft(CudaBackend(1).buffer_type)
    assert not gpu.supports_buft(CPUBackend().buffer_type) and not CPUBackend().supports_buft(buft)


def test_buffers_are_made_on_their_device(fake: FakeCupy) -> None:
    fake.alloc_devices.clear()
    b0 = CudaBackend(0).alloc_buffer(100)
    b1 = CudaBackend(1).alloc_buffer(100)
    assert fake.alloc_devices == [0, 1]
    assert isinstance(b0.mem, DeviceArray) and (b0.mem.device_id, b1.mem.device_id) == (0, 1)
    assert b0.base % 128 == 0 and b1.base % 128 == 0


def test_tensor_views_are_device_arrays_over_the_buffer(gpu: CudaBackend) -> None:
    ctx = Context()
    t = ctx.new_tensor_2d(F32, 4, 3)
    buf = alloc_ctx_tensors(ctx, gpu)
    vals = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor_set(t, vals)
    arr = tensor_array(t)
    assert isinstance(arr, DeviceArray) and arr.shape == (1, 1, 3, 4)
    np.testing.assert_array_equal(tensor_get(t), vals)
    assert type(tensor_get(t)) is np.ndarray
    tensor_set(t, np.array([-1, -2], dtype=np.float32), offset=8)
    np.testing.assert_array_equal(tensor_get(t, offset=4, nbytes=12).view(np.float32), [1, -1, -2])
    assert buf.mem.view(np.ndarray)[8:12].view(np.float32)[0] == -1  # the bytes are the buffer's


def test_aliasing_on_device_buffers(gpu: CudaBackend) -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4)
    b = ctx.new_tensor_1d(F32, 2)
    buf = gpu.alloc_buffer(128)
    tensor_alloc(buf, a, buf.base)
    tensor_alloc(buf, b, buf.base + 8)
    tensor_set(a, np.array([1, 2, 3, 4], dtype=np.float32))
    tensor_set(b, np.array([7, 8], dtype=np.float32))
    assert tensor_get(a).tolist() == [1, 2, 7, 8]


def test_tensor_copy_paths(gpu: CudaBackend, fake: FakeCupy) -> None:
    host, d0, d1 = Context(), Context(), Context()
    h = host.new_tensor_1d(F32, 5)
    back = host.new_tensor_1d(F32, 5)
    x0 = d0.new_tensor_1d(F32, 5)
    y0 = d0.new_tensor_1d(F32, 5)
    x1 = d1.new_tensor_1d(F32, 5)
    alloc_ctx_tensors(host, CPUBackend())
    alloc_ctx_tensors(d0, gpu)
    alloc_ctx_tensors(d1, CudaBackend(1))
    tensor_set(h, np.arange(5, dtype=np.float32))
    fake.transfers.clear()
    tensor_copy(h, x0)      # host -> device: set()
    tensor_copy(x0, y0)     # same device: a device-side copy
    tensor_copy(y0, x1)     # device 0 -> device 1: through the host
    tensor_copy(x1, back)   # device -> host: get()
    assert fake.transfers == ["h2d", "d2h", "h2d", "d2h"]
    assert tensor_get(back).tolist() == [0, 1, 2, 3, 4]


def test_mlp_forward_on_emulated_cuda_equals_numpy(gpu: CudaBackend, fake: FakeCupy) -> None:
    from tests.runtime.test_compute import build_mlp, mlp_data, mlp_numpy

    x, layers = mlp_data(seed=11)
    graph, out, _keep = build_mlp(gpu, x, layers)
    assert out.storage.xp is fake
    syncs = fake.syncs
    with StrictRecorder(capture_values=True) as rec:
        assert graph_compute(gpu, graph)
    np.testing.assert_allclose(tensor_get(out), mlp_numpy(x, layers), rtol=1e-5, atol=1e-5)
    assert fake.syncs > syncs  # compute waits for the device
    assert {e.backend for e in rec.events if isinstance(e, ev.NodeCompute)} == {"CUDA0"}
    end = [e for e in rec.events if isinstance(e, ev.ValueSnapshot) and e.when == "end"]
    assert [e.tensor_id for e in end] == [out.id]
    np.testing.assert_array_equal(np.frombuffer(end[0].data, dtype=np.float32), tensor_get(out).reshape(-1))


def test_graph_copy_cpu_to_emulated_cuda(gpu: CudaBackend) -> None:
    from tests.runtime.test_compute import build_mlp, mlp_data

    x, layers = mlp_data(seed=12)
    graph, out, _keep = build_mlp(CPUBackend(), x, layers)
    copy = graph_copy(gpu, graph)
    assert all(t.storage.buft is gpu.buffer_type for t in copy.ctx_allocated.tensors())
    graph_compute(CPUBackend(), graph)
    graph_compute(gpu, copy.graph)
    np.testing.assert_allclose(tensor_get(copy.graph.nodes[-1]), tensor_get(out), rtol=1e-6)
    copy.free()


def test_cpu_refuses_device_memory_and_freed_device_memory_is_poison(gpu: CudaBackend) -> None:
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 4, name="a")
    out = ctx.new_tensor_impl(F32, (4,), op=Op.SCALE, src=[a], op_params=(2.0, 0.0), name="out")
    g = Graph()
    g.build_forward_expand(out)
    buf = alloc_ctx_tensors(ctx, gpu)
    with pytest.raises(BackendError, match="type CUDA0, which CPU cannot use"):
        graph_compute(CPUBackend(), g)
    buf.free()
    assert tensor_get(a).view(np.uint8).tolist() == [POISON] * 16
