"""Hostile names (buffer type, context, tensor) through every output: summary, check, diff,
plan, and the DOT, SVG, Perfetto and JSON exports. Nothing raw reaches a terminal, and a
10,000-character buffer-type name still makes a DOT file that Graphviz reads."""

from __future__ import annotations

import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from tests.builders import TraceBuilder
from vizalloc.cli import main
from vizalloc.runtime import F32, Context, Graph, ops, set_input
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.backends import CPUBackend, graph_compute
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_set
from vizalloc.trace import api
from vizalloc.trace.value import Trace, TraceHeader

OSC = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J"
BUFT = OSC + "B" * 10_000 + "\u202e" + CLEAR
CTX = "ctx" + OSC + "\u202egnp.exe" + "\x9b31m"
TENSOR = "w" + CLEAR + "\u202e[bold]x[/bold]\ud800"
_RAW = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}


def _raw(text: str) -> list[str]:
    return sorted({f"U+{ord(c):04X}" for c in text if c not in "\n\t" and unicodedata.category(c) in _RAW})


@pytest.fixture(scope="module")
def runtime_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "names.vztrace"
    with api.trace(path):
        buft = BufferType(BUFT, alignment=32)
        wctx = Context(name=CTX)
        w = wctx.new_tensor_1d(F32, 8, name=TENSOR)
        alloc_ctx_tensors(wctx, buft)
        tensor_set(w, np.ones(8))
        ctx = Context(name=CTX + "2")
        x = ctx.new_tensor_1d(F32, 8, name="x" + OSC)
        set_input(x)
        y = ops.relu(ctx, ops.add(ctx, x, w))
        g = Graph()
        g.build_forward_expand(y)
        GraphAllocator(buft).alloc_graph(g)
        tensor_set(x, np.arange(8.0))
        graph_compute(CPUBackend(), g)
    return path


@pytest.fixture(scope="module")
def hazard_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tb = TraceBuilder()
    a, b, g, _ = tb.bound_relu(TENSOR)
    tb.compute(g, [(b, [a])])
    path = tmp_path_factory.mktemp("hostile") / "hazard.vztrace"
    api.save(Trace(TraceHeader.new(), tuple(tb.events)), path)
    return path


@pytest.mark.parametrize("argv", [
    ["summary", "{r}"], ["check", "{h}"], ["check", "{r}"], ["diff", "{r}", "{h}"], ["summary", "{h}"],
])
def test_terminal_output_is_inert(argv: list[str], runtime_trace: Path, hazard_trace: Path,
                                  capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    main([a.format(r=runtime_trace, h=hazard_trace) for a in argv])
    out, err = capsys.readouterr()
    assert _raw(out + err) == []
    assert out.strip()


def test_summary_shows_buffer_type_names_escaped_and_cut(runtime_trace: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that Rich does not cut the cells itself
    assert main(["summary", str(runtime_trace)]) == 0
    out = capsys.readouterr().out
    assert "\\x1b]0;owned\\x07BBBB" in out   # the buffer type's OSC, shown as text
    assert "B" * 400 not in out                # the 10,000-character name is cut


@pytest.mark.parametrize("fmt", ["dot", "svg", "perfetto", "json", "layout"])
def test_exports_stay_valid_and_inert(fmt: str, runtime_trace: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"out.{fmt}"
    assert main(["export", str(runtime_trace), "--format", fmt, "-o", str(out)]) == 0
    capsys.readouterr()
    files = sorted(tmp_path.iterdir())
    assert files
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert _raw(text) == [], f.name
        assert "\x1b" not in text and "\u202e" not in text
        if f.suffix == ".dot":
            _check_dot(text, f)


def _check_dot(text: str, path: Path) -> None:
    # Graphviz refuses a quoted string or an HTML text run over 16,384 bytes
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', text):
        assert len(m.group(1).encode()) < 16_384
    for run in re.split(r"<[^<>]*>", text):
        assert len(run.encode()) < 16_384
    if shutil.which("dot"):
        r = subprocess.run(["dot", "-Tsvg", str(path)], capture_output=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr.decode(errors="replace")[:500]


def test_plan_names_and_description_are_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("NO_COLOR", "1")
    golden = Path(__file__).resolve().parents[1] / "data" / "golden" / "ew03_parent_is_output.json"
    data = json.loads(golden.read_text())
    data["description"] = OSC + CLEAR + "\u202e"
    data["name"] = CTX
    for t in data["tensors"]:
        t["name"] = TENSOR
    path = tmp_path / "case.json"
    path.write_text(json.dumps(data))
    for mode in ([], ["--check"]):
        main(["plan", str(path), *mode])
        out, err = capsys.readouterr()
        assert _raw(out + err) == []
        assert "\\x1b]0;owned\\x07" in out
