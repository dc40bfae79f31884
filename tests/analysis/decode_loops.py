"""Decode loops recorded with the real runtime: the same small graph built, bound with one plan and
computed token after token, then something that touches what the loop left behind. The stream
analysis skips most of the tokens; these traces check that what it then reports is what the
object path reports. The ``kv_`` loops keep a cache, as llama.cpp does: each token reads the
cache the token before wrote, and writes it (``ggml_cpy`` into it), with one graph computed
again and again (``kv_reuse``, llama.cpp's graph reuse) or a new graph per token.
``reuse_unset_input`` is what llama.cpp's reused decode graph does with its ``inp_mixed_embd``
input at a text-only token: the host sets it once, never again, so each token's first node
reads the bytes the token before left there (of a node planned over the input once it was
read), and those bytes were written twice in that token, a small node's, then a bigger one's.

    >>> events = record("plain", tokens=6)
    >>> sum(type(e).__name__ == "ComputeEnd" for e in events)
    7
"""

from __future__ import annotations

import numpy as np

from vizalloc.runtime import ops
from vizalloc.runtime.alloc import GraphAllocator, alloc_ctx_tensors
from vizalloc.runtime.backends import CPUBackend, graph_compute
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F32
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.memory import clear_tensor_pointers, tensor_get, tensor_set
from vizalloc.runtime.tensor import Tensor, set_input, set_output
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import ListRecorder

D = 8
SCENARIOS = ("plain", "reuse", "replan_after", "free_after", "read_old", "rename_old", "clear_old", "shared_each_step",
             "reuse_then_other", "two_shapes", "kv_reuse", "kv_rebuild", "kv_reuse_replan_after",
             "kv_rebuild_free_after", "kv_reuse_clobber_cache", "reuse_unset_input")


def _weights(ctx: Context) -> dict[str, Tensor]:
    w = {k: ctx.new_tensor_2d(F32, D, D, name=k) for k in ("wq", "wk", "wo")}
    w["norm"] = ctx.new_tensor_2d(F32, D, 1, name="norm")
    return w


def _graph(ctx: Context, w: dict[str, Tensor], t: int = 2, extra: Tensor | None = None,
           cache: Tensor | None = None) -> tuple[Graph, Tensor, Tensor]:
    x = ctx.new_tensor_2d(F32, D, t, name="inp")
    set_input(x)
    n = ops.mul(ctx, ops.rms_norm(ctx, x, 1e-5), w["norm"])
    q = ops.mul_mat(ctx, w["wq"], n)
    k = ops.mul_mat(ctx, w["wk"], n)
    stored = None
    if cache is not None:   # read what the token before stored, store this token's
        k = ops.add(ctx, k, ops.scale(ctx, cache, 0.5))
        stored = ops.cpy(ctx, k, cache)
    att = ops.soft_max_ext(ctx, ops.mul_mat(ctx, k, q), None, 0.5, 0.0)
    vt = ops.cont(ctx, ops.transpose(ctx, n))
    h = ops.add(ctx, x, ops.mul_mat(ctx, w["wo"], ops.cont(ctx, ops.transpose(ctx, ops.mul_mat(ctx, att, vt)))))
    if extra is not None:
        h = ops.add(ctx, h, extra)
    out = ops.sum(ctx, h)
    set_output(out)
    g = Graph()
    if stored is not None:
        g.build_forward_expand(stored)
    g.build_forward_expand(out)
    return g, x, out


def record(scenario: str, tokens: int = 12) -> list[ev.Event]:
    """The events of one scenario (see ``SCENARIOS``)."""
    buft = BufferType("CPU", alignment=32)
    backend = CPUBackend()
    rng = np.random.default_rng(3)
    with ListRecorder() as rec:
        wctx = Context(name="weights")
        w = _weights(wctx)
        alloc_ctx_tensors(wctx, buft)
        for t in w.values():
            tensor_set(t, rng.standard_normal(t.nelements).astype(np.float32) * 0.1)
        galloc = GraphAllocator(buft)
        outs: list[Tensor] = []
        kept: list[Tensor] = []
        shared: Tensor | None = None
        if scenario == "shared_each_step":
            sctx = Context(name="shared", no_alloc=True)
            shared = ops.scale(sctx, w["norm"], 2.0)
        cache = None
        if scenario.startswith("kv_"):
            cctx = Context(name="kv")
            cache = cctx.new_tensor_2d(F32, D, 2, name="cache")
            alloc_ctx_tensors(cctx, buft)
            tensor_set(cache, np.zeros(cache.nelements, dtype=np.float32))
        if scenario.startswith("kv_reuse"):
            ctx = Context(name="token")
            g, x, out = _graph(ctx, w, cache=cache)
            galloc.alloc_graph(g)
            for _ in range(tokens + 1):
                tensor_set(x, rng.standard_normal(x.nelements).astype(np.float32))
                graph_compute(backend, g)
                tensor_get(out)
            if scenario == "kv_reuse_replan_after":
                ctx = Context(name="bigger")
                g, x2, _ = _graph(ctx, w, t=6)
                galloc.alloc_graph(g)
                tensor_set(x2, rng.standard_normal(x2.nelements).astype(np.float32))
                graph_compute(backend, g)
                tensor_get(out)        # the loop's output: its bytes were planned over
            elif scenario == "kv_reuse_clobber_cache":
                assert cache is not None
                tensor_set(cache, np.ones(cache.nelements, dtype=np.float32))   # the host overwrites the cache
                tensor_get(out)
                graph_compute(backend, g)
                tensor_get(out)
            return rec.events
        if scenario == "reuse_unset_input":
            return _unset_input(rec, buft, backend, w, tokens)
        if scenario in ("reuse", "reuse_then_other"):
            ctx = Context(name="token")
            g, x, out = _graph(ctx, w)
            galloc.alloc_graph(g)
            for _ in range(tokens + 1):
                tensor_set(x, rng.standard_normal(x.nelements).astype(np.float32))
                graph_compute(backend, g)
                tensor_get(out)
            if scenario == "reuse_then_other":
                ctx2 = Context(name="other")
                g2, x2, _ = _graph(ctx2, w, t=5)
                galloc.alloc_graph(g2)
                tensor_set(x2, rng.standard_normal(x2.nelements).astype(np.float32))
                graph_compute(backend, g2)
                galloc.alloc_graph(g)
                graph_compute(backend, g)
                tensor_get(out)
            return rec.events
        for i in range(tokens + 1):
            ctx = Context(name="token")
            if scenario == "two_shapes" and i % 2:
                g, x, out = _graph(ctx, w, t=3)
            else:
                g, x, out = _graph(ctx, w, extra=shared, cache=cache)
            galloc.alloc_graph(g)
            tensor_set(x, rng.standard_normal(x.nelements).astype(np.float32))
            graph_compute(backend, g)
            tensor_get(out)
            outs.append(out)
            kept.append(x)
        if scenario == "replan_after":
            ctx = Context(name="bigger")
            g, x, out = _graph(ctx, w, t=6)
            galloc.alloc_graph(g)
            tensor_set(x, rng.standard_normal(x.nelements).astype(np.float32))
            graph_compute(backend, g)
            tensor_get(outs[3])        # an old token's output: its bytes were planned over
        elif scenario in ("free_after", "kv_rebuild_free_after"):
            for bufs in galloc.buffers:
                for b in bufs or ():
                    b.free("done")
            tensor_get(outs[-1])
            tensor_get(outs[2])
        elif scenario == "read_old":
            ctx = Context(name="late")
            s = ops.add(ctx, kept[2], kept[5])
            g = Graph()
            g.build_forward_expand(s)
            galloc.alloc_graph(g)
            graph_compute(backend, g)
        elif scenario == "rename_old":
            outs[4].set_name("old-out")
            w["wq"].set_name("wq-renamed")
            tensor_get(outs[4])
        elif scenario == "clear_old":
            clear_tensor_pointers(outs[5])
            clear_tensor_pointers(kept[6])
            tensor_get(outs[-1])
    return rec.events


def _unset_input(rec: ListRecorder, buft: BufferType, backend: CPUBackend, w: dict[str, Tensor],
                 tokens: int) -> list[ev.Event]:
    """One graph computed again, its input set once (as a captured process: inputs it may write
    unseen are not judged): ``small`` is planned over the input's first bytes once the input is
    read, ``big`` over all of them once ``small`` is free, so the next token reads ``big``'s."""
    from vizalloc.trace import recorder

    recorder.emit(ev.ProcessCaptured, "decode_loops", 1, "0.26.0", "", "0.26.0", "", loc=None)
    ctx = Context(name="token")
    x = ctx.new_tensor_2d(F32, D, D, name="inp_unset")
    set_input(x)
    s = ops.sum_rows(ctx, x)                   # the input's one reader: its bytes are free after it
    small = ops.scale(ctx, s, 3.0)             # s has two consumers: not in place, over the input
    t2 = ops.scale(ctx, s, 2.0)                # in place of s
    u = ops.add(ctx, t2, small)                # in place of t2: small is free again
    big = ops.mul(ctx, w["wq"], u)             # the input's bytes, all of them
    out = ops.sum(ctx, big)
    set_output(out)
    g = Graph()
    g.build_forward_expand(small)              # small before t2 in the node order
    g.build_forward_expand(out)
    GraphAllocator(buft).alloc_graph(g)
    tensor_set(x, np.ones(x.nelements, dtype=np.float32))
    for _ in range(tokens + 1):
        graph_compute(backend, g)
        tensor_get(out)
    return rec.events
