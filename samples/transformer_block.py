#!/usr/bin/env python
"""One transformer layer split between a simulated device and the CPU by the scheduler.

    python samples/transformer_block.py
    python samples/transformer_block.py --sim-ops MUL_MAT --tokens 16
    python samples/transformer_block.py --parallel      # 4 copies of every split input
    python samples/transformer_block.py --device cuda   # a real GPU (cupy) instead of SIM

The weights live on the simulated device SIM, which runs only the ops given; the rest
falls back to the CPU. Prints the splits, the input copies the scheduler made
(<backend>#<tensor>#<copy>), the compute buffer of each backend, and how far the
result is from a CPU-only run and from numpy. Library code:
vizalloc.scenarios.transformer_block.
"""

from __future__ import annotations

import argparse
import sys

from vizalloc.errors import VizallocError
from vizalloc.scenarios import transformer_block as tb


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=32, help="model width (default: 32)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default: 4)")
    p.add_argument("--ff", type=int, default=64, help="feed-forward width (default: 64)")
    p.add_argument("--tokens", type=int, default=8, help="sequence length (default: 8)")
    p.add_argument("--sim-ops", default=",".join(tb.DEFAULT_SIM_OPS),
                   help=f"ops the simulated device runs (default: {','.join(tb.DEFAULT_SIM_OPS)})")
    p.add_argument("--parallel", action="store_true", help="pipeline parallelism (n_copies = 4)")
    p.add_argument("--device", choices=("sim", "cuda"), default="sim",
                   help="sim: the simulated device; cuda: CudaBackend(0), needs cupy and a GPU (default: sim)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and input (default: 0)")
    p.add_argument("--assignments", action="store_true",
                   help="also print every node's backend, as GGML_SCHED_DEBUG=2 does")
    args = p.parse_args(argv)
    try:
        cfg = tb.BlockConfig(args.d_model, args.heads, args.ff, args.tokens)
        r = tb.run(cfg, args.seed, [s.strip() for s in args.sim_ops.split(",") if s.strip()], parallel=args.parallel,
                   device=args.device)
    except (VizallocError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.assignments:
        print(r.assignments)
    print(f"{r.n_splits} splits:")
    for s in r.splits:
        inputs = f"  <- copies of {', '.join(s.inputs)}" if s.inputs else ""
        print(f"  #{s.index:<2} {s.backend:<4} {', '.join(s.nodes)}{inputs}")
    print(f"{len(r.copies)} input copies:")
    for c in r.copies:
        print(f"  {c.name:<40} {c.nbytes:>6} B  (of {c.source} -> {c.backend})")
    sizes = ", ".join(f"{k} {v} B" for k, v in r.buffer_nbytes.items())
    print(f"compute buffers: {sizes}; the same layer on the CPU alone: {r.cpu_only_buffer_nbytes} B; "
          f"weights on the device: {r.weights_nbytes} B")
    print(f"max |diff| vs CPU-only run: {r.max_abs_diff_cpu:.3g}; vs numpy: {r.max_abs_diff_numpy:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
