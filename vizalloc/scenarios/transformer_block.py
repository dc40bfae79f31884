"""Inference of one pre-norm transformer layer split between a simulated device and the
CPU by the scheduler, with every split and input copy visible.

    >>> from vizalloc.scenarios.transformer_block import run
    >>> r = run()
    >>> r.n_splits > 1, r.max_abs_diff_cpu < 1e-5
    (True, True)

The layer is the golden ``tfm01_layer``: rms_norm, 4-head causal attention, residual,
rms_norm, SwiGLU feed-forward, residual (d=32, ff=64, T=8). Its weights live in a
``WEIGHTS`` buffer of the simulated device ``SIM``, which runs only the ops in
``sim_ops`` (by default the matrix products and element-wise adds/muls); the rest
(norms, soft_max, silu, cont) falls back to the CPU. The scheduler therefore cuts the
graph into splits and copies tensors across: ``SIM#<name>#0`` on the device,
``CPU#<name>#0`` on the host.

The result is checked twice: against the same layer run on a CPU-only scheduler, and
against a plain numpy implementation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ContextManager

import numpy as np

from vizalloc.errors import AllocationError, UsageError
from vizalloc.runtime import memory, ops
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.buffer import Usage
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F32
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.tensor import Tensor, set_input, set_output

DEFAULT_SIM_OPS = ("MUL_MAT", "ADD", "MUL")
WEIGHT_NAMES = ("attn_norm", "Wq", "Wk", "Wv", "Wo", "ffn_norm", "W_gate", "W_up", "W_down")


@dataclass(frozen=True)
class BlockConfig:
    d_model: int = 32
    n_head: int = 4
    d_ff: int = 64
    n_tokens: int = 8
    eps: float = 1e-5

    def __post_init__(self) -> None:
        if min(self.d_model, self.n_head, self.d_ff, self.n_tokens) < 1 or self.d_model % self.n_head:
            raise UsageError(f"transformer block: d_model {self.d_model} must be a positive multiple of "
                             f"n_head {self.n_head}, and d_ff, n_tokens positive")


@dataclass(frozen=True)
class SplitInfo:
    index: int
    backend: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class CopyInfo:
    name: str          # "<backend>#<source>#<copy>"
    source: str
    backend: str
    nbytes: int


@dataclass(frozen=True)
class BlockResult:
    splits: tuple[SplitInfo, ...]
    copies: tuple[CopyInfo, ...]
    buffer_nbytes: dict[str, int]          # compute buffer per backend
    cpu_only_buffer_nbytes: int            # the same graph on one CPU backend
    weights_nbytes: int
    output: np.ndarray
    max_abs_diff_cpu: float                # vs the CPU-only scheduler
    max_abs_diff_numpy: float              # vs the numpy implementation
    assignments: str = ""                  # Scheduler.format_assignments (GGML_SCHED_DEBUG=2 style)

    @property
    def n_splits(self) -> int:
        return len(self.splits)


def make_weights(cfg: BlockConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    d, f = cfg.d_model, cfg.d_ff
    w = {
        "attn_norm": 1.0 + 0.1 * rng.standard_normal(d),
        "Wq": rng.standard_normal((d, d)) / np.sqrt(d),
        "Wk": rng.standard_normal((d, d)) / np.sqrt(d),
        "Wv": rng.standard_normal((d, d)) / np.sqrt(d),
        "Wo": rng.standard_normal((d, d)) / np.sqrt(d),
        "ffn_norm": 1.0 + 0.1 * rng.standard_normal(d),
        "W_gate": rng.standard_normal((f, d)) / np.sqrt(d),
        "W_up": rng.standard_normal((f, d)) / np.sqrt(d),
        "W_down": rng.standard_normal((d, f)) / np.sqrt(f),
    }
    return {k: v.astype(np.float32) for k, v in w.items()}


def causal_mask(n: int) -> np.ndarray:
    """numpy (query, key): 0 where the key is not in the future, -inf elsewhere."""
    m = np.zeros((n, n), dtype=np.float32)
    m[np.triu_indices(n, 1)] = -np.inf
    return m


def _weight_tensors(ctx: Context, cfg: BlockConfig) -> dict[str, Tensor]:
    d, f = cfg.d_model, cfg.d_ff
    shapes = {"attn_norm": (d,), "Wq": (d, d), "Wk": (d, d), "Wv": (d, d), "Wo": (d, d), "ffn_norm": (d,),
              "W_gate": (d, f), "W_up": (d, f), "W_down": (f, d)}
    return {k: ctx.new_tensor(F32, shapes[k], name=f"L0.{k}") for k in WEIGHT_NAMES}


def build_layer(ctx: Context, w: dict[str, Tensor], cfg: BlockConfig) -> tuple[Tensor, Tensor, Tensor]:
    """``x`` and ``kq_mask`` (inputs) and the layer's output, as ``tfm01_layer`` builds them."""
    d, h, t = cfg.d_model, cfg.n_head, cfg.n_tokens
    hd = d // h
    x = ctx.new_tensor_2d(F32, d, t, "x")
    set_input(x)
    mask = ctx.new_tensor_2d(F32, t, t, "kq_mask")
    set_input(mask)
    cur = ops.mul(ctx, ops.rms_norm(ctx, x, cfg.eps).set_name("L0.attn_rms"), w["attn_norm"]).set_name("L0.attn_normed")
    q = ops.mul_mat(ctx, w["Wq"], cur).set_name("L0.q")
    k = ops.mul_mat(ctx, w["Wk"], cur).set_name("L0.k")
    v = ops.mul_mat(ctx, w["Wv"], cur).set_name("L0.v")
    qh = ops.permute(ctx, ops.reshape_3d(ctx, q, hd, h, t), 0, 2, 1, 3).set_name("L0.q_heads")
    kh = ops.permute(ctx, ops.reshape_3d(ctx, k, hd, h, t), 0, 2, 1, 3).set_name("L0.k_heads")
    vt = ops.cont(ctx, ops.permute(ctx, ops.reshape_3d(ctx, v, hd, h, t), 1, 2, 0, 3)).set_name("L0.v_T")
    kq = ops.mul_mat(ctx, kh, qh).set_name("L0.kq")
    sm = ops.soft_max_ext(ctx, kq, mask, 1.0 / float(np.sqrt(hd)), 0.0).set_name("L0.kq_sm")
    kqv = ops.mul_mat(ctx, vt, sm).set_name("L0.kqv")
    merged = ops.cont_2d(ctx, ops.permute(ctx, kqv, 0, 2, 1, 3), d, t).set_name("L0.kqv_cont")
    attn = ops.add(ctx, ops.mul_mat(ctx, w["Wo"], merged).set_name("L0.attn_out"), x).set_name("L0.attn_res")
    cur = ops.mul(ctx, ops.rms_norm(ctx, attn, cfg.eps).set_name("L0.ffn_rms"), w["ffn_norm"]).set_name("L0.ffn_normed")
    gate = ops.silu(ctx, ops.mul_mat(ctx, w["W_gate"], cur).set_name("L0.gate")).set_name("L0.gate_silu")
    up = ops.mul_mat(ctx, w["W_up"], cur).set_name("L0.up")
    down = ops.mul_mat(ctx, w["W_down"], ops.mul(ctx, gate, up).set_name("L0.gate_up")).set_name("L0.down")
    out = ops.add(ctx, down, attn).set_name("L0.out")
    set_output(out)
    return x, mask, out


def numpy_layer(w: dict[str, np.ndarray], x: np.ndarray, mask: np.ndarray, cfg: BlockConfig) -> np.ndarray:
    """The same layer in numpy (x: tokens x d_model)."""
    def rms(a: np.ndarray) -> np.ndarray:
        return a / np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + cfg.eps)

    d, h, t = cfg.d_model, cfg.n_head, cfg.n_tokens
    hd = d // h
    x64 = x.astype(np.float64)
    cur = rms(x64) * w["attn_norm"]
    q, k, v = cur @ w["Wq"].T, cur @ w["Wk"].T, cur @ w["Wv"].T
    qh, kh, vh = (a.reshape(t, h, hd).transpose(1, 0, 2) for a in (q, k, v))
    scores = qh @ kh.transpose(0, 2, 1) / np.sqrt(hd) + mask
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    attn = (probs @ vh).transpose(1, 0, 2).reshape(t, d) @ w["Wo"].T + x64
    cur = rms(attn) * w["ffn_norm"]
    g = cur @ w["W_gate"].T
    ff = (g / (1.0 + np.exp(-g))) * (cur @ w["W_up"].T)
    return (ff @ w["W_down"].T + attn).astype(np.float32)


def _run_on(backends: list[Any], weights: dict[str, np.ndarray], x_val: np.ndarray, mask_val: np.ndarray,
            cfg: BlockConfig, parallel: bool) -> tuple[Any, Graph, Tensor, Any]:
    from vizalloc.runtime.sched import Scheduler

    wctx = Context(name="weights")
    wt = _weight_tensors(wctx, cfg)
    wbuf = alloc_ctx_tensors(wctx, backends[0].buffer_type, Usage.WEIGHTS)
    for k, t in wt.items():
        memory.tensor_set(t, weights[k])
    ctx = Context(name="layer")
    x, mask, out = build_layer(ctx, wt, cfg)
    g = Graph()
    g.build_forward_expand(out)
    sched = Scheduler(backends, parallel=parallel)
    if not sched.alloc_graph(g):
        raise AllocationError("transformer block: the scheduler could not allocate the layer")
    memory.tensor_set(x, x_val)
    memory.tensor_set(mask, mask_val)
    sched.graph_compute(g)
    return sched, g, out, wbuf


def run(
    config: BlockConfig | None = None,
    seed: int = 0,
    sim_ops: Iterable[str] = DEFAULT_SIM_OPS,
    *,
    parallel: bool = False,
    device: str = "sim",
    around_run: Callable[[], ContextManager[Any]] | None = None,
) -> BlockResult:
    """Run the layer on [device, CPU] and on [CPU] alone; report splits, copies and results.

    Args:
        config: layer sizes.
        seed: seeds weights and input.
        sim_ops: op names the simulated device runs.
        parallel: pipeline parallelism (4 copies of every split input).
        device: ``"sim"`` (the simulated device) or ``"cuda"`` (``CudaBackend(0)``, cupy;
            it runs every op, so ``sim_ops`` is ignored).
        around_run: context manager factory around the device+CPU run only (a trace, say).
    """
    from vizalloc.runtime.backends import CPUBackend, CudaBackend, SimBackend

    cfg = config or BlockConfig()
    rng = np.random.default_rng(seed)
    weights = make_weights(cfg, rng)
    x_val = rng.standard_normal((cfg.n_tokens, cfg.d_model)).astype(np.float32)
    mask_val = causal_mask(cfg.n_tokens)

    if device == "sim":
        dev: Any = SimBackend("SIM", supported_ops=list(sim_ops))
    elif device == "cuda":
        dev = CudaBackend(0)
    else:
        raise UsageError(f"unknown device {device!r}; choose sim or cuda")
    with (around_run() if around_run is not None else contextlib.nullcontext()):
        sched, g, out, wbuf = _run_on([dev, CPUBackend()], weights, x_val, mask_val, cfg, parallel)
        output = memory.tensor_get(out)
    splits = tuple(
        SplitInfo(i, sched.backends[sp.backend_id].name,
                  tuple(n.name for n in g.nodes[sp.i_start:sp.i_end]), tuple(t.name for t in sp.inputs))
        for i, sp in enumerate(sched.splits)
    )
    copies = []
    for sp in sched.splits:
        for inp in sp.inputs:
            c = sched.get_copy(inp, sp.backend_id, sched.cur_copy)
            assert c is not None
            copies.append(CopyInfo(c.name, inp.name, sched.backends[sp.backend_id].name, c.nbytes))
    buffer_nbytes = {b.name: sched.buffer_size(i) for i, b in enumerate(sched.backends)}
    weights_nbytes = wbuf.nbytes if wbuf is not None and not isinstance(wbuf, list) else 0

    cpu_sched, _, cpu_out, _ = _run_on([CPUBackend()], weights, x_val, mask_val, cfg, False)
    cpu_output = memory.tensor_get(cpu_out)
    ref = numpy_layer(weights, x_val, mask_val, cfg)
    return BlockResult(
        splits=splits, copies=tuple(copies), buffer_nbytes=buffer_nbytes,
        cpu_only_buffer_nbytes=cpu_sched.buffer_size(0), weights_nbytes=weights_nbytes, output=output,
        max_abs_diff_cpu=float(np.max(np.abs(output - cpu_output))),
        max_abs_diff_numpy=float(np.max(np.abs(output - ref))),
        assignments=sched.format_assignments(g),
    )
