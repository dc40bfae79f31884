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

import importlib
from typing import TYPE_CHECKING, Any

from vizalloc.runtime.buffer import Buffer, BufferType, Usage, set_strict
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F16, F32, I32, DType
from vizalloc.runtime.graph import Graph, graph_deep_copy
from vizalloc.runtime.tensor import Flag, Op, Tensor, UnaryOp, set_input, set_loss, set_output, set_param

# The rest is imported on first use (PEP 562 ``__getattr__`` below): the kernels, the
# optimizer, the scheduler and the backends are most of the package's import time, and
# a command that only plans (``vizalloc plan``, the analysis) never runs them.
#: name -> (module, attribute; None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    # op constructors and kernels: ``from vizalloc.runtime import ops, kernels``
    "kernels": ("vizalloc.runtime.kernels", None),
    "ops": ("vizalloc.runtime.ops", None),
    # backward graphs and the optimizer
    "backward": ("vizalloc.runtime.backward", None),
    "opt": ("vizalloc.runtime.opt", None),
    **{name: ("vizalloc.runtime.backward", name)
       for name in ("build_backward_expand", "graph_get_grad", "graph_get_grad_acc", "graph_reset")},
    # the backend scheduler
    "Scheduler": ("vizalloc.runtime.sched", "Scheduler"),
    # the allocators
    "DynAllocator": ("vizalloc.runtime.alloc", "DynAllocator"),
    "GraphAllocator": ("vizalloc.runtime.alloc", "GraphAllocator"),
    # what a program calls once its graph is built: place tensors, set inputs, compute, read
    **{name: ("vizalloc.runtime.backends", name)
       for name in ("CPUBackend", "SimBackend", "alloc_ctx_tensors", "graph_compute")},
    "tensor_get": ("vizalloc.runtime.memory", "tensor_get"),
    "tensor_set": ("vizalloc.runtime.memory", "tensor_set"),
}

if TYPE_CHECKING:  # the same names, for type checkers
    from vizalloc.runtime import backward, kernels, ops, opt
    from vizalloc.runtime.alloc import DynAllocator, GraphAllocator
    from vizalloc.runtime.backends import CPUBackend, SimBackend, alloc_ctx_tensors, graph_compute
    from vizalloc.runtime.backward import build_backward_expand, graph_get_grad, graph_get_grad_acc, graph_reset
    from vizalloc.runtime.memory import tensor_get, tensor_set
    from vizalloc.runtime.sched import Scheduler

__all__ = [
    "Buffer", "BufferType", "Context", "DType", "F16", "F32", "Flag", "Graph", "I32", "Op", "Tensor",
    "UnaryOp", "Usage", "graph_deep_copy", "set_input", "set_loss", "set_output", "set_param", "set_strict",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    """The names imported on first use; deprecated names (``dup_graph``), with a warning
    saying what to use instead."""
    lazy = _LAZY.get(name)
    if lazy is not None:
        module = importlib.import_module(lazy[0])
        value = module if lazy[1] is None else getattr(module, lazy[1])
        globals()[name] = value
        return value
    from vizalloc.runtime import graph

    if name in graph._DEPRECATED:
        return graph.deprecated(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
