"""The capture format is one table: interpose.c's record kinds, call kinds, placement and
access kinds, tensor offsets and format constants are read from the C source and compared
with rawfile's and layout's, so a kind added on one side only fails here."""

from __future__ import annotations

import enum
import re

from vizalloc.capture import layout
from vizalloc.capture import rawfile as rf
from vizalloc.capture.build import source

C = source().decode()


def c_enum(prefix: str) -> dict[str, int]:
    """``PREFIX_NAME = n`` members of the C enums, by NAME."""
    return {m[1]: int(m[2]) for m in re.finditer(rf"\b{prefix}_([A-Z0-9_]+)\s*=\s*(\d+)", C)}


def c_define(name: str) -> str:
    m = re.search(rf"^#define {name}\s+(.+?)\s*(/\*.*)?$", C, re.M)
    assert m, f"interpose.c has no #define {name}"
    return m[1]


def c_int(name: str) -> int:
    value = c_define(name)
    m = re.fullmatch(r"\((\d+)u?l?\s*<<\s*(\d+)\)", value)
    return int(m[1]) << int(m[2]) if m else int(value)


def members(kind: type[enum.IntEnum], *, skip: tuple[str, ...] = ()) -> dict[str, int]:
    return {m.name: int(m) for m in kind if m.name not in skip}


def test_record_kinds_are_one_table() -> None:
    assert c_enum("R") == members(rf.RecordKind)
    # every kind has its decoder
    assert set(rf.DECODERS) == set(rf.RecordKind)


def test_call_placement_and_access_kinds_are_one_table() -> None:
    assert c_enum("C") == members(rf.CallKind, skip=("CONTINUATION",))
    assert c_enum("PLACE") == members(rf.PlaceKind)
    assert c_enum("IO") == members(rf.IoKind)
    assert set(rf.CallKind) == set(rf._FUNCTIONS)


def test_the_tensor_layout_is_one_table() -> None:
    offsets = {m[1].lower(): int(m[2]) for m in re.finditer(r"^#define OFF_([A-Z_]+)\s+(\d+)", C, re.M)}
    fields = {name: offset for name, offset, _ in layout.FIELDS}
    assert offsets and all(fields.get(name) == offset for name, offset in offsets.items()), (offsets, fields)
    assert c_int("TENSOR_SIZE_KNOWN") == layout.TENSOR_SIZE == layout._STRUCT.size
    assert c_int("MAX_SRC") == layout.MAX_SRC
    # the decoder reads each field where the table says
    raw = bytearray(layout.TENSOR_SIZE)
    raw[offsets["data"]:offsets["data"] + 8] = (0x1234).to_bytes(8, "little")
    raw[offsets["name"]:offsets["name"] + 2] = b"ab"
    t = layout.decode(0, bytes(raw))
    assert t.data == 0x1234 and t.name == "ab"


def test_file_constants_and_supported_versions_agree() -> None:
    assert c_int("FORMAT_VERSION") == rf.FORMAT_VERSION
    assert c_int("HEADER_SIZE") == rf.HEADER_SIZE
    assert c_int("SCRATCH_CAP") == rf.MAX_RECORD
    magic = re.search(r'magic\[16\] = "([^"]*)"', C)
    assert magic and magic[1].startswith("VZCAPTURE\\0\\0\\0\\" + str(rf.FORMAT_VERSION))
    oldest, newest = layout.SUPPORTED
    assert f"ggml {oldest} ... {newest}" in C
