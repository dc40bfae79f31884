"""The graph runtime modelled on ggml: types, tensors, contexts, graphs, ops, buffers,
allocators, backends, the scheduler and the optimizer.

It knows nothing of analysis or views; its one outward edge is the recorder seam
(``vizalloc.trace.recorder``).
"""

from vizalloc.runtime.buffer import Buffer, BufferType, Usage, set_strict
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F16, F32, I32, DType
from vizalloc.runtime.graph import Graph, dup_graph
from vizalloc.runtime.tensor import Flag, Op, Tensor, UnaryOp, set_input, set_loss, set_output, set_param

__all__ = [
    "Buffer", "BufferType", "Context", "DType", "F16", "F32", "Flag", "Graph", "I32", "Op", "Tensor",
    "UnaryOp", "Usage", "dup_graph", "set_input", "set_loss", "set_output", "set_param", "set_strict",
]

# op constructors and kernels (ops engineer): ``from vizalloc.runtime import ops, kernels``
from vizalloc.runtime import kernels, ops  # noqa: E402

__all__ += ["kernels", "ops"]

# backward graphs and the optimizer (training engineer)
from vizalloc.runtime import backward, opt  # noqa: E402
from vizalloc.runtime.backward import (  # noqa: E402
    build_backward_expand, graph_get_grad, graph_get_grad_acc, graph_reset,
)

__all__ += ["backward", "build_backward_expand", "graph_get_grad", "graph_get_grad_acc", "graph_reset", "opt"]

# the backend scheduler (scheduler engineer)
from vizalloc.runtime.sched import Scheduler  # noqa: E402

__all__ += ["Scheduler"]

# the planning and graph allocators (allocator engineer)
from vizalloc.runtime.alloc import DynAllocator, GraphAllocator  # noqa: E402

__all__ += ["DynAllocator", "GraphAllocator"]
