#!/usr/bin/env python
"""The shared-tensor training loop with one fix strategy, loss per step beside the reference.

    python samples/shared_tensors.py                 # --fix none: watch the losses drift
    python samples/shared_tensors.py --fix dup       # ggml-opt's deep copy: identical losses
    python samples/shared_tensors.py --fix invalidate --reserve-between
    python samples/shared_tensors.py --driver opt --presize     # through ggml-opt's OptContext

A small MLP is trained with SGD "ggml style": the forward graph and the backward graph
share their forward tensors and are allocated in turn through one scheduler. The
reference column trains from the same parameters on the same batches with a brand-new
scheduler for every step. Library code: vizalloc.scenarios.shared_tensors.
"""

from __future__ import annotations

import argparse
import sys

from vizalloc.errors import VizallocError
from vizalloc.scenarios import shared_tensors as st


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fix", choices=st.STRATEGIES, default="none", help="fix strategy (default: none)")
    p.add_argument("--steps", type=int, default=8, help="training steps (default: 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of parameters and data (default: 0)")
    p.add_argument("--config", choices=sorted(st.CONFIGS), default="A",
                   help="A: 16->32->4 batch 8 (backward reallocates); B: 64->8->4 batch 32 (default: A)")
    p.add_argument("--reserve-between", action="store_true", help="reserve another graph between the switches")
    p.add_argument("--driver", choices=st.DRIVERS, default="graphs",
                   help="graphs: the golden seed loop; opt: through ggml-opt's OptContext (default: graphs)")
    p.add_argument("--presize", action="store_true", help="reserve the backward graph once before training")
    args = p.parse_args(argv)
    try:
        r = st.run(args.fix, args.steps, args.seed, args.config, reserve_between=args.reserve_between,
                   driver=args.driver, presize=args.presize)
    except VizallocError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"fix={r.strategy} driver={r.driver} config={args.config} steps={r.steps} seed={r.seed}"
          + (" presized" if r.presize else "")
          + (" (another graph reserved between switches)" if r.reserve_between else ""))
    print(f"{'step':>4}  {'loss':>10}  {'reference':>10}  {'|diff|':>9}  {'update |diff|':>13}")
    for rec in r.records:
        print(f"{rec.step:>4}  {rec.loss:>10.6f}  {rec.reference_loss:>10.6f}  "
              f"{abs(rec.loss - rec.reference_loss):>9.2e}  {rec.update_max_abs_diff:>13.2e}")
    verdict = "DIVERGED: wrong numbers from aliased memory" if r.diverged() else "matches the reference"
    print(f"max |loss diff| {r.max_abs_loss_diff:.3e}, max |update diff| {r.max_update_diff:.3e}, "
          f"compute buffer {r.compute_nbytes} B" + (f" + static {r.static_nbytes} B" if r.static_nbytes else ""))
    print(verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
