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
