"""Differential test against real ggml (ggml-python 0.0.45): random graphs built in both
runtimes get identical offsets, chunks and buffer sizes.

Each example is a seed for a random program (mixed ops including views, reshapes,
permutes, transposes, in-place API ops, copies into fresh destinations, input/output
flags; 1-3 buffer types with alignments 16-256 and small max sizes that force chunks;
1-3 buffer ids, some sharing a buffer type; a second graph that shares tensors with the
first and is allocated by the same allocator). See ``ggml_oracle.py``.

The default run checks 2,000 seeded graphs (hypothesis, derandomized) in a fresh
interpreter, so a ggml abort cannot end the session (``diff_main.py`` says more).
Set ``VIZALLOC_DIFF_EXAMPLES=N`` to run N instead, e.g.
``VIZALLOC_DIFF_EXAMPLES=100000 python -m pytest tests/alloc/test_differential.py``
(about 3 ms per graph), or ``python -m tests.alloc.diff_main N`` directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ggml", reason="ggml-python 0.0.45 is the oracle (pip install ggml-python==0.0.45)")

from tests.alloc.ggml_oracle import random_program, run_differential  # noqa: E402

N_EXAMPLES = int(os.environ.get("VIZALLOC_DIFF_EXAMPLES", "2000"))
ROOT = Path(__file__).resolve().parents[2]


def test_random_graphs_match_ggml() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.alloc.diff_main", str(N_EXAMPLES)], cwd=ROOT, capture_output=True,
        text=True, timeout=max(600, N_EXAMPLES // 50),
    )
    out = proc.stdout + proc.stderr[-3000:]
    assert proc.returncode == 0, out
    assert f"differential: {N_EXAMPLES} graphs run" in proc.stdout, out
    assert ", 0 with differences" in proc.stdout, out


def test_a_few_graphs_in_process() -> None:
    # the same check in this process for a handful of fixed seeds (fast failure messages)
    for seed in (0, 1, 7, 42, 2024):
        assert run_differential(seed) == [], seed


def test_generator_covers_the_interesting_cases() -> None:
    # the differential run is only as good as what it generates: check the mix over 300 seeds
    kinds: set[str] = set()
    chunked = multi_slot = shared_slot = second_graph = 0
    for seed in range(300):
        p = random_program(seed)
        kinds.update(s[0] for s in p.steps1 + p.steps2)
        chunked += any(m is not None for _a, m in p.bufts)
        multi_slot += len(p.slots) > 1
        shared_slot += len(set(p.slots)) < len(p.slots)
        second_graph += bool(p.steps2)
    assert {"view", "reshape", "permute", "transpose", "inplace", "cpy", "input", "output"} <= kinds
    assert chunked > 50 and multi_slot > 50 and shared_slot > 30 and second_graph > 200
