"""Run the ggml differential check in this process: ``python -m tests.alloc.diff_main N``.

Hypothesis draws N seeds (derandomized, so the run is repeatable); each seed is a random
graph program built and allocated in both ggml and vizalloc (``ggml_oracle``). Prints one
summary line and every difference; exits 1 if any graph differs.

``test_differential.py`` runs this in a fresh interpreter so that a ggml abort cannot
take the test session down. Two ways to abort ggml were found while building the
generator and are now avoided: binding a view whose root points into a compute buffer
that a re-plan freed (ggml_backend_view_init reads the freed buffer struct: undefined
behaviour, it aborted at random), and a reused plan whose leaf entry is too small for
the leaf now at that position (ggml does not check leaf entries and asserts in
ggml_backend_tensor_alloc; vizalloc raises AllocationError, and the run stops there).
"""

from __future__ import annotations

import sys

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.alloc.ggml_oracle import STATS, run_differential

_TRACE = bool(__import__("os").environ.get("VIZALLOC_DIFF_TRACE"))


def main(n_examples: int) -> int:
    seen: list[int] = []
    failures: list[tuple[int, list[str]]] = []

    @settings(max_examples=n_examples, derandomize=True, deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(min_value=0, max_value=2**31 - 1))
    def check(seed: int) -> None:
        seen.append(seed)
        if _TRACE:
            print("seed", seed, file=sys.stderr, flush=True)
        diffs = run_differential(seed)
        if diffs:
            failures.append((seed, diffs))

    check()
    distinct = len(set(seen))
    print(f"differential: {len(seen)} graphs run ({distinct} distinct seeds), {len(failures)} with differences")
    print(f"  allocations compared: {STATS['allocations']} (second graphs sharing tensors: {STATS['second_graph']}, "
          f"with several chunks: {STATS['chunked']}, refused by both: {STATS['refused_alike']}), "
          f"reserve_n_size compared: {STATS['reserve_n_size']}")
    print(f"  second allocations stopped where ggml would abort on an unchecked leaf record "
          f"(vizalloc raises AllocationError): {STATS['leaf_overflow']}")
    for seed, diffs in failures[:20]:
        print(f"seed {seed}: {len(diffs)} differences")
        for d in diffs[:10]:
            print("   ", d)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
