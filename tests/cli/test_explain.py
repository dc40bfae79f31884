"""vizalloc explain TRACE: tables, --json (docs/explain-schema.md), -o picture, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vizalloc.analysis.explain import SCHEMA
from vizalloc.cli import main
from vizalloc.trace import api
from vizalloc.trace.api import Trace, TraceHeader

from tests.analysis.test_explain import N_HEAD, N_KV, N_TOKENS, attention_trace
from tests.builders import TraceBuilder


@pytest.fixture(scope="module")
def attention(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("explain") / "attention.vztrace"
    api.save(Trace(TraceHeader.new(), tuple(attention_trace().events)), path)
    return path


def test_tables_name_the_deciding_group(attention: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["explain", str(attention)]) == 0
    out = capsys.readouterr().out
    assert "CPU compute buffer" in out and "lower bound" in out and "greedy by size" in out
    assert "kq-*" in out and f"{N_KV}×{N_TOKENS}×{N_HEAD} f32" in out
    assert "the K·Q scores of one layer (kq-" in " ".join(out.split())


def test_json_follows_the_schema(attention: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(attention), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == SCHEMA and doc["source"] == {"kind": "trace", "path": str(attention)}
    (buf,) = doc["buffers"]
    for key in ("title", "nbytes", "mib", "lower_bound_nbytes", "greedy_nbytes", "holes_nbytes", "groups",
                "deciding", "sentence", "peak_tensor", "plan_id", "galloc_id", "slot"):
        assert key in buf
    assert buf["holes_nbytes"] == buf["nbytes"] - buf["lower_bound_nbytes"]
    assert sum(g["nbytes"] for g in buf["groups"]) == buf["lower_bound_nbytes"]
    top = buf["groups"][buf["deciding"][0]]
    assert top["name"] == "kq-*" and top["shape"] == [N_KV, N_TOKENS, N_HEAD] and top["dims"][2] == "n_head"


def test_svg_has_a_bar_per_group_and_is_created_exclusively(attention: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "explain.svg"
    assert main(["explain", str(attention), "-o", str(out)]) == 0
    svg = out.read_text(encoding="utf-8")
    assert svg.startswith("<?xml") and svg.rstrip().endswith("</svg>")
    doc = json.loads(_json(attention, capsys))
    n_groups = len(doc["buffers"][0]["groups"])
    # one bar in the whole-buffer strip and one bar row per group
    assert svg.count("<rect") >= 2 * n_groups
    assert "kq-*" in svg and "K·Q scores" in svg
    # an existing file is kept without -f; a link is never written through
    assert main(["explain", str(attention), "-o", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    link = tmp_path / "link.svg"
    target = tmp_path / "target.txt"
    target.write_text("keep")
    os.symlink(target, link)
    assert main(["explain", str(attention), "-o", str(link)]) == 2
    assert target.read_text() == "keep"
    assert main(["explain", str(attention), "-o", str(out), "-f"]) == 0


def _json(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["explain", str(path), "--json"]) == 0
    return capsys.readouterr().out


def test_hostile_names_stay_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tb = TraceBuilder()
    evil = '<script>alert(1)</script>\x1b]0;owned\x07'
    t = tb.tensor(evil, 64)
    g = tb.graph([t])
    tb.plan(0, g, [(t, 0, 256)])
    path = tmp_path / "evil.vztrace"
    api.save(Trace(TraceHeader.new(), tuple(tb.events)), path)
    out = tmp_path / "evil.svg"
    assert main(["explain", str(path), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and "\\x1b]0;owned" in text
    svg = out.read_text(encoding="utf-8")
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "\x1b" not in svg


@pytest.mark.parametrize(("args", "message"), [
    (["explain", "{d}/missing.vztrace"], "no file at"),
    (["explain", "{d}"], "is a directory"),
    (["explain", "{d}/notgguf.gguf"], "is not a GGUF model file"),
    (["explain", "{d}/notes.md"], "is neither a vizalloc trace nor a GGUF model"),
    (["explain", "{trace}", "-o", "{d}/x.png"], "must end in .svg"),
    (["explain", "{trace}", "--metadata-only"], "apply to a GGUF model"),
    # settings of a llama.cpp run were silently ignored for a trace (issue 23)
    (["explain", "{trace}", "--ctx", "8192"], "--ctx: settings that apply to a GGUF model"),
    (["explain", "{trace}", "--ubatch", "64", "--flash-attn", "off"], "--ubatch, --flash-attn: settings that apply"),
    (["explain", "{trace}", "--ctx", "0"], "--ctx: settings that apply"),
    (["explain", "{trace}", "--batch", "4096"], "--batch: settings"),
    (["explain", "{trace}", "--program", "completion"], "--program: settings"),
    (["explain", "{trace}", "--outputs", "4"], "--outputs: settings"),
    (["explain", "{trace}", "--threads", "2"], "--threads: settings"),
    (["explain", "{trace}", "--device", "cpu"], "--device: settings"),
    (["explain", "{trace}", "--n-gpu-layers", "3"], "--n-gpu-layers: settings"),
    (["explain", "{trace}", "--top", "0"], "--top must be 1 or more"),
])
def test_bad_input_exits_2_with_one_line(args: list[str], message: str, attention: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notgguf.gguf").write_bytes(b"<html>404</html>")
    (tmp_path / "notes.md").write_text("# a README\n")
    argv = [a.format(d=tmp_path, trace=attention) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_trace_without_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.vztrace"
    tb = TraceBuilder()
    tb.tensor("x", 16)
    api.save(Trace(TraceHeader.new(), tuple(tb.events)), path)
    assert main(["explain", str(path)]) == 0
    assert "no compute buffer to explain" in capsys.readouterr().out


def test_a_small_buffer_is_not_zero_mib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the demo's backward compute buffer, 4,768 B, was "4,768 B = 0.00 MiB" (text and picture)
    from vizalloc.scenarios.shared_tensors import run
    from vizalloc.trace.recorder import StrictRecorder

    rec = StrictRecorder()
    run("none", steps=1, around_loop=lambda: rec)
    path = tmp_path / "seed.vztrace"
    api.save(Trace(TraceHeader.new(), tuple(rec.events)), path)
    assert main(["explain", str(path), "-o", str(tmp_path / "e.svg")]) == 0
    out = capsys.readouterr().out
    assert "CPU compute buffer: 4,768 B = 4.7 KiB" in out and "0.00 MiB" not in out
    svg = (tmp_path / "e.svg").read_text(encoding="utf-8")
    assert "4,768 B (4.7 KiB)" in svg and "0.00 MiB" not in svg


@pytest.mark.parametrize(("ngl", "words"), [
    (37, "every layer and the output"), (19, "the output layer and 18 of 36 layers"),
    (1, "the output layer alone"), (0, "no layer"),
])
def test_offloaded_layers_are_told_as_llama_cpp_counts_them(ngl: int, words: str) -> None:
    """llama.cpp's -ngl takes the output layer first: 19 of a 36-layer model is the output
    and 18 blocks."""
    from vizalloc.cli.explain_model import _offloaded

    assert _offloaded(ngl, 36) == words
