"""Weightless GGUFs of published model shapes, for device predictions: each shape is the
model's own ``config.json`` (the repository is cited beside it), its tensors typed as
llama.cpp's ``llama-quantize`` types a ``Q4_K_M`` file (``llama_tensor_get_type``: the
output and tied embeddings Q6_K, ``attn_v`` and ``ffn_down`` Q6_K in the layers
``use_more_bits`` picks, fused QKV Q5_K, the rest Q4_K; a row length that is not a multiple
of 256 falls back to Q5_0/Q8_0). The data is a sparse hole: megabytes on disk.

No model hub is reachable from where these were written: the shapes were checked against
copies of the configs in public code and documents (test fixtures, planners, converted
repositories). Every value found: qwen2, qwen3, granitemoe, smollm3, qwen3moe (whose
``intermediate_size`` was 6144 here, 5472 in three copies; no layer of it is dense, so
neither prediction moved). All but one: gemma3 (``max_position_embeddings`` only in the -pt
config), exaone (``rope_theta`` not found). From a sibling's config only: gemma2 (the base
model's), olmoe (the base and 0125-Instruct), internlm2 (internlm2.5-7b-chat). Not found:
xverse (its model card gives the vocabulary and the context), HyperCLOVAX (its card gives
the context). That the predictions equal the measured bytes is the stronger check.

    write_shape_gguf("qwen2.5-3b.gguf", SHAPES["qwen2"])
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Shape:
    """A model's hyperparameters, as llama.cpp's GGUF keys need them."""

    arch: str
    source: str           # the published configuration this shape is read from
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    head_dim: int = 0     # 0: n_embd / n_head
    tied: bool = False    # no output.weight: the token embeddings are the output
    qkv_bias: bool = False
    qk_norm: str = ""     # "head": [head_dim] (qwen3, gemma3), "full": [n_embd] (olmoe)
    gemma_norms: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    sliding_window: int = 0
    rope_base: float = 10000.0
    extra: dict[str, Any] = field(default_factory=dict)  # more keys (without the architecture prefix)

    @property
    def hd(self) -> int:
        return self.head_dim or self.n_embd // self.n_head


#: the shapes of the validation table (benchmarks/device_validation.py), by architecture
SHAPES: dict[str, Shape] = {
    "qwen2": Shape("qwen2", "Qwen/Qwen2.5-3B-Instruct config.json", n_embd=2048, n_layer=36, n_head=16, n_head_kv=2,
                   n_ff=11008, n_vocab=151936, n_ctx_train=32768, tied=True, qkv_bias=True, rope_base=1e6),
    "qwen3": Shape("qwen3", "Qwen/Qwen3-4B config.json", n_embd=2560, n_layer=36, n_head=32, n_head_kv=8, n_ff=9728,
                   n_vocab=151936, n_ctx_train=40960, head_dim=128, tied=True, qk_norm="head", rope_base=1e6),
    "gemma3": Shape("gemma3", "google/gemma-3-1b-it config.json", n_embd=1152, n_layer=26, n_head=4, n_head_kv=1,
                    n_ff=6912, n_vocab=262144, n_ctx_train=32768, head_dim=256, tied=True, qk_norm="head",
                    gemma_norms=True, sliding_window=512, rope_base=1e6),
    "gemma2": Shape("gemma2", "google/gemma-2-2b-it config.json", n_embd=2304, n_layer=26, n_head=8, n_head_kv=4,
                    n_ff=9216, n_vocab=256000, n_ctx_train=8192, head_dim=256, tied=True, gemma_norms=True,
                    sliding_window=4096, extra={"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}),
    "olmoe": Shape("olmoe", "allenai/OLMoE-1B-7B-0924-Instruct config.json", n_embd=2048, n_layer=16, n_head=16,
                   n_head_kv=16, n_ff=1024, n_vocab=50304, n_ctx_train=4096, qk_norm="full", n_expert=64,
                   n_expert_used=8, n_ff_exp=1024),
    "qwen3moe": Shape("qwen3moe", "Qwen/Qwen3-Coder-30B-A3B-Instruct config.json", n_embd=2048, n_layer=48, n_head=32,
                      n_head_kv=4, n_ff=5472, n_vocab=151936, n_ctx_train=262144, head_dim=128, qk_norm="head",
                      n_expert=128, n_expert_used=8, n_ff_exp=768, rope_base=1e7),
    "phi3": Shape("phi3", "microsoft/Phi-3.5-mini-instruct config.json", n_embd=3072, n_layer=32, n_head=32,
                  n_head_kv=32, n_ff=8192, n_vocab=32064, n_ctx_train=4096, fused_qkv=True, fused_gate_up=True),
    "internlm2": Shape("internlm2", "internlm/internlm2-base-7b config.json", n_embd=4096, n_layer=32, n_head=32,
                       n_head_kv=8, n_ff=14336, n_vocab=92544, n_ctx_train=32768, rope_base=1e6),
    "granitemoe": Shape("granitemoe", "ibm-granite/granite-3.1-3b-a800m-instruct config.json", n_embd=1536,
                        n_layer=32, n_head=24, n_head_kv=8, n_ff=512, n_vocab=49155, n_ctx_train=131072, tied=True,
                        n_expert=40, n_expert_used=8, n_ff_exp=512, rope_base=1e7,
                        extra={"embedding_scale": 12.0, "residual_scale": 0.22, "attention.scale": 0.015625,
                               "logit_scale": 6.0}),
    "exaone": Shape("exaone", "LGAI-EXAONE/EXAONE-3.5-7.8B-Instruct config.json", n_embd=4096, n_layer=32,
                    n_head=32, n_head_kv=8, n_ff=14336, n_vocab=102400, n_ctx_train=32768, rope_base=1e6),
    "xverse": Shape("xverse", "xverse/XVERSE-7B-Chat config.json", n_embd=4096, n_layer=32, n_head=32, n_head_kv=32,
                    n_ff=11008, n_vocab=100534, n_ctx_train=8192),
    "smollm3": Shape("smollm3", "HuggingFaceTB/SmolLM3-3B config.json", n_embd=2048, n_layer=36, n_head=16,
                     n_head_kv=4, n_ff=11008, n_vocab=128256, n_ctx_train=65536, tied=True, rope_base=5e6),
    "llama": Shape("llama", "naver-hyperclovax/HyperCLOVAX-SEED-Text-Instruct-1.5B config.json", n_embd=2048,
                   n_layer=24, n_head=16, n_head_kv=8, n_ff=7168, n_vocab=110592, n_ctx_train=16384, tied=True),
    # for --fit against llama.cpp's own (benchmarks/rpc_validation.py): a dense model larger than the memory
    "llama3-70b": Shape("llama", "meta-llama/Meta-Llama-3-70B-Instruct config.json", n_embd=8192, n_layer=80,
                        n_head=64, n_head_kv=8, n_ff=28672, n_vocab=128256, n_ctx_train=8192, rope_base=5e5),
}


_Q = {"Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "Q8_0": 8, "Q5_0": 6, "Q5_1": 7, "F32": 0, "F16": 1}
_BLOCK = {"Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210), "Q8_0": (32, 34), "Q5_0": (32, 22),
          "Q5_1": (32, 24), "F32": (1, 4), "F16": (1, 2)}
_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def _more_bits(i: int, n: int) -> bool:
    """llama-quantize's ``use_more_bits``: the first and last eighth, and every third layer between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_type(name: str, ne0: int, il: int, shape: Shape) -> str:
    """The type ``llama-quantize ... Q4_K_M`` gives a tensor (1-D tensors and routers stay F32)."""
    if name.endswith("_norm.weight") or name.endswith(".bias") or "ffn_gate_inp" in name:
        return "F32"
    n = shape.n_layer
    if name == "output.weight" or (shape.tied and name == "token_embd.weight"):
        return "Q8_0" if ne0 % 256 else "Q6_K"
    if "attn_v." in name:
        t = "Q8_0" if shape.n_expert == 8 else "Q6_K" if _more_bits(il, n) else "Q4_K"
    elif "attn_k." in name and shape.n_expert == 8:
        t = "Q8_0"
    elif "ffn_down" in name:
        t = "Q6_K" if _more_bits(il, n) else "Q4_K"
    elif "attn_qkv" in name:
        t = "Q5_K"
    elif "attn_output" in name and shape.n_expert == 8:
        t = "Q5_K"
    else:
        t = "Q4_K"
    return _FALLBACK.get(t, t) if ne0 % 256 else t


def tensors(shape: Shape) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, ggml ne, layer) of every tensor llama.cpp loads for the shape (layer -1: none)."""
    e, hd, kv = shape.n_embd, shape.hd, shape.n_head_kv * shape.hd
    q = shape.n_head * hd
    out: list[tuple[str, tuple[int, ...], int]] = [("token_embd.weight", (e, shape.n_vocab), -1),
                                                   ("output_norm.weight", (e,), -1)]
    if not shape.tied:
        out.append(("output.weight", (e, shape.n_vocab), -1))
    for il in range(shape.n_layer):
        b = f"blk.{il}."
        t = [(b + "attn_norm.weight", (e,))]
        if shape.fused_qkv:
            t.append((b + "attn_qkv.weight", (e, q + 2 * kv)))
        else:
            t += [(b + "attn_q.weight", (e, q)), (b + "attn_k.weight", (e, kv)), (b + "attn_v.weight", (e, kv))]
        if shape.qkv_bias:
            t += [(b + "attn_q.bias", (q,)), (b + "attn_k.bias", (kv,)), (b + "attn_v.bias", (kv,))]
        if shape.qk_norm == "head":
            t += [(b + "attn_q_norm.weight", (hd,)), (b + "attn_k_norm.weight", (hd,))]
        elif shape.qk_norm == "full":
            t += [(b + "attn_q_norm.weight", (q,)), (b + "attn_k_norm.weight", (kv,))]
        t.append((b + "attn_output.weight", (q, e)))
        if shape.gemma_norms:
            t.append((b + "post_attention_norm.weight", (e,)))
        t.append((b + "ffn_norm.weight", (e,)))
        if shape.n_expert:
            x, f = shape.n_expert, shape.n_ff_exp
            t += [(b + "ffn_gate_inp.weight", (e, x)), (b + "ffn_gate_exps.weight", (e, f, x)),
                  (b + "ffn_up_exps.weight", (e, f, x)), (b + "ffn_down_exps.weight", (f, e, x))]
        elif shape.fused_gate_up:
            t += [(b + "ffn_up.weight", (e, 2 * shape.n_ff)), (b + "ffn_down.weight", (shape.n_ff, e))]
        else:
            t += [(b + "ffn_gate.weight", (e, shape.n_ff)), (b + "ffn_up.weight", (e, shape.n_ff)),
                  (b + "ffn_down.weight", (shape.n_ff, e))]
        if shape.gemma_norms:
            t.append((b + "post_ffw_norm.weight", (e,)))
        out += [(name, ne, il) for name, ne in t]
    return out


def write_shape_gguf(path: str | os.PathLike[str], shape: Shape) -> int:
    """Write the shape as a GGUF whose data is a hole; returns the file's size."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter

    from vizalloc.capture.gguf_header import read_header

    a = shape.arch
    w = GGUFWriter(str(path), a)
    w.add_name(f"{a}-shape")
    w.add_context_length(shape.n_ctx_train)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_key_length(shape.hd)
    w.add_value_length(shape.hd)
    w.add_rope_dimension_count(shape.hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(shape.rope_base)
    w.add_vocab_size(shape.n_vocab)
    w.add_file_type(15)  # MOSTLY_Q4_K_M
    if shape.n_expert:
        w.add_expert_count(shape.n_expert)
        w.add_expert_used_count(shape.n_expert_used)
        w.add_expert_feed_forward_length(shape.n_ff_exp)
    if shape.sliding_window:
        w.add_sliding_window(shape.sliding_window)
    for key, value in shape.extra.items():
        w.add_float32(f"{a}.{key}", float(value))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    specials = ["<s>", "</s>"]
    toks = specials + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"tok{i}" for i in range(shape.n_vocab - len(toks))]
    w.add_token_list(toks)
    w.add_token_types([3] * len(specials) + [6] * 256 + [1] * (shape.n_vocab - len(specials) - 256))
    w.add_token_merges(["t o"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    for name, ne, il in tensors(shape):
        qtype = q4_k_m_type(name, ne[0], il, shape)
        block, size = _BLOCK[qtype]
        nbytes = int(np.prod(ne)) // block * size
        rows = list(reversed(ne))
        raw = GGMLQuantizationType(_Q[qtype])
        if qtype == "F32":
            w.add_tensor_info(name, rows, np.dtype(np.float32), nbytes, raw_dtype=raw)
        else:
            w.add_tensor_info(name, [*rows[:-1], rows[-1] // block * size], np.dtype(np.uint8), nbytes, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = read_header(path)
    with open(path, "r+b") as f:
        f.truncate(header.data_offset)
        f.truncate(header.data_end)
    return header.data_end
