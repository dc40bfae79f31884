"""Buffer types and buffers: one real byte array per buffer.

A ``Buffer`` owns one contiguous array of bytes (numpy on the host, cupy on a GPU)
and a base address in vizalloc's simulated address space. Tensors placed in it are
strided views of that array, so two tensors placed on the same bytes really
overwrite each other, as in C.

Addresses are never handed out twice: a freed buffer's range stays unique, so a
stale pointer can always be traced back to the buffer it came from. Freed bytes are
poisoned (0xCD) and kept reachable while some tensor still points into them, so a
dangling tensor reads garbage as in C instead of crashing Python; ``set_strict(True)``
makes such a use raise ``DanglingPointerError`` instead.

    >>> from vizalloc.runtime.buffer import BufferType
    >>> buft = BufferType("CPU", alignment=32)
    >>> buf = buft.alloc_buffer(1024)
    >>> buf.nbytes, buf.base % 64
    (1024, 0)
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import operator
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from vizalloc.errors import AllocationError, DanglingPointerError, UsageError
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

if TYPE_CHECKING:
    from vizalloc.runtime.tensor import Tensor

SIZE_MAX = 2**64 - 1
POISON = 0xCD

# The simulated address space: bases are 64-aligned (like ggml_aligned_malloc) and
# separated by a guard gap, starting well above 0 so no address looks like NULL.
_ADDRESS_START = 0x10000
_ADDRESS_GAP = 4096
_next_address = _ADDRESS_START
_buffer_ids = itertools.count()
_strict = False


def set_strict(strict: bool) -> None:
    """Raise ``DanglingPointerError`` on any use of freed memory instead of reading poison."""
    global _strict
    _strict = strict


def is_strict() -> bool:
    return _strict


#: The simulated address space ends where a trace's signed 64-bit integers do.
ADDRESS_END = 2**63


def _reserve_addresses(nbytes: int, alignment: int = 64) -> int:
    # bases honour the buffer type's alignment when it exceeds 64, as device allocators
    # do (cudaMalloc gives 256), so the first tallocr offset is always 0
    global _next_address
    align = max(64, alignment)
    base = (_next_address + align - 1) & ~(align - 1)
    end = (base + max(nbytes, 1) + _ADDRESS_GAP + 63) & ~63
    if end > ADDRESS_END:  # refused before anything changes: the next buffer is unaffected
        raise AllocationError(f"a buffer of {nbytes:,} bytes does not fit in the simulated 63-bit address space "
                              f"({ADDRESS_END - base:,} bytes are left above {base:#x})", requested=nbytes,
                              available=ADDRESS_END - base)
    _next_address = end
    return base


@contextlib.contextmanager
def own_addresses() -> Iterator[None]:
    """Addresses handed out inside are given out again after it: for work whose buffers all
    die with it (a captured process replayed, ``vizalloc.capture``), so that what one such
    replay reserved (a hostile capture: buffers of 2^62 bytes) never shrinks the address
    space of the next one, and every replay starts at the same addresses. Buffers made
    before it keep their addresses unique."""
    global _next_address
    saved = _next_address
    try:
        yield
    finally:
        _next_address = saved


def whole_number(v: Any) -> int | None:
    """``v`` as an int when it is one (Python or numpy integer, not a bool), else None."""
    if isinstance(v, bool):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def pad(x: int, alignment: int) -> int:
    """Round ``x`` up to a multiple of ``alignment`` (a power of two)."""
    return (x + alignment - 1) & ~(alignment - 1)


class _NoBytes:
    """The memory of a buffer that is only an address range (see ``VIRTUAL``)."""

    __slots__ = ()

    def fill(self, value: int) -> None:
        pass


class _VirtualDevice:
    """An array module with no memory: buffers planned for a real process that vizalloc
    replays (``vizalloc.capture``) may be gigabytes, and nothing computes in them."""

    uint8 = None

    @staticmethod
    def zeros(n: int, dtype: Any = None) -> _NoBytes:
        return _NoBytes()


#: ``BufferType(..., device=VIRTUAL)``: buffers with addresses and sizes but no bytes.
VIRTUAL: Any = _VirtualDevice()


class Usage(str, enum.Enum):
    """What a buffer holds (``enum ggml_backend_buffer_usage``)."""

    ANY = "any"
    WEIGHTS = "weights"
    COMPUTE = "compute"


class Storage:
    """Bytes at an address range: a backend buffer or a context's own pool."""

    def __init__(self, nbytes: int, xp: Any = np, alignment: int = 64) -> None:
        self.base = _reserve_addresses(nbytes, alignment)
        self.nbytes = nbytes
        self.xp = xp
        self.mem = xp.zeros(max(nbytes, 1), dtype=xp.uint8)
        self.freed = False
        self.id = -1

    def contains(self, address: int, nbytes: int = 0) -> bool:
        return self.base <= address and address + nbytes <= self.base + self.nbytes

    def check_usable(self, who: Tensor) -> None:
        """In strict mode, refuse to touch the bytes of a freed storage."""
        if self.freed and _strict:
            raise DanglingPointerError(
                f"tensor {who.name or who.id!r} points into buffer #{self.id}, which was freed "
                f"(address {who.data:#x}); its bytes were reused or released. Clear the tensor's "
                "pointers or re-allocate it before use"
            )

    def release(self) -> None:
        """Poison the bytes and mark them freed (they stay reachable for stale tensors)."""
        if not self.freed:
            self.mem.fill(POISON)
            self.freed = True


class BufferType:
    """A kind of memory (``ggml_backend_buffer_type``): alignment, max size, alloc size.

    Args:
        name: shown in traces (``CPU``, ``SIM``, ``CUDA0``).
        alignment: every allocator offset is a multiple of this (power of two).
        max_size: the largest single buffer, or None for no limit (ggml: SIZE_MAX).
        device: the array module that provides memory (numpy, or cupy for CUDA).
        alloc_size: bytes a tensor needs in this memory (defaults to ``nbytes``).
        is_host: whether the CPU can read the memory directly.
    """

    def __init__(
        self,
        name: str,
        alignment: int = 32,
        max_size: int | None = None,
        *,
        device: Any = np,
        alloc_size: Callable[[Tensor], int] | None = None,
        is_host: bool = True,
        backend_name: str | None = None,
    ) -> None:
        align = whole_number(alignment)
        if align is None or align <= 0 or align & (align - 1):
            raise UsageError(f"buffer type {name!r}: alignment {alignment!r} is not a power of two")
        limit = None if max_size is None else whole_number(max_size)
        if max_size is not None and (limit is None or not 0 < limit <= SIZE_MAX):
            raise UsageError(f"buffer type {name!r}: max_size {max_size!r} must be a positive number of bytes "
                             "(None: no limit, as ggml's SIZE_MAX)")
        self.name = name
        self.alignment = align
        self.max_size = SIZE_MAX if limit is None else limit
        self.device = device
        self._alloc_size = alloc_size
        self.is_host = is_host
        self.backend_name = backend_name or name

    def alloc_size(self, t: Tensor) -> int:
        """``ggml_backend_buft_get_alloc_size``: bytes ``t`` needs in this memory."""
        if self._alloc_size is None:
            return t.nbytes
        return self._alloc_size(t)

    def alloc_buffer(
        self, nbytes: int, usage: Usage = Usage.ANY, *, pool_id: int = -1, slot: int = -1,
        chunk: int = -1, cause: str = "",
    ) -> Buffer:
        """Allocate one buffer of ``nbytes`` (zero gives ggml's dummy zero-size buffer)."""
        size = whole_number(nbytes)
        if size is None or size < 0:
            raise AllocationError(f"cannot allocate a buffer of {nbytes!r:.40} bytes of type {self.name}: the size "
                                  "must be a whole number of bytes, 0 or more")
        return Buffer(self, size, usage, pool_id=pool_id, slot=slot, chunk=chunk, cause=cause)

    def __repr__(self) -> str:
        limit = "" if self.max_size == SIZE_MAX else f", max {self.max_size}"
        return f"<BufferType {self.name} align {self.alignment}{limit}>"


class Buffer(Storage):
    """One backend buffer: a real byte array with a base address (``ggml_backend_buffer``)."""

    def __init__(
        self, buft: BufferType, nbytes: int, usage: Usage = Usage.ANY, *, pool_id: int = -1,
        slot: int = -1, chunk: int = -1, cause: str = "",
    ) -> None:
        try:
            super().__init__(nbytes, buft.device, buft.alignment)
        except Exception as exc:  # numpy/cupy out of memory
            raise AllocationError(
                f"cannot allocate a {nbytes}-byte buffer of type {buft.name}: {exc}", requested=nbytes
            ) from exc
        self.id = next(_buffer_ids)
        self.buft = buft
        self.usage = usage
        if recorder.active():
            recorder.emit(
                ev.BufferAllocated, self.id, buft.backend_name, buft.name, self.base, nbytes,
                buft.alignment, usage.value, pool_id, slot, chunk, cause,
            )

    @property
    def size(self) -> int:
        return self.nbytes

    def set_usage(self, usage: Usage) -> None:
        self.usage = usage

    def clear(self, value: int = 0) -> None:
        """``ggml_backend_buffer_clear``: fill every byte with ``value``."""
        self.mem.fill(value)
        if recorder.active():
            recorder.emit(ev.BufferCleared, self.id, value)

    def free(self, cause: str = "") -> None:
        """``ggml_backend_buffer_free``. Tensors still pointing here now dangle."""
        if self.freed:
            return
        self.release()
        if recorder.active():
            recorder.emit(ev.BufferFreed, self.id, cause)

    def __repr__(self) -> str:
        state = " freed" if self.freed else ""
        return f"<Buffer #{self.id} {self.buft.name} {self.nbytes} B{state}>"
