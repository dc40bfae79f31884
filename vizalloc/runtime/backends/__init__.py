"""Backends: where graphs are computed and which memory they use (``ggml-backend``).

``CPUBackend`` (numpy), ``SimBackend`` (a simulated device in host memory, for
multi-backend work without a GPU) and ``CudaBackend`` (cupy, imported lazily). The
functions here are ggml's backend-level calls:

* ``graph_compute(backend, graph, callback=None)`` runs an allocated graph;
* ``tensor_copy(src, dst)`` copies bytes between tensors in any memory;
* ``graph_copy(backend, graph)`` deep-copies an allocated graph onto a backend;
* ``alloc_ctx_tensors(ctx, backend)`` places a context's tensors in one buffer.

    >>> import numpy as np
    >>> from vizalloc.runtime import Context, F32
    >>> from vizalloc.runtime.backends import CPUBackend, alloc_ctx_tensors
    >>> ctx = Context(); x = ctx.new_tensor_2d(F32, 4, 2)
    >>> buf = alloc_ctx_tensors(ctx, CPUBackend())
    >>> x.offset, buf.nbytes
    (0, 32)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vizalloc.runtime.alloc import alloc_ctx_tensors as _alloc_ctx_tensors
from vizalloc.runtime.backends.base import NOOP_OPS, Backend, EvalCallback
from vizalloc.runtime.backends.copy import (
    GraphCopy,
    graph_copy,
    same_layout,
    tensor_copy,
)
from vizalloc.runtime.backends.cpu import CPU_BUFFER_TYPE, CPUBackend
from vizalloc.runtime.backends.cuda import (
    CudaBackend,  # imports cupy only when one is made
)
from vizalloc.runtime.backends.sim import SimBackend
from vizalloc.runtime.buffer import Buffer, BufferType, Usage

if TYPE_CHECKING:
    from vizalloc.runtime.context import Context
    from vizalloc.runtime.graph import Graph

__all__ = [
    "CPU_BUFFER_TYPE",
    "NOOP_OPS",
    "Backend",
    "CPUBackend",
    "CudaBackend",
    "EvalCallback",
    "GraphCopy",
    "SimBackend",
    "alloc_ctx_tensors",
    "graph_compute",
    "graph_copy",
    "same_layout",
    "tensor_copy",
]


def graph_compute(backend: Backend, graph: Graph, callback: EvalCallback | None = None) -> bool:
    """``ggml_backend_graph_compute``: run ``graph`` on ``backend`` (see ``Backend.graph_compute``)."""
    return backend.graph_compute(graph, callback)


def alloc_ctx_tensors(ctx: Context, where: Backend | BufferType, usage: Usage = Usage.ANY) -> Buffer | list[Buffer] | None:
    """``ggml_backend_alloc_ctx_tensors`` (a backend: its default buffer type) or ``..._from_buft``."""
    buft = where.buffer_type if isinstance(where, Backend) else where
    return _alloc_ctx_tensors(ctx, buft, usage)

