"""vizalloc export: default names, no overwrite without -f, stdout, missing `dot`, bad input."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.export.scenarios import mlp_chain, seed_stale
from vizalloc.cli import main
from vizalloc.trace.api import save
from vizalloc.trace.value import Trace, TraceHeader

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.vztrace"
    save(Trace(TraceHeader.new(), tuple(seed_stale())), path)
    return path


@pytest.mark.parametrize("fmt, ending", [
    ("dot", ".dot"), ("layout", ".layout.svg"), ("perfetto", ".perfetto.json"), ("json", ".report.json"),
    ("minimalloc", ".minimalloc.csv"),
])
def test_default_name_next_to_the_trace(trace_file: Path, fmt: str, ending: str, capsys):
    assert main(["export", str(trace_file), "--format", fmt]) == 0
    out = trace_file.with_name("run" + ending)
    assert out.exists() and out.stat().st_size > 0
    assert f"wrote {out}" in capsys.readouterr().err


@needs_dot
def test_svg_is_the_default_format(trace_file: Path):
    assert main(["export", str(trace_file)]) == 0
    svg = trace_file.with_name("run.svg").read_text(encoding="utf-8")
    ET.fromstring(svg.encode("utf-8"))
    assert "STALE" in svg


def test_no_overwrite_without_force(trace_file: Path, capsys):
    target = trace_file.with_name("run.dot")
    target.write_text("keep me")
    assert main(["export", str(trace_file), "--format", "dot"]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "-f" in err
    assert target.read_text() == "keep me"
    assert main(["export", str(trace_file), "--format", "dot", "-f"]) == 0
    assert target.read_text().startswith("digraph vizalloc {")


def test_output_option_and_stdout(trace_file: Path, tmp_path: Path, capsys):
    target = tmp_path / "sub.json"
    assert main(["export", str(trace_file), "--format", "json", "-o", str(target)]) == 0
    assert json.loads(target.read_text())["schema"] == "vizalloc.report/1"
    capsys.readouterr()
    assert main(["export", str(trace_file), "--format", "perfetto", "-o", "-"]) == 0
    assert "traceEvents" in json.loads(capsys.readouterr().out)


def test_missing_dot_writes_dot_source_and_warns(trace_file: Path, monkeypatch, capsys):
    monkeypatch.setattr("vizalloc.export.dot.find_dot", lambda: None)
    assert main(["export", str(trace_file), "--format", "svg"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "apt-get install graphviz" in err and "brew install graphviz" in err
    assert trace_file.with_name("run.dot").read_text().startswith("digraph vizalloc {")
    assert not trace_file.with_name("run.svg").exists()
    # the fallback file obeys the overwrite rule too
    assert main(["export", str(trace_file), "--format", "svg"]) == 2


def test_binding_and_graph_selection(trace_file: Path, capsys):
    from vizalloc.analysis.model import build_model
    from vizalloc.trace.api import load

    model = build_model(load(trace_file))
    first, second = sorted(model.bindings)
    assert main(["export", str(trace_file), "--format", "dot", "--binding", str(first), "-o", "-"]) == 0
    assert f"binding #{first}," in capsys.readouterr().out
    graph_b = model.bindings[second].graph_id
    assert main(["export", str(trace_file), "--format", "dot", "--graph", str(graph_b), "-o", "-"]) == 0
    assert f"graph #{graph_b} binding #{second}," in capsys.readouterr().out
    assert main(["export", str(trace_file), "--format", "dot", "--binding", "987654", "-o", "-"]) == 2
    assert "binding #987654 is not in the trace" in capsys.readouterr().err


def test_max_nodes_and_fold(tmp_path: Path, capsys):
    path = tmp_path / "chain.vztrace"
    save(Trace(TraceHeader.new(), tuple(mlp_chain(30))), path)
    assert main(["export", str(path), "--format", "dot", "-o", "-", "--max-nodes", "40"]) == 0
    text = capsys.readouterr().out
    assert text.count("shape=box3d") >= 1 and "folded into" in text
    assert main(["export", str(path), "--format", "dot", "-o", "-", "--fold", "none", "--max-nodes", "40"]) == 0
    text = capsys.readouterr().out
    assert "shape=box3d" not in text and "hidden by --max-nodes 40" in text
    assert main(["export", str(path), "--format", "dot", "-o", "-", "--fold", "blk.("]) == 2
    assert "not a valid regular expression" in capsys.readouterr().err
    assert main(["export", str(path), "--format", "dot", "-o", "-", "--max-nodes", "-1"]) == 2


def test_bad_trace_paths(tmp_path: Path, capsys):
    assert main(["export", str(tmp_path / "nope.vztrace")]) == 2
    assert "no trace file at" in capsys.readouterr().err
    junk = tmp_path / "junk.vztrace"
    junk.write_bytes(b"not a trace at all")
    assert main(["export", str(junk), "--format", "json"]) == 2
    assert "error" in capsys.readouterr().err


def test_minimalloc_offsets_column(trace_file: Path, capsys):
    assert main(["export", str(trace_file), "--format", "minimalloc", "--offsets", "-o", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "id,lower,upper,size,offset" and len(lines) == 3


@pytest.mark.parametrize("fmt", ["dot", "layout", "minimalloc"])
def test_says_which_binding_it_drew(trace_file: Path, fmt: str, capsys):
    """The seed trace has two bindings; the second holds the findings and is drawn, and
    stderr names it and why (the picture's title says it too)."""
    from vizalloc.analysis.model import build_model
    from vizalloc.trace.api import load

    model = build_model(load(trace_file).events)
    first, second = sorted(model.bindings)
    b2 = model.bindings[second]
    assert main(["export", str(trace_file), "--format", fmt, "-o", "-"]) == 0
    captured = capsys.readouterr()
    verb, another = ("wrote the plan of", "another") if fmt == "minimalloc" else ("drew", "draw another")
    assert (f"{verb} graph #{b2.graph_id} binding #{second}, plan #{b2.plan_id}: the first binding with a finding; "
            f"{another} with --binding N") in captured.err
    assert captured.err.count(f"plan #{b2.plan_id}") == 1
    if fmt != "minimalloc":
        assert "drawn: the first binding with a finding" in captured.out
    assert main(["export", str(trace_file), "--format", fmt, "-o", "-", "--binding", str(first)]) == 0
    err = capsys.readouterr().err
    assert f"binding #{first}, plan #{model.bindings[first].plan_id}: binding #{first} as asked" in err
    assert "--binding N" not in err
    assert main(["export", str(trace_file), "--format", "json", "-o", "-"]) == 0
    assert "drew" not in capsys.readouterr().err
