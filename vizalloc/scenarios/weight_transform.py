"""Transforming weights at load time, two ways, with the memory each one holds.

    >>> from vizalloc.scenarios.weight_transform import run_graph_transform, run_converting_buffer
    >>> a, b = run_graph_transform(), run_converting_buffer()
    >>> a.peak_nbytes > a.after_nbytes, b.peak_nbytes == b.after_nbytes
    (True, True)

The task: F32 weights arrive from a file and must end up converted (here: cast to F16,
the way a loader repacks or quantizes weights).

1. **A graph into a temporary context.** The originals are loaded into their own
   buffer and tagged INPUT; a graph casts each one into a result tagged OUTPUT, in a
   temporary no-alloc context; a dedicated graph allocator places the results (OUTPUT:
   never reused) and the graph runs; then the originals are dropped (buffer freed).
   The results stay in that allocator's buffer, which therefore must never plan another
   graph: its next plan would land on the weights. Peak memory: originals + results.
2. **A buffer type that converts tensors as they are set** (what the ggml maintainers
   suggested instead, as ggml-cpu's repacking "extra" buffer types do): the weights are
   declared F16 in a ``ConvertingBufferType`` and the loader hands it the F32 data,
   which it converts while writing. Only the final bytes ever exist.

vizalloc's ``tensor_set`` has no per-buffer hook, so the converting buffer type offers
``set_tensor(t, values)`` for the loader to call (ggml routes ``ggml_backend_tensor_set``
to the buffer's ``set_tensor``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vizalloc.errors import AllocationError, ShapeError
from vizalloc.runtime import memory, ops
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.buffer import Buffer, BufferType, Usage
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F16, F32
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.tensor import Tensor, set_input, set_output

#: (name, ne0, ne1) of the weights: ggml shapes (ne0 innermost)
DEFAULT_SHAPES: tuple[tuple[str, int, int], ...] = (("tok_embd", 64, 256), ("Wq", 64, 64), ("Wk", 64, 64),
                                                     ("Wv", 64, 64), ("Wo", 64, 64), ("W_up", 64, 256),
                                                     ("W_down", 256, 64))


@dataclass(frozen=True)
class MemoryPoint:
    """Live bytes at one moment, per buffer."""

    label: str
    buffers: tuple[tuple[str, int], ...]

    @property
    def nbytes(self) -> int:
        return sum(n for _, n in self.buffers)


@dataclass(frozen=True)
class TransformResult:
    approach: str
    timeline: tuple[MemoryPoint, ...]
    weights: dict[str, np.ndarray]    # the converted weights, read back
    max_abs_diff: float               # vs numpy's own float16 conversion

    @property
    def before_nbytes(self) -> int:
        """Bytes held once the weights are loaded, before any transform."""
        return self.timeline[0].nbytes

    @property
    def peak_nbytes(self) -> int:
        return max(p.nbytes for p in self.timeline)

    @property
    def after_nbytes(self) -> int:
        return self.timeline[-1].nbytes


class ConvertingBufferType(BufferType):
    """A host buffer type whose ``set_tensor`` converts incoming data to the tensor's type."""

    def __init__(self, base: BufferType, name: str = "") -> None:
        super().__init__(name or f"{base.name}_CONVERT", alignment=base.alignment,
                         max_size=None if base.max_size == 2**64 - 1 else base.max_size, device=base.device,
                         is_host=True, backend_name=base.backend_name)

    def set_tensor(self, t: Tensor, values: Any) -> None:
        """Convert ``values`` (any float array with ``t``'s element count) to ``t.type`` and write it."""
        if t.buffer is None or t.buffer.buft is not self:
            raise AllocationError(f"tensor {t.name!r} is not placed in a {self.name} buffer; "
                                  "allocate its context with this buffer type first")
        arr = np.asarray(values)
        if arr.size != t.nelements:
            raise ShapeError(f"set_tensor: tensor {t.name!r} has {t.nelements} elements, got {arr.size}")
        memory.tensor_set(t, arr.astype(t.type.numpy))


def make_weights(shapes: Sequence[tuple[str, int, int]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal((ne1, ne0)).astype(np.float32) for name, ne0, ne1 in shapes}


def _point(label: str, bufs: Sequence[tuple[str, Buffer | None]]) -> MemoryPoint:
    return MemoryPoint(label, tuple((n, b.nbytes) for n, b in bufs if b is not None and not b.freed))


def run_graph_transform(shapes: Sequence[tuple[str, int, int]] = DEFAULT_SHAPES, seed: int = 0) -> TransformResult:
    """Approach 1: load F32 originals, cast them by a graph into a temporary context, drop them."""
    from vizalloc.runtime.alloc import GraphAllocator
    from vizalloc.runtime.backends import CPUBackend

    cpu = CPUBackend()
    values = make_weights(shapes, seed)
    ctx_orig = Context(name="originals")
    orig = {name: ctx_orig.new_tensor_2d(F32, ne0, ne1, name) for name, ne0, ne1 in shapes}
    buf_orig = alloc_ctx_tensors(ctx_orig, cpu.buffer_type, Usage.WEIGHTS)
    assert isinstance(buf_orig, Buffer)
    for name, t in orig.items():
        memory.tensor_set(t, values[name])
    timeline = [_point("originals loaded (F32)", [("originals", buf_orig)])]

    ctx_tmp = Context(name="transform")
    g = Graph()
    results = {}
    for name, t in orig.items():
        set_input(t)  # originals tagged input
        r = ops.cast(ctx_tmp, t, F16).set_name(f"{name}.f16")
        set_output(r)  # results tagged output: the allocator never reuses their bytes
        g.build_forward_expand(r)
        results[name] = r
    galloc = GraphAllocator([cpu.buffer_type])
    if not galloc.alloc_graph(g):
        raise AllocationError("weight transform: the graph allocator could not place the results")
    cpu.graph_compute(g)
    result_bufs = [("transform results", b) for vb in galloc.buffers if vb for b in vb]
    timeline.append(_point("transform graph computed", [("originals", buf_orig), *result_bufs]))

    buf_orig.free(cause="originals dropped after the transform")
    ctx_orig.free()
    timeline.append(_point("originals dropped", result_bufs))
    out = {name: memory.tensor_get(r) for name, r in results.items()}
    diff = max(float(np.max(np.abs(out[k].astype(np.float32) - values[k].astype(np.float16).astype(np.float32))))
               for k in out)
    return TransformResult("graph into a temporary context", tuple(timeline), out, diff)


def run_converting_buffer(shapes: Sequence[tuple[str, int, int]] = DEFAULT_SHAPES, seed: int = 0) -> TransformResult:
    """Approach 2: declare the weights F16 in a converting buffer type and load F32 data into it."""
    from vizalloc.runtime.backends import CPUBackend

    values = make_weights(shapes, seed)
    buft = ConvertingBufferType(CPUBackend().buffer_type)
    ctx = Context(name="weights")
    ws = {name: ctx.new_tensor_2d(F16, ne0, ne1, name) for name, ne0, ne1 in shapes}
    buf = alloc_ctx_tensors(ctx, buft, Usage.WEIGHTS)
    assert isinstance(buf, Buffer)
    timeline = [_point("converting buffer allocated (F16)", [("weights", buf)])]
    for name, t in ws.items():
        buft.set_tensor(t, values[name])  # converted while being set
    timeline.append(_point("weights set (converted on the way in)", [("weights", buf)]))
    out = {name: memory.tensor_get(t) for name, t in ws.items()}
    diff = max(float(np.max(np.abs(out[k].astype(np.float32) - values[k].astype(np.float16).astype(np.float32))))
               for k in out)
    return TransformResult("buffer type that converts on set", tuple(timeline), out, diff)
