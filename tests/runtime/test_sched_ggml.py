"""The Scheduler against real ggml_backend_sched (ggml-python, one CPU backend), live:
the same graphs, the same reset / alloc / reserve / compute sequence, the same offsets
and buffer sizes at every step - including stale tensors planned over after a reset,
a reallocation, a reserved plan reused for a smaller graph, and compute's implicit alloc."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tests.runtime.ggml_oracle import HAVE_GGML, GgmlBuilder, VizBuilder
from vizalloc.runtime import Graph
from vizalloc.runtime.backends import CPUBackend
from vizalloc.runtime.sched import Scheduler

pytestmark = pytest.mark.skipif(not HAVE_GGML, reason="needs ggml-python (the test extra)")


class VizSched:
    def __init__(self) -> None:
        self.b = VizBuilder()
        self.backend = CPUBackend()
        self.sched = Scheduler([self.backend])

    def graph(self, roots: Sequence[Any]) -> Graph:
        g = Graph()
        for r in roots:
            g.build_forward_expand(r)
        return g

    def tensors(self, g: Graph) -> list[Any]:
        return [*g.nodes, *g.leafs]

    def data(self, t: Any) -> int | None:
        return t.data

    def key(self, t: Any) -> int:
        return id(t)

    def offset(self, t: Any) -> int | None:
        return t.offset

    def size(self) -> int:
        return self.sched.buffer_size(0)

    def call(self, action: str, g: Graph | None, t: Any = None) -> bool:
        if action == "reset":
            self.sched.reset()
            return True
        if action == "alloc":
            return self.sched.alloc_graph(g)
        if action == "reserve":
            return self.sched.reserve(g)
        if action == "compute":
            self.sched.graph_compute(g)
            return True
        if action == "set_backend":
            self.sched.set_tensor_backend(t, self.backend)
            return True
        raise AssertionError(action)


class GgmlSched:
    def __init__(self) -> None:
        import ggml as g

        self.g = g
        self.b = GgmlBuilder()
        self.gctx = g.ggml_init(g.ggml_init_params(mem_size=g.ggml_graph_overhead() * 16, mem_buffer=None,
                                                   no_alloc=True))
        self.backend = g.ggml_backend_cpu_init()
        arr = (g.ggml_backend_t_ctypes * 1)(self.backend)
        self.sched = g.ggml_backend_sched_new(arr, None, 1, 2048, False, False)

    def graph(self, roots: Sequence[Any]) -> Any:
        gr = self.g.ggml_new_graph(self.gctx)
        for r in roots:
            self.g.ggml_build_forward_expand(gr, r)
        return gr

    def tensors(self, gr: Any) -> list[Any]:
        c = gr.contents
        return [c.nodes[i] for i in range(c.n_nodes)] + [c.leafs[i] for i in range(c.n_leafs)]

    def data(self, t: Any) -> int | None:
        return t.contents.data or None

    def key(self, t: Any) -> int:
        return ctypes.addressof(t.contents)

    def offset(self, t: Any) -> int | None:
        c = t.contents
        buf = c.view_src.contents.buffer if c.view_src else c.buffer
        if not c.data or not buf:
            return None
        return c.data - self.g.ggml_backend_buffer_get_base(buf)

    def size(self) -> int:
        return int(self.g.ggml_backend_sched_get_buffer_size(self.sched, self.backend))

    def call(self, action: str, gr: Any, t: Any = None) -> bool:
        g = self.g
        if action == "reset":
            g.ggml_backend_sched_reset(self.sched)
            return True
        if action == "alloc":
            return bool(g.ggml_backend_sched_alloc_graph(self.sched, gr))
        if action == "reserve":
            return bool(g.ggml_backend_sched_reserve(self.sched, gr))
        if action == "compute":
            return g.ggml_backend_sched_graph_compute(self.sched, gr) == 0
        if action == "set_backend":
            g.ggml_backend_sched_set_tensor_backend(self.sched, t, self.backend)
            return True
        raise AssertionError(action)

    def close(self) -> None:
        g = self.g
        g.ggml_backend_sched_free(self.sched)
        g.ggml_backend_free(self.backend)
        g.ggml_free(self.gctx)
        self.b.close()


Script = Callable[[Any], list[tuple[str, Any, Any]]]


def run_script(rt: Any, script: Script) -> list[tuple[str, bool, int, list[int | None]]]:
    """Run the script's steps; per step: the action, its result, the buffer size, and the
    offsets of the step graph's tensors. A tensor whose pointer was last set before the
    latest reallocation may point into a freed buffer (ggml cannot tell its base any
    more); it is reported as -1 in both runtimes."""
    out = []
    placed_at: dict[int, int] = {}
    last_realloc = -1
    steps = script(rt)
    for k, (action, graph, t) in enumerate(steps):
        tensors = rt.tensors(graph) if graph is not None else []
        before_data = [rt.data(x) for x in tensors]
        before_size = rt.size()
        ok = rt.call(action, graph, t)
        size = rt.size()
        if size != before_size:
            last_realloc = k
        offs = []
        for x, d0 in zip(tensors, before_data):
            if rt.data(x) != d0:
                placed_at[rt.key(x)] = k
            live = placed_at.get(rt.key(x), -1) >= last_realloc
            offs.append(rt.offset(x) if live else -1)
        out.append((action, ok, size, offs))
    return out


def stale_sequence(rt: Any) -> list[tuple[str, Any, Any]]:
    b = rt.b
    x = b.new("f32", (64,), "x")
    b.set_input(x)
    t = b.op("sqr", x)
    b.set_name(t, "t")
    s = b.op("sum", b.op("sqr", t))
    b.set_output(s)
    a = rt.graph([s])
    y = b.new("f32", (64,), "y")
    b.set_input(y)
    q = b.op("sum", b.op("add", t, y))
    b.set_output(q)
    gb = rt.graph([q])
    w = b.new("f32", (4096,), "w")
    b.set_input(w)
    m = b.op("sum", b.op("add", b.op("sqr", w), w))
    b.set_output(m)
    gc = rt.graph([m])
    return [("reset", None, None), ("alloc", a, None), ("reset", None, None), ("alloc", gb, None),
            ("reset", None, None), ("alloc", gc, None), ("reset", None, None), ("alloc", a, None),
            ("reset", None, None), ("alloc", gb, None)]


def reserve_sequence(rt: Any) -> list[tuple[str, Any, Any]]:
    b = rt.b

    def chain(n: int, name: str) -> Any:
        p = b.new("f32", (n,), name)
        b.set_input(p)
        h = b.op("sqr", p)
        r = b.op("sum", b.op("mul", h, p))
        b.set_output(r)
        return rt.graph([r])

    big, small, other = chain(1024, "big"), chain(256, "small"), chain(128, "other")
    bigger, fresh = chain(2048, "bigger"), chain(200, "fresh")
    return [("reserve", big, None), ("alloc", small, None), ("reset", None, None), ("alloc", other, None),
            ("reset", None, None), ("alloc", bigger, None), ("reset", None, None), ("reserve", small, None),
            ("alloc", fresh, None)]


def compute_sequence(rt: Any) -> list[tuple[str, Any, Any]]:
    b = rt.b
    x = b.new("f32", (32, 4), "x")
    b.set_input(x)
    w = b.new("f32", (32, 16), "w")
    h = b.op("relu", b.op("mul_mat", w, x))
    o = b.op("soft_max", h)
    b.set_output(o)
    g1 = rt.graph([o])
    z = b.new("f32", (16, 4), "z")
    b.set_input(z)
    o2 = b.op("add", b.op("scale", h, 0.5), z)
    b.set_output(o2)
    g2 = rt.graph([o2])
    # compute allocates implicitly; a user assignment makes the next compute reset first
    return [("compute", g1, None), ("reset", None, None), ("set_backend", g2, h), ("compute", g2, None),
            ("compute", g1, None), ("reset", None, None), ("compute", g1, None)]


@pytest.mark.parametrize("script", [stale_sequence, reserve_sequence, compute_sequence])
def test_same_offsets_as_ggml_backend_sched(script):
    ours = run_script(VizSched(), script)
    rt = GgmlSched()
    try:
        theirs = run_script(rt, script)
    finally:
        rt.close()
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"step {i} ({a[0]}): vizalloc {a} != ggml {b}"


def test_stale_sequence_really_overlaps():
    """The live comparison above is not vacuous: after the reset, B's new tensors are
    placed on the bytes of t, which B still reads."""
    rt = VizSched()
    steps = run_script(rt, stale_sequence)
    _, ok, _, offs = steps[3]
    assert ok and offs.count(0) >= 3  # t (stale), y and z all at offset 0
