"""The linear allocator (ggml's ``ggml_tallocr``) and ``alloc_ctx_tensors``, which gives
every tensor of a context bytes with it: the static half of ``ggml-alloc.c``.

    >>> from vizalloc.runtime import Context, F32
    >>> from vizalloc.runtime.buffer import BufferType
    >>> from vizalloc.runtime.alloc import TensorAllocator, alloc_ctx_tensors
    >>> ctx = Context(); a = ctx.new_tensor_1d(F32, 3); b = ctx.new_tensor_1d(F32, 5)
    >>> buf = alloc_ctx_tensors(ctx, BufferType("CPU", alignment=32))
    >>> buf.nbytes, a.data - buf.base, b.data - buf.base
    (64, 0, 32)
"""

from __future__ import annotations

from vizalloc.errors import AllocationError
from vizalloc.runtime import memory
from vizalloc.runtime.buffer import Buffer, BufferType, Usage, pad
from vizalloc.runtime.context import Context
from vizalloc.runtime.tensor import Tensor, label
from vizalloc.trace import events as ev


class TensorAllocator:
    """``ggml_tallocr``: a bump allocator over one buffer; no freeing, no reuse."""

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer
        self.alignment = buffer.buft.alignment
        self.offset = pad(buffer.base, self.alignment) - buffer.base

    def alloc(self, t: Tensor) -> None:
        size = pad(self.buffer.buft.alloc_size(t), self.alignment)
        if self.offset + size > self.buffer.nbytes:
            raise AllocationError(
                f"not enough space in buffer #{self.buffer.id} for tensor {label(t)}: needed {size} bytes, "
                f"available {self.buffer.nbytes - self.offset}",
                requested=size, available=self.buffer.nbytes - self.offset,
            )
        address = self.buffer.base + self.offset
        self.offset += size
        memory.tensor_alloc(self.buffer, t, address, by=ev.PlacedBy.TALLOCR)


def alloc_ctx_tensors(ctx: Context, buft: BufferType, usage: Usage = Usage.ANY) -> Buffer | list[Buffer] | None:
    """``ggml_backend_alloc_ctx_tensors_from_buft``: one buffer for every tensor of ``ctx``.

    Tensors are placed in creation order; with a ``max_size`` the tensors are split into
    several buffers (returned as a list, ggml's "multi buffer"). Returns None when no
    tensor needed memory. A tensor larger than ``max_size`` is an ``AllocationError``
    (ggml requests a buffer of its size, which the backends that set such a limit refuse).
    """
    if not ctx.no_alloc:
        raise AllocationError(f"context {ctx.name!r} allocates its own memory; alloc_ctx_tensors needs a no_alloc context")
    tensors = list(ctx.tensors())
    ranges: list[tuple[int, int, int]] = []  # (first, end, bytes)
    first, cur = 0, 0
    for i, t in enumerate(tensors):
        this = pad(buft.alloc_size(t), buft.alignment) if (t.data is None and t.view_src is None) else 0
        if this > buft.max_size:
            # ggml asks the backend for a buffer of this tensor's size, which a backend with this
            # limit refuses (alloc_ctx_tensors then fails); the CPU one would give it
            raise AllocationError(
                f"alloc_ctx_tensors: tensor {label(t)} needs {this} bytes, more than the {buft.max_size}-byte "
                f"max_size of buffer type {buft.name}; a buffer that large cannot be allocated there",
                requested=this, available=buft.max_size,
            )
        if cur > 0 and cur + this > buft.max_size:
            ranges.append((first, i, cur))
            first, cur = i, this
        else:
            cur += this
    if cur > 0:
        ranges.append((first, len(tensors), cur))
    if not ranges:
        return None
    buffers = []
    for first, end, nbytes in ranges:
        buf = buft.alloc_buffer(nbytes, usage, cause=f"alloc_ctx_tensors {ctx.name}")
        talloc = TensorAllocator(buf)
        for t in tensors[first:end]:
            if t.data is None and t.view_src is None:
                talloc.alloc(t)
            elif t.view_src is not None and t.buffer is None:
                memory.view_init(t)
        buffers.append(buf)
    return buffers[0] if len(buffers) == 1 else buffers
