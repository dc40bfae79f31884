"""A real ggml program driven from Python (ggml-python 0.0.45) traced with `vizalloc run --`."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, run


def test_traced_program_keeps_its_output_and_exit_code(tmp_path: Path) -> None:
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "ggml_python_add.py"), "3"], tmp_path)
    assert done.returncode == 3, done.stderr
    # relu((x + x) * x) * 2 for x = 0, 1, 2, 3
    assert "out [0.0, 4.0, 16.0, 36.0]" in done.stdout
    assert "ggml 0.15.3 from" in done.stderr
    assert (tmp_path / "t.vztrace").exists()


def test_every_placement_is_replayed_and_matches(tmp_path: Path) -> None:
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "ggml_python_add.py")], tmp_path)
    assert done.returncode == 0, done.stderr
    events = load(tmp_path / "t.vztrace").events
    kinds = [type(e).__name__ for e in events]
    captured = [e for e in events if isinstance(e, ev.ProcessCaptured)]
    assert captured and captured[0].ggml_version == "0.15.3" and captured[0].rules_version == "0.21.0"
    assert not [e for e in events if isinstance(e, ev.ReplayMismatch)]
    # the planner's decisions are recovered: a plan, a binding, in-place takeovers along the chain
    assert "PlanBegin" in kinds and "BindingBegin" in kinds and "PlanInplace" in kinds
    placed = {e.tensor_id: e for e in events if isinstance(e, ev.TensorPlaced) and e.by is ev.PlacedBy.GALLOCR}
    names = {e.tensor_id: e.name for e in events if isinstance(e, ev.TensorCreated)}
    # a and b are inputs (never shared); the chain add -> mul -> relu -> scale runs in place over b's... or a's
    # bytes is ggml's choice, which the replay must reproduce: both sit in the 512-byte buffer
    assert {names[t] for t in placed} >= {"a", "b", "out"}
    assert all(p.offset in (0, 256) for p in placed.values())
    # the compute: four nodes in ggml's order, the inputs written by the program first
    computes = [e for e in events if isinstance(e, ev.NodeCompute)]
    assert [names[e.tensor_id] for e in computes][-1] == "out" and len(computes) == 4
    sets = [names[e.tensor_id] for e in events if isinstance(e, ev.TensorSet)]
    assert sets == ["a", "b"]
    check = run(["check", "t.vztrace"], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_program_that_never_loads_ggml(tmp_path: Path) -> None:
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, "-c", "import sys; sys.exit(5)"], tmp_path)
    assert done.returncode == 5
    assert "never called ggml" in done.stderr
    events = load(tmp_path / "t.vztrace").events
    notes = [e.note for e in events if isinstance(e, ev.ProcessCaptured)]
    assert notes and "never called ggml" in notes[0]
    # the command line as a shell would take it back (it read "-c import sys; sys.exit(5)")
    programs = [e.program for e in events if isinstance(e, ev.ProcessCaptured)]
    assert programs == [f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(5)'"]
