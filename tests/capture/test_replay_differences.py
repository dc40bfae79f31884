"""A replay that disagrees with the real process is reported, never hidden: the capture of a
real run is edited (one placement moved, one buffer resized) and the import must say so."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from vizalloc.analysis.hazards import HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.capture import rawfile as rf
from vizalloc.capture.launch import capture_environment
from vizalloc.capture.layout import decode
from vizalloc.capture.replay import Importer
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder

from tests.capture.conftest import PROGRAMS


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[rf.Record]:
    out = tmp_path_factory.mktemp("capture")
    env = capture_environment(str(out))
    subprocess.run([sys.executable, str(PROGRAMS / "ggml_python_add.py")], env=env, check=True,
                   capture_output=True, timeout=120)
    (capture,) = out.glob("capture.*.vzcap")
    recs, cut = rf.read_records(capture.read_bytes())
    assert cut is None
    return recs


def _import(records: list[rf.Record]) -> list[ev.Event]:
    with StrictRecorder() as rec:
        Importer(records).run()
    return rec.events


def test_the_untouched_capture_replays_without_a_difference(records: list[rf.Record]) -> None:
    events = _import(records)
    assert not [e for e in events if isinstance(e, ev.ReplayMismatch)]
    assert [h for h in find_hazards(build_model(events)) if h.kind is HazardKind.REPLAY_MISMATCH] == []


def test_a_moved_placement_is_reported_with_both_offsets(records: list[rf.Record]) -> None:
    edited = list(records)
    # the last snapshot of 'out' (after the allocator placed it): move its data 32 bytes on
    i = max(k for k, r in enumerate(edited)
            if isinstance(r, rf.TensorBytes) and decode(r.address, r.raw).name == "out" and decode(r.address, r.raw).data)
    r = edited[i]
    assert isinstance(r, rf.TensorBytes)
    raw = bytearray(r.raw)
    data = int.from_bytes(raw[248:256], "little")
    raw[248:256] = (data + 32).to_bytes(8, "little")
    edited[i] = replace(r, raw=bytes(raw))
    events = _import(edited)
    names = {e.tensor_id: e.name for e in events if isinstance(e, ev.TensorCreated)}
    found = [e for e in events if isinstance(e, ev.ReplayMismatch)]
    assert [(e.what, names[e.tensor_id], e.call, e.ggml_version) for e in found] == [
        ("offset", "out", "ggml_gallocr_alloc_graph", "0.15.3")]
    observed, replayed = found[0].observed, found[0].replayed
    assert observed.endswith(f"+ {int(replayed.rsplit('+ ', 1)[1]) + 32}")
    hazards = [h for h in find_hazards(build_model(events)) if h.kind is HazardKind.REPLAY_MISMATCH]
    assert len(hazards) == 1 and "'out'" in hazards[0].report() and observed in hazards[0].report()


def test_a_buffer_of_another_size_is_reported(records: list[rf.Record]) -> None:
    edited = [replace(r, size=r.size + 64) if isinstance(r, rf.BufferInfo) and r.owner_galloc else r for r in records]
    found = [e for e in _import(edited) if isinstance(e, ev.ReplayMismatch)]
    assert [e.what for e in found] == ["buffer_size"]
    assert found[0].observed == "576 bytes" and found[0].replayed.startswith("512 bytes")


def test_summary_names_the_process_and_each_difference(records: list[rf.Record], tmp_path: Path) -> None:
    import vizalloc

    edited = [replace(r, size=r.size + 64) if isinstance(r, rf.BufferInfo) and r.owner_galloc else r for r in records]
    path = tmp_path / "edited.vztrace"
    with vizalloc.trace(str(path)):
        Importer(edited, program="ggml_python_add.py").run()
    done = subprocess.run([sys.executable, "-m", "vizalloc", "summary", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "captured from ggml_python_add.py" in out and "ggml 0.15.3" in out and "1 replay difference(s)" in out
    assert "replay difference: ggml 0.15.3's ggml_gallocr_alloc_graph sized a buffer: 576 bytes; vizalloc's replay: 512 bytes" in out
    data = json.loads(subprocess.run([sys.executable, "-m", "vizalloc", "summary", "--json", str(path)],
                                     capture_output=True, text=True, timeout=120).stdout)
    assert [d["what"] for d in data["replay_differences"]] == ["buffer_size"]
    assert data["captured"][0]["ggml_version"] == "0.15.3"
