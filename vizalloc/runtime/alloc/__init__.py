"""The allocators (ggml-alloc.c): the linear allocator and ``alloc_ctx_tensors`` for a
context's tensors, the dynamic (planning) allocator, and the graph allocator.

    >>> from vizalloc.runtime.alloc import DynAllocator, GraphAllocator, TensorAllocator, alloc_ctx_tensors
"""

from vizalloc.runtime.alloc.dyn_allocator import MAX_CHUNKS, MAX_FREE_BLOCKS, DynAllocator
from vizalloc.runtime.alloc.graph_allocator import GraphAllocator
from vizalloc.runtime.alloc.planner import INVALID, Plan, plan_graph
from vizalloc.runtime.alloc.tensor_allocator import TensorAllocator, alloc_ctx_tensors

__all__ = ["DynAllocator", "GraphAllocator", "INVALID", "MAX_CHUNKS", "MAX_FREE_BLOCKS", "Plan", "TensorAllocator",
           "alloc_ctx_tensors", "plan_graph"]
