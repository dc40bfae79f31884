"""Running a program under the capture: LD_PRELOAD the capture library, pass everything
else through, and hand back the program's exit status and its capture files.

The program keeps its stdin, stdout and stderr (the terminal, a pipe, a file) and its
environment, plus ``LD_PRELOAD`` (the capture library first), ``VIZALLOC_CAPTURE_DIR``
(where each process image that touches ggml writes ``capture.<pid>.<image>.vzcap``, as
``rawfile`` says) and, for Python programs that call ggml through ctypes, the shim's
directory first on ``PYTHONPATH``.
Signals: the program is in vizalloc's process group, so a terminal's Ctrl-C and hang-up
reach it directly, as they reach vizalloc; SIGINT, SIGTERM and SIGHUP sent to vizalloc
itself (``kill``, ``timeout``) are passed on to it. Either way vizalloc waits for the
program to end and then imports what was captured: its exit code is the program's. The
program starts with the signal mask and the dispositions vizalloc was given (a signal
vizalloc was told to ignore, as under ``nohup``, stays ignored; the ones Python itself
ignores, SIGPIPE and SIGXFSZ, are reset), never with vizalloc's own.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from vizalloc.capture.build import CaptureError, library_path
from vizalloc.capture.rawfile import image_files, image_key
from vizalloc.errors import VizallocError

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
    report it) and the capture files its processes wrote, the program's own first;
    ``received``: the signals vizalloc itself got while the program ran, each passed on to it
    (``forwarded``) unless it came from the terminal, which sent it to the program too."""

    exit_code: int
    signal: int | None
    pid: int
    captures: list[Path]
    received: tuple[int, ...] = ()
    forwarded: tuple[int, ...] = ()


#: The signals that ask vizalloc to stop while a program runs: they are the program's to handle.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: ``si_code`` of a signal the kernel sent: on Linux, the terminal's (Ctrl-C, hang-up) to its
#: whole foreground process group, the program included
_SI_KERNEL = 0x80
#: what Python ignores at start-up and subprocess resets for its children
_PYTHON_IGNORES = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name))


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
    """Run ``argv`` under the capture and wait for it (``stdout``/``stderr``: open files the
    program's output goes to; default: vizalloc's own). SIGINT, SIGTERM and SIGHUP that
    vizalloc gets meanwhile are the program's (see the module docstring).

    Raises:
        CaptureError: no program, or one that cannot be executed (not found, not
            executable, not a format this machine runs, a missing interpreter).
    """
    if not argv:
        raise CaptureError("no program to run: give one after --, e.g. vizalloc run -- ./llama-cli -m model.gguf")
    path = resolve_program(argv[0])
    env = capture_environment(capture_dir)
    watched = [s for s in FORWARDED if signal.getsignal(s) is not signal.SIG_IGN]
    # Blocked in this thread and taken with sigtimedwait, which tells who sent each one (SIGCHLD
    # only wakes the wait when the program ends). Other threads (numpy's) do not block them:
    # one of those may take a signal while this thread is not inside sigtimedwait, and a
    # handler notes it then. (Python sets handlers in its main thread only: a run from another
    # thread has none, and such a signal acts there as it would without vizalloc.)
    blocked = {*watched, signal.SIGCHLD}
    received: list[int] = []
    forwarded: list[int] = []
    child: list[int] = []
    in_main = threading.current_thread() is threading.main_thread()
    handlers = {s: signal.signal(s, lambda number, frame: _pass_on(child, number, None, received, forwarded))
                for s in watched} if in_main else {}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        pid = _spawn(path, argv, env, stdout, stderr, mask=mask, defaults=(*watched, *_PYTHON_IGNORES))
        child.append(pid)
        status = _wait(pid, watched, received, forwarded)
    finally:
        # what arrived as the program ended is taken too, so that unblocking delivers nothing
        while (info := signal.sigtimedwait(blocked, 0)) is not None:
            if info.si_signo != signal.SIGCHLD:
                received.append(info.si_signo)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        child.clear()  # the program is reaped: its pid is no longer its own
        for s, handler in handlers.items():
            signal.signal(s, handler)
    code = os.waitstatus_to_exitcode(status)
    captures = image_files(capture_dir, pid)
    if code < 0:
        return Finished(128 - code, -code, pid, captures, tuple(received), tuple(forwarded))
    return Finished(code, None, pid, captures, tuple(received), tuple(forwarded))


def _spawn(path: str, argv: list[str], env: dict[str, str], stdout: Any, stderr: Any, *,
           mask: set[int | signal.Signals], defaults: tuple[int, ...]) -> int:
    # an open file, or a descriptor (subprocess.DEVNULL and PIPE are not: the program's output is not read here)
    actions = [(os.POSIX_SPAWN_DUP2, f if isinstance(f, int) else f.fileno(), fd)
               for fd, f in ((1, stdout), (2, stderr)) if f is not None]
    try:
        return os.posix_spawn(path, argv, env, file_actions=actions or None, setsigmask=mask, setsigdef=defaults)
    except OSError as exc:
        raise CaptureError(_not_executable(argv[0], path, exc)) from None


def _not_executable(name: str, path: str, exc: OSError) -> str:
    """Why ``path`` could not be executed, in one line, with what to do."""
    from vizalloc.text import inert

    shown = inert(name, 200)
    if exc.errno == errno.ENOEXEC:
        return (f"cannot run {shown}: it is not a program this machine can execute (Exec format error): a binary for "
                "another machine or operating system, a damaged file, or a script without a '#!' line (run a script "
                f"through its interpreter: vizalloc run -- sh {shown})")
    if exc.errno == errno.ENOENT:
        interpreter = _interpreter(path)
        what = (f"its interpreter {inert(interpreter, 200)!r} (its '#!' line) does not exist" if interpreter else
                "the loader it names (its ELF interpreter, e.g. /lib64/ld-linux-x86-64.so.2 of another system) "
                "or its interpreter does not exist")
        return f"cannot run {shown}: {what}; install it, or run the program through an interpreter that exists"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (f"cannot run {shown}: permission denied ({exc.strerror}); make it executable (chmod +x) on a file "
                "system that allows executing programs (not one mounted noexec)")
    return f"cannot run {shown}: {exc.strerror or exc}"


def _interpreter(path: str) -> str:
    """The interpreter a script's ``#!`` line names ('' if it has none), from its first bytes."""
    from vizalloc.files import read_regular

    try:
        head = read_regular(path, 512, what="the program")
    except VizallocError:
        return ""
    if not head.startswith(b"#!"):
        return ""
    words = head[2:].split(b"\n", 1)[0].split()
    return words[0].decode("utf-8", "replace") if words else ""


def _wait(pid: int, watched: list[signal.Signals], received: list[int], forwarded: list[int]) -> int:
    """The program's wait status; signals meanwhile are passed on to it."""
    waited = {*watched, signal.SIGCHLD}
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        info = signal.sigtimedwait(waited, 0.2)
        if info is not None and info.si_signo != signal.SIGCHLD:
            _pass_on([pid], info.si_signo, info.si_code == _SI_KERNEL, received, forwarded)


def _pass_on(child: list[int], number: int, from_kernel: bool | None, received: list[int],
             forwarded: list[int]) -> None:
    """Send signal ``number`` that vizalloc got on to the program, unless the terminal sent it
    to the program's process group too (passing it again would be a second Ctrl-C: llama-cli
    quits at a second one instead of stopping its generation). ``from_kernel``: whether the
    kernel sent it (``si_code``), None when a handler took it and cannot tell; then a
    SIGINT or SIGHUP while vizalloc holds the terminal's foreground is taken for the terminal's."""
    received.append(number)
    if not child:
        return
    pid = child[0]
    try:
        same_group = os.getpgid(pid) == os.getpgrp()
        if from_kernel is None:
            from_kernel = number in (signal.SIGINT, signal.SIGHUP) and _in_foreground()
        if from_kernel and same_group:
            return
        os.kill(pid, number)
        forwarded.append(number)
    except ProcessLookupError:  # it ended meanwhile: the next waitpid reaps it
        pass


def _in_foreground() -> bool:
    """Whether vizalloc's process group is its terminal's foreground group."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def capture_pid(path: Path) -> int:
    """The process id in a capture file's name (``capture.<pid>.<image>.vzcap``), or -1."""
    key = image_key(path)
    return -1 if key is None else key[0]
