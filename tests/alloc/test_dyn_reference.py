"""DynAllocator against a literal, unoptimized port of ggml_dyn_tallocr (semantics §4) on
random alloc/free sequences: the fast paths (one chunk, bisected release) must give the
same addresses and the same free lists as ggml's plain loops."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vizalloc.runtime.alloc import DynAllocator

SIZE_MAX = 2**64 - 1


class RefDyn:
    """ggml_dyn_tallocr written as the C reads: lists of [offset, size] blocks per chunk."""

    def __init__(self, alignment: int, max_size: int | None) -> None:
        self.a = alignment
        self.max_chunk = min(SIZE_MAX if max_size is None else max_size, SIZE_MAX // 2)
        self.chunks: list[dict] = []

    def pad(self, x: int) -> int:
        return x + ((self.a - x % self.a) % self.a)

    def alloc(self, size: int) -> tuple[int, int]:
        size = self.pad(size)
        best_c = best_b = -1
        for c, ch in enumerate(self.chunks):
            best_size = SIZE_MAX
            for i in range(len(ch["blocks"]) - 1):
                bs = ch["blocks"][i][1]
                if bs >= size and bs <= best_size:
                    best_c, best_b, best_size = c, i, bs
        if best_b == -1:
            best_reuse = -(2**63)
            for c, ch in enumerate(self.chunks):
                if ch["blocks"]:
                    blk = ch["blocks"][-1]
                    r = ch["max"] - blk[0] - size
                    better_reuse = best_reuse < 0 and r > best_reuse
                    better_fit = r >= 0 and r < best_reuse
                    if blk[1] >= size and (better_reuse or better_fit):
                        best_c, best_b, best_reuse = c, len(ch["blocks"]) - 1, r
        if best_b == -1:
            assert len(self.chunks) < 16
            n = len(self.chunks)
            cap = max(size, self.max_chunk)
            if n == 15:
                cap = SIZE_MAX // 2
            self.chunks.append({"blocks": [[0, cap]], "max": 0})
            best_c, best_b = n, 0
        ch = self.chunks[best_c]
        blk = ch["blocks"][best_b]
        addr = (best_c, blk[0])
        blk[0] += size
        blk[1] -= size
        if blk[1] == 0:
            del ch["blocks"][best_b]
        ch["max"] = max(ch["max"], addr[1] + size)
        return addr

    def free(self, c: int, off: int, size: int) -> None:
        size = self.pad(size)
        blocks = self.chunks[c]["blocks"]
        for i in range(len(blocks)):
            b = blocks[i]
            if b[0] + b[1] == off:
                b[1] += size
                if i + 1 < len(blocks) and b[0] + b[1] == blocks[i + 1][0]:
                    b[1] += blocks[i + 1][1]
                    del blocks[i + 1]
                return
            if off + size == b[0]:
                b[0] = off
                b[1] += size
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == b[0]:
                    blocks[i - 1][1] += b[1]
                    del blocks[i]
                return
        assert len(blocks) < 256
        pos = 0
        while pos < len(blocks) and blocks[pos][0] < off:
            pos += 1
        blocks.insert(pos, [off, size])


ops = st.lists(st.tuples(st.booleans(), st.integers(1, 700), st.integers(0, 10**6)), min_size=1, max_size=120)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(ops=ops, alignment=st.sampled_from([16, 32, 256]), max_size=st.sampled_from([None, 256, 512, 1000, 4096]))
def test_same_addresses_and_free_lists_as_the_literal_port(  # type: ignore[no-untyped-def]
        ops, alignment, max_size) -> None:
    fast = DynAllocator(alignment, max_size)
    ref = RefDyn(alignment, max_size)
    live: list[tuple[int, int, int]] = []
    for is_alloc, size, pick in ops:
        if is_alloc or not live:
            c, o, _blk = fast.alloc(size)
            assert (c, o) == ref.alloc(size)
            live.append((c, o, size))
        else:
            c, o, sz = live.pop(pick % len(live))
            fast.free(c, o, sz)
            ref.free(c, o, sz)
        assert fast.chunk_sizes() == [ch["max"] for ch in ref.chunks]
        for c, ch in enumerate(ref.chunks):
            assert fast.free_blocks(c) == [tuple(b) for b in ch["blocks"]]
