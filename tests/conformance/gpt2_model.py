"""A tiny GPT-2 with random weights in the format ggml's ``examples/gpt-2`` loads
(``gpt2_model_load`` in ``main-*.cpp``): the magic ``ggml``, six int32 hyper-parameters, the
vocabulary (count, then length-prefixed words), then every tensor as ``n_dims, name length,
type, ne[0..n_dims), name, data``. All float32 (ftype 0); the LM head is the token embedding,
as GPT-2's is when the file has no ``model/lm_head``."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

GGML_FILE_MAGIC = 0x67676D6C
WORDS = [chr(c) for c in range(ord("a"), ord("z") + 1)]


def write(path: Path, *, n_vocab: int = 128, n_ctx: int = 64, n_embd: int = 32, n_head: int = 2,
          n_layer: int = 2, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    vocab = (WORDS + [" " + w for w in WORDS] + [f"<{i}>" for i in range(n_vocab)])[:n_vocab]
    out = bytearray(struct.pack("<I6i", GGML_FILE_MAGIC, n_vocab, n_ctx, n_embd, n_head, n_layer, 0))
    out += struct.pack("<i", n_vocab)
    for word in vocab:
        data = word.encode()
        out += struct.pack("<I", len(data)) + data

    def tensor(name: str, *ne: int, ones: bool = False) -> None:
        nonlocal out
        values = np.ones(ne[::-1], np.float32) if ones else (rng.standard_normal(ne[::-1]) * 0.02).astype(np.float32)
        key = name.encode()
        out += struct.pack(f"<3i{len(ne)}i", len(ne), len(key), 0, *ne) + key + values.tobytes()

    tensor("model/ln_f/g", n_embd, ones=True)
    tensor("model/ln_f/b", n_embd)
    tensor("model/wte", n_embd, n_vocab)
    tensor("model/wpe", n_embd, n_ctx)
    for i in range(n_layer):
        h = f"model/h{i}"
        tensor(f"{h}/ln_1/g", n_embd, ones=True)
        tensor(f"{h}/ln_1/b", n_embd)
        tensor(f"{h}/ln_2/g", n_embd, ones=True)
        tensor(f"{h}/ln_2/b", n_embd)
        tensor(f"{h}/attn/c_attn/w", n_embd, 3 * n_embd)
        tensor(f"{h}/attn/c_attn/b", 3 * n_embd)
        tensor(f"{h}/attn/c_proj/w", n_embd, n_embd)
        tensor(f"{h}/attn/c_proj/b", n_embd)
        tensor(f"{h}/mlp/c_fc/w", n_embd, 4 * n_embd)
        tensor(f"{h}/mlp/c_fc/b", 4 * n_embd)
        tensor(f"{h}/mlp/c_proj/w", 4 * n_embd, n_embd)
        tensor(f"{h}/mlp/c_proj/b", n_embd)
    path.write_bytes(bytes(out))
    return path
