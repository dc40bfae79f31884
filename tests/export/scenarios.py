"""Real runtime runs recorded for exporter tests (each returns the recorded events)."""

from __future__ import annotations

import numpy as np

from vizalloc.runtime import Context, F32, Graph, ops
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.backends import CPUBackend, SimBackend, alloc_ctx_tensors
from vizalloc.runtime.buffer import BufferType, Usage
from vizalloc.runtime.memory import tensor_set
from vizalloc.runtime.sched import Scheduler
from vizalloc.runtime.tensor import Op, set_input, set_output
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder


def seed_stale(names: tuple[str, ...] = ("x", "t", "u", "s", "y", "z", "q")) -> list[ev.Event]:
    """ggml-semantics §9.2 on one graph allocator: graph A, then graph B sharing x and t.

    B's plan skips the stale x and t as external and puts the new input y (and z, in
    place over y) on their bytes [0, 256).
    """
    nx, nt, nu, ns, ny, nz, nq = names
    with StrictRecorder() as rec:
        ctx = Context(no_alloc=True)
        galloc = GraphAllocator([BufferType("CPU", alignment=32)])
        x = ctx.new_tensor_1d(F32, 64, name=nx)
        set_input(x)
        t = ops.sqr(ctx, x).set_name(nt)
        u = ops.sqr(ctx, t).set_name(nu)
        s = ops.sum(ctx, u).set_name(ns)
        set_output(s)
        a = Graph()
        a.build_forward_expand(s)
        assert galloc.alloc_graph(a)
        y = ctx.new_tensor_1d(F32, 64, name=ny)
        set_input(y)
        z = ops.add(ctx, t, y).set_name(nz)
        q = ops.sum(ctx, z).set_name(nq)
        set_output(q)
        b = Graph()
        b.build_forward_expand(q)
        assert galloc.alloc_graph(b)
    return rec.events


def two_backends(compute: bool = True) -> list[ev.Event]:
    """x (CPU input) -> h = mul_mat(w, x) on SIM -> r = relu(h) on CPU -> o = add(r, h) on SIM:
    three splits, three input copies; computed once."""
    with StrictRecorder() as rec:
        sim = SimBackend("SIM", supported_ops={Op.MUL_MAT, Op.ADD})
        cpu = CPUBackend()
        wctx = Context(name="weights")
        w = wctx.new_tensor_2d(F32, 8, 8, "w")
        alloc_ctx_tensors(wctx, sim, Usage.WEIGHTS)
        rng = np.random.default_rng(1)
        tensor_set(w, rng.standard_normal((8, 8)).astype(np.float32))
        sched = Scheduler([sim, cpu])
        ctx = Context(name="compute", no_alloc=True)
        x = ctx.new_tensor_2d(F32, 8, 4, "x")
        set_input(x)
        h = ops.mul_mat(ctx, w, x).set_name("h")
        r = ops.relu(ctx, h).set_name("r")
        o = ops.add(ctx, r, h).set_name("o")
        set_output(o)
        g = Graph()
        g.build_forward_expand(o)
        assert sched.alloc_graph(g)
        if compute:
            tensor_set(x, rng.standard_normal((4, 8)).astype(np.float32))
            sched.graph_compute(g)
    return rec.events


def mlp_chain(n_layers: int, width: int = 8, prefix: str = "blk.{i}.") -> list[ev.Event]:
    """A chain of ``n_layers`` layers (mul_mat, add, relu each), planned and bound on the CPU."""
    with StrictRecorder() as rec:
        wctx = Context(name="weights", no_alloc=True)
        ctx = Context(name="compute", no_alloc=True)
        x = ctx.new_tensor_2d(F32, width, 2, "x")
        set_input(x)
        cur = x
        for i in range(n_layers):
            p = prefix.format(i=i)
            w = wctx.new_tensor_2d(F32, width, width, f"{p}w")
            b = wctx.new_tensor_1d(F32, width, f"{p}b")
            cur = ops.relu(ctx, ops.add(ctx, ops.mul_mat(ctx, w, cur).set_name(f"{p}mm"), b).set_name(f"{p}add"))
            cur.set_name(f"{p}relu")
        set_output(cur)
        alloc_ctx_tensors(wctx, CPUBackend())
        g = Graph(size=max(2048, 4 * n_layers + 16))
        g.build_forward_expand(cur)
        assert GraphAllocator([BufferType("CPU", alignment=32)]).alloc_graph(g)
    return rec.events


def reserve_then_tokens(n_layers: int = 3, n_ctx: int = 64, width: int = 8, tokens: int = 2,
                        free_at_end: bool = True) -> list[ev.Event]:
    """What a llama.cpp context does: weights in their own buffer; the worst-case graph (a
    micro-batch of ``n_ctx`` tokens, with an ``n_ctx x n_ctx`` score matrix per layer,
    ``kq-<layer>``) reserved, never bound; then ``tokens`` one-token graphs of the same
    structure bound with that plan; at the end every buffer is freed, as a process exits."""
    def graph(rows: int, ws: list[object]) -> Graph:
        ctx = Context(name="compute", no_alloc=True)
        x = ctx.new_tensor_2d(F32, width, rows, "inp_embd")
        set_input(x)
        cur = x
        for i, w in enumerate(ws):
            q = ops.mul_mat(ctx, w, cur).set_name(f"q-{i}")                       # type: ignore[arg-type]
            kq = ops.mul_mat(ctx, q, q).set_name(f"kq-{i}")                       # rows x rows
            kqv = ops.mul_mat(ctx, ops.cont(ctx, ops.transpose(ctx, q)), kq)                # width x rows
            cur = ops.relu(ctx, kqv).set_name(f"l_out-{i}")
        set_output(cur)
        g = Graph()
        g.build_forward_expand(cur)
        return g

    with StrictRecorder() as rec:
        wctx = Context(name="weights", no_alloc=True)
        ws: list[object] = [wctx.new_tensor_2d(F32, width, width, f"blk.{i}.attn_q.weight") for i in range(n_layers)]
        weights = alloc_ctx_tensors(wctx, CPUBackend(), Usage.WEIGHTS)
        ga = GraphAllocator([BufferType("CPU", alignment=32)])
        assert ga.reserve(graph(n_ctx, ws))
        for _ in range(tokens):
            assert ga.alloc_graph(graph(1, ws))
        if free_at_end:
            for b in [*(c for chunks in ga.buffers if chunks for c in chunks),
                      *(weights if isinstance(weights, list) else [weights])]:
                if b is not None:
                    b.free()
    return rec.events
