"""Graphs as real ggml programs build them (ggml-python 0.0.45, traced with `vizalloc run --`):
ggml_cast's self-reference, ggml-opt's graphs over tensors no allocator call lists."""

from __future__ import annotations

import sys
from pathlib import Path

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, run


def _names(events: list[ev.Event]) -> dict[int, str]:
    return {e.tensor_id: e.name for e in events if isinstance(e, ev.TensorCreated)}


def test_a_cast_is_its_own_second_source(tmp_path: Path) -> None:
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "ggml_python_cast.py"), "3"], tmp_path)
    assert done.returncode == 3, done.stderr
    assert "out [0.0, 2.0, 4.0, 6.0]" in done.stdout
    assert "0 replay difference(s)" in done.stderr, done.stderr
    events = load(tmp_path / "t.vztrace").events
    names = _names(events)
    selfs = [e for e in events if isinstance(e, ev.TensorSrcSet) and e.src_id == e.tensor_id and e.slot == 1]
    assert sorted(names[e.tensor_id] for e in selfs) == ["KQ_mask (copy)", "KQ_mask (copy) (copy)"]
    assert not [e for e in events if isinstance(e, ev.ReplayMismatch)]
    placed = {names[e.tensor_id] for e in events if isinstance(e, ev.TensorPlaced) and e.by is ev.PlacedBy.GALLOCR}
    assert {"KQ_mask (copy)", "out"} <= placed
    check = run(["check", "t.vztrace"], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_ggml_opt_graphs_reach_tensors_no_call_lists(tmp_path: Path) -> None:
    # ggml_opt_init places the loss with ggml_backend_alloc_ctx_tensors: the loss reads the
    # program's outputs, which read an add that no graph handed to the allocator lists yet
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "ggml_opt_init.py"), "4"], tmp_path)
    assert done.returncode == 4, done.stderr
    assert "loss 4.0" in done.stdout
    assert "0 replay difference(s)" in done.stderr, done.stderr
    events = load(tmp_path / "t.vztrace").events
    names = set(_names(events).values())
    assert {"inputs", "weights", "outputs", "loss_sum", "AdamW m for weights", "adamw step for weights"} <= names
    assert [e for e in events if isinstance(e, ev.ComputeBegin)]
    assert not [e for e in events if isinstance(e, ev.ReplayMismatch)]


def test_a_stale_view_is_left_alone_as_ggml_leaves_it(tmp_path: Path) -> None:
    # ggml re-initialises a view only when it names no buffer: the kept view still points at
    # its root's old bytes after the root was placed anew, and the replay must agree
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "stale_view.py")], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "r moved True v kept True" in done.stdout
    assert "0 replay difference(s)" in done.stderr, done.stderr
    events = load(tmp_path / "t.vztrace").events
    names = _names(events)
    inits = [names[e.tensor_id] for e in events if isinstance(e, ev.TensorPlaced) and e.by is ev.PlacedBy.VIEW_INIT]
    assert inits == ["v"]  # by the first binding; the second leaves 'v (kept)' where it was


def test_a_second_context_at_the_first_ones_addresses(tmp_path: Path) -> None:
    # the second context's buffer, tensors and views sit where the first one's were, freed
    # before: every placement is the new buffer's
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "second_context.py")], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "same buffer handle True same base True same tensor True same view True" in done.stdout
    assert "0 replay difference(s)" in done.stderr, done.stderr
    events = load(tmp_path / "t.vztrace").events
    names = _names(events)
    kv = [e.buffer_id for e in events if isinstance(e, ev.BufferAllocated) and e.nbytes == 4 << 20]
    assert len(kv) == 2
    views = [e.buffer_id for e in events if isinstance(e, ev.TensorPlaced) and e.by is ev.PlacedBy.VIEW_INIT
             and names[e.tensor_id] == "cache_k_l0 (view)"]
    assert views == kv


def test_two_backends_of_one_kind_share_one_compute_buffer(tmp_path: Path) -> None:
    # ggml's graph allocator gives slots of one buffer type one buffer: it is reported once
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "two_cpu_backends.py"), "2"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "out [0.0, 1.0, 2.0]" in done.stdout
    lines = [line.strip() for line in done.stderr.splitlines() if "compute buffer" in line]
    assert lines == ["CPU compute buffer: 256 bytes planned by the replay, the same as the process allocated"], lines
    assert "0 replay difference(s)" in done.stderr
