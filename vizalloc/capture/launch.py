"""Running a program under the capture: LD_PRELOAD the capture library, pass everything
else through, and hand back the program's exit status and its capture files.

The program keeps its stdin, stdout and stderr (the terminal, a pipe, a file) and its
environment, plus ``LD_PRELOAD`` (the capture library first), ``VIZALLOC_CAPTURE_DIR``
(where each process that touches ggml writes ``capture.<pid>.vzcap``) and, for Python
programs that call ggml through ctypes, the shim's directory first on ``PYTHONPATH``.
Ctrl-C reaches the program (it is in the terminal's foreground group); vizalloc waits for
it and then imports what was captured.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from vizalloc.capture.build import CaptureError, library_path

#: The ggml functions interpose.c defines (tests/capture checks this against the source).
HOOKED_SYMBOLS = (
    "ggml_gallocr_new", "ggml_gallocr_new_n", "ggml_gallocr_free", "ggml_gallocr_reserve",
    "ggml_gallocr_reserve_n", "ggml_gallocr_reserve_n_size", "ggml_gallocr_alloc_graph",
    "ggml_backend_sched_new", "ggml_backend_sched_free", "ggml_backend_sched_reserve",
    "ggml_backend_sched_reserve_size", "ggml_backend_sched_alloc_graph", "ggml_backend_sched_reset",
    "ggml_backend_sched_graph_compute", "ggml_backend_sched_graph_compute_async",
    "ggml_backend_graph_compute", "ggml_backend_graph_compute_async", "ggml_backend_buft_alloc_buffer",
    "ggml_backend_buffer_free", "ggml_backend_buffer_clear", "ggml_backend_buffer_set_usage",
    "ggml_backend_tensor_alloc", "ggml_backend_view_init", "ggml_backend_tensor_set", "ggml_backend_tensor_get",
    "ggml_backend_tensor_set_async", "ggml_backend_tensor_get_async", "ggml_backend_tensor_memset",
    "ggml_backend_tensor_copy", "ggml_graph_compute", "ggml_graph_compute_with_ctx",
    "ggml_backend_alloc_ctx_tensors_from_buft",
)


@dataclass(frozen=True)
class Finished:
    """How the program ended: its exit code (``128 + N`` when killed by signal N, as shells
    report it) and the capture files its processes wrote, the program's own first."""

    exit_code: int
    signal: int | None
    pid: int
    captures: list[Path]


def _shim_dir() -> str:
    return str(resources.files("vizalloc.capture").joinpath("pyshim"))


def capture_environment(capture_dir: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The program's environment: its own plus what the capture needs."""
    env = dict(os.environ if base is None else base)
    lib = str(library_path())
    env["LD_PRELOAD"] = lib + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env["VIZALLOC_CAPTURE_DIR"] = capture_dir
    env["VIZALLOC_CAPTURE_SYMBOLS"] = ",".join(HOOKED_SYMBOLS)
    env["PYTHONPATH"] = _shim_dir() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def resolve_program(program: str) -> str:
    """The program's path, or a CaptureError saying it cannot be run."""
    if os.sep in program:
        if not os.path.isfile(program):
            raise CaptureError(f"no program at {program!r}")
        if not os.access(program, os.X_OK):
            raise CaptureError(f"{program!r} is not executable (chmod +x it, or run it through its interpreter)")
        return program
    found = shutil.which(program)
    if found is None:
        raise CaptureError(f"no program {program!r} on PATH; give its path")
    return found


def run_program(argv: list[str], capture_dir: str, *, stdout: Any = None, stderr: Any = None) -> Finished:
    """Run ``argv`` under the capture and wait for it (``stdout``/``stderr``: where its
    output goes, as ``subprocess.Popen`` takes them; default: vizalloc's own)."""
    if not argv:
        raise CaptureError("no program to run: give one after --, e.g. vizalloc run -- ./llama-cli -m model.gguf")
    resolve_program(argv[0])
    env = capture_environment(capture_dir)
    # the terminal sends Ctrl-C to the program too; vizalloc waits for it instead of dying first
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr)
        code = proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    captures = sorted(Path(capture_dir).glob("capture.*.vzcap"), key=lambda p: capture_pid(p) != proc.pid)
    if code < 0:
        return Finished(128 - code, -code, proc.pid, captures)
    return Finished(code, None, proc.pid, captures)


def capture_pid(path: Path) -> int:
    """The process id in a capture file's name (``capture.<pid>.vzcap``), or -1."""
    try:
        return int(path.name.split(".")[1])
    except (IndexError, ValueError):
        return -1
