"""What fits in a GPU's memory: the largest context, or the most offloaded layers, that
llama.cpp can use on one device of a given size, answered from any machine.

The memory a setting needs on the device is what llama.cpp's ``--fit`` adds up
(``common/fit.cpp``: the model, context and compute parts of ``llama_get_memory_breakdown``):

* the weights of the offloaded layers: the output layer first (a tied output is a copy of
  the token embeddings there), then the last blocks, as llama.cpp counts ``-ngl``; each as
  the device's buffer type allocates it (ggml-cuda: 128-byte aligned, a quantized tensor's
  last row padded to 512 elements; ggml-rpc: 32-byte aligned);
* the KV cache of the offloaded layers (``cache_k_l*``, ``cache_v_l*`` as llama.cpp made
  them, sliding-window layers with their smaller cache);
* the device compute buffer, predicted by replaying the captured worst-case graph
  (:mod:`vizalloc.replay.cuda_split`);

and llama.cpp's ``--fit`` keeps a margin free on every device (``--fit-target``, 1024 MiB by
default), for what none of these counts (the CUDA context, the cuBLAS workspace, the pool).
A context is searched in multiples of 256 tokens, as llama.cpp rounds it; the layers for a
given context from a single capture (the CPU graph does not depend on them).

How it differs from llama.cpp's own ``--fit`` / ``llama-fit-params`` (``common/fit.cpp``):
llama.cpp measures at the user's setting and at its
minimum context and interpolates linearly between them, rounding down to 256 × the
streams; here each candidate context is predicted and the largest that fits is bisected
for, so where memory is not linear in the context (sliding-window caches, steps of the
compute buffer) the answers can differ by some multiples of 256. llama.cpp gives up when
``-ngl``, ``-ts`` or ``-ot`` are set; here ``--n-gpu-layers`` fixes the layers and the context
is answered. llama.cpp then fills whole layers back to front and overflows the FFN of a
partial layer to the CPU (``-ot`` patterns), and for MoE models first tries the experts on
the CPU; here only whole layers are counted. One device: llama.cpp's fit over several
(``-ts``) is not answered. Compared with ``llama-fit-params`` run for real on an RPC device
(``benchmarks/rpc_validation.py``): the same answer for a context reduced from 262144 and
for the layers of a dense 70B and a dense 3B model; one step of 256 below llama.cpp's
interpolated context where the sliding-window cache is not linear (llama.cpp's answer is
0.17 MiB over its own target there); fewer layers than llama.cpp for a MoE model, whose
experts llama.cpp moves to the CPU.

    from vizalloc.predict.fit import fit
    answer = fit("model.gguf", budget=24 << 30, setting=Setting(n_ctx=8192))   # the most layers
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from vizalloc.errors import UsageError, VizallocError
from vizalloc.predict.model import DEVICE_NAMES, ModelRun, Setting, explain_model
from vizalloc.replay.cuda_split import CUDA, DEVICES, DeviceKind, Placement

#: llama.cpp's --fit keeps this much free on each device by default (common/fit.cpp, --fit-target)
DEFAULT_MARGIN = 1024 << 20
#: llama.cpp rounds a fitted context down to a multiple of this (× the streams)
CTX_STEP = 256

_UNITS = {"b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20,
          "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """``24GiB``, ``24G``, ``8000MiB``, ``16GB`` (decimal), a plain number of bytes.

        >>> parse_size("24GiB"), parse_size("1.5g"), parse_size("8000MB")
        (25769803776, 1610612736, 8000000000)
    """
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS and unit:
        raise UsageError(f"--fit {text!r}: give a size such as 24GiB, 8000MiB or 16GB")
    value = int(float(m.group(1)) * _UNITS.get(unit, 1))
    if value <= 0:
        raise UsageError(f"--fit {text!r}: give a positive size")
    return value


@dataclass(frozen=True)
class Need:
    """What one setting needs on the device, in bytes."""

    n_ctx: int
    n_gpu_layers: int
    weights: int
    kv_cache: int
    compute: int
    host_compute: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute


@dataclass
class FitAnswer:
    """The answer, the setting one step beyond it (which does not fit), and what other
    settings of ``-ub``, ``-fa`` and the KV type would need at the answer."""

    question: str                 # "n_ctx" (largest context) or "n_gpu_layers" (most layers)
    budget: int
    margin: int
    n_layer: int
    answer: Need | None           # None: not even the smallest setting fits
    beyond: Need | None           # one step past the answer (None: the answer is the largest there is)
    alternatives: list[tuple[str, Need]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (change, llama.cpp's reason)
    predictions: int = 0
    captures: int = 0
    seconds: float = 0.0

    @property
    def usable(self) -> int:
        return self.budget - self.margin


def _alloc(nbytes: int, ne0: int, dtype: str, kind: DeviceKind) -> int:
    from vizalloc.runtime.dtype import DType

    t = DType.from_label(dtype)
    if t.is_quantized and kind.row_padding and ne0 % kind.row_padding:
        nbytes += (kind.row_padding - ne0 % kind.row_padding) // t.blck_size * t.type_size
    return -(-nbytes // kind.alignment) * kind.alignment


def static_need(model: Any, n_layer: int, n_gpu_layers: int, kind: DeviceKind = CUDA) -> tuple[int, int]:
    """(weights, KV cache) on a device of ``kind`` with ``n_gpu_layers`` offloaded (llama.cpp's
    ``-ngl``: the output layer first, then the last layers; ``cuda_split.Placement``)."""
    placement = Placement(n_layer, n_gpu_layers)
    weights = kv = 0
    seen: set[str] = set()
    tied = True
    for t in model.tensors.values():
        if t.view_src not in (-1, t.tensor_id) or t.name in seen:
            continue
        seen.add(t.name)
        if t.name.startswith("cache_"):
            if placement.on_gpu(t.name):
                kv += _alloc(t.nbytes, t.ne[0], t.dtype, kind)
            continue
        if not t.name.endswith((".weight", ".bias")):
            continue
        if t.name == "output.weight":
            tied = False
        if placement.on_gpu(t.name):
            weights += _alloc(t.nbytes, t.ne[0], t.dtype, kind)
    if placement.output_on_gpu and tied:  # the output is a copy of the token embeddings on the output's device
        for t in model.tensors.values():
            if t.name == "token_embd.weight":
                weights += _alloc(t.nbytes, t.ne[0], t.dtype, kind)
                break
    return weights, kv


def need_of(run: ModelRun, n_gpu_layers: int) -> Need:
    pred = run.predict(n_gpu_layers)
    gpu, host = list(pred.sizes)[:2]
    weights, kv = static_need(run.model, run.n_layer, n_gpu_layers, DEVICES[DEVICE_NAMES[run.device]])
    return Need(run.n_ctx, n_gpu_layers, weights, kv, pred.sizes[gpu], pred.sizes[host])


def fit(path: str, *, budget: int, setting: Setting, question: str, n_gpu_layers: int | None = None,
        device: str = "cuda", build: str = "captured", margin: int = DEFAULT_MARGIN, threads: int = 0,
        alternatives: bool = True) -> FitAnswer:
    """Answer ``question``: "n_gpu_layers" (the most layers at ``setting.n_ctx``) or "n_ctx"
    (the largest context, a multiple of 256, with ``n_gpu_layers``: None is every layer)."""
    if question not in ("n_ctx", "n_gpu_layers"):
        raise UsageError(f"fit question {question!r}: n_ctx or n_gpu_layers")
    if margin < 0 or budget <= margin:
        raise UsageError(f"--fit {budget:,} B leaves nothing after llama.cpp's margin of {margin:,} B "
                         "(--fit-margin): give more memory or a smaller margin")
    t0 = time.perf_counter()
    captures = predictions = 0
    runs: dict[Setting, ModelRun] = {}

    def run_at(s: Setting) -> ModelRun:
        nonlocal captures
        if s not in runs:
            (runs[s],) = explain_model(path, [s], metadata_only=True, device=device, build=build, threads=threads)
            captures += 1
        return runs[s]

    def need(s: Setting, ngl: int) -> Need:
        nonlocal predictions
        predictions += 1
        return need_of(run_at(s), ngl)

    usable = budget - margin
    first = run_at(setting)
    n_layer = first.n_layer
    full = n_layer + 1
    answer: Need | None = None
    beyond: Need | None = None
    best = setting
    if question == "n_gpu_layers":
        lo_need = need(setting, 0)
        if lo_need.total > usable:
            answer, beyond = None, lo_need
        else:
            lo, hi = 0, full  # lo fits; find the largest that does
            fits = {0: lo_need}
            top = need(setting, full)
            if top.total <= usable:
                answer, beyond = top, None
            else:
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    nd = need(setting, mid)
                    if nd.total <= usable:
                        lo, fits[mid] = mid, nd
                    else:
                        hi = mid
                answer, beyond = fits[lo], need(setting, lo + 1)
    else:
        ngl = full if n_gpu_layers is None else n_gpu_layers
        train = first.n_ctx_train or 0
        limit = train if train >= CTX_STEP else max(setting.n_ctx, CTX_STEP)
        lo_s = replace(setting, n_ctx=CTX_STEP)
        lo_need = need(lo_s, ngl)
        if lo_need.total > usable:
            answer, beyond = None, lo_need
        else:
            top_s = replace(setting, n_ctx=limit - limit % CTX_STEP)
            top = need(top_s, ngl)
            if top.total <= usable:
                answer, beyond, best = top, None, top_s
            else:
                lo, hi = 1, top_s.n_ctx // CTX_STEP
                fits = {1: lo_need}
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    nd = need(replace(setting, n_ctx=mid * CTX_STEP), ngl)
                    if nd.total <= usable:
                        lo, fits[mid] = mid, nd
                    else:
                        hi = mid
                answer, best = fits[lo], replace(setting, n_ctx=lo * CTX_STEP)
                beyond = need(replace(setting, n_ctx=(lo + 1) * CTX_STEP), ngl)
    alts: list[tuple[str, Need]] = []
    refused: list[tuple[str, str]] = []
    if alternatives and answer is not None:
        ngl = answer.n_gpu_layers
        base = replace(best, n_ctx=answer.n_ctx)
        others = [(f"-ub {u}", replace(base, n_ubatch=u, n_batch=max(base.batch, u)))
                  for u in (base.n_ubatch // 2, base.n_ubatch * 2) if u >= 1]
        fa = {"on": "off", "off": "on"}.get(base.flash_attn) or ("off" if first.graph_flash_attn == "on" else "on")
        others.append((f"-fa {fa}", replace(base, flash_attn=fa)))
        others.append(("-ctk/-ctv " + ("f16" if base.kv_type != "f16" else "q8_0"),
                       replace(base, kv_type="f16" if base.kv_type != "f16" else "q8_0")))
        for label, s in others:
            try:
                alts.append((label, need(s, ngl)))
            except VizallocError as exc:  # a setting llama.cpp refuses (a quantized V cache without -fa)
                refused.append((label, str(exc)))
    return FitAnswer(question, budget, margin, n_layer, answer, beyond, alts, refused, predictions, captures,
                     time.perf_counter() - t0)
