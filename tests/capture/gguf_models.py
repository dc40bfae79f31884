"""GGUF models written from scratch with the ``gguf`` package, for tests and benchmarks:
llama architecture, chosen hyperparameters, a placeholder vocabulary (specials, the 256
byte tokens, fillers) and Q4_0 matrices. With ``with_data=False`` the tensor data are a
sparse hole (a metadata-only model: megabytes on disk whatever its size on paper).

    write_llama_gguf("llama3-8b.gguf", **LLAMA3_8B)    # Llama-3-8B's shape, no weights
"""

from __future__ import annotations

import os
from pathlib import Path

#: Llama-3-8B's hyperparameters (Meta's config.json)
LLAMA3_8B = dict(n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, n_ff=14336, n_vocab=128256)


def write_llama_gguf(path: str | os.PathLike[str], *, n_embd: int, n_layer: int, n_head: int, n_head_kv: int,
                     n_ff: int, n_vocab: int, n_ctx_train: int = 8192, with_data: bool = False,
                     architecture: str = "llama") -> int:
    """Write the model; returns the file's size (the data's end). ``architecture`` names
    another architecture with llama's keys and tensors (for the "unknown architecture" case)."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

    q4 = GGMLQuantizationType.Q4_0
    f32 = GGMLQuantizationType.F32
    w = GGUFWriter(str(path), architecture)
    w.add_name(f"llama-shape-{n_layer}x{n_embd}")
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(2)  # mostly Q4_0
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tokens = specials + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"tok{i}" for i in range(n_vocab - len(tokens))]
    w.add_token_list(tokens)
    w.add_token_types([3] * len(specials) + [6] * 256 + [1] * (n_vocab - len(specials) - 256))
    w.add_token_merges(["t o"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    def info(name: str, ne: tuple[int, ...], qtype: GGMLQuantizationType) -> None:
        block, size = GGML_QUANT_SIZES[qtype]
        rows = list(reversed(ne))  # numpy order: the last dimension is ggml's ne[0]
        nbytes = int(np.prod(ne)) // block * size
        if qtype == f32:
            w.add_tensor_info(name, rows, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        else:
            w.add_tensor_info(name, [*rows[:-1], rows[-1] // block * size], np.dtype(np.uint8), nbytes,
                              raw_dtype=qtype)

    hd = n_embd // n_head
    info("token_embd.weight", (n_embd, n_vocab), q4)
    info("output_norm.weight", (n_embd,), f32)
    info("output.weight", (n_embd, n_vocab), q4)
    for i in range(n_layer):
        info(f"blk.{i}.attn_norm.weight", (n_embd,), f32)
        info(f"blk.{i}.attn_q.weight", (n_embd, n_embd), q4)
        info(f"blk.{i}.attn_k.weight", (n_embd, n_head_kv * hd), q4)
        info(f"blk.{i}.attn_v.weight", (n_embd, n_head_kv * hd), q4)
        info(f"blk.{i}.attn_output.weight", (n_embd, n_embd), q4)
        info(f"blk.{i}.ffn_norm.weight", (n_embd,), f32)
        info(f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), q4)
        info(f"blk.{i}.ffn_up.weight", (n_embd, n_ff), q4)
        info(f"blk.{i}.ffn_down.weight", (n_ff, n_embd), q4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    # the data section: where the last tensor ends, per the header just written
    from vizalloc.capture.gguf_header import read_header

    header = read_header(path)
    end = header.data_end
    with open(path, "r+b") as f:
        f.truncate(header.data_offset)
        if with_data:
            f.seek(header.data_offset)
            left = end - header.data_offset
            chunk = b"\0" * (1 << 20)
            while left > 0:
                n = min(left, len(chunk))
                f.write(chunk[:n])
                left -= n
        else:
            f.truncate(end)
    return end


def main() -> None:  # pragma: no cover - a helper for trying things by hand
    import sys

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "llama3-8b-shape.gguf")
    print(out, write_llama_gguf(out, **LLAMA3_8B))


if __name__ == "__main__":  # pragma: no cover
    main()
