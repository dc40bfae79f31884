"""Tracing real ggml programs: an unmodified process (C/C++, or Python driving ggml) is
observed from outside and turned into an ordinary ``.vztrace``.

Three steps, one module each:

* ``build`` / ``launch``: a small C library (``native/interpose.c``, compiled on first use)
  is preloaded into the program; it defines ggml's exported allocator, scheduler and
  buffer functions, records what each call saw and did, and forwards to the real one;
* ``rawfile`` / ``layout``: the record it writes, and ``struct ggml_tensor`` as bytes;
* ``replay``: the record replayed through vizalloc's own allocators, every offset compared
  with what the process did, emitted as trace events.

    vizalloc run -- ./llama-cli -m model.gguf -p hi -n 8
    vizalloc run -- python train_with_ggml_python.py

``trace_program`` is the whole thing as a function.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vizalloc.capture.build import CaptureError, check_platform, library_path
from vizalloc.capture.launch import Finished, capture_pid, run_program
from vizalloc.capture.rawfile import CaptureFormatError, read_records
from vizalloc.capture.replay import CaptureImportError, ComputeBuffer, Importer, ImportResult

__all__ = [
    "CaptureError", "CaptureFormatError", "CaptureImportError", "ComputeBuffer", "ImportResult", "Traced", "import_capture",
    "library_path", "trace_program",
]


@dataclass
class Traced:
    """A traced program: how it ended and, per process that used ggml, its trace file."""

    finished: Finished
    traces: list[tuple[Path, ImportResult]]


def import_capture(capture: str | os.PathLike[str], output: str | os.PathLike[str], *, program: str = "",
                   force: bool = False) -> ImportResult:
    """Replay one capture file into the trace ``output``."""
    from vizalloc.files import check_new
    from vizalloc.trace.api import trace

    data = Path(capture).read_bytes()
    records, cut_at = read_records(data)
    check_new(output, overwrite=force, flag="-f", other="use -o to choose another name")
    # the replay runs after the program: every chunk compressed (a live trace compresses only
    # what costs the program little, and the replay's flushes come far faster than the program's)
    with trace(str(output), keep_events=False, overwrite=force, compress_max_overhead=None):
        result = Importer(records, program=program, cut_at=cut_at).run()
    return result


def trace_program(argv: list[str], output: str | os.PathLike[str] | None = None, *, force: bool = False,
                  stdout: Any = None, stderr: Any = None) -> Traced:
    """Run ``argv`` under the capture and write one trace per process that used ggml.

    ``output`` names the program's own trace (default ``vizalloc-<program>.<pid>.vztrace``);
    other processes that used ggml (a launcher's children) get ``<output stem>.<pid>.vztrace``.
    ``stdout``/``stderr`` redirect the program's output (as ``subprocess.Popen`` takes them).
    """
    check_platform()
    library_path()  # build (or find) the library before the program starts
    with tempfile.TemporaryDirectory(prefix="vizalloc-capture-") as capture_dir:
        finished = run_program(list(argv), capture_dir, stdout=stdout, stderr=stderr)
        traces: list[tuple[Path, ImportResult]] = []
        program = os.path.basename(argv[0])
        for i, capture in enumerate(finished.captures):
            pid = capture_pid(capture)
            if output is None:
                path = Path(f"vizalloc-{program}.{pid}.vztrace")
            elif i == 0 and pid == finished.pid:
                path = Path(output)
            else:
                base = Path(output)
                path = base.with_name(f"{base.stem}.{pid}{base.suffix or '.vztrace'}")
            result = import_capture(capture, path, program=shlex.join(argv), force=force)
            traces.append((path, result))
        if not finished.captures:
            path = Path(output) if output is not None else Path(f"vizalloc-{program}.{finished.pid}.vztrace")
            traces.append((path, _no_ggml_trace(argv, finished, path, force)))
    return Traced(finished, traces)


def static_ggml(program: str) -> bool:
    """Whether ``program``'s file carries ggml's allocator (linked in statically, so its calls
    cannot be interposed): its symbol or string tables name ``ggml_gallocr_``."""
    names = (b"ggml_gallocr_", b"ggml_backend_sched_")
    keep = max(map(len, names)) - 1  # a name may straddle two reads: each read is searched with the last one's tail
    tail = b""
    try:
        with open(program, "rb") as f:
            while chunk := f.read(1 << 22):
                window = tail + chunk
                if any(name in window for name in names):
                    return True
                tail = window[-keep:]
    except OSError:
        return False
    return False


def _no_ggml_trace(argv: list[str], finished: Finished, path: Path, force: bool) -> ImportResult:
    """A trace that says the program never used a ggml vizalloc could see, and why."""
    from vizalloc.capture.launch import resolve_program
    from vizalloc.trace import events as ev
    from vizalloc.files import check_new
    from vizalloc.trace import recorder
    from vizalloc.trace.api import trace

    pid = finished.pid
    result = ImportResult(program=shlex.join(argv), pid=pid)
    if static_ggml(resolve_program(argv[0])):
        note = (f"{argv[0]} has ggml linked in statically, so its calls cannot be seen from outside: vizalloc needs "
                "ggml as a shared library (build ggml / llama.cpp with -DBUILD_SHARED_LIBS=ON)")
    elif finished.signal is not None:
        # the capture writes its file at its first flush; a process killed before it leaves none
        note = (f"{argv[0]} was killed by signal {finished.signal} before the capture wrote anything: it called no "
                "ggml allocator, scheduler or buffer function, or did so less than 100 ms before it died without a "
                "graph compute or plan ending")
    else:
        note = f"{argv[0]} never called ggml's allocator, scheduler or buffer functions (no ggml library was used)"
    result.notes.append(note)
    result.incomplete = note
    check_new(path, overwrite=force, flag="-f", other="use -o to choose another name")
    with trace(str(path), keep_events=False, overwrite=force):
        recorder.emit(ev.ProcessCaptured, result.program, pid, "", "", "", note, loc=None)
        # a trace of nothing is no clean bill of health: check reports it (incomplete-capture)
        recorder.emit(ev.CaptureIncomplete, 0, 0, "", "", "every ggml call of the program", note, loc=None)
    return result
