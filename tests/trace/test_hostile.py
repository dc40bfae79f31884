"""Hostile trace files: decompression bombs and absurd lengths are refused with a
``TraceFormatError`` in bounded memory, by every reader (load, read_batches, follow,
the TUI's loader, check, summary, export)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import warnings
import zlib
from pathlib import Path

import pytest

import vizalloc
from vizalloc.cli import main
from vizalloc.errors import TraceFormatError
from vizalloc.trace import fileformat
from vizalloc.trace.api import follow, read_batches
from vizalloc.trace.chunk_decoder import ChunkDecoder
from vizalloc.trace.chunk_encoder import ChunkEncoder
from vizalloc.trace.fileformat import TraceTruncatedWarning, read_trace

from tests.trace import fuzz

MIB = 1 << 20


@pytest.fixture(scope="module")
def small() -> bytes:
    return fuzz.write(fuzz.small_trace())


def _every_reader(path: Path) -> list[str]:
    """What each reader does with ``path``: 'ok', 'prefix' (loaded with a truncation
    warning) or the exception's class name (a VizallocError's; anything else escapes)."""
    from vizalloc.tui.data import read_events
    from vizalloc.tui.steps import Prescan

    def outcome(fn) -> str:  # type: ignore[no-untyped-def]
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()
        except vizalloc.VizallocError as exc:
            return type(exc).__name__
        return "prefix" if any(issubclass(w.category, TraceTruncatedWarning) for w in caught) else "ok"

    def follow_all() -> None:
        with follow(path) as live:
            live.poll()
            if not live.complete:  # a live view waits for more instead of warning
                warnings.warn(TraceTruncatedWarning("not complete"), stacklevel=1)

    return [
        outcome(lambda: vizalloc.load(path)),
        outcome(lambda: [len(b) for b in read_batches(path, 50)]),
        outcome(lambda: [len(b) for b in read_batches(path, 50, slice_events=7)]),
        outcome(follow_all),
        outcome(lambda: read_events(path, Prescan())),
    ]


# -- decompression ------------------------------------------------------------------

def test_metadata_never_inflates_past_what_its_head_declares() -> None:
    from vizalloc.trace import events as ev

    meta, blob = ChunkEncoder().encode([ev.Marker(1, 5, None, "hi")])
    # the same stream, with a megabyte of zeros deflated after the chunk
    dec = ChunkDecoder.for_current_schema()
    d = zlib.decompressobj()
    plain = d.decompress(meta)
    comp = zlib.compressobj()
    bomb = comp.compress(plain + bytes(MIB)) + comp.flush(zlib.Z_SYNC_FLUSH)
    with pytest.raises(ValueError, match="inflates past the .* bytes its head declares"):
        dec.decode(bomb, blob, 1)
    # and the honest chunk decodes
    fresh = ChunkDecoder.for_current_schema()
    assert fresh.assemble([fresh.decode(meta, blob, 1)])[0].text == "hi"


def test_a_head_declaring_more_than_a_chunk_may_hold_is_refused_before_inflating() -> None:
    data = fuzz.bomb_frames(0, head=(1, 0, 0, 0, 2**32 - 1, 0, 1, 0))
    with pytest.raises(TraceFormatError, match=r"declares 4,294,967,3\d\d bytes of metadata, over the"):
        read_trace(io.BytesIO(data))


def test_zero_byte_planes_cannot_stand_for_billions_of_integers() -> None:
    # no byte plane present: 4G row integers in zero bytes of metadata
    data = fuzz.bomb_frames(0, head=(1, 0, 0, 2**32 - 1, 0, 0, 0, 0))
    with pytest.raises(TraceFormatError, match="decompression bomb"):
        read_trace(io.BytesIO(data))


def test_the_file_bounds_what_its_chunks_inflate_to(small: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(read_trace(io.BytesIO(small)).events) > 100
    monkeypatch.setattr(fileformat, "INFLATE_ALLOWANCE", 0)
    monkeypatch.setattr(fileformat, "MAX_INFLATE_RATIO", 1)  # a real trace inflates more than 1:1
    with pytest.raises(TraceFormatError, match="more than its file can hold"):
        read_trace(io.BytesIO(small))


LIMITED = textwrap.dedent(
    """
    import io, json, os, resource, sys, warnings
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import vizalloc
    from vizalloc.cli import main
    from vizalloc.tui.data import read_events
    from vizalloc.tui.steps import Prescan
    warnings.simplefilter("ignore")
    out = {}
    for path in sys.argv[2:]:
        got = []
        for name, fn in (("load", lambda: vizalloc.load(path)),
                         ("batches", lambda: [b for b in vizalloc.trace.api.read_batches(path, 64)]),
                         ("tui", lambda: read_events(path, Prescan())),
                         ("check", lambda: main(["check", path])),
                         ("summary", lambda: main(["summary", "--json", path])),
                         ("export", lambda: main(["export", path, "--format", "json", "-o", "-"]))):
            try:
                r = fn()
                got.append(f"{name}:" + (str(r) if isinstance(r, int) else "ok"))
            except vizalloc.VizallocError as exc:
                got.append(f"{name}:{type(exc).__name__}")
            except BaseException as exc:
                got.append(f"{name}:ESCAPED {type(exc).__name__}: {exc}")
        out[os.path.basename(path)] = got
    import resource as r
    out["max_rss_kib"] = r.getrusage(r.RUSAGE_SELF).ru_maxrss
    sys.__stdout__.write("RESULT " + json.dumps(out) + "\\n")
    """
)

ADDRESS_SPACE_LIMIT = fuzz.ADDRESS_SPACE_LIMIT


def run_limited(paths: list[Path], limit: int = ADDRESS_SPACE_LIMIT) -> dict[str, list[str] | int]:
    proc = subprocess.run([sys.executable, "-c", LIMITED, str(limit), *map(str, paths)], capture_output=True,
                          text=True, env=fuzz.limited_env(), timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])  # type: ignore[no-any-return]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as Linux counts it")
def test_bombs_are_refused_by_every_reader_in_bounded_memory(tmp_path: Path) -> None:
    files = {
        "gib_after_head": fuzz.bomb_frames(1024 * MIB),
        "declares_4g_items": fuzz.bomb_frames(8 * MIB, head=(1, 0, 0, 0, 2**32 - 1, 0, 1, 0)),
        "declares_200m_items": fuzz.bomb_frames(200 * MIB, head=(1, 0, 0, 0, 200 * MIB, 0, 1, 0)),
        "zero_planes": fuzz.bomb_frames(0, head=(1, 0, 0, 2**32 - 1, 0, 0, 0, 0)),
    }
    paths = []
    for name, data in files.items():
        assert len(data) < 2 * MIB  # small files...
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    got = run_limited(paths)
    for name in files:
        assert got[name] == ["load:TraceFormatError", "batches:TraceFormatError", "tui:TraceFormatError",
                             "check:2", "summary:2", "export:2"], (name, got[name])


# -- lengths ---------------------------------------------------------------------------

@pytest.mark.parametrize(("which", "value"), [("blob", v) for v in fuzz.ABSURD]
                         + [("meta", v) for v in fuzz.ABSURD if v <= 0xFFFFFFFF])  # a u32
def test_absurd_frame_lengths_never_overflow_or_exhaust_memory(small: bytes, tmp_path: Path, which: str,
                                                               value: int) -> None:
    header, frames = fuzz.split(small)
    i = 2  # a chunk in the middle: the frames before it load
    data = header + b"".join(f.pack(**({f"{which}_len": value} if j == i else {})) for j, f in enumerate(frames))
    path = tmp_path / "absurd.vztrace"
    path.write_bytes(data)
    got = _every_reader(path)
    # beyond the file's end: a cut (the frames before it load); beyond any chunk: damage
    assert set(got) <= {"prefix", "TraceFormatError"} and len(set(got)) == 1, got
    expect = "TraceFormatError" if value > fileformat.MAX_FRAME_BYTES or (
        which == "meta" and value > fileformat.MAX_FRAME_META) else "prefix"
    assert got[0] == expect, got
    assert main(["check", str(path)]) in (0, 1, 2)


def test_absurd_header_length_is_a_clear_error(small: bytes, tmp_path: Path) -> None:
    import struct

    bad = bytearray(small)
    json_len = struct.unpack_from("<I", bad, 12)[0]
    struct.pack_into("<I", bad, 12, 2**32 - 1)
    end = 16 + json_len
    head = bytes(bad[:16]) + bytes(bad[16:end])
    bad[end:end + 4] = struct.pack("<I", zlib.crc32(head))  # the CRC no longer covers a consistent header
    path = tmp_path / "h.vztrace"
    path.write_bytes(bytes(bad))
    assert set(_every_reader(path)) == {"TraceFormatError"}
    with pytest.raises(TraceFormatError, match="declares 4,294,967,31\\d bytes, the file ends at byte"):
        vizalloc.load(path)


def test_the_writer_never_makes_a_chunk_the_reader_refuses(tmp_path: Path) -> None:
    from vizalloc.errors import UsageError
    from vizalloc.trace.api import save
    from vizalloc.trace.chunk_decoder import MAX_CHUNK_EVENTS, MAX_CHUNK_META_BYTES
    from vizalloc.trace.value import Trace, TraceHeader

    # ~110 bytes of metadata per event: the largest chunk a writer makes stays far below the reader's bound
    assert MAX_CHUNK_EVENTS * 110 < MAX_CHUNK_META_BYTES / 2
    for bad in (0, MAX_CHUNK_EVENTS + 1):
        with pytest.raises(UsageError, match="max_pending must be 1 to 4,194,304"):
            vizalloc.trace(max_pending=bad)
        with pytest.raises(UsageError, match="chunk_events must be 1 to 4,194,304"):
            save(Trace(TraceHeader.new(), ()), tmp_path / f"{bad}.vztrace", chunk_events=bad)
