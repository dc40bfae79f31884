"""whisper.cpp, unmodified, under ``vizalloc run --``: ``pywhispercpp==1.5.1`` (whisper.cpp 1.8.5
with its own ggml 0.13.1, a prebuilt CPU wheel) transcribing three seconds of a sine sweep
with a random-weight model the test writes (``whisper_model.py``), flash attention on and off
(and with whisper.cpp's ``audio_ctx`` cut to 512). The three take about 15 s together on
2 cores, so none is marked slow.

Each setting is run twice, plainly and captured, as a user would (real processes, nothing
patched): the program's exit code and its output are the same; the capture replays every
call of ggml's allocator with 0 differences; each compute buffer whisper.cpp logs equals the
trace's; ``vizalloc check`` finds nothing.

whisper.cpp logs a compute buffer as ``whisper_sched_size`` (src/whisper.cpp): the buffer of
each backend of its scheduler (CPU only, here) plus the size of the scheduler's metadata
buffer, ``ggml_tensor_overhead() * WHISPER_MAX_NODES + ggml_graph_overhead()``, in MB of 10^6
bytes with two decimals. Both overheads are read from the very library the trace says the
process used (they depend on ``struct ggml_tensor`` and ggml's graph layout, so a literal
would be wrong for another build); ``WHISPER_MAX_NODES`` (4,096) is whisper.cpp's own constant,
not ggml's ``GGML_DEFAULT_GRAPH_SIZE`` (2,048), which would put every line 0.75 MB off.
"""

from __future__ import annotations

import ctypes
import math
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import VIZALLOC, capture_lib  # noqa: F401 - the session's capture library
from tests.conformance.whisper_model import GGML_TYPE_F16, HParams, tensors, write_model

PROGRAM = [sys.executable, str(Path(__file__).with_name("whisper_transcribe.py"))]
#: whisper.cpp 1.8.5's src/whisper.cpp: the node count of its graphs and of its scheduler's metadata
WHISPER_MAX_NODES = 4096
#: the graphs whisper.cpp plans when it creates its state, in the order it logs them
SCHEDULERS = ["conv", "encode", "cross", "decode"]

_LOGGED = re.compile(r"^whisper_init_state: compute buffer \((\w+)\) *= *([0-9.]+) MB$", re.M)
_FLASH = re.compile(r"^whisper_init_with_params_no_state: flash attn = (\d)$", re.M)
_CHECKED = re.compile(r"(\d[\d,]*) allocator calls replayed, (\d[\d,]*) placements checked: (\d+) replay difference")
_BUFFER_LINE = re.compile(r"^    (\S+) compute buffer: (\d[\d,]*) bytes .* planned by the replay, (.*)$", re.M)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run(cmd: list[str], cwd: Path) -> Run:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    return Run(done.returncode, done.stdout, done.stderr, time.perf_counter() - t0)


def logged_buffers(stderr: str) -> list[tuple[str, str]]:
    """whisper.cpp's own log of its compute buffers: (scheduler, MB as printed)."""
    return _LOGGED.findall(stderr)


def scheduler_metadata(ggml_base: str) -> int:
    """The bytes whisper.cpp adds to each compute buffer it logs (its scheduler's metadata
    buffer), computed by the ggml library at ``ggml_base``."""
    lib = ctypes.CDLL(ggml_base)
    for name in ("ggml_tensor_overhead", "ggml_graph_overhead"):
        getattr(lib, name).restype = ctypes.c_size_t
        getattr(lib, name).argtypes = []
    return int(lib.ggml_tensor_overhead()) * WHISPER_MAX_NODES + int(lib.ggml_graph_overhead())


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("whisper") / "whisper-random.bin")


@pytest.mark.parametrize(("flash_attn", "audio_ctx"), [
    ("on", 0),
    ("off", 0),
    # whisper.cpp's speed-up for short audio: the encoder, cross and decoder graphs are cut to
    # 512 audio positions, smaller than the worst case planned at creation, and computed in
    # the buffers planned then
    ("off", 512),
], ids=["flash_on", "flash_off", "flash_off-audio_ctx512"])
def test_whisper_cpp_is_traced_to_the_byte(tmp_path: Path, model: Path, flash_attn: str, audio_ctx: int) -> None:
    args = [str(model), "--flash-attn", flash_attn, "--audio-ctx", str(audio_ctx)]
    plain = run([*PROGRAM, *args], tmp_path)
    trace = tmp_path / "whisper.vztrace"
    captured = run([*VIZALLOC, "run", "-o", str(trace), "--", *PROGRAM, *args], tmp_path)

    # the program itself: the same exit code, the same transcript, the same log of its buffers
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert captured.returncode == plain.returncode, captured.stderr[-3000:]
    assert re.fullmatch(r"(\[\d+ -> \d+\] .+\n)+", plain.stdout), plain.stdout
    assert captured.stdout == plain.stdout
    assert _FLASH.findall(plain.stderr) == [{"on": "1", "off": "0"}[flash_attn]]
    logged = logged_buffers(plain.stderr)
    assert [s for s, _ in logged] == SCHEDULERS, plain.stderr[-3000:]
    assert logged_buffers(captured.stderr) == logged

    # the capture: all of it imported, ggml's version named, every placement replayed
    events = load(trace).events
    assert [e for e in events if type(e).__name__ == "CaptureIncomplete"] == []
    (process,) = [e for e in events if isinstance(e, ev.ProcessCaptured)]
    assert process.ggml_version == "0.13.1" and "pywhispercpp" in process.ggml_path
    assert [e for e in events if isinstance(e, ev.ReplayMismatch)] == []
    calls, checked, differences = _CHECKED.search(captured.stderr).groups()  # type: ignore[union-attr]
    n_calls, n_checked = int(calls.replace(",", "")), int(checked.replace(",", ""))
    assert differences == "0"
    # one plan per scheduler at creation, then a binding for every graph the transcription computes
    assert n_calls >= len(SCHEDULERS) + 2
    largest = max(e.n_nodes for e in events if isinstance(e, ev.PlanBegin))
    assert n_checked > 2 * largest > 100

    # each compute buffer: the replay's plan, the process's own buffer, whisper.cpp's log
    planned = [e.nbytes for e in events if isinstance(e, ev.BufferAllocated) and e.usage == "compute"]
    assert len(planned) == len(SCHEDULERS)
    reported = [(buft, int(n.replace(",", "")), real) for buft, n, real in _BUFFER_LINE.findall(captured.stderr)]
    assert reported == [("CPU", n, "the same as the process allocated") for n in planned], captured.stderr[-3000:]
    meta = scheduler_metadata(process.ggml_path)
    assert [(s, f"{(n + meta) / 1e6:.2f}") for s, n in zip(SCHEDULERS, planned)] == logged

    # and nothing to report
    check = run([*VIZALLOC, "check", str(trace)], tmp_path)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert re.search(r" 0 hazards -> ok$", check.stdout.strip()), check.stdout
    print(f"\nwhisper.cpp, flash attention {flash_attn}, audio_ctx {audio_ctx}: {n_calls} calls replayed, {n_checked:,} placements "
          f"checked, 0 differences; buffers {[f'{n:,}' for n in planned]} + {meta:,} = log {[mb for _, mb in logged]} "
          f"MB; plain {plain.seconds:.1f} s, captured {captured.seconds:.1f} s")


def test_the_model_is_whisper_cpps_smallest(tmp_path: Path, model: Path) -> None:
    """The written model loads as what it says: the hyper-parameters whisper.cpp reads back
    are the writer's, every tensor is loaded, and none is missing."""
    done = run([*PROGRAM, str(model), "--flash-attn", "off", "--seconds", "1"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    read = dict(re.findall(r"^whisper_model_load: (n_\w+) *= (\d+)$", done.stderr, re.M))
    h = HParams()
    assert {k: int(v) for k, v in read.items() if k != "n_langs"} == {
        k: getattr(h, k) for k in h.__dataclass_fields__ if k.startswith("n_")}
    assert "not all tensors loaded" not in done.stderr and "no tensors loaded" not in done.stderr
    data = sum(math.prod(shape) * (2 if ggml_type == GGML_TYPE_F16 else 4) for _, ggml_type, shape in tensors(h))
    assert f"model size    = {data / 1e6:7.2f} MB" in done.stderr, done.stderr[-3000:]
