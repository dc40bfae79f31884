"""A ggml whose struct ggml_tensor is not the layout vizalloc knows is refused, with the
version found, and nothing of it is read as garbage; the program still runs as before."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS


@pytest.fixture(scope="module")
def fake_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "the capture tests need a C compiler (apt install gcc)"
    out = tmp_path_factory.mktemp("fake")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out / "libggml-base.so"), str(PROGRAMS / "fake_ggml.c")],
                   check=True)
    subprocess.run([cc, "-o", str(out / "prog"), str(PROGRAMS / "fake_ggml_main.c"), f"-L{out}", "-lggml-base",
                    f"-Wl,-rpath,{out}"], check=True)
    return out / "prog"


def test_an_unknown_tensor_layout_is_refused_with_its_version(fake_program: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "vizalloc", "run", "-o", "t.vztrace", "--", str(fake_program)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 7, done.stderr  # the program's own exit code
    assert "placed: 0" in done.stdout         # and its own output, unchanged
    assert "ggml 9.9.9" in done.stderr and "struct ggml_tensor is 400 bytes" in done.stderr
    events = load(tmp_path / "t.vztrace").events
    captured = [e for e in events if isinstance(e, ev.ProcessCaptured)]
    assert captured and captured[0].ggml_version == "9.9.9" and "400 bytes" in captured[0].note
    assert captured[0].pid > 0 and "allocator calls replayed" not in done.stderr
    assert not [e for e in events if isinstance(e, (ev.TensorCreated, ev.TensorPlaced))]


def test_a_refused_layout_is_an_incomplete_capture(fake_program: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "vizalloc", "run", "--check", "-o", "t.vztrace", "--",
                           str(fake_program)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 7, done.stderr  # the program's own exit code, findings or not
    assert "INCOMPLETE: ggml 9.9.9" in done.stderr
    events = load(tmp_path / "t.vztrace").events
    (stop,) = [e for e in events if isinstance(e, ev.CaptureIncomplete)]
    assert "struct ggml_tensor is 400 bytes" in stop.reason and stop.missing.startswith("every call of the ggml at")
    check = subprocess.run([sys.executable, "-m", "vizalloc", "check", "t.vztrace"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 1 and "incomplete-capture" in check.stdout, check.stdout


def test_an_abort_passes_through_whatever_the_import_does(fake_program: Path, tmp_path: Path) -> None:
    import signal

    done = subprocess.run([sys.executable, "-m", "vizalloc", "run", "--check", "-o", "t.vztrace", "--",
                           str(fake_program), "abort"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 128 + signal.SIGABRT, done.stderr  # the program's own end, not the import's
    assert "placed: 0" in done.stdout and "INCOMPLETE: ggml 9.9.9" in done.stderr
