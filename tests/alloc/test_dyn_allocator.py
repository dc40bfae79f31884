"""The planning allocator alone: selection rule, merging, chunks, the 256-block limit."""

from __future__ import annotations

import pytest

from vizalloc.errors import AllocationError
from vizalloc.runtime import Context
from vizalloc.runtime.alloc import MAX_FREE_BLOCKS, DynAllocator, GraphAllocator
from vizalloc.runtime.alloc.dyn_allocator import SIZE_MAX
from vizalloc.runtime.tensor import Op

from tests.alloc.helpers import cpu, graph, leaf, node


def test_requests_and_releases_are_padded() -> None:
    d = DynAllocator(32)
    assert d.alloc(1) == (0, 0, -1)
    assert d.alloc(33) == (0, 32, 0)
    assert d.chunk_sizes() == [96]
    d.free(0, 0, 1)  # a 1-byte release frees a whole aligned slot
    assert d.free_blocks(0)[0] == (0, 32)


def test_best_fit_ties_go_to_the_later_block() -> None:
    d = DynAllocator(32)
    for _ in range(5):
        d.alloc(64)
    d.free(0, 0, 64)
    d.free(0, 128, 64)
    assert d.alloc(64) == (0, 128, 1)


def test_smaller_hole_beats_earlier_larger_one() -> None:
    d = DynAllocator(32)
    offs = [d.alloc(s)[1] for s in (128, 32, 64, 32)]
    d.free(0, offs[0], 128)
    d.free(0, offs[2], 64)
    assert d.alloc(64)[1] == offs[2]


def test_free_merges_both_neighbours() -> None:
    d = DynAllocator(32)
    offs = [d.alloc(32)[1] for _ in range(4)]
    d.free(0, offs[0], 32)
    d.free(0, offs[2], 32)
    assert d.free_blocks(0)[:2] == [(0, 32), (64, 32)]
    d.free(0, offs[1], 32)
    assert d.free_blocks(0)[0] == (0, 96)
    d.free(0, offs[3], 32)  # merges with the hole below and the tail above
    assert len(d.free_blocks(0)) == 1 and d.free_blocks(0)[0][0] == 0


def test_tail_reuse_factor_prefers_no_growth() -> None:
    d = DynAllocator(32, max_size=256)
    assert d.alloc(256)[0] == 0          # chunk 0 full, no blocks left
    assert d.alloc(64) == (1, 0, -1)     # chunk 1
    assert d.alloc(32) == (1, 64, 0)
    d.free(1, 64, 32)                    # chunk 1 tail back at 64, high-water 96
    assert d.alloc(256) == (2, 0, -1)    # does not fit chunk 1's 192-byte tail
    d.free(2, 0, 256)
    # both tails fit 32 bytes: chunk 1 leaves room 0 (96-64-32), chunk 2 grows: chunk 1 wins
    assert d.alloc(32) == (1, 64, 0)


def test_oversized_request_gets_its_own_chunk() -> None:
    d = DynAllocator(32, max_size=256)
    assert d.alloc(1000) == (0, 0, -1)
    assert d.chunk_sizes() == [1024]


def test_sixteenth_chunk_is_unbounded_and_seventeenth_fails() -> None:
    d = DynAllocator(32, max_size=256)
    for c in range(15):
        assert d.alloc(256)[0] == c
    assert d.alloc(256)[0] == 15
    assert d.free_blocks(15)[0] == (256, SIZE_MAX // 2 - 256)
    for _ in range(100):
        assert d.alloc(256)[0] == 15
    d2 = DynAllocator(32, max_size=64)
    for _ in range(15):
        d2.alloc(64)
    d2.offs[-1].clear()  # (white-box) make every chunk look full to reach the 17th
    d2.alloc(64)
    d2.offs[-1].clear(); d2.sizes[-1].clear()
    d2.offs[-2].clear(); d2.sizes[-2].clear()
    with pytest.raises(AllocationError, match="all 16 chunks"):
        d2.alloc(64)


def test_free_block_limit_raises_allocation_error() -> None:
    d = DynAllocator(32)
    offs = [d.alloc(32)[1] for _ in range(2 * MAX_FREE_BLOCKS + 4)]
    for k in range(MAX_FREE_BLOCKS - 1):  # 255 separate holes + the tail = 256 blocks
        d.free(0, offs[2 * k], 32)
    assert len(d.free_blocks(0)) == MAX_FREE_BLOCKS
    d.free(0, offs[2 * (MAX_FREE_BLOCKS - 2) + 1], 32)  # merges: needs no new block
    with pytest.raises(AllocationError, match="out of free blocks"):
        d.free(0, offs[2 * MAX_FREE_BLOCKS + 2], 32)


def test_graph_that_leaves_too_many_holes_fails_cleanly() -> None:
    # 600 leafs; every even one is read once by a 64-byte concat and then freed between
    # two live odd leafs, leaving a separate 32-byte hole the concats never fit into
    ctx = Context()
    leafs = [leaf(ctx, 8, name=f"l{i}") for i in range(600)]
    nodes = [node(ctx, Op.CONCAT, [leafs[2 * i], leafs[2 * i]], (16,)) for i in range(300)]
    g = graph(*leafs, *nodes)
    with pytest.raises(AllocationError, match="out of free blocks in chunk 0 of buffer type 'CPU'"):
        GraphAllocator(cpu()).alloc_graph(g)
    # fewer holes plan fine
    ctx2 = Context()
    leafs = [leaf(ctx2, 8) for i in range(400)]
    nodes = [node(ctx2, Op.CONCAT, [leafs[2 * i], leafs[2 * i]], (16,)) for i in range(200)]
    assert GraphAllocator(cpu()).alloc_graph(graph(*leafs, *nodes))
