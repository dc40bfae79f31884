"""A whisper model with random weights, in whisper.cpp's own ("ggml") model format.

No weights can be downloaded, and a conformance run needs none: what vizalloc checks (the
graphs whisper.cpp builds, where their tensors are placed, the compute buffers) depends on
the hyper-parameters alone. The format is what ``whisper_model_load`` in whisper.cpp's
``src/whisper.cpp`` (1.8.5) reads, all little-endian:

1. the magic ``GGML_FILE_MAGIC`` (0x67676d6c, "ggml") as a uint32;
2. eleven int32 hyper-parameters: n_vocab, n_audio_ctx, n_audio_state, n_audio_head,
   n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
   (0 all F32, 1 the large matrices F16); n_audio_state must equal n_text_state;
3. the mel filter bank: int32 n_mel, int32 n_fft, then n_mel * n_fft float32;
4. the vocabulary: int32 count, then per word a uint32 length and its bytes (the loader
   invents names for ids past the count, up to n_vocab: special tokens, timestamps);
5. the tensors until the end of the file, each: int32 n_dims, int32 name length, int32
   ggml type, n_dims int32 extents (innermost first), the name, the data. Every tensor the
   loader creates must appear once, with its shape and type (it refuses unknown names, wrong
   shapes and a partial set).

The default hyper-parameters are the smallest that keep whisper.cpp's fixed assumptions:
30 s windows (3,000 mel frames, so n_audio_ctx 1,500 after the stride-2 convolution), 80
mel bands, the English vocabulary size (51,864: the special tokens sit at fixed ids from
50,256 and the 1,501 timestamp tokens after them) and the usual n_text_ctx of 448; the
widths and depths are cut to 64 and one layer (the loader accepts any depth). The file is
about 7.5 MB and a transcription of a few seconds runs in about a second on 2 cores.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GGML_FILE_MAGIC = 0x67676D6C
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
#: the fixed id of the first special token (end of text) of whisper's vocabulary
TOKEN_EOT = 50256
SPACE = 220
N_FFT_BINS = 1 + 400 // 2  # WHISPER_N_FFT / 2 + 1


@dataclass(frozen=True)
class HParams:
    n_vocab: int = 51864
    n_audio_ctx: int = 1500
    n_audio_state: int = 64
    n_audio_head: int = 2
    n_audio_layer: int = 1
    n_text_ctx: int = 448
    n_text_state: int = 64
    n_text_head: int = 2
    n_text_layer: int = 1
    n_mels: int = 80
    ftype: int = 1  # GGML_FTYPE_MOSTLY_F16

    def fields(self) -> tuple[int, ...]:
        return (self.n_vocab, self.n_audio_ctx, self.n_audio_state, self.n_audio_head, self.n_audio_layer,
                self.n_text_ctx, self.n_text_state, self.n_text_head, self.n_text_layer, self.n_mels, self.ftype)


def tensors(h: HParams) -> list[tuple[str, int, tuple[int, ...]]]:
    """(name, ggml type, extents innermost first) of every tensor whisper.cpp's loader creates,
    in its order."""
    assert h.n_audio_state == h.n_text_state, "whisper.cpp asserts n_text_state == n_audio_state"
    w = GGML_TYPE_F16 if h.ftype == 1 else GGML_TYPE_F32  # wctx.wtype: the large matrices
    conv = w  # vtype: F16 unless the model is all F32
    f32 = GGML_TYPE_F32
    a, t = h.n_audio_state, h.n_text_state
    out: list[tuple[str, int, tuple[int, ...]]] = [
        ("encoder.positional_embedding", f32, (a, h.n_audio_ctx)),
        ("encoder.conv1.weight", conv, (3, h.n_mels, a)),
        ("encoder.conv1.bias", f32, (1, a)),
        ("encoder.conv2.weight", conv, (3, a, a)),
        ("encoder.conv2.bias", f32, (1, a)),
        ("encoder.ln_post.weight", f32, (a,)),
        ("encoder.ln_post.bias", f32, (a,)),
    ]

    def block(prefix: str, n: int, attn: str) -> list[tuple[str, int, tuple[int, ...]]]:
        return [
            (f"{prefix}.{attn}_ln.weight", f32, (n,)),
            (f"{prefix}.{attn}_ln.bias", f32, (n,)),
            (f"{prefix}.{attn}.query.weight", w, (n, n)),
            (f"{prefix}.{attn}.query.bias", f32, (n,)),
            (f"{prefix}.{attn}.key.weight", w, (n, n)),
            (f"{prefix}.{attn}.value.weight", w, (n, n)),
            (f"{prefix}.{attn}.value.bias", f32, (n,)),
            (f"{prefix}.{attn}.out.weight", w, (n, n)),
            (f"{prefix}.{attn}.out.bias", f32, (n,)),
        ]

    def mlp(prefix: str, n: int) -> list[tuple[str, int, tuple[int, ...]]]:
        return [
            (f"{prefix}.mlp_ln.weight", f32, (n,)),
            (f"{prefix}.mlp_ln.bias", f32, (n,)),
            (f"{prefix}.mlp.0.weight", w, (n, 4 * n)),
            (f"{prefix}.mlp.0.bias", f32, (4 * n,)),
            (f"{prefix}.mlp.2.weight", w, (4 * n, n)),
            (f"{prefix}.mlp.2.bias", f32, (n,)),
        ]

    for i in range(h.n_audio_layer):
        out += mlp(f"encoder.blocks.{i}", a) + block(f"encoder.blocks.{i}", a, "attn")
    out += [
        ("decoder.positional_embedding", f32, (t, h.n_text_ctx)),
        ("decoder.token_embedding.weight", w, (t, h.n_vocab)),
        ("decoder.ln.weight", f32, (t,)),
        ("decoder.ln.bias", f32, (t,)),
    ]
    for i in range(h.n_text_layer):
        out += (mlp(f"decoder.blocks.{i}", t) + block(f"decoder.blocks.{i}", t, "attn")
                + block(f"decoder.blocks.{i}", t, "cross_attn"))
    return out


def write_model(path: Path, h: HParams = HParams(), seed: int = 0) -> Path:
    """Write a whisper.cpp model with random weights (fixed by ``seed``) to ``path``.

    Layer-norm scales are 1 and biases 0, the other weights small normal values, so that
    every activation stays finite and the decoder's choices are deterministic."""
    rng = np.random.default_rng(seed)
    parts: list[bytes] = [struct.pack("<I", GGML_FILE_MAGIC), struct.pack("<11i", *h.fields())]
    filters = rng.uniform(0.0, 0.02, size=(h.n_mels, N_FFT_BINS)).astype("<f4")
    parts += [struct.pack("<ii", h.n_mels, N_FFT_BINS), filters.tobytes()]
    # the ordinary tokens get plain ASCII words, so that the transcript is readable text;
    # the loader names the special and timestamp tokens itself. The decoder looks up the lone
    # space by name (it suppresses a blank start): GPT-2's id 220 holds it, as in whisper's.
    words = [f" w{i}".encode("ascii") for i in range(TOKEN_EOT)]
    words[SPACE] = b" "
    parts.append(struct.pack("<i", len(words)))
    for word in words:
        parts += [struct.pack("<I", len(word)), word]
    for name, ggml_type, shape in tensors(h):
        count = int(np.prod(shape))
        if name.endswith("ln.weight") or name.endswith("ln_post.weight"):
            values = np.ones(count)
        elif name.endswith(".bias"):
            values = np.zeros(count)
        else:
            values = rng.normal(0.0, 0.05, size=count)
        data = values.astype("<f2" if ggml_type == GGML_TYPE_F16 else "<f4").tobytes()
        raw = name.encode("ascii")
        parts += [struct.pack("<iii", len(shape), len(raw), ggml_type), struct.pack(f"<{len(shape)}i", *shape), raw,
                  data]
    path.write_bytes(b"".join(parts))
    return path


if __name__ == "__main__":
    import sys

    print(write_model(Path(sys.argv[1] if len(sys.argv) > 1 else "whisper-random.bin")))
