"""A capture that cannot be imported to its end, or that holds nothing, is never clean: the
trace says where and why the import stopped, `check` reports `incomplete-capture` and exits 1,
`summary` and `explain` say so first, and `vizalloc run` keeps the program's exit code."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from vizalloc.capture import import_capture
from vizalloc.capture import rawfile as rf
from vizalloc.capture.launch import capture_environment
from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, run
from tests.capture.fuzz import sealed
from tests.capture.test_bad_input import STATIC_GGML


def _capture(tmp_path: Path, program: str) -> Path:
    """The raw capture of a ggml-python program (one process)."""
    out = tmp_path / "cap"
    out.mkdir()
    subprocess.run([sys.executable, str(PROGRAMS / program)], env=capture_environment(str(out)), check=True,
                   capture_output=True, timeout=120)
    (capture,) = out.glob("capture.*.vzcap")
    return capture


def _without_first_tensor(data: bytes, name: bytes) -> bytes:
    """The capture's bytes with the first description of the tensor called ``name`` left out."""
    pos = rf.HEADER_SIZE
    while pos < len(data):
        kind, length = struct.unpack_from("<H2xI", data, pos)
        end = pos + 8 + length
        if kind == 10 and data[pos + 8 + 16 + 256:end].split(b"\0", 1)[0] == name:
            return sealed(data[:pos] + data[end:])  # the records after it framed again for their new places
        pos = end
    raise AssertionError(f"no tensor {name!r} in the capture")


def test_an_import_that_stops_says_where_and_check_fails(tmp_path: Path) -> None:
    capture = _capture(tmp_path, "ggml_python_add.py")
    cut = tmp_path / "cut.vzcap"
    cut.write_bytes(_without_first_tensor(capture.read_bytes(), b"b"))
    result = import_capture(cut, tmp_path / "t.vztrace")
    assert result.incomplete.startswith("the import stopped at record ")
    events = load(tmp_path / "t.vztrace").events
    (stop,) = [e for e in events if isinstance(e, ev.CaptureIncomplete)]
    # the graph's call names 'b' (a source of the add) without the capture having described it
    assert stop.call == "ggml_gallocr_alloc_graph" and 0 < stop.record < stop.n_records
    assert stop.missing.startswith("the description of the tensor at 0x")
    assert stop.tensor_name == "node_0" and "before describing it" in stop.reason
    check = run(["check", "t.vztrace"], tmp_path)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "incomplete-capture" in check.stdout and "-> ok" not in check.stdout
    summary = run(["summary", "t.vztrace"], tmp_path)
    assert summary.returncode == 0 and summary.stdout.startswith("INCOMPLETE TRACE: the import stopped at record")
    explain = run(["explain", "t.vztrace"], tmp_path)
    assert explain.returncode == 0 and explain.stdout.startswith("INCOMPLETE TRACE: the import stopped at record")
    # the untouched capture imports to its end and checks clean
    assert import_capture(capture, tmp_path / "whole.vztrace").incomplete == ""
    assert run(["check", "whole.vztrace"], tmp_path).returncode == 0


def test_a_trace_of_a_statically_linked_ggml_is_no_clean_bill(tmp_path: Path) -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on PATH: install gcc or set CC"
    (tmp_path / "static_ggml.c").write_text(STATIC_GGML)
    subprocess.run([cc, "-O1", "static_ggml.c", "-o", "static_ggml"], cwd=tmp_path, check=True)
    done = run(["run", "--check", "-o", "t.vztrace", "--", "./static_ggml"], tmp_path)
    assert done.returncode == 4, done.stderr  # the program's own exit code
    assert "INCOMPLETE: ./static_ggml has ggml linked in statically" in done.stderr
    assert "-> ok" not in done.stderr and "incomplete-capture" in done.stderr
    check = run(["check", "t.vztrace"], tmp_path)
    assert check.returncode == 1 and "1 incomplete-capture -> FAIL" in check.stdout, check.stdout


def test_run_check_on_a_program_without_ggml_fails(tmp_path: Path) -> None:
    done = run(["run", "--check", "-o", "t.vztrace", "--", sys.executable, "-c", "pass"], tmp_path)
    assert done.returncode == 1, done.stderr  # the program exited 0; the check found the trace empty
    assert "no ggml library was used" in done.stderr and "-> FAIL" in done.stderr


EXTENSION = """
#include <stddef.h>
/* an extension module with (a stand-in for) ggml linked into it: its calls bind inside it */
void *ggml_init(size_t n) { static char mem[64]; (void)n; return mem; }
int run(void) { return ggml_init(8) != NULL ? 41 : 0; }
"""


def test_ggml_linked_into_an_extension_is_named(tmp_path: Path) -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on PATH: install gcc or set CC"
    (tmp_path / "ext.c").write_text(EXTENSION)
    subprocess.run([cc, "-shared", "-fPIC", "ext.c", "-o", "ext.so"], cwd=tmp_path, check=True)
    code = f"import ctypes, sys; sys.exit(ctypes.CDLL({str(tmp_path / 'ext.so')!r}).run())"
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, "-c", code], tmp_path)
    assert done.returncode == 41, done.stderr
    said = (f"ggml is linked into {tmp_path / 'ext.so'} (it defines ggml_init itself), so its calls bind inside "
            "that object and none reached the capture")
    assert f"INCOMPLETE: {said}" in done.stderr and "no ggml library was used" not in done.stderr
    events = load(tmp_path / "t.vztrace").events
    (stop,) = [e for e in events if isinstance(e, ev.CaptureIncomplete)]
    assert stop.reason.startswith(said)
    assert run(["check", "t.vztrace"], tmp_path).returncode == 1


def test_ggml_loaded_but_its_allocator_never_called(tmp_path: Path) -> None:
    code = ("import ggml; ggml.ggml_free(ggml.ggml_init(ggml.ggml_init_params(mem_size=1024, mem_buffer=None, "
            "no_alloc=True)))")
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, "-c", code], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "INCOMPLETE: ggml's shared library " in done.stderr and "libggml-base.so was loaded, but the program " \
        "called none of its allocator, scheduler, buffer or compute functions" in done.stderr, done.stderr
    check = run(["check", "t.vztrace"], tmp_path)
    assert check.returncode == 1 and "incomplete-capture" in check.stdout
