"""The golden ``seed_A_*`` training loop on real ggml, driven from Python through ggml-python.

An MLP 16->32->4 (batch 8, ReLU, cross-entropy, SGD lr 0.5) trained "ggml style", as the
golden corpus' seed scenario was (tests/data/golden/README.md, "The seed scenario"):

* a static context holds the parameters W1, b1, W2, b2 (``ggml_set_param``), the
  loss-gradient accumulator and ``sgd_params``, in one buffer allocated once;
* a compute context holds the inputs ``x``, ``labels`` and every compute tensor;
  ``gf`` is the forward graph, ``gb = ggml_graph_dup(gf)`` + ``ggml_build_backward_expand``
  + one ``ggml_opt_step_sgd`` per parameter (ggml-opt's ``gb_opt`` construction), so ``gb``
  holds every forward tensor of ``gf``;
* one ``ggml_backend_sched`` (CPU backend, 1 thread) allocates them in turn, F, B, F, B, ...:
  per step ``sched_reset; [fix]; sched_alloc_graph; upload the batch; compute``.

``--fix none`` leaves the forward tensors' data pointers in place (the seed bug: they keep
the addresses of ``gf``'s plan, which is wrong for ``gb``); ``--fix clear`` clears data,
buffer and extra of every compute-context tensor after each reset; ``--fix dup`` allocates
a fresh copy of the graph each step (ggml-opt's ``dup_graph``).

Freed compute buffers are quarantined, as the golden harness did: the scheduler gets a copy
of the CPU buffer type (same name, alignment and memory) whose buffers do not give their
memory back when ggml frees them, so the stale pointers of ``--fix none`` point into dead
but reserved memory instead of into malloc's free lists (with the stock buffer type the
golden C harness died of heap corruption: ``seed_A_stale_realfree``). ``--memory stock``
uses the stock CPU buffer type instead: without a fix the program then dies in its first
backward step, as that harness did.

Each step's numbers are checked against a float64 numpy reference of the same step from the
same parameters and batch, with the golden ``numerics`` match rule; the program prints one
``record {json}`` line per compute and a final ``trajectory {json}`` line (the losses beside
an independent reference training run). Nothing here reads memory through a tensor's data
pointer: every read and write goes through ggml's own ``ggml_backend_tensor_get/set``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys

import ggml
import numpy as np

lib = ggml.lib
for _fn in ("ggml_backend_cpu_buffer_type", "ggml_backend_buffer_get_size", "ggml_backend_buffer_get_type"):
    getattr(lib, _fn).restype = ctypes.c_void_p  # ggml-python declares some as int: truncated pointers
lib.ggml_backend_buffer_get_size.restype = ctypes.c_size_t
lib.ggml_backend_buffer_get_size.argtypes = [ctypes.c_void_p]
lib.ggml_backend_buffer_get_type.argtypes = [ctypes.c_void_p]

N_IN, N_HIDDEN, N_OUT, BATCH, LR = 16, 32, 4, 8, 0.5
F32 = ggml.GGML_TYPE_F32
GRAPH_SIZE = ggml.GGML_DEFAULT_GRAPH_SIZE


# -- the quarantining CPU buffer type ------------------------------------------------------

_P = ctypes.c_void_p
_AllocFn = ctypes.CFUNCTYPE(_P, _P, ctypes.c_size_t)


class _BuftIface(ctypes.Structure):
    # struct ggml_backend_buffer_type_i (ggml-backend-impl.h)
    _fields_ = [(n, _P) for n in ("get_name", "alloc_buffer", "get_alignment", "get_max_size",
                                  "get_alloc_size", "is_host")]


class _Buft(ctypes.Structure):
    # struct ggml_backend_buffer_type: iface, device, context
    _fields_ = [("iface", _BuftIface), ("device", _P), ("context", _P)]


class QuarantineCPU:
    """ggml's CPU buffer type, except that ggml freeing one of its buffers does not release
    the memory (the buffer's ``free_buffer`` is unset; ``ggml_backend_buffer_free`` still
    deletes the buffer object itself, as in the golden harness)."""

    def __init__(self) -> None:
        cpu = _Buft.from_address(lib.ggml_backend_cpu_buffer_type())
        self.struct = _Buft()
        ctypes.pointer(self.struct)[0] = cpu
        real_alloc = _AllocFn(cpu.iface.alloc_buffer)

        def alloc(buft: int, size: int) -> int:
            buffer = real_alloc(buft, size)
            if buffer:
                if lib.ggml_backend_buffer_get_type(buffer) != buft or lib.ggml_backend_buffer_get_size(buffer) != size:
                    raise SystemExit("seed_loop: the CPU buffer does not have the layout this program knows")
                # struct ggml_backend_buffer starts with its iface, whose first member is free_buffer
                ctypes.c_void_p.from_address(buffer).value = None
            return buffer

        self._alloc = _AllocFn(alloc)  # kept alive: ggml holds the pointer
        cpu_ptr = lib.ggml_backend_cpu_buffer_type()
        # the copy must read as the CPU buffer type through ggml's own accessors, or the layout is not ggml's
        if (ggml.ggml_backend_buft_name(self.ptr) != ggml.ggml_backend_buft_name(cpu_ptr)
                or ggml.ggml_backend_buft_get_alignment(self.ptr) != ggml.ggml_backend_buft_get_alignment(cpu_ptr)):
            raise SystemExit("seed_loop: the CPU buffer type does not have the layout this program knows")
        self.struct.iface.alloc_buffer = ctypes.cast(self._alloc, _P).value

    @property
    def ptr(self) -> int:
        return ctypes.addressof(self.struct)


# -- data and the numpy reference -----------------------------------------------------------

def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Scaled normal weights, zero biases (numpy shapes are ggml's ne reversed)."""
    return {
        "W1": (rng.standard_normal((N_HIDDEN, N_IN)) / np.sqrt(N_IN)).astype(np.float32),
        "b1": np.zeros(N_HIDDEN, dtype=np.float32),
        "W2": (rng.standard_normal((N_OUT, N_HIDDEN)) / np.sqrt(N_HIDDEN)).astype(np.float32),
        "b2": np.zeros(N_OUT, dtype=np.float32),
    }


def make_batches(n: int, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """Classes from a fixed random linear teacher; labels one-hot."""
    teacher = rng.standard_normal((N_OUT, N_IN))
    out = []
    for _ in range(n):
        x = rng.standard_normal((BATCH, N_IN)).astype(np.float32)
        labels = np.zeros((BATCH, N_OUT), dtype=np.float32)
        labels[np.arange(BATCH), np.argmax(x @ teacher.T, axis=1)] = 1.0
        out.append((x, labels))
    return out


def reference_step(params: dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray
                   ) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
    """The same step in float64 numpy: loss and logits of the forward pass, and the
    parameters after the SGD update (ggml's cross_entropy_loss is the mean over rows)."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    x64, y = x.astype(np.float64), labels.astype(np.float64)
    h_pre = x64 @ p["W1"].T + p["b1"]
    h = np.maximum(h_pre, 0.0)
    logits = h @ p["W2"].T + p["b2"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = float(-(y * log_softmax).sum() / BATCH)
    g_logits = (np.exp(log_softmax) - y) / BATCH
    g_h_pre = (g_logits @ p["W2"]) * (h_pre > 0)
    grads = {"W2": g_logits.T @ h, "b2": g_logits.sum(axis=0), "W1": g_h_pre.T @ x64, "b1": g_h_pre.sum(axis=0)}
    after = {k: p[k] - LR * grads[k] for k in p}
    return loss, logits, after


# -- the ggml program -------------------------------------------------------------------------

def tensor_get(t: ggml.ggml_tensor_p, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, dtype=np.float32)
    ggml.ggml_backend_tensor_get(t, out.ctypes.data, 0, out.nbytes)
    return out


def tensor_set(t: ggml.ggml_tensor_p, value: np.ndarray) -> None:
    value = np.ascontiguousarray(value, dtype=np.float32)
    ggml.ggml_backend_tensor_set(t, value.ctypes.data, 0, value.nbytes)


def addr(t: ggml.ggml_tensor_p) -> int:
    return ctypes.cast(t, ctypes.c_void_p).value or 0


class Net:
    """Static parameters, the compute context and the two shared graphs."""

    def __init__(self, params: dict[str, np.ndarray]) -> None:
        overhead = ggml.ggml_tensor_overhead()
        self.ctx_static = ggml.ggml_init(ggml.ggml_init_params(mem_size=overhead * 8, mem_buffer=None, no_alloc=True))
        cs = self.ctx_static
        self.W1 = ggml.ggml_new_tensor_2d(cs, F32, N_IN, N_HIDDEN)
        self.b1 = ggml.ggml_new_tensor_1d(cs, F32, N_HIDDEN)
        self.W2 = ggml.ggml_new_tensor_2d(cs, F32, N_HIDDEN, N_OUT)
        self.b2 = ggml.ggml_new_tensor_1d(cs, F32, N_OUT)
        self.params = {"W1": self.W1, "b1": self.b1, "W2": self.W2, "b2": self.b2}
        for name, t in self.params.items():
            ggml.ggml_set_name(t, name.encode())
            ggml.ggml_set_param(t)
        self.loss_grad_acc = ggml.ggml_new_tensor_1d(cs, F32, 1)
        ggml.ggml_set_name(self.loss_grad_acc, b"loss_grad_acc")
        self.sgd_params = ggml.ggml_new_tensor_1d(cs, F32, 2)
        ggml.ggml_set_name(self.sgd_params, b"sgd_params")
        # the static buffer: stock CPU buffer type, allocated once, never freed while training
        self.buf_static = ggml.ggml_backend_alloc_ctx_tensors_from_buft(cs, lib.ggml_backend_cpu_buffer_type())
        assert self.buf_static, "could not allocate the static buffer"
        self.set_params(params)
        tensor_set(self.sgd_params, np.array([LR, 0.0], dtype=np.float32))  # lr, weight decay

        mem = overhead * 64 + 2 * ggml.ggml_graph_overhead_custom(GRAPH_SIZE, True)
        self.ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=True))
        ctx = self.ctx
        self.x = self.named(ggml.ggml_new_tensor_2d(ctx, F32, N_IN, BATCH), "x")
        ggml.ggml_set_input(self.x)
        self.labels = self.named(ggml.ggml_new_tensor_2d(ctx, F32, N_OUT, BATCH), "labels")
        ggml.ggml_set_input(self.labels)
        h_mm = self.named(ggml.ggml_mul_mat(ctx, self.W1, self.x), "h_mm")
        h_pre = self.named(ggml.ggml_add(ctx, h_mm, self.b1), "h_pre")
        h = self.named(ggml.ggml_relu(ctx, h_pre), "h")
        o_mm = self.named(ggml.ggml_mul_mat(ctx, self.W2, h), "o_mm")
        self.logits = self.named(ggml.ggml_add(ctx, o_mm, self.b2), "logits")
        ggml.ggml_set_output(self.logits)
        self.loss = self.named(ggml.ggml_cross_entropy_loss(ctx, self.logits, self.labels), "loss")
        ggml.ggml_set_output(self.loss)
        ggml.ggml_set_loss(self.loss)

        self.gf = ggml.ggml_new_graph_custom(ctx, GRAPH_SIZE, True)
        ggml.ggml_build_forward_expand(self.gf, self.loss)
        self.gb = ggml.ggml_graph_dup(ctx, self.gf, True)
        n_forward = ggml.ggml_graph_n_nodes(self.gf)
        grad_accs = (ctypes.POINTER(ggml.ggml_tensor) * GRAPH_SIZE)()
        loss_index = [addr(ggml.ggml_graph_node(self.gf, i)) for i in range(n_forward)].index(addr(self.loss))
        grad_accs[loss_index] = self.loss_grad_acc
        ggml.ggml_build_backward_expand(ctx, self.gb, grad_accs)
        # one SGD step per parameter, going backwards over the forward nodes (ggml-opt's order)
        for i in reversed(range(n_forward)):
            node = ggml.ggml_graph_node(self.gb, i)
            if not node.contents.flags & ggml.GGML_TENSOR_FLAG_PARAM:
                continue
            grad = ggml.ggml_graph_get_grad(self.gb, node)
            if not grad:
                continue
            step = ggml.ggml_opt_step_sgd(ctx, node, grad, self.sgd_params)
            ggml.ggml_set_name(step, b"sgd step for " + node.contents.name)
            ggml.ggml_build_forward_expand(self.gb, step)
        ggml.ggml_graph_reset(self.gb)  # the loss gradient accumulator starts at 1

    @staticmethod
    def named(t: ggml.ggml_tensor_p, name: str) -> ggml.ggml_tensor_p:
        ggml.ggml_set_name(t, name.encode())
        return t

    def get_params(self) -> dict[str, np.ndarray]:
        return {name: tensor_get(t, (t.contents.ne[1], t.contents.ne[0]) if name[0] == "W" else (t.contents.ne[0],))
                for name, t in self.params.items()}

    def set_params(self, values: dict[str, np.ndarray]) -> None:
        for name, t in self.params.items():
            tensor_set(t, values[name])

    def compute_tensors(self) -> list[ggml.ggml_tensor_p]:
        out = []
        t = ggml.ggml_get_first_tensor(self.ctx)
        while t:
            out.append(t)
            t = ggml.ggml_get_next_tensor(self.ctx, t)
        return out


def clear_tensor_pointers(tensors: list[ggml.ggml_tensor_p]) -> None:
    """The 'clear' fix: forget every compute tensor's placement (data, buffer, extra)."""
    for t in tensors:
        t.contents.data = None
        t.contents.buffer = None
        t.contents.extra = None


def dup_graph(ctx: ggml.ggml_context_p, src: ggml.ggml_cgraph_p) -> tuple[ggml.ggml_cgraph_p, dict[int, ggml.ggml_tensor_p]]:
    """ggml-opt's ``dup_graph`` (src/ggml-opt.cpp): a new tensor for every tensor of ``src``
    with its op, strides, flags, op params, name, data, buffer, extra and view offset, views
    and sources mapped to the copies; leafs first, then nodes. (ggml-opt also copies the
    gradient table, which only building a backward pass reads: allocation and compute do not.)
    Returns the copy and the map from original tensor address to copy."""
    mapping: dict[int, ggml.ggml_tensor_p] = {}

    def map_tensor(t: ggml.ggml_tensor_p) -> ggml.ggml_tensor_p | None:
        if not t:
            return None
        key = addr(t)
        if key in mapping:
            return mapping[key]
        new = ggml.ggml_dup_tensor(ctx, t)
        mapping[key] = new
        o, n = t.contents, new.contents
        n.op = o.op
        for i in range(ggml.GGML_MAX_DIMS):
            n.nb[i] = o.nb[i]
        n.flags = o.flags
        ctypes.memmove(ctypes.addressof(n.op_params), ctypes.addressof(o.op_params), ctypes.sizeof(o.op_params))
        n.name = o.name
        n.data = o.data
        n.buffer = o.buffer
        n.extra = o.extra
        n.view_offs = o.view_offs
        n.view_src = map_tensor(o.view_src)
        for i in range(ggml.GGML_MAX_SRC):
            n.src[i] = map_tensor(o.src[i])
        return new

    g = src.contents
    dst = ggml.ggml_new_graph_custom(ctx, g.size, True)
    for i in range(g.n_leafs):
        ggml.ggml_build_forward_expand(dst, map_tensor(g.leafs[i]))
    assert dst.contents.n_leafs == g.n_leafs
    for i in range(g.n_nodes):
        ggml.ggml_build_forward_expand(dst, map_tensor(g.nodes[i]))
    assert dst.contents.n_nodes == g.n_nodes
    return dst, mapping


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fix", choices=("none", "clear", "dup"), default="none")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory", choices=("quarantine", "stock"), default="quarantine",
                    help="buffer type of the scheduler (default: quarantine freed compute buffers)")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    init = init_params(rng)
    batches = make_batches(args.iterations, rng)

    net = Net(init)
    backend = ggml.ggml_backend_cpu_init()
    ggml.ggml_backend_cpu_set_n_threads(backend, 1)
    quarantine = QuarantineCPU() if args.memory == "quarantine" else None
    buft = quarantine.ptr if quarantine is not None else lib.ggml_backend_cpu_buffer_type()
    backends = (ggml.ggml_backend_t_ctypes * 1)(backend)
    bufts = (ggml.ggml_backend_buffer_type_t_ctypes * 1)(buft)
    sched = ggml.ggml_backend_sched_new(backends, bufts, 1, GRAPH_SIZE, False, False)

    copies: list[ggml.ggml_context_p] = []  # the dup fix's copy contexts, kept to the end (as the golden did)
    originals = net.compute_tensors()
    losses: list[float] = []
    record = 0
    corrupted = []
    for iteration, (x, labels) in enumerate(batches):
        before = net.get_params()
        loss_ref, logits_ref, after_ref = reference_step(before, x, labels)
        for graph_name, graph in (("forward", net.gf), ("backward", net.gb)):
            ggml.ggml_backend_sched_reset(sched)
            g, t_x, t_labels, t_loss, t_logits = graph, net.x, net.labels, net.loss, net.logits
            if args.fix == "clear":
                clear_tensor_pointers(originals)
            elif args.fix == "dup":
                mem = ggml.ggml_tensor_overhead() * 64 + ggml.ggml_graph_overhead_custom(GRAPH_SIZE, True)
                copy_ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=True))
                copies.append(copy_ctx)
                g, mapping = dup_graph(copy_ctx, graph)
                t_x, t_labels, t_loss, t_logits = (mapping[addr(t)] for t in (net.x, net.labels, net.loss, net.logits))
            if not ggml.ggml_backend_sched_alloc_graph(sched, g):
                print(f"sched_alloc_graph failed for the {graph_name} graph", file=sys.stderr)
                return 2
            tensor_set(t_x, x)
            tensor_set(t_labels, labels)
            if ggml.ggml_backend_sched_graph_compute(sched, g) != ggml.GGML_STATUS_SUCCESS:
                print(f"compute failed for the {graph_name} graph", file=sys.stderr)
                return 2
            loss = float(tensor_get(t_loss, (1,))[0])
            logits = tensor_get(t_logits, (BATCH, N_OUT))
            params_diff = max_abs_diff(np.concatenate([v.ravel() for v in net.get_params().values()]),
                                       np.concatenate([after_ref[k].ravel() for k in net.params])) \
                if graph_name == "backward" else 0.0
            if graph_name == "forward":
                losses.append(loss)
            logits_diff = max_abs_diff(logits, logits_ref)
            match = (abs(loss - loss_ref) <= 1e-5 * max(1.0, abs(loss_ref)) and logits_diff <= 1e-4
                     and params_diff <= 1e-5)
            if not match:
                corrupted.append(record)
            print("record " + json.dumps({
                "record": record, "iteration": iteration, "graph": graph_name, "loss": loss, "loss_ref": loss_ref,
                "loss_abs_diff": abs(loss - loss_ref), "logits_max_abs_diff": logits_diff,
                "params_after_max_abs_diff": params_diff, "match": match,
                "buffer_size": ggml.ggml_backend_sched_get_buffer_size(sched, backend)}), flush=True)
            record += 1

    # an independent reference training run from the same initial parameters and batches
    ref_params = init
    ref_losses = []
    for x, labels in batches:
        loss, _, after = reference_step(ref_params, x, labels)
        ref_losses.append(loss)
        ref_params = after
    final = net.get_params()
    print("trajectory " + json.dumps({
        "loss": losses, "loss_reference_trajectory": ref_losses,
        "final_params_max_abs_diff_vs_reference_trajectory": max(max_abs_diff(final[k], ref_params[k]) for k in final),
        "corrupted": bool(corrupted), "mismatching_records": corrupted}), flush=True)

    ggml.ggml_backend_sched_free(sched)
    ggml.ggml_backend_free(backend)
    for c in copies:
        ggml.ggml_free(c)
    ggml.ggml_free(net.ctx)
    ggml.ggml_backend_buffer_free(net.buf_static)
    ggml.ggml_free(net.ctx_static)
    return 0


if __name__ == "__main__":
    sys.exit(main())
