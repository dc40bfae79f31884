"""The chunk layout shared by the encoder (``chunk_encoder.py``) and the decoder (``chunk_decoder.py``).

Every event kind has a fixed *row* of int64 slots: ``seq`` and ``t_ns`` (as differences
from the previous event of the same kind in the file), the location id, then one slot
per field: the value (ints, bools), an id into the file's interned string table
(strings, enum values), or, for tuples and other variable-size values, the number of
*items* the value occupies in a separate item stream (bytes fields: the number of bytes
in the raw blob). A chunk stores its rows in recording order (small chunks) or grouped
by kind (big ones); either way the decoder finds every row with a few numpy operations.

A chunk's metadata (what goes through zlib) is::

    head   struct <6IBB: n_events n_strings n_locs n_rows_ints n_items n_text int_planes flags
    kinds  u8[n_events]            the kind of every event, in recording order
    lens   u32[n_strings]          byte lengths of the strings new in this chunk
    text   the UTF-8 bytes of those strings
    ints   int64[3 n_locs + n_rows_ints + n_items], zigzag-coded, byte-shuffled (all first
           bytes, then all second bytes, ...), all-zero byte planes left out
           (bit i of int_planes says whether plane i is present): new locations
           (file id, line, function id), then the rows, then the items

and the blob (``ValueSnapshot.data``) follows it raw. All chunks' metadata goes through
one zlib stream, flushed at every chunk, so small chunks compress as well as big ones.

The decoder does the per-chunk minimum (decompress, unshuffle, keep the pieces) and
builds events for many chunks at once with numpy: rows are gathered per kind,
differences summed, ids mapped, and each kind's events made by one ``map`` over its
columns with the kind's fast constructor. That is what makes a 2M-event file of small
chunks (one per graph compute) load in seconds.

    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.trace.chunk_encoder import ChunkEncoder
    >>> from vizalloc.trace.chunk_decoder import ChunkDecoder
    >>> enc, dec = ChunkEncoder(), ChunkDecoder.for_current_schema()
    >>> evs = [ev.Marker(1, 100, None, "a"), ev.ContextFreed(2, 150, None, 7)]
    >>> meta, blob = enc.encode(evs)
    >>> dec.assemble([dec.decode(meta, blob, len(evs))]) == evs
    True
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vizalloc.trace import events as ev
from vizalloc.trace.schema import SCHEMA, KindSchema

HEAD = struct.Struct("<6IBB")
IN_ORDER = 1        # chunk head flag: rows in recording order (else grouped by kind)
#: Chunks up to this many events (the usual flush at the end of a small graph compute)
#: are encoded event by event in recording order, which costs less than grouping them.
ORDERED_MAX_EVENTS = 512
INT64 = "q" if struct.calcsize("q") == 8 else "l"
BIG_ENDIAN = sys.byteorder == "big"
I64_MIN, I64_SPAN = -(1 << 63), 1 << 64
_F64 = struct.Struct("<d")
_I64 = struct.Struct("<q")
# scalar item tags (op params)
TAG_INT, TAG_FLOAT, TAG_STR, TAG_BOOL, TAG_NONE = range(5)
_SIMPLE = frozenset({"int", "bool", "str", "float"})

# slot kinds of a field
S_INT, S_BOOL, S_STR, S_ENUM, S_FLOAT, S_TUPLE_INT, S_VAR, S_BYTES = range(8)


class EncodeError(ValueError):
    """An event field holds a value its codec cannot store."""


def is_simple(codec: str) -> bool:
    return codec in _SIMPLE or codec.startswith("enum:")


def _slot_kind(codec: str) -> int:
    if codec == "int":
        return S_INT
    if codec == "bool":
        return S_BOOL
    if codec == "str":
        return S_STR
    if codec.startswith("enum:"):
        return S_ENUM
    if codec == "float":
        return S_FLOAT
    if codec == "tuple<int>":
        return S_TUPLE_INT
    if codec == "bytes":
        return S_BYTES
    if codec.startswith("tuple<") or codec == "scalar":
        if "bytes" in codec:
            raise TypeError(f"codec {codec}: bytes are only supported as a whole field")
        return S_VAR
    raise TypeError(f"unknown codec {codec}")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class RowPlan:
    """How one kind's fields map to row slots."""

    schema: KindSchema
    width: int
    slots: tuple[int, ...]          # slot kind per field
    var: tuple[int, ...]            # row columns holding item counts (tuples, scalars)
    blobs: tuple[int, ...]          # row columns holding blob byte counts
    convert: tuple[tuple[int, int, str, str], ...]  # (row column, slot kind, codec, name) of non-int fields


def _plan(schema: KindSchema) -> RowPlan:
    slots = tuple(_slot_kind(c) for c in schema.codecs)
    var = tuple(3 + j for j, s in enumerate(slots) if s in (S_TUPLE_INT, S_VAR))
    blobs = tuple(3 + j for j, s in enumerate(slots) if s == S_BYTES)
    convert = tuple((3 + j, s, c, n) for j, (s, c, n) in enumerate(zip(slots, schema.codecs, schema.fields))
                    if s != S_INT)
    return RowPlan(schema, 3 + len(slots), slots, var, blobs, convert)


ROW_PLANS: dict[type[ev.Event], RowPlan] = {cls: _plan(s) for cls, s in SCHEMA.items()}


def as_bool(v: Any) -> int:
    if v is True or v is False or v == 0 or v == 1:
        return 1 if v else 0
    raise EncodeError(f"expected a bool, got {v!r}")


def float_bits(v: Any) -> int:
    if not isinstance(v, float):
        raise EncodeError(f"expected a float, got {v!r}")
    return int(_I64.unpack(_F64.pack(v))[0])


def bits_float(i: int) -> float:
    return float(_F64.unpack(_I64.pack(i))[0])


def pack_planes(a: np.ndarray) -> tuple[bytes, int]:
    """int64 values, zigzag-coded (small negatives become small), byte-shuffled, all-zero planes dropped."""
    if not len(a):
        return b"", 0
    z = a << 1
    z ^= a >> 63
    used = int(np.bitwise_or.reduce(z)) & 0xFFFF_FFFF_FFFF_FFFF
    k = (used.bit_length() + 7) >> 3
    planes = z.view(np.uint8).reshape(-1, 8)
    low = used.to_bytes(8, "little")[:k]
    if b"\0" not in low:  # the usual case: the low k planes, taken by slice
        return planes[:, :k].T.tobytes(), (1 << k) - 1
    present = [i for i in range(k) if low[i]]
    return planes[:, present].T.tobytes(), sum(1 << i for i in present)


PLANES = [[i for i in range(8) if mask >> i & 1] for mask in range(256)]


def unpack_planes(data: bytes | memoryview, n: int, mask: int) -> np.ndarray:
    """``_pack_ints``'s bytes as an (8, n) uint8 array of byte planes (the transpose is left
    for later, so it is done once for many chunks)."""
    planes = PLANES[mask]
    if len(data) != n * len(planes):
        raise ValueError(f"integer section has {len(data)} bytes for {n} values in {len(planes)} byte planes")
    out = np.zeros((8, n), dtype=np.uint8)
    if n and planes:
        out[planes] = np.frombuffer(data, dtype=np.uint8).reshape(len(planes), n)
    return out


def join_planes(pieces: Sequence[np.ndarray]) -> np.ndarray:
    """Byte-plane pieces (8, n_i) -> the int64 values, zigzag decoded."""
    planes = np.concatenate(pieces, axis=1) if len(pieces) != 1 else pieces[0]
    z = np.ascontiguousarray(planes.T).view("<u8").reshape(-1)
    low = (z & np.uint64(1)).view(np.int64)
    np.negative(low, out=low)
    z >>= np.uint64(1)
    out = z.view(np.int64)
    out ^= low
    return out


