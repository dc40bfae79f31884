"""Hostile raw captures imported one after another in one process, as a test run or a
library user does: damage the format can show is refused, and a capture that fails (or one
that reserves absurd address ranges) leaves the next import as it would have been.
The subject is the real capture of ``programs/ggml_python_add.py``. On main: a record
length +8 and a chunk naming an unknown buffer type were accepted silently, and after a
hostile capture every later import failed (``cannot write event: BufferAllocated.base``)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from vizalloc.capture import import_capture
from vizalloc.capture import rawfile as rf
from vizalloc.errors import VizallocError
from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.fuzz import real_capture, records_of, sealed


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return real_capture()


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def intact_imports(tmp_path: Path, capture: bytes) -> None:
    out = tmp_path / "intact.vztrace"
    result = import_capture(write(tmp_path, "intact.vzcap", capture), out, force=True)
    assert result.mismatches == 0 and result.computes == 1
    assert sum(isinstance(e, ev.BufferAllocated) for e in load(out).events) == 1


def test_a_record_longer_than_its_content(tmp_path: Path, capture: bytes) -> None:
    pos, kind, length = next(x for x in records_of(capture) if x[1] == 9)  # ggml_backend_buffer_set_usage
    bad = sealed(capture[:pos] + struct.pack("<HHI", kind, 0, length + 8) + capture[pos + 8:pos + 8 + length]
                 + bytes(8) + capture[pos + 8 + length:])  # with valid checks: the decoder's own test
    with pytest.raises(VizallocError, match=f"capture record at byte {pos} \\(kind 9\\) says {length + 8} bytes, but "
                                            "its content ends 8 bytes before that"):
        import_capture(write(tmp_path, "long.vzcap", bad), tmp_path / "t.vztrace")
    intact_imports(tmp_path, capture)


def test_a_chunk_naming_a_buffer_type_never_described(tmp_path: Path, capture: bytes) -> None:
    pos, _, _ = next(x for x in records_of(capture) if x[1] == 6)  # the graph allocator's chunk
    bad = bytearray(capture)
    struct.pack_into("<Q", bad, pos + 8 + 16, 0xBAD0)  # its buffer type
    bad = bytearray(sealed(bytes(bad)))  # with a valid check: what the import makes of the value
    # the import stops there and says so: the trace is incomplete (check's incomplete-capture)
    result = import_capture(write(tmp_path, "buft.vzcap", bytes(bad)), tmp_path / "t.vztrace")
    assert "names a buffer type never described" in result.incomplete, result
    assert any(isinstance(e, ev.CaptureIncomplete) for e in load(tmp_path / "t.vztrace").events)
    intact_imports(tmp_path, capture)


def _buffers(capture: bytes, n: int, size: int) -> bytes:
    """The capture with ``n`` more buffers of ``size`` bytes, seen in use before its end."""
    (buft_pos, _, _) = next(x for x in records_of(capture) if x[1] == 5)
    buft = struct.unpack_from("<Q", capture, buft_pos + 8 + 8)[0]
    extra = b"".join(rf.frame(0, 6, struct.pack("<qQQQQqqQQ", 0, 0xB000 + 64 * i, buft, 0x10000 + i * size, size, 0, 2, 0, 0))
                     for i in range(n))
    (bye, _, _) = next(x for x in records_of(capture) if x[1] == 16)
    out = bytearray(capture[:bye] + extra + capture[bye:])
    end = int.from_bytes(capture[16:24], "little")
    out[16:24] = (end + len(extra)).to_bytes(8, "little")  # the header says where the records end
    return sealed(bytes(out))  # every record's check for its new place


def test_a_buffer_larger_than_any_address_space_is_refused(tmp_path: Path, capture: bytes) -> None:
    with pytest.raises(VizallocError, match="describes a buffer of 18,446,744,073,709,551,615 bytes"):
        import_capture(write(tmp_path, "huge.vzcap", _buffers(capture, 1, 2**64 - 1)), tmp_path / "t.vztrace")
    intact_imports(tmp_path, capture)


def test_imports_do_not_use_up_each_other_s_address_space(tmp_path: Path, capture: bytes) -> None:
    """100 buffers of 2^56 bytes each (valid on a 57-bit machine) take 2^62.6 of the 2^63
    simulated addresses: on main the second such import failed, and so did every later one."""
    big = write(tmp_path, "big.vzcap", _buffers(capture, 100, 2**56))
    for k in range(3):
        result = import_capture(big, tmp_path / f"big{k}.vztrace")
        assert result.buffers == 101
    intact_imports(tmp_path, capture)


def test_a_failed_import_leaves_no_recorder_behind(tmp_path: Path, capture: bytes) -> None:
    from vizalloc.trace import recorder

    with pytest.raises(VizallocError):
        import_capture(write(tmp_path, "cut.vzcap", capture[:16] + rf.frame(0, 99, b"")), tmp_path / "t.vztrace")
    assert not recorder.active()
    intact_imports(tmp_path, capture)
