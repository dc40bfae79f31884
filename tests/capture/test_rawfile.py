"""The capture file reader on hand-made bytes: big graphs in continuation records, files cut
mid-record, damaged records."""

from __future__ import annotations

import struct

import pytest

from vizalloc.capture import rawfile as rf

HEADER = rf.MAGIC + rf.FORMAT_VERSION.to_bytes(4, "little") + bytes(16)  # records to the file's end


def record(kind: int, payload: bytes) -> bytes:
    return struct.pack("<HHI", kind, 0, len(payload)) + payload


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
    data = HEADER + record(11, call_head(3, 5, 2, ids=True))
    data += record(11, continuation(3, 0, 0, nodes[:3], "Q")) + record(11, continuation(3, 0, 3, nodes[3:], "Q"))
    data += record(11, continuation(3, 1, 0, leafs, "Q"))
    data += record(17, text("a note in between"))  # records of the call come after it, not before
    data += record(11, continuation(3, 2, 0, [0, 1, 0, 1, 0], "i"))
    records, cut = rf.read_records(data)
    assert cut is None
    assert isinstance(records[0], rf.Note)
    call = records[1]
    assert isinstance(call, rf.Call)
    assert call.nodes == tuple(nodes) and call.leafs == tuple(leafs) and call.node_ids == (0, 1, 0, 1, 0)
    assert call.leaf_ids is None and call.site == "prog\tmain" and call.t_ns == 7


def test_a_file_cut_inside_a_record_keeps_the_records_before() -> None:
    first = record(17, text("first"))
    whole = HEADER + first + record(17, text("second"))
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
        rf.read_records(HEADER + record(99, b""))
    # a galloc record claiming more buffer types than it holds
    bad = struct.pack("<qQQq", 0, 1, 0, 1 << 40)
    with pytest.raises(rf.CaptureFormatError, match="byte 32 claims"):
        rf.read_records(HEADER + record(14, bad))
    with pytest.raises(rf.CaptureFormatError, match="claims 4294967295 bytes"):
        rf.read_records(HEADER + struct.pack("<HHI", 17, 0, 0xFFFFFFFF))
    with pytest.raises(rf.CaptureFormatError, match="continues call 5, which never began"):
        rf.read_records(HEADER + record(11, continuation(5, 0, 0, [1], "Q")))


def mapped(body: bytes, tail: bytes = bytes(4096)) -> bytes:
    """A file as the capture's memory map leaves it: the header's end after ``body``, then ``tail``."""
    end = len(HEADER) + len(body)
    return HEADER[:16] + end.to_bytes(8, "little") + bytes(8) + body + tail


def test_the_header_says_where_the_records_end() -> None:
    body = record(17, text("first")) + record(21, struct.pack("<Q", 42))
    # the window's zero fill after the last record: the file is whole
    records, cut = rf.read_records(mapped(body))
    assert records == [rf.Note("first"), rf.Thread(42)] and cut is None
    # a record whose copy a kill cut short lies after the end: reading stops at the end and says so
    torn = record(17, text("second"))[:9]
    records, cut = rf.read_records(mapped(body, torn + bytes(100)))
    assert records == [rf.Note("first"), rf.Thread(42)] and cut == len(HEADER) + len(body)
    # a file shorter than its header says (copied while written): cut where it ends
    data = mapped(body, b"")
    records, cut = rf.read_records(data[:-3])
    assert records == [rf.Note("first")] and cut is not None


def test_hello_names_the_image_and_its_command_line() -> None:
    argv = b"python\0prog.py\0second\0"
    payload = struct.pack("<qqQ", 10, 1, 5) + text("/usr/bin/python") + struct.pack("<qI", 2, len(argv)) + argv
    (hello,), _ = rf.read_records(HEADER + record(1, payload))
    assert hello == rf.Hello(10, 1, 5, "/usr/bin/python", 2, ("python", "prog.py", "second"))


def test_image_files_in_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for name in ("capture.7.0.vzcap", "capture.5.0.vzcap", "capture.7.1.vzcap", "capture.9.10.vzcap",
                 "capture.9.2.vzcap", "capture.x.0.vzcap", "notes.txt", "capture.5.vzcap"):
        (tmp_path / name).write_bytes(b"")
    # the program's own images first, in exec order, then the others by pid and image
    assert [p.name for p in rf.image_files(tmp_path, program_pid=9)] == [
        "capture.9.2.vzcap", "capture.9.10.vzcap", "capture.5.0.vzcap", "capture.7.0.vzcap", "capture.7.1.vzcap"]
    assert rf.image_key("capture.7.1.vzcap") == (7, 1) and rf.image_key("capture.5.vzcap") is None
