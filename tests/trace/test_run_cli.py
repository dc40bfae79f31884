"""``vizalloc run``: traces a script like ``memray run``, through ``vizalloc.cli.main``."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

import vizalloc
from vizalloc.cli import main
from vizalloc.cli.run import default_output
from vizalloc.trace import events as ev
from vizalloc.trace.api import read_header

SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    from vizalloc.runtime import Context, F32, BufferType, Graph, ops
    from vizalloc.runtime.alloc import alloc_ctx_tensors
    from vizalloc.runtime.memory import tensor_set
    import vizalloc

    ctx = Context(name="w")
    a = ctx.new_tensor_1d(F32, 256, name="a")
    b = ctx.new_tensor_1d(F32, 256, name="b")
    buf = alloc_ctx_tensors(ctx, BufferType("CPU"))
    tensor_set(a, np.ones(256, dtype=np.float32))
    g = Graph(); g.build_forward_expand(ops.add(ctx, a, b))
    extra = BufferType("CPU").alloc_buffer(4096)
    extra.free()
    vizalloc.mark("args=" + ",".join(sys.argv[1:]))
    print("script says hi", __name__)
    if "--fail" in sys.argv:
        raise RuntimeError("the script failed")
    if "--exit" in sys.argv:
        sys.exit(3)
    """
)


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_run_traces_the_script_and_summarizes(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = script.parent / "t.vztrace"
    assert main(["run", "-o", str(out_path), str(script), "x", "--flag"]) == 0
    captured = capsys.readouterr()
    assert "script says hi __main__" in captured.out
    assert f"into {out_path}" in captured.err
    assert "1 graphs" in captured.err and "2 buffers" in captured.err
    assert "peak 6.0 KiB of buffers allocated at once" in captured.err  # 2 x 1024 B of weights + 4096 B
    for cmd in ("summary", "check", "tui"):
        assert f"vizalloc {cmd} {out_path}" in captured.err
    trace = vizalloc.load(out_path)
    markers = [e.text for e in trace.events if isinstance(e, ev.Marker)]
    assert markers == ["args=x,--flag"]
    created = [e for e in trace.events if isinstance(e, ev.TensorCreated)]
    assert created[0].loc is not None and created[0].loc.file == str(script)


def test_default_name_and_refusal_to_overwrite(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = default_output(str(script))
    assert expected == f"vizalloc-train.{os.getpid()}.vztrace"
    assert main(["run", str(script)]) == 0
    assert Path(expected).exists()
    first = Path(expected).read_bytes()
    capsys.readouterr()
    assert main(["run", str(script)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "-f" in err
    assert Path(expected).read_bytes() == first  # untouched
    before = read_header(expected).created_unix_ns
    assert main(["run", "-f", str(script)]) == 0
    assert read_header(expected).created_unix_ns > before  # a new trace replaced it


def test_script_exception_leaves_a_readable_trace(script: Path, capsys: pytest.CaptureFixture[str],
                                                  recwarn: pytest.WarningsRecorder) -> None:
    out_path = script.parent / "fail.vztrace"
    assert main(["run", "-o", str(out_path), str(script), "--fail"]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError: the script failed" in err and "Traceback" in err
    assert 'train.py", line' in err and "runpy" not in err
    trace = vizalloc.load(out_path)
    assert not [w for w in recwarn.list if "end record" in str(w.message)]
    assert any(isinstance(e, ev.Marker) for e in trace.events)


def test_script_exit_code_is_kept(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "-o", "e.vztrace", str(script), "--exit"]) == 3
    assert vizalloc.load("e.vztrace").events


def test_missing_script_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "-o", str(tmp_path / "x.vztrace"), str(tmp_path / "nope.py")]) == 2
    assert "no script" in capsys.readouterr().err


def test_check_reports_after_the_run(script: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--check", "-o", "c.vztrace", str(script)]) == 0
    assert "vizalloc run --check:" in capsys.readouterr().err


def test_capture_values_flag_reaches_the_header(script: Path) -> None:
    assert main(["run", "--capture-values", "-o", "v.vztrace", str(script)]) == 0
    assert vizalloc.load("v.vztrace").header.capture_values
