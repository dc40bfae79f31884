"""The planning allocator (ggml's ``ggml_dyn_tallocr``): hands out ``(chunk, offset)``
addresses from per-chunk free lists and records each chunk's high-water mark. It never
touches memory; the graph allocator turns its high-water marks into real buffers.

    >>> from vizalloc.runtime.alloc.dyn_allocator import DynAllocator
    >>> d = DynAllocator(alignment=32)
    >>> d.alloc(100), d.alloc(64)          # (chunk, offset, block); block -1: a new chunk
    ((0, 0, -1), (0, 128, 0))
    >>> d.free(0, 0, 100); d.alloc(96)     # the hole below the tail is the best fit
    (0, 0, 0)
    >>> d.chunk_sizes()
    [192]

Selection rule (``src/ggml-alloc.c``, semantics §4.2), reproduced exactly:

1. best fit among the *non-last* free blocks of every chunk; ties go to the later block,
   and the best size restarts for every chunk, so the last chunk with any fitting hole wins;
2. otherwise the last block ("tail") of the chunk with the best reuse factor
   ``max_size - block.offset - size`` (smallest non-negative, else the largest negative;
   ties keep the earlier chunk);
3. otherwise a new chunk of ``max(size, max_chunk_size)`` bytes (the 16th is unbounded).

Requests and releases are padded to the alignment; a release merges with its neighbours
or inserts a new block, and a chunk holds at most 256 free blocks (ggml aborts with
"out of free blocks"; vizalloc raises ``AllocationError``).

Free lists are two plain lists per chunk (offsets, sizes) because the planner calls
``alloc``/``free`` once per tensor and Python object overhead would dominate.
"""

from __future__ import annotations

from bisect import bisect_left

from vizalloc.errors import AllocationError

SIZE_MAX = 2**64 - 1
#: ggml's MAX_FREE_BLOCKS: free blocks one chunk can hold.
MAX_FREE_BLOCKS = 256
#: ggml's GGML_VBUFFER_MAX_CHUNKS: chunks (backend buffers) one allocator can open.
MAX_CHUNKS = 16
_INT64_MIN = -(2**63)


class DynAllocator:
    """Free-list allocator over up to 16 lazily created chunks.

    Args:
        alignment: every request and release is rounded up to this (a power of two).
        max_size: the buffer type's largest buffer (None: no limit); a chunk offers
            ``min(max_size, SIZE_MAX // 2)`` bytes unless one tensor needs more.
        name: shown in error messages (the buffer type's name).
    """

    __slots__ = ("alignment", "max_chunk_size", "name", "offs", "sizes", "max_sizes", "_mask", "_exact")

    def __init__(self, alignment: int, max_size: int | None = None, name: str = "") -> None:
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment {alignment} is not a power of two")
        self.alignment = alignment
        self._mask = alignment - 1
        self.max_chunk_size = min(SIZE_MAX if max_size is None else max_size, SIZE_MAX // 2)
        self.name = name
        #: per chunk: offsets and sizes of its free blocks, sorted by offset
        self.offs: list[list[int]] = []
        self.sizes: list[list[int]] = []
        #: per chunk: the high-water mark (bytes the chunk's buffer must have)
        self.max_sizes: list[int] = []
        #: set once a release overlapped a free block or was empty: from then on ``free``
        #: scans the blocks exactly as ggml does instead of bisecting
        self._exact = False

    # -- state --------------------------------------------------------------
    def reset(self) -> None:
        """Drop every chunk (``ggml_dyn_tallocr_reset``): planning starts empty."""
        self.offs = []
        self.sizes = []
        self.max_sizes = []
        self._exact = False

    @property
    def n_chunks(self) -> int:
        return len(self.max_sizes)

    def chunk_sizes(self) -> list[int]:
        """High-water mark of each chunk (``ggml_dyn_tallocr_max_size``)."""
        return list(self.max_sizes)

    def free_blocks(self, chunk: int) -> list[tuple[int, int]]:
        """``(offset, size)`` of the free blocks of ``chunk``, by offset (for tests and views)."""
        return list(zip(self.offs[chunk], self.sizes[chunk]))

    def _new_chunk(self, min_size: int) -> int:
        n = len(self.max_sizes)
        if n >= MAX_CHUNKS:
            return -1
        size = min_size if min_size > self.max_chunk_size else self.max_chunk_size
        if n == MAX_CHUNKS - 1:
            size = SIZE_MAX // 2  # the last chunk is unbounded
        self.offs.append([0])
        self.sizes.append([size])
        self.max_sizes.append(0)
        return n

    # -- alloc / free ---------------------------------------------------------
    def padded(self, size: int) -> int:
        """``size`` rounded up to the alignment: the bytes ``alloc`` and ``free`` use for it."""
        mask = self._mask
        return (size + mask) & ~mask

    def alloc(self, size: int) -> tuple[int, int, int]:
        """Place ``size`` bytes (padded); returns ``(chunk, offset, block)``.

        ``block`` is the index of the free block taken before the allocation, -1 when
        a new chunk was opened.
        """
        mask = self._mask
        size = (size + mask) & ~mask
        sizes_all = self.sizes
        if len(sizes_all) == 1:
            # one chunk (every buffer type without a max size): best non-last hole, else
            # the tail if it fits; otherwise fall through to open a second chunk
            sizes = sizes_all[0]
            if sizes:
                last = len(sizes) - 1
                best_b = -1
                best_size = SIZE_MAX
                for i in range(last):
                    s = sizes[i]
                    if size <= s <= best_size:
                        best_b = i
                        best_size = s
                if best_b < 0 and sizes[last] >= size:
                    best_b = last
                if best_b >= 0:
                    offs = self.offs[0]
                    offset = offs[best_b]
                    rest = sizes[best_b] - size
                    if rest:
                        offs[best_b] = offset + size
                        sizes[best_b] = rest
                    else:
                        del offs[best_b]
                        del sizes[best_b]
                    end = offset + size
                    max_sizes = self.max_sizes
                    if end > max_sizes[0]:
                        max_sizes[0] = end
                    return 0, offset, best_b
        best_c = -1
        best_b = -1
        # pass 1: best fit among non-last blocks; best size restarts per chunk
        for c in range(len(sizes_all)):
            sizes = sizes_all[c]
            n = len(sizes) - 1
            if n > 0:
                best_size = SIZE_MAX
                for i in range(n):
                    s = sizes[i]
                    if s >= size and s <= best_size:
                        best_c = c
                        best_b = i
                        best_size = s
        new_chunk = False
        if best_b < 0:
            # pass 2: the tail with the best reuse factor
            best_reuse = _INT64_MIN
            max_sizes = self.max_sizes
            offs_all = self.offs
            for c in range(len(sizes_all)):
                sizes = sizes_all[c]
                if sizes:
                    last = len(sizes) - 1
                    r = max_sizes[c] - offs_all[c][last] - size
                    if sizes[last] >= size and (
                        (best_reuse < 0 and r > best_reuse) or (r >= 0 and r < best_reuse)
                    ):
                        best_c = c
                        best_b = last
                        best_reuse = r
            if best_b < 0:
                best_c = self._new_chunk(size)
                best_b = 0
                new_chunk = True
                if best_c < 0:
                    raise AllocationError(
                        f"graph allocation: failed to reserve {size} bytes in buffer type {self.name!r}: "
                        f"all {MAX_CHUNKS} chunks are in use (ggml aborts here)",
                        requested=size,
                    )
        offs = self.offs[best_c]
        sizes = sizes_all[best_c]
        offset = offs[best_b]
        rest = sizes[best_b] - size
        if rest == 0:
            del offs[best_b]
            del sizes[best_b]
        else:
            offs[best_b] = offset + size
            sizes[best_b] = rest
        end = offset + size
        if end > self.max_sizes[best_c]:
            self.max_sizes[best_c] = end
        return best_c, offset, (-1 if new_chunk else best_b)

    def free(self, chunk: int, offset: int, size: int) -> None:
        """Give back ``size`` bytes (padded) at ``offset`` of ``chunk``, merging neighbours."""
        mask = self._mask
        size = (size + mask) & ~mask
        offs = self.offs[chunk]
        sizes = self.sizes[chunk]
        n = len(offs)
        end = offset + size
        if size and not self._exact:
            # Blocks are sorted, disjoint and non-empty, so only the block before the
            # insertion point can end at ``offset`` and only the one at it can start at
            # ``end``: the same result as ggml's scan from block 0, found by bisection.
            p = bisect_left(offs, offset)
            prev_end = offs[p - 1] + sizes[p - 1] if p else -1
            if prev_end <= offset and (p == n or offs[p] >= end):
                if prev_end == offset:
                    sizes[p - 1] += size
                    if p < n and offs[p] == end:
                        sizes[p - 1] += sizes[p]
                        del offs[p]
                        del sizes[p]
                    return
                if p < n and offs[p] == end:
                    offs[p] = offset
                    sizes[p] += size
                    return
                if n >= MAX_FREE_BLOCKS:
                    self._out_of_blocks(chunk, offset, size)
                offs.insert(p, offset)
                sizes.insert(p, size)
                return
        # an empty or overlapping release (never made by the graph allocator): ggml's scan
        self._exact = True
        for i in range(n):
            b_off = offs[i]
            if b_off + sizes[i] == offset:
                # the released range starts where block i ends
                sizes[i] += size
                if i + 1 < n and b_off + sizes[i] == offs[i + 1]:
                    sizes[i] += sizes[i + 1]
                    del offs[i + 1]
                    del sizes[i + 1]
                return
            if end == b_off:
                # the released range ends where block i starts
                offs[i] = offset
                sizes[i] += size
                if i > 0 and offs[i - 1] + sizes[i - 1] == offset:
                    sizes[i - 1] += sizes[i]
                    del offs[i]
                    del sizes[i]
                return
        if n >= MAX_FREE_BLOCKS:
            self._out_of_blocks(chunk, offset, size)
        pos = 0
        while pos < n and offs[pos] < offset:
            pos += 1
        offs.insert(pos, offset)
        sizes.insert(pos, size)

    def _out_of_blocks(self, chunk: int, offset: int, size: int) -> None:
        raise AllocationError(
            f"graph allocation: out of free blocks in chunk {chunk} of buffer type {self.name!r}: "
            f"releasing {size} bytes at offset {offset} needs a new block, but the chunk already has "
            f"{MAX_FREE_BLOCKS} separate free blocks (ggml aborts here). The graph leaves too many "
            "holes; give long-lived tensors (weights) a static buffer or bound tensor lifetimes",
            requested=size,
        )

    def __repr__(self) -> str:
        return f"<DynAllocator align {self.alignment} chunks {self.max_sizes}>"
