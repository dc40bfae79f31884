#!/usr/bin/env python
"""Converting weights at load time: a graph into a temporary context, or a buffer type
that converts tensors as they are set. Prints the memory each one holds.

    python samples/weight_transform.py
    python samples/weight_transform.py --scale 4

Approach 1 loads the F32 originals (tagged INPUT), casts them to F16 by a graph whose
results (tagged OUTPUT) a dedicated graph allocator places in a temporary context, then
drops the originals. Approach 2, the one the ggml maintainers named, declares the weights
F16 in a buffer type that converts the F32 data while it is being set: only the final
bytes ever exist. Library code: vizalloc.scenarios.weight_transform.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from vizalloc.scenarios import weight_transform as wt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=int, default=1, help="multiply every weight dimension by this (default: 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights (default: 0)")
    args = p.parse_args(argv)
    if args.scale < 1:
        print("error: --scale must be at least 1", file=sys.stderr)
        return 2
    shapes = [(n, a * args.scale, b * args.scale) for n, a, b in wt.DEFAULT_SHAPES]
    results = [wt.run_graph_transform(shapes, args.seed), wt.run_converting_buffer(shapes, args.seed)]
    for r in results:
        print(f"== {r.approach}")
        for point in r.timeline:
            parts = ", ".join(f"{n} {b} B" for n, b in point.buffers)
            print(f"   {point.label:<40} {point.nbytes:>10} B   ({parts})")
        print(f"   before {r.before_nbytes} B, peak {r.peak_nbytes} B, after {r.after_nbytes} B; "
              f"max |diff| vs numpy float16: {r.max_abs_diff:g}")
    same = all(np.array_equal(results[0].weights[k], results[1].weights[k]) for k in results[0].weights)
    print(f"both approaches give identical F16 weights: {same}")
    print(f"peak memory: graph {results[0].peak_nbytes} B vs converting buffer {results[1].peak_nbytes} B "
          f"({results[0].peak_nbytes / results[1].peak_nbytes:.1f}x)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
