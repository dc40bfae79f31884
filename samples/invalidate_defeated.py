#!/usr/bin/env python
"""The ggml maintainers' counter-example to "invalidate" (rejected ggml PR #999).

    python samples/invalidate_defeated.py --steps 6

"invalidate" lets the graph allocator clear the pointers of tensors it placed in its
*last binding* before binding the next graph. In the plain forward/backward loop that
is enough. But a program that reserves another graph in between (to size its buffer
for a worst case, say) starts a new plan, the allocator forgets its last binding, the
stale tensors are no longer recognised, and the corruption returns. Deep copies (dup),
clearing every compute tensor (clear) and a static buffer are not fooled.
Library code: vizalloc.scenarios.shared_tensors (reserve_between=True).
"""

from __future__ import annotations

import argparse
import sys

from vizalloc.scenarios import shared_tensors as st


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6, help="training steps (default: 6)")
    p.add_argument("--seed", type=int, default=0, help="seed of parameters and data (default: 0)")
    p.add_argument("--config", choices=sorted(st.CONFIGS), default="A", help="model configuration (default: A)")
    args = p.parse_args(argv)
    if args.steps < 1:
        print("error: --steps must be at least 1", file=sys.stderr)
        return 2
    rows = [("invalidate", False), ("invalidate", True), ("dup", True), ("clear", True)]
    print(f"{'strategy':<11} {'reserve between':<16} {'max |loss diff|':>15} {'max |update diff|':>17}  verdict")
    for strategy, between in rows:
        r = st.run(strategy, args.steps, args.seed, args.config, reserve_between=between)
        verdict = "CORRUPTED" if r.diverged() else "correct"
        print(f"{strategy:<11} {'yes' if between else 'no':<16} {r.max_abs_loss_diff:>15.3e} "
              f"{r.max_update_diff:>17.3e}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
