"""The CUDA backend: buffers are cupy device allocations, kernels the same as the CPU's
written against the array module (``t.storage.xp`` is cupy here).

cupy is imported only in this module, and only when a ``CudaBackend`` is made; a
missing cupy, driver or device raises ``BackendUnavailableError`` saying how to get it
(``pip install 'vizalloc[cuda]'``). The buffer type follows ggml-cuda's
(``ggml_backend_cuda_buffer_type``): name ``CUDA<device>``, alignment 128, no size
limit, ``alloc_size = nbytes`` for the types vizalloc has, not host memory.

    >>> from vizalloc.runtime.backends import CudaBackend
    >>> # gpu = CudaBackend(0)            # needs cupy and a CUDA device
    >>> # gpu.buffer_type.name == "CUDA0"
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vizalloc.errors import BackendUnavailableError
from vizalloc.runtime.backends.base import Backend, EvalCallback, op_batch_size
from vizalloc.runtime.buffer import Buffer, BufferType, Usage

if TYPE_CHECKING:
    from vizalloc.runtime.graph import Graph

#: ggml-cuda's ``ggml_backend_cuda_buffer_type_get_alignment``.
CUDA_ALIGNMENT = 128
#: ggml-cuda's ``offload_op``: ops with at least this batch size go to the GPU.
OFFLOAD_MIN_BATCH = 32

_INSTALL = "install it with: pip install 'vizalloc[cuda]' (cupy-cuda12x; needs an NVIDIA driver)"
_bufts: dict[int, CudaBufferType] = {}


def load_cupy() -> Any:
    """Import cupy, or say clearly why it cannot be used."""
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailableError(f"the CUDA backend needs cupy, which is not installed ({exc}); {_INSTALL}") from None
    return cupy


def device_count(cupy: Any) -> int:
    """How many CUDA devices cupy sees (0 when there is no driver)."""
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001  (CUDARuntimeError, or ImportError of the CUDA libraries: both mean none)
        return 0


class CudaBufferType(BufferType):
    """A device's buffer type: allocations are made on that device."""

    def __init__(self, cupy: Any, device: int) -> None:
        super().__init__(f"CUDA{device}", alignment=CUDA_ALIGNMENT, max_size=None, device=cupy,
                         is_host=False, backend_name=f"CUDA{device}")
        self.device_index = device

    def alloc_buffer(self, nbytes: int, usage: Usage = Usage.ANY, *, pool_id: int = -1, slot: int = -1,
                     chunk: int = -1, cause: str = "") -> Buffer:
        with self.device.cuda.Device(self.device_index):
            return super().alloc_buffer(nbytes, usage, pool_id=pool_id, slot=slot, chunk=chunk, cause=cause)


class CudaBackend(Backend):
    """Computes on one CUDA device with cupy.

    Args:
        device: the CUDA device index.

    Raises:
        BackendUnavailableError: cupy is missing, no driver or device is found, or
            ``device`` is out of range.
    """

    is_cpu = False

    def __init__(self, device: int = 0) -> None:
        super().__init__()
        cupy = load_cupy()
        n = device_count(cupy)
        if n == 0:
            raise BackendUnavailableError(
                "the CUDA backend found no CUDA device (cupy is installed, but no GPU or driver is visible); "
                "run on a machine with an NVIDIA GPU, or use CPUBackend / SimBackend"
            )
        if not 0 <= device < n:
            raise BackendUnavailableError(f"CUDA device {device} does not exist; this machine has {n} (0..{n - 1})")
        self._cupy = cupy
        self.xp = cupy
        self.device = device
        self.name = f"CUDA{device}"
        buft = _bufts.get(device)
        if buft is None:
            buft = _bufts[device] = CudaBufferType(cupy, device)
        self.buffer_type = buft

    def supports_buft(self, buft: BufferType) -> bool:
        """Only this device's own buffer type (ggml-cuda: same device)."""
        return isinstance(buft, CudaBufferType) and buft.device_index == self.device

    def offload_op(self, t: Any) -> bool:
        return op_batch_size(t) >= OFFLOAD_MIN_BATCH

    def graph_compute(self, graph: Graph, callback: EvalCallback | None = None) -> bool:
        with self._cupy.cuda.Device(self.device):
            return super().graph_compute(graph, callback)

    def synchronize(self) -> None:
        self._cupy.cuda.Device(self.device).synchronize()
