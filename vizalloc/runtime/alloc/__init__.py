"""Allocators that plan graphs: the dynamic (planning) allocator and the graph allocator.

    >>> from vizalloc.runtime.alloc import DynAllocator, GraphAllocator
"""

from vizalloc.runtime.alloc.dyn_allocator import MAX_CHUNKS, MAX_FREE_BLOCKS, DynAllocator
from vizalloc.runtime.alloc.graph_allocator import GraphAllocator
from vizalloc.runtime.alloc.planner import INVALID, Plan, plan_graph

__all__ = ["DynAllocator", "GraphAllocator", "INVALID", "MAX_CHUNKS", "MAX_FREE_BLOCKS", "Plan", "plan_graph"]
