"""Training-step speed: one step (forward, backward, AdamW) of the demo MLP through
vizalloc's ggml-opt port vs real ggml-opt (ggml-python) vs the same step in numpy.

MLP: batch 256, 784 → 1024 → 1024 → 10, f32, relu after the hidden layers, cross-entropy
loss, AdamW (alpha 1e-3, betas 0.9/0.999, eps 1e-8, no weight decay). All three sides
start from the same weights and train on the same batches.

* **vizalloc**: ``OptContext`` with static graphs (the default ``fix="dup"``, as ggml-opt)
  through a ``Scheduler`` on one ``CPUBackend``, written as a user would: build once, then
  per step ``alloc(backward=True)``, upload the batch, ``eval``.
* **ggml**: the same through ggml-python's ``ggml_opt_init`` / ``ggml_opt_alloc`` /
  ``ggml_opt_eval`` (CPU backend, 2 threads by default).
* **numpy**: the step written by hand with preallocated ``out=`` arrays (forward,
  softmax-cross-entropy backward, matmul gradients, AdamW in place).

Two figures per ggml-opt side:

* ``switch`` (the main figure): a training step right after a forward (validation) pass,
  as ``ggml_opt_epoch`` does between its training and validation batches, so ``alloc``
  pays ggml-opt's full graph-switch cost: scheduler reset, the deep copy of the graph
  (``graph_deep_copy``), splitting and planning it, binding it. Only the training step is timed;
  the forward pass between steps is not. A switch before every step is the worst case
  (``ggml_opt_epoch`` switches twice per epoch).
* ``steady``: consecutive training steps; ``alloc`` finds the optimizer graph already
  allocated and returns, so this is the compute-only figure (plus the per-step Python).

    python benchmarks/train_step.py                  # all three, ratios to numpy
    python benchmarks/train_step.py --batch 64 --sizes 784,256,10 --repeat 10
    python benchmarks/train_step.py --threads 1 --blas-threads 1   # steadier on a busy machine

On a machine whose cores are busy with other work, threaded BLAS and ggml's polling
workers make medians swing by several times; the best times and one-thread runs are the
steadier comparison.

The target is vizalloc ≤ 1.2× the hand-written numpy step (switch figure); the issue
measured ggml-opt at ≈ 1.85× it.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _preset_blas_threads(argv: list[str]) -> None:
    """``--blas-threads N`` must reach OpenBLAS before numpy loads it."""
    for i, a in enumerate(argv):
        if a == "--blas-threads" or a.startswith("--blas-threads="):
            value = a.partition("=")[2] or (argv[i + 1] if i + 1 < len(argv) else "")
            if value.isdigit():
                for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                    os.environ[var] = value


_preset_blas_threads(sys.argv[1:])

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vizalloc.runtime import F32, Context, ops, set_param  # noqa: E402
from vizalloc.runtime.backends import CPUBackend, alloc_ctx_tensors  # noqa: E402
from vizalloc.runtime.memory import tensor_get, tensor_set  # noqa: E402
from vizalloc.runtime.opt import (  # noqa: E402
    AdamWParams, LossType, OptContext, OptimizerParams, OptResult, constant_optimizer_params, default_params,
)
from vizalloc.runtime.sched import Scheduler  # noqa: E402

ALPHA, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 0.0


@dataclass(frozen=True)
class Problem:
    """Sizes, initial weights (numpy shapes: ggml's ``ne`` reversed) and the batches."""

    sizes: tuple[int, ...]
    batch: int
    weights: list[tuple[np.ndarray, np.ndarray]]
    batches: list[tuple[np.ndarray, np.ndarray]]


def make_problem(batch: int, sizes: tuple[int, ...], n_batches: int, seed: int = 0) -> Problem:
    rng = np.random.default_rng(seed)
    weights = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        w = (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)
        b = (rng.standard_normal(n_out) * 0.1).astype(np.float32)
        weights.append((w, b))
    teacher = rng.standard_normal((sizes[-1], sizes[0]))
    batches = []
    for _ in range(n_batches):
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        labels = np.zeros((batch, sizes[-1]), dtype=np.float32)
        labels[np.arange(batch), np.argmax(x @ teacher.T, axis=1)] = 1.0
        batches.append((x, labels))
    return Problem(sizes, batch, weights, batches)


class Side:
    """One implementation: ``train(i)`` runs a training step on batch ``i`` and returns the
    loss; ``forward(i)`` a forward (validation) pass; ``weights()`` the current parameters."""

    name = ""

    def train(self, i: int) -> float:
        raise NotImplementedError

    def forward(self, i: int) -> None:
        raise NotImplementedError

    def weights(self) -> list[np.ndarray]:
        """The parameters in numpy shapes: w0, b0, w1, b1, ..."""
        raise NotImplementedError

    def close(self) -> None:
        pass


# -- numpy, by hand -----------------------------------------------------------------------------------

class NumpySide(Side):
    """The step with preallocated arrays; every op writes with ``out=``."""

    name = "numpy (out=)"

    def __init__(self, p: Problem) -> None:
        self.p = p
        B = p.batch
        f = np.float32
        self.w = [(w.copy(), b.copy()) for w, b in p.weights]
        self.g = [(np.empty_like(w), np.empty_like(b)) for w, b in self.w]
        self.m = [(np.zeros_like(w), np.zeros_like(b)) for w, b in self.w]
        self.v = [(np.zeros_like(w), np.zeros_like(b)) for w, b in self.w]
        self.tmp = [(np.empty_like(w), np.empty_like(b)) for w, b in self.w]
        self.tmp2 = [(np.empty_like(w), np.empty_like(b)) for w, b in self.w]
        self.x = np.empty((B, p.sizes[0]), dtype=f)
        self.labels = np.empty((B, p.sizes[-1]), dtype=f)
        self.h = [np.empty((B, n), dtype=f) for n in p.sizes[1:]]      # activations (post-relu)
        self.dh = [np.empty((B, n), dtype=f) for n in p.sizes[1:]]     # gradients of pre-activations
        self.rowmax = np.empty((B, 1), dtype=f)
        self.rowsum = np.empty((B, 1), dtype=f)
        self.sm = np.empty((B, p.sizes[-1]), dtype=f)
        self.mask = [np.empty((B, n), dtype=bool) for n in p.sizes[1:-1]]
        self.it = 1

    def forward(self, i: int) -> None:
        x, labels = self.p.batches[i % len(self.p.batches)]
        np.copyto(self.x, x)
        np.copyto(self.labels, labels)
        h = self.x
        last = len(self.w) - 1
        for k, ((w, b), out) in enumerate(zip(self.w, self.h)):
            np.matmul(h, w.T, out=out)
            out += b
            if k < last:
                np.maximum(out, 0, out=out)
            h = out

    def train(self, i: int) -> float:
        self.forward(i)
        B = self.p.batch
        logits, sm, dl = self.h[-1], self.sm, self.dh[-1]
        # cross-entropy: -sum(labels * log_softmax(logits)) / B; gradient (softmax - labels) / B
        np.max(logits, axis=1, keepdims=True, out=self.rowmax)
        np.subtract(logits, self.rowmax, out=sm)
        np.exp(sm, out=dl)
        np.sum(dl, axis=1, keepdims=True, out=self.rowsum)
        np.log(self.rowsum, out=self.rowmax)
        sm -= self.rowmax  # log_softmax
        loss = -float(np.vdot(sm, self.labels)) / B
        np.divide(dl, self.rowsum, out=dl)
        dl -= self.labels
        dl *= np.float32(1.0 / B)
        # backward through the layers
        n = len(self.w)
        for k in range(n - 1, -1, -1):
            gw, gb = self.g[k]
            h_in = self.x if k == 0 else self.h[k - 1]
            dk = self.dh[k]
            np.matmul(dk.T, h_in, out=gw)
            np.sum(dk, axis=0, out=gb)
            if k > 0:
                prev = self.dh[k - 1]
                np.matmul(dk, self.w[k][0], out=prev)
                np.greater(self.h[k - 1], 0, out=self.mask[k - 1])
                np.multiply(prev, self.mask[k - 1], out=prev)
        self._adamw()
        return loss

    def weights(self) -> list[np.ndarray]:
        return [a.copy() for pair in self.w for a in pair]

    def _adamw(self) -> None:
        f = np.float32
        beta1h = f(1.0) / (f(1.0) - f(np.power(f(BETA1), f(self.it))))
        beta2h = f(1.0) / (f(1.0) - f(np.power(f(BETA2), f(self.it))))
        keep = f(1.0) - f(ALPHA) * f(WD)
        for k in range(len(self.w)):
            for j in range(2):
                w, g, m, v = self.w[k][j], self.g[k][j], self.m[k][j], self.v[k][j]
                t, t2 = self.tmp[k][j], self.tmp2[k][j]
                m *= f(BETA1)
                np.multiply(g, f(1.0 - BETA1), out=t)
                m += t
                v *= f(BETA2)
                np.multiply(g, g, out=t)
                t *= f(1.0 - BETA2)
                v += t
                np.multiply(v, beta2h, out=t)
                np.sqrt(t, out=t)
                t += f(EPS)
                np.multiply(m, beta1h * f(ALPHA), out=t2)
                t2 /= t
                if WD:
                    w *= keep
                w -= t2
        self.it += 1


# -- vizalloc, through its ggml-opt port ----------------------------------------------------------------

class VizallocSide(Side):
    name = "vizalloc OptContext"

    def __init__(self, p: Problem) -> None:
        self.p = p
        backend = CPUBackend()
        ctx_static = Context(name="model")
        self.x = ctx_static.new_tensor_2d(F32, p.sizes[0], p.batch, name="inputs")
        self.params = []
        for k, (w, b) in enumerate(p.weights):
            tw = ctx_static.new_tensor_2d(F32, w.shape[1], w.shape[0], name=f"w{k}")
            tb = ctx_static.new_tensor_1d(F32, b.shape[0], name=f"b{k}")
            set_param(tw)
            set_param(tb)
            self.params.append((tw, tb))
        alloc_ctx_tensors(ctx_static, backend.buffer_type)
        for (tw, tb), (w, b) in zip(self.params, p.weights):
            tensor_set(tw, w)
            tensor_set(tb, b)
        ctx = Context(name="compute")
        h = self.x
        for k, (tw, tb) in enumerate(self.params):
            h = ops.add(ctx, ops.mul_mat(ctx, tw, h), tb)
            if k < len(self.params) - 1:
                h = ops.relu(ctx, h)
        self.sched = Scheduler([backend])
        op = default_params(self.sched, LossType.CROSS_ENTROPY)
        op.ctx_compute, op.inputs, op.outputs = ctx, self.x, h
        op.get_opt_pars = constant_optimizer_params
        op.get_opt_pars_ud = OptimizerParams(adamw=AdamWParams(ALPHA, BETA1, BETA2, EPS, WD))
        self.opt = OptContext(op)  # fix="dup": ggml-opt's deep copy per graph switch

    def _step(self, i: int, backward: bool) -> float:
        x, labels = self.p.batches[i % len(self.p.batches)]
        self.opt.alloc(backward)
        tensor_set(self.x, x)
        tensor_set(self.opt.labels, labels)  # type: ignore[arg-type]
        r = OptResult()
        self.opt.eval(r)
        return r.loss()[0]

    def train(self, i: int) -> float:
        return self._step(i, True)

    def forward(self, i: int) -> None:
        self._step(i, False)

    def weights(self) -> list[np.ndarray]:
        return [tensor_get(t) for pair in self.params for t in pair]


# -- ggml-opt via ggml-python -----------------------------------------------------------------------------

class GgmlSide(Side):
    name = "ggml-opt"

    def __init__(self, p: Problem, n_threads: int) -> None:
        import ggml

        self.g = ggml
        self.name = f"ggml-opt ({n_threads} threads)"
        ggml.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p
        ggml.ggml_backend_alloc_buffer.restype = ctypes.c_void_p
        self.p = p
        f32 = ggml.GGML_TYPE_F32
        self.backend = ggml.ggml_backend_cpu_init()
        ggml.ggml_backend_cpu_set_n_threads(self.backend, n_threads)
        arr = (ggml.ggml_backend_t_ctypes * 1)(self.backend)
        self.sched = ggml.ggml_backend_sched_new(arr, None, 1, 2048, False, True)
        ip = ggml.ggml_init_params(mem_size=16 << 20, mem_buffer=None, no_alloc=True)
        self.cs, self.cc = ggml.ggml_init(ip), ggml.ggml_init(ip)
        self.x = ggml.ggml_new_tensor_2d(self.cs, f32, p.sizes[0], p.batch)
        self.params = []
        for w, b in p.weights:
            tw = ggml.ggml_new_tensor_2d(self.cs, f32, w.shape[1], w.shape[0])
            tb = ggml.ggml_new_tensor_1d(self.cs, f32, b.shape[0])
            ggml.ggml_set_param(tw)
            ggml.ggml_set_param(tb)
            self.params.append((tw, tb))
        self.buf = ggml.ggml_backend_alloc_ctx_tensors(self.cs, self.backend)
        for (tw, tb), (w, b) in zip(self.params, p.weights):
            self._set(tw, w)
            self._set(tb, b)
        h = self.x
        for k, (tw, tb) in enumerate(self.params):
            h = ggml.ggml_add(self.cc, ggml.ggml_mul_mat(self.cc, tw, h), tb)
            if k < len(self.params) - 1:
                h = ggml.ggml_relu(self.cc, h)
        op = ggml.ggml_opt_default_params(self.sched, ggml.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY)
        op.ctx_compute, op.inputs, op.outputs = self.cc, self.x, h
        op.optimizer = ggml.GGML_OPT_OPTIMIZER_TYPE_ADAMW
        self.cpars = ggml.ggml_opt_optimizer_params()
        a = self.cpars.adamw
        a.alpha, a.beta1, a.beta2, a.eps, a.wd = ALPHA, BETA1, BETA2, EPS, WD
        # ctypes callbacks cannot return structs: hand ggml its own C function
        c_fn = ctypes.cast(ggml.ggml.lib.ggml_opt_get_constant_optimizer_params, ctypes.c_void_p).value
        assert c_fn is not None
        op.get_opt_pars = ctypes.cast(c_fn, ggml.ggml_opt_get_optimizer_params)
        op.get_opt_pars_ud = ctypes.cast(ctypes.pointer(self.cpars), ctypes.c_void_p)
        self.octx = ggml.ggml_opt_init(op)
        self.labels = ggml.ggml_opt_labels(self.octx)
        self.loss = ctypes.c_double()
        self.unc = ctypes.c_double()

    def _set(self, t: Any, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a, dtype=np.float32)
        self.g.ggml_backend_tensor_set(t, a.ctypes.data_as(ctypes.c_void_p), 0, a.nbytes)

    def _step(self, i: int, backward: bool) -> float:
        g = self.g
        x, labels = self.p.batches[i % len(self.p.batches)]
        g.ggml_opt_alloc(self.octx, backward)
        self._set(self.x, x)
        self._set(self.labels, labels)
        r = g.ggml_opt_result_init()
        g.ggml_opt_eval(self.octx, r)
        g.ggml_opt_result_loss(r, ctypes.byref(self.loss), ctypes.byref(self.unc))
        g.ggml_opt_result_free(r)
        return self.loss.value

    def train(self, i: int) -> float:
        return self._step(i, True)

    def forward(self, i: int) -> None:
        self._step(i, False)

    def weights(self) -> list[np.ndarray]:
        out = []
        for pair, (w, b) in zip(self.params, self.p.weights):
            for t, ref in zip(pair, (w, b)):
                got = np.empty_like(ref)
                self.g.ggml_backend_tensor_get(t, got.ctypes.data_as(ctypes.c_void_p), 0, got.nbytes)
                out.append(got)
        return out

    def close(self) -> None:
        g = self.g
        g.ggml_opt_free(self.octx)
        g.ggml_backend_buffer_free(self.buf)
        g.ggml_free(self.cs)
        g.ggml_free(self.cc)
        g.ggml_backend_sched_free(self.sched)
        g.ggml_backend_free(self.backend)


# -- timing ---------------------------------------------------------------------------------------------

def time_round(sides: list[Side], step: int, times: dict[tuple[str, bool], list[float]], rotate: int = 0) -> None:
    """One round: per side, an untimed forward pass, a timed training step (it switches
    graphs), and a second timed training step (it does not). The sides take turns step by
    step, so drifting machine load hits them alike, and the order rotates by ``rotate``,
    so no side always runs right after another's threads (ggml's workers poll a while
    after a compute)."""
    k = rotate % len(sides)
    for s in sides[k:] + sides[:k]:
        s.forward(step)
        t0 = time.perf_counter()
        s.train(step)
        t1 = time.perf_counter()
        s.train(step + 1)
        t2 = time.perf_counter()
        times.setdefault((s.name, True), []).append(t1 - t0)
        times.setdefault((s.name, False), []).append(t2 - t1)


def _row(name: str, times: list[float], base: list[float] | None) -> str:
    med, best = statistics.median(times), min(times)
    ratio = "" if base is None else f"   {med / statistics.median(base):5.2f}x median  {best / min(base):5.2f}x best"
    return f"  {name:<34} median {med * 1e3:8.2f} ms   best {best * 1e3:8.2f} ms{ratio}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256, help="rows per batch (default 256)")
    parser.add_argument("--sizes", type=str, default="784,1024,1024,10",
                        help="layer widths, input to output (default 784,1024,1024,10)")
    parser.add_argument("--repeat", type=int, default=20, help="timed steps per side and figure (default 20)")
    parser.add_argument("--check-steps", type=int, default=4, help="steps of the loss agreement check (default 4)")
    parser.add_argument("--threads", type=int, default=2, help="ggml CPU threads (default 2)")
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="OpenBLAS threads of numpy and vizalloc (default: OpenBLAS's own, all cores); "
                             "1 gives steadier figures on a loaded machine")
    parser.add_argument("--no-ggml", action="store_true", help="skip the ggml-python side")
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    if len(sizes) < 2 or min(sizes) < 1 or args.batch < 1 or args.repeat < 1 or args.check_steps < 1:
        parser.error("need at least two positive layer widths, a positive batch, repeat and check-steps")

    p = make_problem(args.batch, sizes, n_batches=4)
    print(f"train step (fwd + bwd + AdamW), batch {args.batch}, {' -> '.join(map(str, sizes))}, f32, relu, "
          f"cross-entropy; {args.repeat} timed steps per side and figure; BLAS threads "
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'default')}, ggml threads {args.threads}")

    def build() -> list[Side]:
        out: list[Side] = [NumpySide(p), VizallocSide(p)]
        if not args.no_ggml:
            try:
                out.append(GgmlSide(p, args.threads))
            except ImportError as exc:
                print(f"  (ggml-python not available: {exc}; skipping the ggml side)")
        return out

    # 1. honesty: the same losses and weights from the same start
    sides = build()
    losses = {s.name: [s.train(i) for i in range(args.check_steps)] for s in sides}
    ref = np.array(losses[sides[0].name])
    print(f"loss agreement over {args.check_steps} steps from the same weights "
          f"(numpy losses {', '.join(f'{v:.6f}' for v in ref)}):")
    for s in sides[1:]:
        diff = float(np.max(np.abs(np.array(losses[s.name]) - ref)))
        print(f"  {s.name:<34} max |loss - numpy| = {diff:.3g}")
    wn = sides[0].weights()
    for s in sides[1:]:
        wdiff = max(float(np.max(np.abs(a.reshape(b.shape) - b))) for a, b in zip(s.weights(), wn))
        print(f"  {s.name:<34} max |weight - numpy| after the steps = {wdiff:.3g}")

    # 2. timing, the sides interleaved in rounds so drifting machine load hits all alike
    times: dict[tuple[str, bool], list[float]] = {}
    warm: dict[tuple[str, bool], list[float]] = {}
    time_round(sides, args.check_steps, warm)  # warm-up, not counted
    for k in range(args.repeat):
        time_round(sides, args.check_steps + 2 + 2 * k, times, rotate=k)
    for s in sides:
        s.close()

    print("training step right after a forward pass: alloc switches graphs (scheduler reset, deep copy "
          "of the graph, split, plan, bind), then compute — the main figure:")
    for s in sides:
        print(_row(s.name, times[(s.name, True)], None if s is sides[0] else times[(sides[0].name, True)]))
    print("consecutive training steps: alloc finds the graph allocated and returns (no deep copy); "
          "compute and the per-step bookkeeping only:")
    for s in sides:
        print(_row(s.name, times[(s.name, False)], None if s is sides[0] else times[(sides[0].name, False)]))
    for s, label in zip(sides[1:], ("vizalloc/numpy", "ggml/numpy")):
        sw, st = times[(s.name, True)], times[(s.name, False)]
        bsw, bst = times[(sides[0].name, True)], times[(sides[0].name, False)]
        print(f"ratio {label + ':':<15} {statistics.median(sw) / statistics.median(bsw):.3f}x median "
              f"({min(sw) / min(bsw):.3f}x best) with the switch, "
              f"{statistics.median(st) / statistics.median(bst):.3f}x median ({min(st) / min(bst):.3f}x best) "
              "without" + ("   target <= 1.2x" if s is sides[1] else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
