"""vizalloc: shows and checks where every byte of a ggml-style compute graph lives.

    import vizalloc
    with vizalloc.trace("run.vztrace") as t:
        ...                      # build, allocate and compute graphs with vizalloc.runtime
    trace = vizalloc.load("run.vztrace")

The public names are loaded on first use, so ``import vizalloc`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_PUBLIC = {
    "Context": "vizalloc.runtime.context",
    "Graph": "vizalloc.runtime.graph",
    "Tensor": "vizalloc.runtime.tensor",
    "DType": "vizalloc.runtime.dtype",
    "ops": "vizalloc.runtime",
    "trace": "vizalloc.trace.api",
    "load": "vizalloc.trace.api",
    "mark": "vizalloc.trace.api",
    "Trace": "vizalloc.trace.api",
    "VizallocError": "vizalloc.errors",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'vizalloc' has no attribute {name!r}")
    if name == "trace":
        # the package vizalloc.trace is callable (vizalloc/trace/__init__.py) and Python binds
        # it here anyway once a submodule is imported: keep one meaning for vizalloc.trace
        value = importlib.import_module("vizalloc.trace")
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
