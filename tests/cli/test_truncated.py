"""A trace cut short (its writer killed, or still running): the commands say plainly where
it is cut and what was read (no raw Python warning line); a trace cut before its first
complete frame is not "ok"."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import vizalloc
from vizalloc.cli import main
from vizalloc.errors import TraceFormatError
from vizalloc.trace.fileformat import TraceTruncatedWarning

from tests.trace import fuzz


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, list[fuzz.Frame]]:
    data = fuzz.write(fuzz.small_trace(), chunk_events=80)
    d = tmp_path_factory.mktemp("cut")
    header, frames = fuzz.split(data)
    return d, data, frames


def _cut(d: Path, data: bytes, at: int, name: str) -> Path:
    path = d / name
    path.write_bytes(data[:at])
    return path


def test_check_says_where_the_trace_is_cut(whole, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    d, data, frames = whole
    third = frames[2]
    at = third.offset + 100  # inside the third frame: two complete frames
    path = _cut(d, data, at, "mid.vztrace")
    n_events = frames[0].n_events + frames[1].n_events
    code = main(["check", str(path)])
    out, err = capsys.readouterr()
    assert code == 0  # the two frames read hold no failing hazard
    assert (f"vizalloc check: warning: {path}: trace cut at byte {at:,}, 100 bytes into the frame at byte "
            f"{third.offset:,}") in err
    assert f"read {n_events:,} events in 2 complete frames" in err
    assert "TraceTruncatedWarning" not in err and "warnings.warn" not in err and ".py:" not in err
    assert f"vizalloc check: {n_events:,} events" in out
    for cmd in (["summary", str(path)], ["export", str(path), "--format", "json", "-o", "-"]):
        assert main(cmd) == 0
        err = capsys.readouterr().err
        assert f"vizalloc {cmd[0]}: warning:" in err and "2 complete frames" in err, cmd


def test_a_trace_cut_at_a_frame_boundary(whole, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    d, data, frames = whole
    at = frames[1].offset  # the first frame complete, nothing after it
    path = _cut(d, data, at, "edge.vztrace")
    main(["check", str(path)])
    err = capsys.readouterr().err
    assert f"trace cut at byte {at:,}, after its last complete frame" in err
    assert f"read {frames[0].n_events:,} events in 1 complete frame;" not in err  # (no trailing ';')
    assert re.search(rf"read {frames[0].n_events:,} events in 1 complete frame\b", err)


@pytest.mark.parametrize("into_first_frame", [0, 1, 27, 200])
def test_a_trace_cut_before_its_first_complete_frame_is_not_ok(whole, into_first_frame: int,  # type: ignore[no-untyped-def]
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    d, data, frames = whole
    path = _cut(d, data, frames[0].offset + into_first_frame, "early.vztrace")
    for cmd in (["check", str(path)], ["check", str(path), "--json"], ["summary", str(path)],
                ["diff", str(path), str(path)], ["export", str(path), "--format", "json", "-o", "-"]):
        assert main(cmd) == 2, cmd
        out, err = capsys.readouterr()
        assert "-> ok" not in out and "no complete frame, so no events" in err, (cmd, err)
        assert f"vizalloc {cmd[0]}: error: {path}: trace cut at byte" in err


def test_the_library_warns_at_the_callers_line_with_the_numbers(whole) -> None:  # type: ignore[no-untyped-def]
    d, data, frames = whole
    at = frames[3].offset + 5
    path = _cut(d, data, at, "lib.vztrace")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = vizalloc.load(path)
    (w,) = caught
    assert w.filename == __file__  # not a line inside vizalloc
    msg = w.message
    assert isinstance(msg, TraceTruncatedWarning)
    assert (msg.cut_at, msg.file_size, msg.n_frames, msg.n_events) == (
        frames[3].offset, at, 3, sum(f.n_events for f in frames[:3]))
    assert len(t.events) == msg.n_events
    # a cut inside the header is no trace at all
    with pytest.raises(TraceFormatError, match="nothing to load"):
        vizalloc.load(_cut(d, data, 100, "head.vztrace"))
