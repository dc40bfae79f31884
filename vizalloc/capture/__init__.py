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

import itertools
import os
import shlex
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vizalloc.capture.build import CaptureError, check_platform, library_path
from vizalloc.capture.launch import Finished, capture_pid, run_program
from vizalloc.capture.rawfile import Bye, CaptureFormatError, image_key, read_records
from vizalloc.capture.replay import CaptureImportError, ComputeBuffer, Importer, ImportResult
from vizalloc.errors import Interrupted

__all__ = [
    "CaptureError", "CaptureFormatError", "CaptureImportError", "ComputeBuffer", "ImportResult", "Traced", "import_capture",
    "library_path", "trace_program",
]


@dataclass
class Traced:
    """A traced program: how it ended and, per process that used ggml, its trace file;
    ``notes``: what the run had to do differently (a trace written to another name than
    asked for, a capture file refused or kept), one line each; ``refused``: how many
    captures could not be turned into a trace (each has its note)."""

    finished: Finished
    traces: list[tuple[Path, ImportResult]]
    notes: list[str] = field(default_factory=list)
    refused: int = 0


def import_capture(capture: str | os.PathLike[str], output: str | os.PathLike[str], *, program: str = "",
                   force: bool = False) -> ImportResult:
    """Replay one capture file into the trace ``output``. The capture is read only if it is a
    regular file (not a link, a FIFO, a device or a directory), and only as far as it
    reached when it was opened."""
    from vizalloc.files import check_new

    data = read_capture(capture)
    check_new(output, overwrite=force, flag="-f", other="use -o to choose another name")
    return _import(data, output, program=program, overwrite=force)


def read_capture(capture: str | os.PathLike[str]) -> bytes:
    """A capture file's bytes; a ``UsageError`` for anything that is not a regular file
    (a link to /dev/zero, a FIFO, a directory put where the capture goes)."""
    from vizalloc.files import read_regular

    return read_regular(capture, what="the capture file", follow=False)


def _import(data: bytes, output: str | os.PathLike[str], *, program: str, overwrite: bool) -> ImportResult:
    from vizalloc.trace.api import trace

    records, cut_at = read_records(data)
    # the replay runs after the program: every chunk compressed (a live trace compresses only
    # what costs the program little, and the replay's flushes come far faster than the program's)
    with trace(str(output), keep_events=False, overwrite=overwrite, compress_max_overhead=None):
        result = Importer(records, program=program, cut_at=cut_at).run()
    if cut_at is None and not any(isinstance(r, Bye) for r in records):
        result.notes.append("the capture has no end record: the process ended without the capture's exit (killed by "
                            "SIGKILL, _exit or exec), or the file was cut between two records; the trace holds what "
                            "was written until then")
    return result


class _Outputs:
    """The trace files of a run. The program's own (``-o``) is created, empty, before the
    program starts: a file the program makes at that path meanwhile is noticed (it is not
    the one vizalloc made) and the trace goes to a free name beside it instead; so does a
    trace whose default name is taken. A trace is never dropped for its name."""

    def __init__(self, output: str | os.PathLike[str] | None, force: bool) -> None:
        from vizalloc.files import create_new

        self.output, self.force = output, force
        self.claimed: tuple[int, int] | None = None
        if output is not None:
            with create_new(output, overwrite=force, flag="-f", other="use -o to choose another name") as f:
                st = os.fstat(f.fileno())
            self.claimed = (st.st_dev, st.st_ino)

    def ours(self, path: Path) -> bool:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == self.claimed

    def place(self, path: Path, claimed: bool) -> tuple[Path, bool, str]:
        """Where a trace meant for ``path`` goes, whether to overwrite what is there, and a
        note when that is not ``path``."""
        if claimed:
            if self.ours(path) and os.path.getsize(path) == 0:
                return path, True, ""
            why = (f"{path} was written by another process while the program ran (vizalloc had created it empty)"
                   if self.ours(path) else
                   f"{path} was replaced by another process while the program ran (vizalloc had created it)")
        else:
            if self.force or not os.path.lexists(path):
                return path, self.force, ""
            why = f"{path} already exists"
        for n in itertools.count(1):
            other = path.with_name(f"{path.stem}.{n}{path.suffix or '.vztrace'}")
            if not os.path.lexists(other):
                return other, False, f"{why}: the trace is in {other} instead"
        raise AssertionError("unreachable")

    def release(self) -> None:
        """The claimed file, still empty, when no trace went there (a run stopped early)."""
        if self.output is not None and self.claimed is not None and self.ours(Path(self.output)):
            if os.path.getsize(self.output) == 0:
                os.unlink(self.output)


def trace_program(argv: list[str], output: str | os.PathLike[str] | None = None, *, force: bool = False,
                  stdout: Any = None, stderr: Any = None, keep_interrupted: bool = False) -> Traced:
    """Run ``argv`` under the capture and write one trace per process that used ggml.

    ``output`` names the program's own trace (default ``vizalloc-<program>.<pid>.vztrace``);
    other processes that used ggml (a launcher's children) get ``<output stem>.<pid>.vztrace``.
    ``stdout``/``stderr``: open files the program's output goes to. When vizalloc itself is
    told to stop while the program runs (Ctrl-C, SIGTERM, SIGHUP: the program gets it too),
    ``Interrupted`` is raised once the program has ended, unless ``keep_interrupted``:
    then what it captured is imported as after any other end (``vizalloc run``).

    Every capture file is imported or, if it cannot be (not a regular file, damaged), kept:
    copied beside the trace, and named in ``Traced.notes``.
    """
    check_platform()
    library_path()  # build (or find) the library before the program starts
    outputs = _Outputs(output, force)
    done = False
    try:
        # mkdtemp: a folder only this user can enter (0700)
        with tempfile.TemporaryDirectory(prefix="vizalloc-capture-") as capture_dir:
            finished = run_program(list(argv), capture_dir, stdout=stdout, stderr=stderr)
            if finished.received and not keep_interrupted:
                raise Interrupted(finished.received[0])
            traced = Traced(finished, [])
            program = os.path.basename(argv[0])
            for i, capture in enumerate(finished.captures):
                pid, image = image_key(capture) or (-1, 0)
                name = f"{pid}.{image}" if image else f"{pid}"  # an exec'd image keeps the pid
                claimed = output is not None and i == 0 and pid == finished.pid
                if output is None:
                    wanted = Path(f"vizalloc-{program}.{name}.vztrace")
                elif claimed:
                    wanted = Path(output)
                else:
                    base = Path(output)
                    wanted = base.with_name(f"{base.stem}.{name}{base.suffix or '.vztrace'}")
                # the program's own first image is the command line run; the others name themselves
                own = i == 0 and pid == finished.pid and image == 0
                _import_one(traced, capture, wanted, claimed, outputs, shlex.join(argv) if own else "")
            if not traced.traces and not traced.refused:
                claimed = output is not None
                wanted = Path(output) if output is not None else Path(f"vizalloc-{program}.{finished.pid}.vztrace")
                path, overwrite, note = outputs.place(wanted, claimed)
                if note:
                    traced.notes.append(note)
                traced.traces.append((path, _no_ggml_trace(argv, finished, path, overwrite)))
            done = True
    finally:
        if not done:
            outputs.release()
    if output is not None and all(path != Path(output) for path, _ in traced.traces):
        outputs.release()
    return traced


def _import_one(traced: Traced, capture: Path, wanted: Path, claimed: bool, outputs: _Outputs,
                program: str) -> None:
    from vizalloc.errors import VizallocError

    try:
        data = read_capture(capture)
    except VizallocError as exc:
        traced.notes.append(f"{exc}: no trace for process {capture_pid(capture)} (something other than the capture "
                            "made it there)")
        traced.refused += 1
        return
    path, overwrite, note = outputs.place(wanted, claimed)
    try:
        result = _import(data, path, program=program, overwrite=overwrite)
    except VizallocError as exc:
        kept, _, _ = outputs.place(path.with_suffix(".vzcap"), False)
        from vizalloc.files import create_new

        with create_new(kept) as f:
            f.write(data)
        traced.notes.append(f"the capture of process {capture_pid(capture)} could not be imported: {exc}; the "
                            f"capture is kept in {kept}")
        traced.refused += 1
        return
    if note:
        traced.notes.append(note)
    traced.traces.append((path, result))


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


def _no_ggml_trace(argv: list[str], finished: Finished, path: Path, overwrite: bool) -> ImportResult:
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
        # the capture creates its file with its first record: a process killed before it leaves none
        note = (f"{argv[0]} was killed by signal {finished.signal} before it called any ggml allocator, scheduler or "
                "buffer function")
    else:
        note = f"{argv[0]} never called ggml's allocator, scheduler or buffer functions (no ggml library was used)"
    result.notes.append(note)
    result.incomplete = note
    check_new(path, overwrite=overwrite, flag="-f", other="use -o to choose another name")
    with trace(str(path), keep_events=False, overwrite=overwrite):
        recorder.emit(ev.ProcessCaptured, result.program, pid, "", "", "", note, loc=None)
        # a trace of nothing is no clean bill of health: check reports it (incomplete-capture)
        recorder.emit(ev.CaptureIncomplete, 0, 0, "", "", "every ggml call of the program", note, loc=None)
    return result
