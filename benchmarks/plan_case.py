"""How long and how much memory does ``vizalloc plan`` take on a large case file?

The case is an in-place chain: an input ``x`` and N unary nodes, each reading the one
before it, so the graph allocator puts every node on the same bytes. Every pair of its
tensors overlaps in memory (N²/2 pairs) while none is live with another, so a listing
that compares all pairs is quadratic while the answer (0 both_live pairs) is not. The
target for N = 100,000: at most 2 s and 300 MB per command.

Each command runs as its own process, as the ``vizalloc`` console script runs it (output
to /dev/null, ended by ``run_main``), three times; the figures are the best wall time, the
best CPU time (user + system, steadier on a busy machine) and the peak resident memory
(``ru_maxrss``). A calibration loop (``sum(range(10**6))``) is timed before each size:
on an idle 2-core machine it takes about 12 ms, and every figure grows with it.

    python benchmarks/plan_case.py                 # 1k, 10k, 100k nodes; tables, --json, --check
    python benchmarks/plan_case.py --sizes 2000    # one size
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TIME_TARGET_S = 2.0
MEMORY_TARGET_MB = 300


def inplace_chain(n: int) -> dict[str, Any]:
    """A case file (vizalloc-golden/1) with an input and ``n`` in-place unary nodes."""
    def tensor(i: int, name: str, op: str, src: list[int], flags_raw: int) -> dict[str, Any]:
        return {"id": i, "name": name, "type": "f32", "ne": [8, 1, 1, 1], "nb": [4, 32, 32, 32], "op": op,
                "unary_op": "RELU" if op == "UNARY" else None, "src": src, "view_src": None, "view_offs": 0,
                "flags": [], "flags_raw": flags_raw, "external": False}

    tensors = [tensor(0, "x", "NONE", [], 1)] + [tensor(i, f"relu_{i}", "UNARY", [i - 1], 16) for i in range(1, n + 1)]
    return {
        "format": "vizalloc-golden/1", "name": f"inplace_chain_{n}", "description": f"x and {n} in-place relu nodes",
        "driver": "ggml_gallocr", "buffer_types": [{"name": "CPU", "alignment": 32, "max_size": None}],
        "buffer_instances": [], "tensors": tensors,
        "steps": [{"index": 0, "action": "alloc_graph", "graph": {"nodes": list(range(1, n + 1)), "leafs": [0]},
                   "node_buffer_ids": None, "leaf_buffer_ids": None}],
    }


def run_plan(path: str, mode: list[str]) -> tuple[float, float, float, int]:
    """(wall s, cpu s, peak MB, exit code) of one ``vizalloc plan`` process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    code = f"import sys; sys.argv = ['vizalloc', 'plan', *{[path, *mode]!r}]; from vizalloc.cli import run_main; run_main()"
    with open(os.devnull, "w") as sink:
        rc = subprocess.run([sys.executable, "-c", code], stdout=sink, env=env, check=False).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 1024, rc


def calibration_ms() -> float:
    """Best time of ``sum(range(10**6))`` in ms: how fast this machine is right now."""
    import timeit

    return min(timeit.repeat("sum(range(10**6))", number=10, repeat=5)) / 10 * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    args = parser.parse_args()
    print(f"{'nodes':>8} {'mode':>8} {'wall s':>7} {'cpu s':>6} {'peak MB':>8}  target")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = os.path.join(tmp, f"chain{n}.json")
            with open(path, "w") as f:
                json.dump(inplace_chain(n), f)
            print(f"{'':>8} calibration {calibration_ms():.1f} ms")
            for mode in ([], ["--json"], ["--check"]):
                runs = [run_plan(path, mode) for _ in range(3)]
                wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
                peak, rc = max(r[2] for r in runs), max(r[3] for r in runs)
                # ru_maxrss of the children is the largest child so far: sizes run in increasing order
                ok = "" if n != 100_000 else ("met" if cpu <= TIME_TARGET_S and peak <= MEMORY_TARGET_MB else "MISSED")
                print(f"{n:>8} {' '.join(mode) or 'tables':>8} {wall:>7.2f} {cpu:>6.2f} {peak:>8.0f}  {ok}"
                      + (f"  (exit {rc})" if rc else ""))


if __name__ == "__main__":
    main()
