"""The graph runtime modelled on ggml: types, tensors, contexts, graphs, ops, buffers,
allocators, backends, the scheduler and the optimizer.

What a program needs is importable from here: ``Context``, ``Graph``, ``ops``,
``GraphAllocator``, ``Scheduler``, ``CPUBackend``, ``alloc_ctx_tensors`` (place a
context's tensors), ``tensor_set``/``tensor_get`` (``ggml_backend_tensor_set/get``),
``graph_compute``, ``build_backward_expand``/``graph_get_grad`` and
``graph_deep_copy`` (ggml-opt's deep ``dup_graph``; ``Graph.dup`` is ggml's shallow
``ggml_graph_dup``). ``dup_graph`` still works, with a ``DeprecationWarning``.

It knows nothing of analysis or views; its one outward edge is the recorder seam
(``vizalloc.trace.recorder``).
"""

from typing import Any

from vizalloc.runtime.buffer import Buffer, BufferType, Usage, set_strict
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F16, F32, I32, DType
from vizalloc.runtime.graph import Graph, graph_deep_copy
from vizalloc.runtime.tensor import Flag, Op, Tensor, UnaryOp, set_input, set_loss, set_output, set_param

__all__ = [
    "Buffer", "BufferType", "Context", "DType", "F16", "F32", "Flag", "Graph", "I32", "Op", "Tensor",
    "UnaryOp", "Usage", "graph_deep_copy", "set_input", "set_loss", "set_output", "set_param", "set_strict",
]

# op constructors and kernels: ``from vizalloc.runtime import ops, kernels``
from vizalloc.runtime import kernels, ops  # noqa: E402

__all__ += ["kernels", "ops"]

# backward graphs and the optimizer
from vizalloc.runtime import backward, opt  # noqa: E402
from vizalloc.runtime.backward import (  # noqa: E402
    build_backward_expand, graph_get_grad, graph_get_grad_acc, graph_reset,
)

__all__ += ["backward", "build_backward_expand", "graph_get_grad", "graph_get_grad_acc", "graph_reset", "opt"]

# the backend scheduler
from vizalloc.runtime.sched import Scheduler  # noqa: E402

__all__ += ["Scheduler"]

# the allocators
from vizalloc.runtime.alloc import DynAllocator, GraphAllocator  # noqa: E402

__all__ += ["DynAllocator", "GraphAllocator"]

# what a program calls once its graph is built: place tensors, set inputs, compute, read
from vizalloc.runtime.backends import CPUBackend, SimBackend, alloc_ctx_tensors, graph_compute  # noqa: E402
from vizalloc.runtime.memory import tensor_get, tensor_set  # noqa: E402

__all__ += ["CPUBackend", "SimBackend", "alloc_ctx_tensors", "graph_compute", "tensor_get", "tensor_set"]


def __getattr__(name: str) -> Any:
    """Deprecated names (``dup_graph``), with a warning saying what to use instead."""
    from vizalloc.runtime import graph

    if name in graph._DEPRECATED:
        return graph.deprecated(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
