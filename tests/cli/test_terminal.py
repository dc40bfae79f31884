"""Every command run in a real (pseudo-)terminal, as a user runs it.

The rest of the suite runs commands with pipes or captured streams, where ``isatty()`` is
False: the progress bars and the terminal-only paths of rich never ran there, and
``check``/``summary``/``diff`` crashed on every terminal (a ``None`` total formatted with
``:,``) while every test passed. Here stdin, stdout and stderr of a real ``vizalloc``
process are one pseudo-terminal, 160x50.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

import vizalloc

ROOT = Path(vizalloc.__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")

pytestmark = pytest.mark.skipif(not sys.platform.startswith(("linux", "darwin")), reason="needs POSIX ptys")


def in_terminal(args: list[str], cwd: Path, timeout: float = 120.0) -> tuple[int, str]:
    """Run ``python -m vizalloc ARGS`` with a pseudo-terminal as stdin, stdout and stderr;
    its exit code and everything it wrote (ANSI sequences removed, CRLF as LF)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES", "TERM", "CI")}
    env.update(TERM="xterm-256color", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "vizalloc", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=cwd, env=env, close_fds=True, start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal's other end has closed it
                break
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
            pytest.fail(f"vizalloc {' '.join(args)} did not finish within {timeout} s")
        code = proc.wait(timeout=30)
    finally:
        os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return code, _ANSI.sub("", text)


SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from vizalloc.runtime import Context, F32, BufferType, Graph, ops
    from vizalloc.runtime.alloc import alloc_ctx_tensors
    from vizalloc.runtime.memory import tensor_set

    ctx = Context(name="w")
    a = ctx.new_tensor_1d(F32, 256, name="a")
    b = ctx.new_tensor_1d(F32, 256, name="b")
    buf = alloc_ctx_tensors(ctx, BufferType("CPU"))
    tensor_set(a, np.ones(256, dtype=np.float32))
    g = Graph(); g.build_forward_expand(ops.add(ctx, a, b))
    print("script says hi")
    """
)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``vizalloc demo`` in a terminal; its traces serve the other commands."""
    d = tmp_path_factory.mktemp("pty")
    code, out = in_terminal(["demo", "--steps", "1", "--out-dir", str(d)], d)
    assert code == 0, out
    assert "CORRUPTED" in out and "safe" in out and "Traceback" not in out
    assert (d / "demo-none.vztrace").is_file() and (d / "demo-dup.vztrace").is_file()
    return d


def _no_traceback(out: str) -> None:
    assert "Traceback" not in out and "Error:" not in out.replace("ERROR:", ""), out


def test_check_in_a_terminal(demo_dir: Path) -> None:
    code, out = in_terminal(["check", "demo-none.vztrace"], demo_dir)
    _no_traceback(out)
    assert code == 1, out
    assert "==vizalloc== ERROR: stale-overlap" in out
    assert out.rstrip().endswith("-> FAIL")
    code, out = in_terminal(["check", "demo-dup.vztrace"], demo_dir)
    _no_traceback(out)
    assert code == 0 and out.rstrip().endswith("-> ok"), out


def test_summary_in_a_terminal(demo_dir: Path) -> None:
    code, out = in_terminal(["summary", "demo-none.vztrace"], demo_dir)
    _no_traceback(out)
    assert code == 0, out
    assert "plans and their quality" in out and "stale-overlap" in out and "buffers" in out


def test_diff_in_a_terminal(demo_dir: Path) -> None:
    code, out = in_terminal(["diff", "demo-none.vztrace", "demo-dup.vztrace"], demo_dir)
    _no_traceback(out)
    assert code == 1, out  # the traces differ
    assert "peak buffer bytes:" in out and "hazards only in A (removed)" in out
    code, out = in_terminal(["diff", "demo-dup.vztrace", "demo-dup.vztrace"], demo_dir)
    _no_traceback(out)
    assert code == 0 and "no differences" in out, out


def test_export_in_a_terminal(demo_dir: Path) -> None:
    target = demo_dir / "terminal.report.json"
    code, out = in_terminal(["export", "demo-none.vztrace", "--format", "json", "-o", target.name], demo_dir)
    _no_traceback(out)
    assert code == 0 and f"wrote {target.name}" in out, out
    assert json.loads(target.read_text())["hazards"]
    code, out = in_terminal(["export", "demo-none.vztrace", "--format", "json", "-o", target.name], demo_dir)
    assert code == 2 and "already exists" in out, out
    code, out = in_terminal(["export", "demo-none.vztrace", "--format", "layout", "-o", "-"], demo_dir)
    _no_traceback(out)
    assert code == 0 and "<svg" in out, out


def test_run_in_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    code, out = in_terminal(["run", "-o", "t.vztrace", "--check", "train.py"], tmp_path)
    _no_traceback(out)
    assert code == 0, out
    assert "script says hi" in out and "vizalloc run: traced train.py into t.vztrace" in out
    assert "vizalloc run --check:" in out
    assert (tmp_path / "t.vztrace").is_file()


def test_plan_in_a_terminal(tmp_path: Path) -> None:
    case = GOLDEN / "ew01_unary_chain_inplace.json"
    code, out = in_terminal(["plan", str(case)], tmp_path)
    _no_traceback(out)
    assert code == 0 and out.strip(), out
    code, out = in_terminal(["plan", str(case), "--check"], tmp_path)
    _no_traceback(out)
    assert code == 0, out


def test_bad_input_in_a_terminal_is_exit_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.vztrace").write_bytes(b"not a trace at all")
    for cmd in (["check", "bad.vztrace"], ["summary", "bad.vztrace"], ["diff", "bad.vztrace", "bad.vztrace"],
                ["export", "bad.vztrace", "--format", "json", "-o", "-"], ["check", "missing.vztrace"]):
        code, out = in_terminal(cmd, tmp_path)
        _no_traceback(out)
        assert code == 2, (cmd, out)
        assert f"vizalloc {cmd[0]}: error:" in out, (cmd, out)


def test_progress_bar_renders_with_an_unknown_total(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: the bar is drawn before the first update tells the total."""
    from vizalloc.cli.check import progress_bar

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    stream = os.fdopen(slave, "w", encoding="utf-8", buffering=1)
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        with progress_bar("model x") as update:
            assert update is not None
            update(1500, 0)
            update(1500, 3000)
        stream.flush()
        seen = b""
        while select.select([master], [], [], 0.2)[0]:
            seen += os.read(master, 65536)
    finally:
        stream.close()
        os.close(master)
    assert b"model x" in seen


def test_an_internal_error_is_exit_3_not_findings(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A bug (an exception that is not a VizallocError) must not read as "hazards found"."""
    from vizalloc.cli import INTERNAL_ERROR, main
    from vizalloc.cli import check

    def broken(path: str, label: str = "", command: str = "check") -> None:
        raise TypeError("unsupported format string passed to NoneType.__format__")

    monkeypatch.setattr(check, "analyse_file", broken)
    assert main(["check", "any.vztrace"]) == INTERNAL_ERROR == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "TypeError" in err
    assert "vizalloc check: internal error: this is a bug in vizalloc" in err
