"""The CPU backend: numpy kernels over host memory (``ggml_backend_cpu``).

Its buffer type is ggml's ``ggml_backend_cpu_buffer_type``: name ``CPU``, alignment
32 (``TENSOR_ALIGNMENT``), no size limit, ``alloc_size = nbytes``, and one object
shared by every CPU backend, as in ggml. It can use any host buffer type.

    >>> import numpy as np
    >>> from vizalloc.runtime import Context, F32
    >>> from vizalloc.runtime.backends import CPUBackend, alloc_ctx_tensors
    >>> ctx = Context(); w = ctx.new_tensor_1d(F32, 8)
    >>> buf = alloc_ctx_tensors(ctx, CPUBackend())
    >>> buf.buft.name, buf.nbytes
    ('CPU', 32)
"""

from __future__ import annotations

import numpy as np

from vizalloc.runtime.backends.base import Backend
from vizalloc.runtime.buffer import BufferType

#: ``ggml_backend_cpu_buffer_type()``: one shared object, as ggml's static singleton.
CPU_BUFFER_TYPE = BufferType("CPU", alignment=32, max_size=None, device=np, is_host=True, backend_name="CPU")


class CPUBackend(Backend):
    """Computes on the host with numpy.

    Args:
        n_threads: recorded only (``ggml_backend_cpu_set_n_threads``); numpy's BLAS
            picks its own thread count.
    """

    is_cpu = True
    xp = np

    def __init__(self, n_threads: int | None = None) -> None:
        super().__init__()
        self.name = "CPU"
        self.buffer_type = CPU_BUFFER_TYPE
        self.n_threads = n_threads

    def supports_buft(self, buft: BufferType) -> bool:
        """ggml's CPU device takes every host buffer type (``ggml_backend_buft_is_host``)."""
        return bool(buft.is_host)
