"""Damaged files: a cut file loads its prefix with a warning; a corrupt one raises with the offset."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import vizalloc
from vizalloc.errors import TraceFormatError, UsageError
from vizalloc.trace import events as ev
from vizalloc.trace.fileformat import FRAME_HEADER_SIZE, TraceFileWriter, TraceTruncatedWarning, read_trace
from vizalloc.trace.value import TraceHeader

HEADER = TraceHeader.new(argv=("x",))
LOC = ev.Location("user.py", 3, "main")


def _file(n_chunks: int = 6, per_chunk: int = 5) -> tuple[bytes, list[int], list[ev.Event]]:
    """A trace file, the byte offsets where each frame ends, and its events (odd chunks are
    stored outside the zlib stream, as a live trace stores chunks not worth compressing)."""
    buf = io.BytesIO()
    w = TraceFileWriter(buf, HEADER)
    ends = [buf.tell()]
    events: list[ev.Event] = []
    seq = 0
    for c in range(n_chunks):
        chunk: list[ev.Event] = []
        for i in range(per_chunk):
            seq += 1
            chunk.append(ev.TensorPlaced(seq, seq * 100, LOC, c * 10 + i, 1, 64 * i, 64, ev.PlacedBy.GALLOCR, c))
        seq += 1
        chunk.append(ev.ValueSnapshot(seq, seq * 100, None, c, c, "end", "f32", (2, 1, 1, 1), bytes([c]) * 8))
        w.write_rows([e.__class__ for e in chunk], chunk, compress_budget_ns=0 if c % 2 else None)
        events += chunk
        ends.append(buf.tell())
    w.close()
    return buf.getvalue(), ends, events


def _load(data: bytes) -> tuple[tuple[ev.Event, ...], list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = read_trace(io.BytesIO(data), "t.vztrace")
    return trace.events, [w for w in caught if issubclass(w.category, TraceTruncatedWarning)]


def test_complete_file_loads_without_warning() -> None:
    data, _, events = _file()
    loaded, warned = _load(data)
    assert loaded == tuple(events) and not warned


def test_every_cut_point_loads_the_complete_frames_with_a_warning() -> None:
    data, ends, events = _file(n_chunks=4, per_chunk=3)
    header_end = ends[0]
    per_frame = len(events) // 4
    for cut in range(header_end, len(data)):
        loaded, warned = _load(data[:cut])
        complete_frames = sum(1 for e in ends[1:] if e <= cut)
        assert loaded == tuple(events[: complete_frames * per_frame]), f"cut at byte {cut}"
        assert len(warned) == 1, f"cut at byte {cut}"
        assert "without its end record" in str(warned[0].message)


def test_cut_inside_the_header_raises() -> None:
    data, ends, _ = _file(n_chunks=1)
    for cut in (0, 3, 8, 15, ends[0] - 1):
        with pytest.raises(TraceFormatError):
            read_trace(io.BytesIO(data[:cut]))


def test_every_corrupted_byte_raises_with_an_offset() -> None:
    data, ends, _ = _file(n_chunks=3, per_chunk=2)
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x5A
        with pytest.raises(TraceFormatError) as info:
            read_trace(io.BytesIO(bytes(bad)))
        message = str(info.value)
        offsets = [int(m) for m in re.findall(r"byte (\d+)|bytes (\d+)", message) for m in m if m]
        assert offsets, f"no byte offset in {message!r} (corrupted byte {pos})"
        # the reported frame (or header) contains the damaged byte
        frame_starts = [0] + ends[:-1]
        owner = max(s for s in frame_starts if s <= pos)
        assert owner in offsets or any(o <= pos for o in offsets), (pos, message)


def test_garbage_after_the_end_record_raises() -> None:
    data, _, _ = _file(n_chunks=1)
    with pytest.raises(TraceFormatError, match=f"byte {len(data)}"):
        read_trace(io.BytesIO(data + b"VF" + bytes(FRAME_HEADER_SIZE)))


def test_not_a_trace_and_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "x.vztrace"
    p.write_bytes(b"PK\x03\x04 something else")
    with pytest.raises(TraceFormatError, match="not a vizalloc trace"):
        vizalloc.load(p)
    with pytest.raises(UsageError, match="no trace file"):
        vizalloc.load(tmp_path / "missing.vztrace")


def test_newer_version_is_refused() -> None:
    data, _, _ = _file(n_chunks=1)
    bad = bytearray(data)
    bad[8] = 99
    with pytest.raises(TraceFormatError, match="version 99"):
        read_trace(io.BytesIO(bytes(bad)))


CHILD = textwrap.dedent(
    """
    import sys, time
    import vizalloc
    from vizalloc.trace import events as ev, recorder
    with vizalloc.trace(sys.argv[1]) as t:
        i = 0
        while True:
            i += 1
            vizalloc.mark(f"step {i}")
            if i % 50 == 0:
                recorder.emit(ev.ComputeEnd, i, 1000)   # a graph compute ends: a flush
                print(i, flush=True)
                time.sleep(0.002)
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_sigkill_leaves_a_file_that_loads_up_to_the_last_flush(tmp_path: Path) -> None:
    path = tmp_path / "killed.vztrace"
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, env=env, text=True)
    assert child.stdout is not None
    flushed = [int(child.stdout.readline())]  # wait until it really traces
    time.sleep(0.3)
    child.send_signal(signal.SIGKILL)
    flushed += [int(line) for line in child.stdout.read().split()]
    child.wait()
    assert child.returncode == -signal.SIGKILL
    with pytest.warns(TraceTruncatedWarning, match="without its end record"):
        trace = vizalloc.load(path)
    markers = [e for e in trace.events if isinstance(e, ev.Marker)]
    ends = [e for e in trace.events if isinstance(e, ev.ComputeEnd)]
    # everything up to the last ComputeEnd the child reported was flushed before it printed
    assert ends and ends[-1].compute_id >= flushed[-1]
    assert [m.text for m in markers[: flushed[-1]]] == [f"step {i}" for i in range(1, flushed[-1] + 1)]
    assert [e.seq for e in trace.events] == sorted(e.seq for e in trace.events)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_a_forked_child_does_not_write_into_the_parents_trace(tmp_path: Path) -> None:
    path = tmp_path / "parent.vztrace"
    with vizalloc.trace(path) as t:
        vizalloc.mark("before fork")
        pid = os.fork()
        if pid == 0:  # the child: its events and its end of the block must not reach the file
            try:
                vizalloc.mark("in the child")
                t.stop()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        vizalloc.mark("after fork")
    loaded = vizalloc.load(path)
    assert [e.text for e in loaded.events if isinstance(e, ev.Marker)] == ["before fork", "after fork"]
