"""Compute speed: an MLP forward through vizalloc vs the same numpy calls made directly,
vs ggml's CPU backend (ggml-python) on the same graph.

MLP: batch 256, 784 → 1024 → 1024 → 10, f32, relu after the two hidden layers. Each
side computes the same graph many times; the graph is built and allocated once
(vizalloc: weights by ``alloc_ctx_tensors``, the graph by ``GraphAllocator``; ggml:
``ggml_backend_alloc_ctx_tensors`` + ``ggml_gallocr``, 2 threads). The numpy baseline
makes the calls vizalloc's plan amounts to, into preallocated arrays: ``matmul`` into
a buffer, then bias ``add`` and ``maximum`` in place on it (the graph allocator puts
ADD and UNARY in place on their parent).

    python benchmarks/compute.py                 # CPU: vizalloc, numpy, ggml
    python benchmarks/compute.py --device cuda   # vizalloc on CudaBackend vs cupy direct

Prints the median and best time of each side and the ratios to numpy (cupy) from one
run. The target is vizalloc ≤ 1.10× numpy.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vizalloc.runtime import F32, Context, Graph, ops, set_input, set_output
from vizalloc.runtime.backends import (
    Backend,
    CPUBackend,
    alloc_ctx_tensors,
    graph_compute,
)
from vizalloc.runtime.memory import tensor_get, tensor_set
from vizalloc.trace.recorder import ListRecorder

BATCH = 256
SIZES = (784, 1024, 1024, 10)


def make_weights(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer: w with numpy shape (n_out, n_in) (ggml ne = (n_in, n_out)) and b (n_out,)."""
    rng = np.random.default_rng(seed)
    layers = []
    for n_in, n_out in itertools.pairwise(SIZES):
        w = (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)
        b = (rng.standard_normal(n_out) * 0.1).astype(np.float32)
        layers.append((w, b))
    return layers


def time_it(fn: Callable[[], Any], repeat: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


# -- numpy / cupy, called directly ---------------------------------------------------------------

def direct(xp: Any, x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]],
           sync: Callable[[], None] | None) -> tuple[Callable[[], Any], Callable[[], np.ndarray]]:
    xs = xp.asarray(x)
    ws = [(xp.asarray(w), xp.asarray(b)) for w, b in layers]
    outs = [xp.empty((BATCH, w.shape[0]), dtype=xp.float32) for w, _ in layers]
    last = len(layers) - 1

    def step() -> None:
        h = xs
        for i, ((w, b), out) in enumerate(zip(ws, outs)):
            xp.matmul(h, w.T, out=out)
            xp.add(out, b, out=out)
            if i < last:
                xp.maximum(out, 0, out=out)
            h = out
        if sync is not None:
            sync()

    def result() -> np.ndarray:
        return np.asarray(outs[-1]) if xp is np else xp.asnumpy(outs[-1])

    return step, result


# -- vizalloc ----------------------------------------------------------------------------------------

def vizalloc_mlp(backend: Backend, x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]
                 ) -> tuple[Callable[[], Any], Callable[[], np.ndarray], Graph]:
    from vizalloc.runtime.alloc import GraphAllocator

    wctx = Context(name="weights")
    params = []
    for i, (w, b) in enumerate(layers):
        params.append((wctx.new_tensor_2d(F32, w.shape[1], w.shape[0], name=f"w{i}"),
                       wctx.new_tensor_1d(F32, b.shape[0], name=f"b{i}")))
    inp = wctx.new_tensor_2d(F32, SIZES[0], BATCH, name="x")
    set_input(inp)
    alloc_ctx_tensors(wctx, backend)
    for (tw, tb), (w, b) in zip(params, layers):
        tensor_set(tw, w)
        tensor_set(tb, b)
    tensor_set(inp, x)

    ctx = Context(name="compute")
    h = inp
    for i, (tw, tb) in enumerate(params):
        h = ops.add(ctx, ops.mul_mat(ctx, tw, h), tb)
        if i < len(params) - 1:
            h = ops.relu(ctx, h)
    set_output(h)
    graph = Graph()
    graph.build_forward_expand(h)
    galloc = GraphAllocator(backend.buffer_type)
    if not galloc.alloc_graph(graph):
        raise SystemExit("vizalloc: the graph allocator refused the MLP graph")

    def step() -> None:
        graph_compute(backend, graph)

    def result() -> np.ndarray:
        return tensor_get(h)

    return step, result, graph


# -- ggml via ggml-python ----------------------------------------------------------------------------

def ggml_mlp(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]], n_threads: int
             ) -> tuple[Callable[[], Any], Callable[[], np.ndarray], Callable[[], None]]:
    import ggml

    f32 = ggml.GGML_TYPE_F32
    n_tensors = 4 * len(layers) + 8
    params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * n_tensors, mem_buffer=None, no_alloc=True)
    wctx = ggml.ggml_init(params)
    gparams = ggml.ggml_init_params(
        mem_size=ggml.ggml_tensor_overhead() * n_tensors + ggml.ggml_graph_overhead(), mem_buffer=None, no_alloc=True)
    ctx = ggml.ggml_init(gparams)
    tensors = []
    for w, b in layers:
        tensors.append((ggml.ggml_new_tensor_2d(wctx, f32, w.shape[1], w.shape[0]),
                        ggml.ggml_new_tensor_1d(wctx, f32, b.shape[0])))
    inp = ggml.ggml_new_tensor_2d(wctx, f32, SIZES[0], BATCH)
    backend = ggml.ggml_backend_cpu_init()
    ggml.ggml_backend_cpu_set_n_threads(backend, n_threads)
    wbuf = ggml.ggml_backend_alloc_ctx_tensors(wctx, backend)
    keep = []  # keep the host arrays alive while ggml copies them

    def upload(t: Any, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        keep.append(arr)
        ggml.ggml_backend_tensor_set(t, arr.ctypes.data_as(ctypes.c_void_p), 0, arr.nbytes)

    for (tw, tb), (w, b) in zip(tensors, layers):
        upload(tw, w)
        upload(tb, b)
    upload(inp, x)
    h = inp
    for i, (tw, tb) in enumerate(tensors):
        h = ggml.ggml_add(ctx, ggml.ggml_mul_mat(ctx, tw, h), tb)
        if i < len(tensors) - 1:
            h = ggml.ggml_relu(ctx, h)
    ggml.ggml_set_output(h)
    graph = ggml.ggml_new_graph(ctx)
    ggml.ggml_build_forward_expand(graph, h)
    galloc = ggml.ggml_gallocr_new(ggml.ggml_backend_get_default_buffer_type(backend))
    if not ggml.ggml_gallocr_alloc_graph(galloc, graph):
        raise SystemExit("ggml: gallocr_alloc_graph failed")
    out = np.empty((BATCH, SIZES[-1]), dtype=np.float32)

    def step() -> None:
        ggml.ggml_backend_graph_compute(backend, graph)

    def result() -> np.ndarray:
        ggml.ggml_backend_tensor_get(h, out.ctypes.data_as(ctypes.c_void_p), 0, out.nbytes)
        return out.copy()

    def free() -> None:
        ggml.ggml_gallocr_free(galloc)
        ggml.ggml_backend_buffer_free(wbuf)
        ggml.ggml_backend_free(backend)
        ggml.ggml_free(ctx)
        ggml.ggml_free(wctx)

    return step, result, free


# -- main ----------------------------------------------------------------------------------------------

def _row(name: str, times: list[float], base: float | None) -> str:
    med, best = statistics.median(times), min(times)
    ratio = f"{med / base:6.3f}x" if base else "  1.000x"
    return f"  {name:<22} median {med * 1e3:8.3f} ms   best {best * 1e3:8.3f} ms   vs baseline {ratio}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeat", type=int, default=50, help="timed computes per side (default 50)")
    parser.add_argument("--threads", type=int, default=2, help="ggml CPU threads (default 2)")
    parser.add_argument("--no-ggml", action="store_true", help="skip the ggml-python side")
    args = parser.parse_args(argv)

    layers = make_weights()
    x = np.random.default_rng(1).standard_normal((BATCH, SIZES[0])).astype(np.float32)
    print(f"MLP forward, batch {BATCH}, {' -> '.join(map(str, SIZES))}, f32, relu; {args.repeat} computes per side")

    if args.device == "cuda":
        from vizalloc.runtime.backends import CudaBackend

        backend = CudaBackend(0)
        cp = backend.xp
        step_d, res_d = direct(cp, x, layers, lambda: cp.cuda.Device(0).synchronize())
        step_v, res_v, _ = vizalloc_mlp(backend, x, layers)
        t_d = time_it(step_d, args.repeat)
        t_v = time_it(step_v, args.repeat)  # graph_compute synchronizes at the end
        step_d()
        step_v()
        np.testing.assert_allclose(res_v(), res_d(), rtol=1e-3, atol=1e-3)
        print(_row("cupy direct (out=)", t_d, None))
        print(_row("vizalloc CudaBackend", t_v, statistics.median(t_d)))
        print(f"ratio vizalloc/cupy: {statistics.median(t_v) / statistics.median(t_d):.3f}x (median)")
        return 0

    step_n, res_n = direct(np, x, layers, None)
    step_v, res_v, _graph = vizalloc_mlp(CPUBackend(), x, layers)
    step_n()
    step_v()
    np.testing.assert_allclose(res_v(), res_n(), rtol=1e-4, atol=1e-4)
    # interleave the sides in rounds so drifting machine load hits both alike
    t_n: list[float] = []
    t_v: list[float] = []
    t_g: list[float] = []
    ggml_side = None
    if not args.no_ggml:
        try:
            ggml_side = ggml_mlp(x, layers, args.threads)
        except ImportError as exc:
            print(f"  (ggml-python not available: {exc}; skipping the ggml side)")
    if ggml_side is not None:
        ggml_side[0]()
        np.testing.assert_allclose(ggml_side[1](), res_n(), rtol=1e-3, atol=1e-3)
    rounds = 5
    per = max(1, args.repeat // rounds)
    t_tr: list[float] = []
    for _ in range(rounds):
        t_n += time_it(step_n, per)
        t_v += time_it(step_v, per)
        with ListRecorder():  # tracing on (events kept in memory), values not captured
            t_tr += time_it(step_v, per, warmup=0)
        if ggml_side is not None:
            t_g += time_it(ggml_side[0], per)
    base = statistics.median(t_n)
    print(_row("numpy direct (out=)", t_n, None))
    print(_row("vizalloc CPUBackend", t_v, base))
    print(_row("vizalloc, traced", t_tr, base))
    if ggml_side is not None:
        print(_row(f"ggml CPU ({args.threads} threads)", t_g, base))
        ggml_side[2]()
    print(f"ratio vizalloc/numpy: {statistics.median(t_v) / base:.3f}x (median), "
          f"{min(t_v) / min(t_n):.3f}x (best)   target <= 1.10x")
    if t_g:
        print(f"ratio ggml/numpy:     {statistics.median(t_g) / base:.3f}x (median), {min(t_g) / min(t_n):.3f}x (best)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
