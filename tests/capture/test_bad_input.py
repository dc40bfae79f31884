"""What ``vizalloc run -- PROGRAM`` says and keeps when tracing cannot work or the program
dies: a statically linked ggml, a platform without LD_PRELOAD, a program killed by a
signal after (or before) it used ggml. Real processes throughout."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, VIZALLOC, run


# ggml's allocator compiled into the program itself, as linking a static libggml does
STATIC_GGML = r"""
#include <stdbool.h>
#include <stdio.h>
bool ggml_gallocr_alloc_graph(void *galloc, void *graph) { return galloc == graph; }
int main(void) {
    puts(ggml_gallocr_alloc_graph(NULL, NULL) ? "planned" : "refused");
    return 4;
}
"""


def notes(trace: Path) -> list[str]:
    return [e.note for e in load(trace).events if isinstance(e, ev.ProcessCaptured)]


@pytest.mark.parametrize("at", [(1 << 22) - 5, (1 << 22) - 13, 1 << 22, 100])
def test_ggml_s_name_is_found_wherever_it_lies_in_the_file(tmp_path: Path, at: int) -> None:
    # the file is read 4 MiB at a time: a name across that boundary is found too
    from vizalloc.capture import static_ggml

    program = tmp_path / "prog"
    program.write_bytes(b"\0" * at + b"ggml_gallocr_alloc_graph" + b"\0" * 64)
    assert static_ggml(str(program))
    program.write_bytes(b"\0" * at + b"ggml_galloc_" + b"\0" * 64)
    assert not static_ggml(str(program))


def test_a_statically_linked_ggml_is_named(tmp_path: Path) -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on PATH: install gcc or set CC"
    (tmp_path / "static_ggml.c").write_text(STATIC_GGML)
    subprocess.run([cc, "-O1", "static_ggml.c", "-o", "static_ggml"], cwd=tmp_path, check=True)
    done = run(["run", "-o", "t.vztrace", "--", "./static_ggml"], tmp_path)
    assert done.returncode == 4, done.stderr  # the program's own exit code
    assert done.stdout == "planned\n"          # its own stdout, its own (unseen) allocator
    message = ("./static_ggml has ggml linked in statically, so its calls cannot be seen from outside: vizalloc "
               "needs ggml as a shared library (build ggml / llama.cpp with -DBUILD_SHARED_LIBS=ON)")
    assert message in done.stderr
    assert notes(tmp_path / "t.vztrace") == [message]


@pytest.mark.parametrize(("platform", "name"), [("darwin", "macOS"), ("win32", "Windows"), ("cygwin", "Windows")])
def test_macos_and_windows_are_not_supported_yet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str], platform: str, name: str) -> None:
    from vizalloc.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "platform", platform)
    assert main(["run", "-o", "t.vztrace", "--", sys.executable, "-c", "print('never run')"]) == 2
    out = capsys.readouterr()
    assert f"tracing a real ggml program is not supported on {name} yet" in out.err
    assert "vizalloc run script.py" in out.err  # what still works there
    assert "never run" not in out.out and not (tmp_path / "t.vztrace").exists()


@pytest.mark.parametrize(("how", "sig"), [("abort", signal.SIGABRT), ("segv", signal.SIGSEGV),
                                          ("kill", signal.SIGKILL)])
def test_a_program_that_dies_leaves_the_trace_up_to_its_death(tmp_path: Path, how: str, sig: int) -> None:
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "crash_after_compute.py"), how],
               tmp_path)
    assert done.returncode == 128 + sig, done.stderr
    assert "out [0.0, 6.0, 12.0]" in done.stdout  # (x + x) * 3: it computed before it died
    assert f"ended (killed by signal {sig} ({signal.Signals(sig).name}), exit code {128 + sig})" in done.stderr
    events = load(tmp_path / "t.vztrace").events
    names = {e.tensor_id: e.name for e in events if isinstance(e, ev.TensorCreated)}
    # the plan, the binding and the compute happened before the end: all of it is there,
    # replayed without a difference
    assert [e for e in events if isinstance(e, ev.ReplayMismatch)] == []
    assert sum(isinstance(e, ev.BindingBegin) for e in events) == 1
    assert [names[e.tensor_id] for e in events if isinstance(e, ev.NodeCompute)][-1] == "out"
    assert [names[e.tensor_id] for e in events if isinstance(e, ev.TensorSet)] == ["a"]
    # every record made is in the file (a memory map), a SIGKILL's too: the result read after the compute
    assert [names[e.tensor_id] for e in events if isinstance(e, ev.TensorGet)] == ["out"]
    if sig == signal.SIGKILL:
        assert "SIGKILL reaches no handler: the trace holds every record the capture had made by then" in done.stderr


def test_a_program_killed_before_the_capture_wrote_anything(tmp_path: Path) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, "-c", code], tmp_path)
    assert done.returncode == 128 + signal.SIGKILL
    (note,) = notes(tmp_path / "t.vztrace")
    assert note.endswith("was killed by signal 9 before it called any ggml allocator, scheduler or buffer function")
    assert "never called ggml" not in done.stderr


def test_without_a_compiler_the_message_says_what_to_install(tmp_path: Path) -> None:
    """The capture library is built on first use; no compiler is a clear error (exit 2), and
    nothing else of vizalloc needs one."""
    env = dict(os.environ, CC=str(tmp_path / "no-such-cc"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("VIZALLOC_CAPTURE_LIB", None)
    done = subprocess.run([*VIZALLOC, "run", "-o", "t.vztrace", "--", sys.executable, "-c",
                           "print('ran')"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "ran" not in done.stdout  # the program is not started without its capture
    assert "needs a C compiler" in done.stderr and "apt install gcc" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    assert not (tmp_path / "t.vztrace").exists()
