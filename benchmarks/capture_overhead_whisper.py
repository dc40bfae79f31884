"""What the capture costs a whisper.cpp program (``pywhispercpp==1.5.1``, ggml 0.13.1).

    python benchmarks/capture_overhead_whisper.py            # 8 rounds, flash attention off and on
    python benchmarks/capture_overhead_whisper.py --quick    # 3 rounds

The program is the conformance suite's (``tests/conformance/whisper_transcribe.py``): load a
random-weight whisper model written by ``tests/conformance/whisper_model.py`` and transcribe
three seconds of a sine sweep. In each round it runs three ways, side by side, the order
rotating from round to round so that whatever the first run warms up (page cache, CPU
frequency) favours none:

* **plain**: the program alone;
* **captured**: the program with the capture library preloaded, as ``vizalloc run --`` starts
  it, writing its raw capture: the cost the program itself pays;
* **vizalloc run**: ``python -m vizalloc run -o T -- PROGRAM``, end to end: the captured
  program plus vizalloc's start, the import (the replay of every allocator call) and the
  trace written after the program ends.

Times are whole processes (``getrusage`` of the children: user + system CPU seconds; and wall
seconds), Python's start and imports included, as a user waits for them. The ratios to the
plain run are taken per round; the median and the range are printed. One compute thread by
default: with two, ggml's threads spin at barriers whenever the machine's other core is busy.
"""

from __future__ import annotations

import argparse
import os
import resource
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

from tests.conformance.whisper_model import write_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = [sys.executable, str(ROOT / "tests" / "conformance" / "whisper_transcribe.py")]
WAYS = ("plain", "captured", "vizalloc run")


@dataclass
class Timed:
    cpu: float
    wall: float
    stdout: str


def timed(cmd: list[str], env: dict[str, str]) -> Timed:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(cpu, wall, done.stdout)


def one(way: str, program: list[str], work: Path) -> tuple[Timed, int]:
    """One run of ``program`` the given way; the bytes of raw capture it wrote (0 if none)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with tempfile.TemporaryDirectory(dir=work) as d:
        if way == "plain":
            return timed(program, env), 0
        if way == "captured":
            t = timed(program, capture_environment(d, env))
            return t, sum(p.stat().st_size for p in Path(d).glob("capture.*.vzcap"))
        t = timed([sys.executable, "-m", "vizalloc", "run", "-o", os.path.join(d, "w.vztrace"), "--", *program], env)
        return t, os.path.getsize(os.path.join(d, "w.vztrace"))


def ratios(values: list[float]) -> str:
    rs = sorted(values)
    return f"median {statistics.median(rs):.3f}x (range {rs[0]:.3f}-{rs[-1]:.3f})"


def overhead(model: Path, flash_attn: str, args: argparse.Namespace, work: Path) -> None:
    program = [*PROGRAM, str(model), "--flash-attn", flash_attn, "--threads", str(args.threads),
               "--seconds", str(args.seconds)]
    runs: dict[str, list[Timed]] = {w: [] for w in WAYS}
    sizes: dict[str, int] = {}
    for i in range(args.rounds):
        order = WAYS[i % 3:] + WAYS[:i % 3]
        for way in order:
            t, size = one(way, program, work)
            runs[way].append(t)
            sizes[way] = size
        p, c, r = (runs[w][-1] for w in WAYS)
        if not p.stdout == c.stdout == r.stdout:
            raise SystemExit(f"the transcripts differ:\n{p.stdout}\n{c.stdout}\n{r.stdout}")
        print(f"  round {i + 1} ({', '.join(order)}): plain {p.cpu:.2f} s CPU / {p.wall:.2f} s wall | captured "
              f"{c.cpu:.2f} / {c.wall:.2f} | vizalloc run {r.cpu:.2f} / {r.wall:.2f}", flush=True)
    plain = runs["plain"]
    print(f"\nflash attention {flash_attn}, {args.rounds} rounds, {args.threads} thread(s), {args.seconds:g} s of audio "
          f"(plain: median {statistics.median(t.cpu for t in plain):.2f} s CPU, "
          f"{statistics.median(t.wall for t in plain):.2f} s wall):")
    for way in WAYS[1:]:
        got = runs[way]
        print(f"  {way + ' / plain:':<22} CPU  {ratios([g.cpu / p.cpu for g, p in zip(got, plain)])}")
        print(f"  {'':<22} wall {ratios([g.wall / p.wall for g, p in zip(got, plain)])}")
    print(f"  raw capture {sizes['captured']:,} bytes; trace {sizes['vizalloc run']:,} bytes")


def describe(model: Path, flash_attn: str, work: Path) -> None:
    """What one captured run recorded."""
    program = [*PROGRAM, str(model), "--flash-attn", flash_attn]
    with tempfile.TemporaryDirectory(dir=work) as d:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        timed(program, capture_environment(d, env))
        (path,) = Path(d).glob("capture.*.vzcap")
        records, _ = rf.read_records(path.read_bytes())
    calls = sum(isinstance(r, rf.Call) for r in records)
    places = sum(isinstance(r, rf.Place) for r in records)
    print(f"  one captured run: {len(records):,} records ({calls:,} calls, {places:,} placements)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 8")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of synthetic audio")
    parser.add_argument("--flash-attn", choices=("on", "off", "both"), default="both")
    args = parser.parse_args()
    args.rounds = args.rounds or (3 if args.quick else 8)
    with tempfile.TemporaryDirectory(prefix="vizalloc-bench-whisper-") as d:
        work = Path(d)
        model = write_model(work / "whisper-random.bin")
        for flash_attn in (("off", "on") if args.flash_attn == "both" else (args.flash_attn,)):
            overhead(model, flash_attn, args, work)
            describe(model, flash_attn, work)


if __name__ == "__main__":
    main()
