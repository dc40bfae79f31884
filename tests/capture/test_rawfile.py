"""The capture file reader on hand-made bytes: big graphs in continuation records, files cut
mid-record, damaged records."""

from __future__ import annotations

import struct

import pytest

from vizalloc.capture import rawfile as rf

HEADER = rf.MAGIC + rf.FORMAT_VERSION.to_bytes(4, "little") + bytes(16)  # records to the file's end


def frames(*recs: tuple[int, bytes]) -> bytes:
    """``(kind, payload)`` records framed as a file's first records, with their checks."""
    return b"".join(rf.frame(seq, kind, payload) for seq, (kind, payload) in enumerate(recs))


def text(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def call_head(call: int, n_nodes: int, n_leafs: int, *, ids: bool) -> bytes:
    return (struct.pack("<QQq", call, 0, int(rf.CallKind.GALLOC_RESERVE_N))
            + struct.pack("<qQQQ", 0, 0x1000, 0x2000, 7)
            + struct.pack("<qqqq", n_nodes, n_leafs, int(ids), 0) + text("prog\tmain"))


def continuation(call: int, which: int, start: int, items: list[int], fmt: str) -> bytes:
    return (struct.pack("<QQq", call, 0, 0) + struct.pack("<qqq", which, start, len(items))
            + struct.pack(f"<{len(items)}{fmt}", *items))


def test_a_graph_in_continuation_records_is_reassembled_in_place() -> None:
    nodes = list(range(100, 100 + 5))
    leafs = [900, 901]
    data = HEADER + frames(
        (11, call_head(3, 5, 2, ids=True)),
        (11, continuation(3, 0, 0, nodes[:3], "Q")), (11, continuation(3, 0, 3, nodes[3:], "Q")),
        (11, continuation(3, 1, 0, leafs, "Q")),
        (17, text("a note in between")),  # records of the call come after it, not before
        (11, continuation(3, 2, 0, [0, 1, 0, 1, 0], "i")))
    records, cut = rf.read_records(data)
    assert cut is None
    assert isinstance(records[0], rf.Note)
    call = records[1]
    assert isinstance(call, rf.Call)
    assert call.nodes == tuple(nodes) and call.leafs == tuple(leafs) and call.node_ids == (0, 1, 0, 1, 0)
    assert call.leaf_ids is None and call.site == "prog\tmain" and call.t_ns == 7


def test_a_file_cut_inside_a_record_keeps_the_records_before() -> None:
    first = frames((17, text("first")))
    whole = HEADER + frames((17, text("first")), (17, text("second")))
    for cut_at in range(len(HEADER) + 1, len(whole)):
        records, cut = rf.read_records(whole[:cut_at])
        texts = [r.text for r in records if isinstance(r, rf.Note)]
        if cut_at < len(HEADER) + len(first):
            assert texts == [] and cut == len(HEADER)
        else:
            assert texts == ["first"] and cut == (None if cut_at == len(HEADER) + len(first) else len(HEADER) + len(first))
    assert [r.text for r in rf.read_records(whole)[0] if isinstance(r, rf.Note)] == ["first", "second"]


def test_damage_is_named_by_its_byte_offset() -> None:
    with pytest.raises(rf.CaptureFormatError, match="not a vizalloc capture file"):
        rf.read_records(b"VZTRACE\0" * 4)
    with pytest.raises(rf.CaptureFormatError, match="format 9"):
        rf.read_records(rf.MAGIC + (9).to_bytes(4, "little"))
    with pytest.raises(rf.CaptureFormatError, match="byte 32 has an unknown kind 99"):
        rf.read_records(HEADER + frames((99, b"")))
    # a galloc record claiming more buffer types than it holds
    bad = struct.pack("<qQQq", 0, 1, 0, 1 << 40)
    with pytest.raises(rf.CaptureFormatError, match="byte 32 claims"):
        rf.read_records(HEADER + frames((14, bad)))
    with pytest.raises(rf.CaptureFormatError, match="claims 4294967295 bytes"):
        rf.read_records(HEADER + struct.pack("<HHI", 17, 0, 0xFFFFFFFF))  # refused before its check
    with pytest.raises(rf.CaptureFormatError, match="continues call 5, which never began"):
        rf.read_records(HEADER + frames((11, continuation(5, 0, 0, [1], "Q"))))


def mapped(body: bytes, tail: bytes = bytes(4096)) -> bytes:
    """A file as the capture's memory map leaves it: the header's end after ``body``, then ``tail``."""
    end = len(HEADER) + len(body)
    return HEADER[:16] + end.to_bytes(8, "little") + bytes(8) + body + tail


def test_the_header_says_where_the_records_end() -> None:
    body = frames((17, text("first")), (21, struct.pack("<Q", 42)))
    # the window's zero fill after the last record: the file is whole
    records, cut = rf.read_records(mapped(body))
    assert records == [rf.Note("first"), rf.Thread(42)] and cut is None
    # a record whose copy a kill cut short lies after the end: reading stops at the end and says so
    torn = rf.frame(2, 17, text("second"))[:9]
    records, cut = rf.read_records(mapped(body, torn + bytes(100)))
    assert records == [rf.Note("first"), rf.Thread(42)] and cut == len(HEADER) + len(body)
    # a file shorter than its header says (copied while written): cut where it ends
    data = mapped(body, b"")
    records, cut = rf.read_records(data[:-3])
    assert records == [rf.Note("first")] and cut is not None


def test_hello_names_the_image_and_its_command_line() -> None:
    argv = b"python\0prog.py\0second\0"
    payload = struct.pack("<qqQ", 10, 1, 5) + text("/usr/bin/python") + struct.pack("<qI", 2, len(argv)) + argv
    (hello,), _ = rf.read_records(HEADER + frames((1, payload)))
    assert hello == rf.Hello(10, 1, 5, "/usr/bin/python", 2, ("python", "prog.py", "second"))


def test_image_files_in_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for name in ("capture.7.0.vzcap", "capture.5.0.vzcap", "capture.7.1.vzcap", "capture.9.10.vzcap",
                 "capture.9.2.vzcap", "capture.x.0.vzcap", "notes.txt", "capture.5.vzcap"):
        (tmp_path / name).write_bytes(b"")
    # the program's own images first, in exec order, then the others by pid and image
    assert [p.name for p in rf.image_files(tmp_path, program_pid=9)] == [
        "capture.9.2.vzcap", "capture.9.10.vzcap", "capture.5.0.vzcap", "capture.7.0.vzcap", "capture.7.1.vzcap"]
    assert rf.image_key("capture.7.1.vzcap") == (7, 1) and rf.image_key("capture.5.vzcap") is None


def test_every_record_carries_its_check() -> None:
    """A changed byte, and a record dropped, repeated or moved, fails the check of the record
    where it shows (its byte offset, its kind and what to do); the frame's check is
    ``binascii.crc_hqx``, as the capture library computes it."""
    recs = [(17, text("first")), (21, struct.pack("<Q", 42)), (17, text("third"))]
    framed = [rf.frame(seq, kind, payload) for seq, (kind, payload) in enumerate(recs)]
    assert rf.read_records(mapped(b"".join(framed)))[0] == [rf.Note("first"), rf.Thread(42), rf.Note("third")]
    second = len(HEADER) + len(framed[0])
    for body, at, kind in [
        (framed[0][:-1] + b"F" + b"".join(framed[1:]), len(HEADER), 17),   # a name's last letter changed
        (framed[0] + framed[2], second, 17),                                # the second record dropped
        (framed[0] + framed[0] + b"".join(framed[1:]), second, 17),         # the first one repeated
        (framed[1] + framed[0] + framed[2], len(HEADER), 21),               # the first two swapped
    ]:
        with pytest.raises(rf.CaptureFormatError, match=f"capture record at byte {at} \\(kind {kind}, record "
                                                        ".* fails its check.*capture the program again"):
            rf.read_records(mapped(body))
    # the frame's spare half-word is the check itself: a flipped bit there fails too
    flipped = bytearray(framed[0])
    flipped[2] ^= 1
    with pytest.raises(rf.CaptureFormatError, match="byte 32 \\(kind 17, record 0 of the file\\) fails its check"):
        rf.read_records(mapped(bytes(flipped) + b"".join(framed[1:])))
