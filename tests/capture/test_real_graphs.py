"""Graphs as real ggml programs build them (ggml-python 0.0.45, traced with `vizalloc run --`):
ggml_cast's self-reference, ggml-opt's graphs over tensors no allocator call lists."""

from __future__ import annotations

import sys
import re
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
    # the bytes, the tensor structs and the view are where the first context's were; whether
    # malloc hands the buffer's handle back too depends on what the capture itself allocates
    # in between (its tables grow): both ways the replay must tell the buffers apart
    assert re.search(r"same buffer handle (True|False) same base True same tensor True same view True", done.stdout)
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


def test_a_graph_computed_without_the_allocator(tmp_path: Path) -> None:
    # ggml_graph_compute_with_ctx over a context's own memory (ggml's test-pool, gpt-2-ctx):
    # on main the trace was empty and said no ggml library was used
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "ggml_ctx_compute.py"), "3"], tmp_path)
    assert done.returncode == 3, done.stderr
    assert "out [10.0, 30.0, 50.0]" in done.stdout
    assert "no ggml library was used" not in done.stderr and "INCOMPLETE" not in done.stderr
    assert "ggml computed 1 graph(s) with ggml_graph_compute and no graph allocator" in done.stderr
    events = load(tmp_path / "t.vztrace").events
    names = _names(events)
    (begin,) = [e for e in events if isinstance(e, ev.ComputeBegin)]
    assert begin.backend == "CPU"
    assert [names[e.tensor_id] for e in events if isinstance(e, ev.NodeCompute)] == ["pooled", "out"]
    observed = {names[e.tensor_id] for e in events if isinstance(e, ev.TensorPlaced) and e.by is ev.PlacedBy.OBSERVED}
    assert observed == {"a", "pooled", "out"}
    assert run(["check", "t.vztrace"], tmp_path).returncode == 0


def test_the_tensor_allocator_is_replayed_and_checked(tmp_path: Path) -> None:
    # ggml_backend_alloc_ctx_tensors places the static tensors (inputs, weights; ggml-opt's
    # loss, moments and parameters): each is re-placed by the replay's tensor allocator
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "ggml_opt_init.py")], tmp_path)
    assert done.returncode == 0, done.stderr
    # 3 calls of the tensor allocator and the scheduler's plan; 12 placements before
    assert "4 allocator calls replayed, 19 placements checked: 0 replay difference(s)" in done.stderr, done.stderr


def test_a_tensor_allocator_offset_that_differs_is_reported(tmp_path: Path) -> None:
    import struct as st

    from tests.capture.fuzz import sealed
    from tests.capture.test_incomplete import _capture
    from vizalloc.capture import import_capture
    from vizalloc.capture import rawfile as rf

    data = bytearray(_capture(tmp_path, "ggml_opt_init.py").read_bytes())
    # the process's 'inputs', as placed by the tensor allocator, moved 32 bytes on (where
    # 'weights' is): the replay puts it at the buffer's start
    pos, moved = rf.HEADER_SIZE, 0
    while pos < len(data):
        kind, length = st.unpack_from("<H2xI", data, pos)
        raw = pos + 8 + 16
        if kind == 10 and bytes(data[raw + 256:raw + 262]) == b"inputs" and st.unpack_from("<Q", data, raw + 248)[0]:
            st.pack_into("<Q", data, raw + 248, st.unpack_from("<Q", data, raw + 248)[0] + 32)
            moved += 1
            break
        pos += 8 + length
    assert moved == 1
    (tmp_path / "moved.vzcap").write_bytes(sealed(bytes(data)))  # with a valid check: the replay judges the value
    result = import_capture(tmp_path / "moved.vzcap", tmp_path / "t.vztrace")
    assert result.mismatches >= 1 and not result.incomplete
    events = load(tmp_path / "t.vztrace").events
    names = _names(events)
    (first, *_) = [e for e in events if isinstance(e, ev.ReplayMismatch)]
    assert names[first.tensor_id] == "inputs" and first.call == "ggml_backend_alloc_ctx_tensors_from_buft"
    assert first.observed.endswith("+ 32") and first.replayed.endswith("+ 0"), first


def _renamed(data: bytes, kind: int, old: bytes, new: bytes) -> bytes:
    """The capture with the name in its first record of ``kind`` (3 type, 4 op: the name is the
    payload's last field) that reads ``old`` changed to ``new``."""
    import struct as st

    from vizalloc.capture import rawfile as rf

    out, pos, done, seq = bytearray(data[:rf.HEADER_SIZE]), rf.HEADER_SIZE, False, 0
    end = int.from_bytes(data[16:24], "little") or len(data)  # the header says where the records end
    while pos < end:
        k, length = st.unpack_from("<H2xI", data, pos)
        payload = data[pos + 8:pos + 8 + length]
        fixed = 32 if k == 3 else 24
        if k == kind and not done and payload[fixed + 4:] == old:
            payload = payload[:fixed] + st.pack("<I", len(new)) + new
            done = True
        out += rf.frame(seq, k, payload)
        pos, seq = pos + 8 + length, seq + 1
    assert done, f"no record of kind {kind} named {old!r}"
    out[16:24] = len(out).to_bytes(8, "little")
    return bytes(out)


def test_an_op_and_a_type_vizalloc_does_not_know_are_imported_opaque(tmp_path: Path) -> None:
    from tests.capture.test_incomplete import _capture
    from vizalloc.capture import import_capture

    data = _capture(tmp_path, "ggml_python_cast.py").read_bytes()
    # a newer ggml's op and type: the cast's CPY under another name, f16 under another name
    data = _renamed(_renamed(data, 4, b"CPY", b"CPY_FROM_THE_FUTURE"), 3, b"f16", b"f16_from_the_future")
    (tmp_path / "future.vzcap").write_bytes(data)
    result = import_capture(tmp_path / "future.vzcap", tmp_path / "t.vztrace")
    assert not result.incomplete and result.mismatches == 0, result
    assert any("op 'CPY_FROM_THE_FUTURE'" in n and "OPAQUE" in n for n in result.notes), result.notes
    assert any("tensor type 'f16_from_the_future'" in n and "as f16" in n for n in result.notes), result.notes
    events = load(tmp_path / "t.vztrace").events
    made = {e.name: e for e in events if isinstance(e, ev.TensorCreated)}
    assert made["KQ_mask (copy)"].op == "OPAQUE" and made["KQ_mask (copy)"].dtype == "f16"
    placed = {e.tensor_id for e in events if isinstance(e, ev.TensorPlaced) and e.by is ev.PlacedBy.GALLOCR}
    assert made["KQ_mask (copy)"].tensor_id in placed


def test_ggml_opt_rounds_at_reused_addresses_are_copies_not_hazards(tmp_path: Path) -> None:
    # test-opt's subtests, one after another: each round's graph copies (ggml-opt's dup_graph)
    # alias the static tensors on purpose, in buffers made where the last round's were; read
    # as distinct tensors, they were 6 false use-after-reuse findings here (164 in test-opt)
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / "ggml_opt_init.py"), "0", "12"],
               tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("loss 4.0") == 12
    assert "48 allocator calls replayed, 228 placements checked: 0 replay difference(s)" in done.stderr, done.stderr
    check = run(["check", "t.vztrace"], tmp_path)
    assert check.returncode == 0 and "0 hazards -> ok" in check.stdout, check.stdout[-3000:]
