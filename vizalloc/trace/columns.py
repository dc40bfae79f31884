"""Columns of plain values as bytes: the smallest integer width that fits, little-endian.

A column is written as ``code (1 byte) | nbytes (u32) | data``. ``code`` is one of
``b B h H i I q Q`` (signed/unsigned 1, 2, 4, 8-byte integers) or ``d`` (float64),
the letters of Python's ``struct`` module, always little-endian in the file.

    >>> from vizalloc.trace.columns import pack_ints, unpack
    >>> blob = pack_ints([3, 300, -1])
    >>> blob[:1], unpack(blob, 0)[0]
    (b'h', [3, 300, -1])
"""

from __future__ import annotations

import struct
import sys
from array import array

_LEN = struct.Struct("<BI")
_SWAP = sys.byteorder == "big"  # the file is little-endian


def _typecode(size: int, signed: bool) -> str:
    for tc in ("bhilq" if signed else "BHILQ"):
        if array(tc).itemsize == size:
            return tc
    raise RuntimeError(f"this Python has no {size}-byte array typecode")  # pragma: no cover


#: file code -> array typecode with that size and signedness
ARRAY_CODE: dict[str, str] = {
    "b": _typecode(1, True), "B": _typecode(1, False), "h": _typecode(2, True), "H": _typecode(2, False),
    "i": _typecode(4, True), "I": _typecode(4, False), "q": _typecode(8, True), "Q": _typecode(8, False),
    "d": "d",
}
_BY_BYTE = {ord(code): tc for code, tc in ARRAY_CODE.items()}
ITEMSIZE = {code: array(tc).itemsize for code, tc in ARRAY_CODE.items()}


def int_code(lo: int, hi: int) -> str:
    """The narrowest file code holding every value in ``[lo, hi]``."""
    if lo >= 0:
        if hi < 1 << 8:
            return "B"
        if hi < 1 << 16:
            return "H"
        if hi < 1 << 32:
            return "I"
        if hi < 1 << 64:
            return "Q"
    else:
        if lo >= -(1 << 7) and hi < 1 << 7:
            return "b"
        if lo >= -(1 << 15) and hi < 1 << 15:
            return "h"
        if lo >= -(1 << 31) and hi < 1 << 31:
            return "i"
        if lo >= -(1 << 63) and hi < 1 << 63:
            return "q"
    raise OverflowError(f"integers in [{lo}, {hi}] do not fit in 64 bits")


def pack_ints(values: list[int]) -> bytes:
    """One integer column (raises OverflowError past 64 bits, TypeError for non-integers)."""
    if not values:
        return _LEN.pack(ord("B"), 0)
    code = int_code(min(values), max(values))
    arr = array(ARRAY_CODE[code], values)
    if _SWAP:  # pragma: no cover - big-endian hosts
        arr.byteswap()
    data = arr.tobytes()
    return _LEN.pack(ord(code), len(data)) + data


def pack_floats(values: list[float]) -> bytes:
    arr = array("d", values)
    if _SWAP:  # pragma: no cover
        arr.byteswap()
    data = arr.tobytes()
    return _LEN.pack(ord("d"), len(data)) + data


def unpack(buf: bytes | memoryview, pos: int) -> tuple[list, int]:  # type: ignore[type-arg]
    """The column at ``buf[pos:]`` as a list, and the position after it.

    Raises ValueError when the column is malformed (unknown code, length past the end,
    length not a multiple of the item size).
    """
    code, nbytes = _LEN.unpack_from(buf, pos)
    pos += _LEN.size
    end = pos + nbytes
    tc = _BY_BYTE.get(code)
    if tc is None:
        raise ValueError(f"unknown column code {code}")
    if end > len(buf):
        raise ValueError(f"column of {nbytes} bytes runs past the end of its chunk")
    arr = array(tc)
    arr.frombytes(buf[pos:end])  # ValueError if nbytes is not a multiple of the item size
    if _SWAP:  # pragma: no cover
        arr.byteswap()
    return arr.tolist(), end


def pack_bytes(data: bytes) -> bytes:
    """A raw byte column (kinds, bools, tags)."""
    return _LEN.pack(ord("B"), len(data)) + data


def unpack_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes, int]:
    code, nbytes = _LEN.unpack_from(buf, pos)
    pos += _LEN.size
    end = pos + nbytes
    if code != ord("B") or end > len(buf):
        raise ValueError("malformed byte column")
    return bytes(buf[pos:end]), end
