"""Accuracy of the access check against the bytes themselves.

Random graphs of elementwise ops share tensors across a random sequence of allocations
with one graph allocator (sometimes clearing pointers first, sometimes not). While each
graph computes, an eval callback keeps the ground truth on the runtime side, from the
tensors' real data pointers: a tag per byte of every buffer naming the memory root that
wrote it last. Before a node runs, a source with a byte tagged by another root (or never
written) reads foreign data, and a source whose buffer was freed dangles. The analysis,
which only sees the trace, must flag exactly the foreign reads (use-after-reuse or
uninitialized-read) and exactly the dangling ones: no misses, no false alarms.

As a check on the oracle itself, every read whose *values* differ from what its root last
wrote must be a foreign read (different values imply a foreign writer; the converse does
not hold, since two tensors can compute equal bytes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vizalloc.analysis.hazards import Collector, HazardKind
from vizalloc.analysis.model import build_model
from vizalloc.analysis.dynamic import scan_accesses
from vizalloc.runtime import ops
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.backends import CPUBackend, graph_compute
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F32
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.memory import clear_tensor_pointers, tensor_set
from vizalloc.runtime.tensor import Op, Tensor, set_input, set_output

from vizalloc.trace.recorder import StrictRecorder

CONTENT_KINDS = (HazardKind.USE_AFTER_REUSE, HazardKind.UNINITIALIZED_READ)
UNARY = ("relu", "neg", "sqr", "abs")
BINARY = ("add", "mul", "sub")


class Every(Collector):
    """A collector that also keeps every occurrence: (seq, victim tensor, kind)."""

    def __init__(self) -> None:
        super().__init__()
        self.all: list[tuple[int, int, HazardKind]] = []

    def bump(self, key: tuple[Any, ...], seq: int, step: int) -> bool:
        if key in self.found:
            self.all.append((seq, key[1], key[0]))
        return super().bump(key, seq, step)

    def add(self, key: tuple[Any, ...], make: Any, step: int, seq: int) -> None:
        super().add(key, make, step, seq)
        self.all.append((seq, key[1], key[0]))


def _bytes(t: Tensor) -> bytes:
    s = t.storage
    assert s is not None and t.data is not None
    off = t.data - s.base
    return bytes(s.mem[off:off + t.nbytes])


Reads = set[tuple[str, int, int, int]]


def run_case(seed: int) -> tuple[Reads, Reads, int]:
    """(truth, flagged, reads): ("content" | "dangling", compute order, node index, source id)."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([4, 8, 16]))
    buft = BufferType("CPU", alignment=32)
    backend = CPUBackend()
    truth: Reads = set()
    value_changed: Reads = set()
    expected: dict[int, bytes] = {}   # root id -> its bytes right after its last write
    tags: dict[int, np.ndarray] = {}   # storage id -> root id that last wrote each byte (-1: never)
    n_reads = 0
    values: dict[int, np.ndarray] = {}
    pool: list[Tensor] = []
    compute_no = -1

    def root(t: Tensor) -> Tensor:
        return t.view_src if t.view_src is not None else t

    def snap(t: Tensor) -> None:
        r = root(t)
        expected[r.id] = _bytes(r)
        st = t.storage
        assert st is not None and t.data is not None
        tag = tags.setdefault(st.id, np.full(len(st.mem), -1, dtype=np.int64))
        off = t.data - st.base
        tag[off:off + t.nbytes] = r.id

    def foreign(s: Tensor) -> bool:
        st = s.storage
        assert st is not None and s.data is not None
        tag = tags.get(st.id)
        if tag is None:
            return True
        off = s.data - st.base
        return bool((tag[off:off + s.nbytes] != root(s).id).any())

    def callback(t: Tensor, ask: bool) -> bool:
        nonlocal n_reads
        if ask:
            index = current.nodes.index(t)
            for s in t.src:
                if s is None:
                    continue
                n_reads += 1
                r = root(s)
                want = expected.get(r.id)
                if want is None or want != _bytes(r):
                    value_changed.add(("content", compute_no, index, s.id))
                if foreign(s):
                    truth.add(("content", compute_no, index, s.id))
                if r.storage is not None and r.storage.freed:
                    truth.add(("dangling", compute_no, index, s.id))
            return True
        if t.op not in (Op.NONE, Op.VIEW, Op.RESHAPE, Op.PERMUTE, Op.TRANSPOSE):
            snap(t)
        return True

    with StrictRecorder() as rec:
        galloc = GraphAllocator(buft)
        for step in range(int(rng.integers(2, 5))):
            ctx = Context(name=f"g{step}")
            fresh = []
            for _ in range(int(rng.integers(1, 3))):
                x = ctx.new_tensor_1d(F32, n, name=f"in{step}_{len(fresh)}")
                set_input(x)
                values[x.id] = rng.standard_normal(n).astype(np.float32)
                fresh.append(x)
            avail = pool + fresh
            last = None
            for k in range(int(rng.integers(2, 7))):
                if rng.random() < 0.4:
                    a = avail[int(rng.integers(len(avail)))]
                    last = getattr(ops, UNARY[int(rng.integers(len(UNARY)))])(ctx, a)
                else:
                    a = avail[int(rng.integers(len(avail)))]
                    b = avail[int(rng.integers(len(avail)))]
                    last = getattr(ops, BINARY[int(rng.integers(len(BINARY)))])(ctx, a, b)
                avail.append(last)
            assert last is not None
            set_output(last)
            current = Graph()
            current.build_forward_expand(last)
            if rng.random() < 0.3:  # the 'clear' cure, sometimes
                for t in pool:
                    clear_tensor_pointers(t, by="test")
                    expected.pop(t.id, None)
            assert galloc.alloc_graph(current)
            for leaf in current.leafs:
                if leaf.id in values:
                    tensor_set(leaf, values[leaf.id])
                    snap(leaf)
            compute_no += 1
            graph_compute(backend, current, callback)
            pool = [t for t in avail if t.view_src is None]
    model = build_model(rec.events)
    col = Every()
    scan_accesses(model, col)
    computes = sorted(model.computes.values(), key=lambda c: c.begin_seq)
    where = {}
    for order, c in enumerate(computes):
        for node in c.nodes:
            where[node.seq] = (order, node.index, node)
    flagged: Reads = set()
    for seq, victim, kind in col.all:
        if seq in where:
            order, index, node = where[seq]
            if victim in node.reads and kind in CONTENT_KINDS:
                flagged.add(("content", order, index, victim))
            elif victim in node.reads and kind is HazardKind.DANGLING:
                flagged.add(("dangling", order, index, victim))
    assert value_changed <= truth, sorted(value_changed - truth)
    return truth, flagged, n_reads


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_no_misses_and_no_false_alarms(seed: int) -> None:
    truth, flagged, _ = run_case(seed)
    assert flagged == truth, (sorted(truth - flagged), sorted(flagged - truth))


def test_the_random_cases_do_corrupt_sometimes():
    """The property above is only worth something if the cases contain corruption."""
    corrupted = clean = 0
    for seed in range(12):
        truth, _, reads = run_case(seed)
        assert reads > 0
        if any(kind == "content" for kind, *_ in truth):
            corrupted += 1
        else:
            clean += 1
    assert corrupted >= 2 and clean >= 2, (corrupted, clean)
