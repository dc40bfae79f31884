"""Encoding runs of events as chunks, and decoding many chunks back at once.

Every event kind has a fixed *row* of int64 slots: ``seq`` and ``t_ns`` (as differences
from the previous event of the same kind in the file), the location id, then one slot
per field: the value (ints, bools), an id into the file's interned string table
(strings, enum values), or, for tuples and other variable-size values, the number of
*items* the value occupies in a separate item stream (bytes fields: the number of bytes
in the raw blob). A chunk stores its events grouped by kind, rows one after another,
so the rows of one kind from many chunks simply concatenate.

A chunk's metadata (what goes through zlib) is::

    head   struct <6IB: n_events n_strings n_locs n_rows_ints n_items n_text int_planes
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
    >>> from vizalloc.trace.chunks import ChunkEncoder, ChunkDecoder
    >>> enc, dec = ChunkEncoder(), ChunkDecoder.for_current_schema()
    >>> evs = [ev.Marker(1, 100, None, "a"), ev.ContextFreed(2, 150, None, 7)]
    >>> meta, blob = enc.encode(evs)
    >>> dec.assemble([dec.decode(meta, blob, len(evs))]) == evs
    True
"""

from __future__ import annotations

import enum
import struct
import sys
import zlib
from array import array as _array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from vizalloc.trace import events as ev
from vizalloc.trace.schema import ENUMS, SCHEMA, KindSchema

_Location = ev.Location
_HEAD = struct.Struct("<6IBB")
_IN_ORDER = 1        # chunk head flag: rows in recording order (else grouped by kind)
#: Chunks up to this many events (the usual flush at the end of a small graph compute)
#: are encoded event by event in recording order, which costs less than grouping them.
ORDERED_MAX_EVENTS = 512
_INT64 = "q" if struct.calcsize("q") == 8 else "l"
_BIG_ENDIAN = sys.byteorder == "big"
_I64_MIN, _I64_SPAN = -(1 << 63), 1 << 64
_F64 = struct.Struct("<d")
_I64 = struct.Struct("<q")
# scalar item tags (op params)
_TAG_INT, _TAG_FLOAT, _TAG_STR, _TAG_BOOL, _TAG_NONE = range(5)
_SIMPLE = frozenset({"int", "bool", "str", "float"})

# slot kinds of a field
_S_INT, _S_BOOL, _S_STR, _S_ENUM, _S_FLOAT, _S_TUPLE_INT, _S_VAR, _S_BYTES = range(8)


class EncodeError(ValueError):
    """An event field holds a value its codec cannot store."""


def _is_simple(codec: str) -> bool:
    return codec in _SIMPLE or codec.startswith("enum:")


def _slot_kind(codec: str) -> int:
    if codec == "int":
        return _S_INT
    if codec == "bool":
        return _S_BOOL
    if codec == "str":
        return _S_STR
    if codec.startswith("enum:"):
        return _S_ENUM
    if codec == "float":
        return _S_FLOAT
    if codec == "tuple<int>":
        return _S_TUPLE_INT
    if codec == "bytes":
        return _S_BYTES
    if codec.startswith("tuple<") or codec == "scalar":
        if "bytes" in codec:
            raise TypeError(f"codec {codec}: bytes are only supported as a whole field")
        return _S_VAR
    raise TypeError(f"unknown codec {codec}")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one kind's fields map to row slots."""

    schema: KindSchema
    width: int
    slots: tuple[int, ...]          # slot kind per field
    var: tuple[int, ...]            # row columns holding item counts (tuples, scalars)
    blobs: tuple[int, ...]          # row columns holding blob byte counts
    convert: tuple[tuple[int, int, str, str], ...]  # (row column, slot kind, codec, name) of non-int fields


def _plan(schema: KindSchema) -> _Plan:
    slots = tuple(_slot_kind(c) for c in schema.codecs)
    var = tuple(3 + j for j, s in enumerate(slots) if s in (_S_TUPLE_INT, _S_VAR))
    blobs = tuple(3 + j for j, s in enumerate(slots) if s == _S_BYTES)
    convert = tuple((3 + j, s, c, n) for j, (s, c, n) in enumerate(zip(slots, schema.codecs, schema.fields))
                    if s != _S_INT)
    return _Plan(schema, 3 + len(slots), slots, var, blobs, convert)


_PLANS: dict[type[ev.Event], _Plan] = {cls: _plan(s) for cls, s in SCHEMA.items()}


def _as_bool(v: Any) -> int:
    if v is True or v is False or v == 0 or v == 1:
        return 1 if v else 0
    raise EncodeError(f"expected a bool, got {v!r}")


def _float_bits(v: Any) -> int:
    if not isinstance(v, float):
        raise EncodeError(f"expected a float, got {v!r}")
    return int(_I64.unpack(_F64.pack(v))[0])


def _bits_float(i: int) -> float:
    return float(_F64.unpack(_I64.pack(i))[0])


def _pack_planes(a: np.ndarray) -> tuple[bytes, int]:
    """int64 values, zigzag-coded (small negatives become small), byte-shuffled, all-zero planes dropped."""
    if not len(a):
        return b"", 0
    z = (a << 1) ^ (a >> 63)
    used = int(np.bitwise_or.reduce(z).view(np.uint64))
    present = [i for i in range(8) if used >> (8 * i) & 0xFF]
    k = len(present)
    planes = z.view(np.uint8).reshape(-1, 8)
    # the usual case: the low k planes, taken by slice
    planes = planes[:, :k] if present[-1:] == [k - 1] else planes[:, present]
    return planes.T.tobytes(), sum(1 << i for i in present)


_PLANES = [[i for i in range(8) if mask >> i & 1] for mask in range(256)]


def _unpack_planes(data: bytes | memoryview, n: int, mask: int) -> np.ndarray:
    """``_pack_ints``'s bytes as an (8, n) uint8 array of byte planes (the transpose is left
    for later, so it is done once for many chunks)."""
    planes = _PLANES[mask]
    if len(data) != n * len(planes):
        raise ValueError(f"integer section has {len(data)} bytes for {n} values in {len(planes)} byte planes")
    out = np.zeros((8, n), dtype=np.uint8)
    if n and planes:
        out[planes] = np.frombuffer(data, dtype=np.uint8).reshape(len(planes), n)
    return out


def _join_planes(pieces: Sequence[np.ndarray]) -> np.ndarray:
    """Byte-plane pieces (8, n_i) -> the int64 values, zigzag decoded."""
    planes = np.concatenate(pieces, axis=1) if len(pieces) != 1 else pieces[0]
    z = np.ascontiguousarray(planes.T).view("<u8").reshape(-1)
    low = (z & np.uint64(1)).view(np.int64)
    np.negative(low, out=low)
    z >>= np.uint64(1)
    out = z.view(np.int64)
    out ^= low
    return out


def _deltas(col: list[int], prev: int) -> list[int]:
    """Differences from the previous value, wrapped into int64 like the reader's cumsum wraps
    (the values themselves must fit int64)."""
    out = [x - p for p, x in zip(chain((prev,), col), col)]
    if min(out) < _I64_MIN or max(out) >= -_I64_MIN:
        _array(_INT64, col)  # OverflowError when a value itself is outside int64
        out = [(d - _I64_MIN) % _I64_SPAN + _I64_MIN for d in out]
    return out


_ROW_ENCODER_CODE: dict[type[ev.Event], Any] = {}
_INDEX: dict[type[ev.Event], int] = {cls: s.index for cls, s in SCHEMA.items()}
_NUMPY_DELTAS_FROM = 256


class ChunkEncoder:
    """Turns events into chunk bytes; keeps the file-wide tables between chunks.

    Args:
        compress_level: zlib level for the metadata stream, or None for no compression.
    """

    def __init__(self, compress_level: int | None = 1) -> None:
        self._sids: dict[str, int] = {}
        self._new_strings: list[str] = []
        self._lids: dict[int, int] = {id(None): 0}     # id(Location) -> location id (0: None)
        self._lid_by_value: dict[ev.Location, int] = {}
        self._locs: list[ev.Location] = []              # keeps interned objects (and their ids) alive
        self._new_locs: list[ev.Location] = []
        self._carry: dict[type[ev.Event], tuple[int, int]] = {}   # last (seq, t_ns) per kind
        self._zlib = None if compress_level is None else zlib.compressobj(compress_level)
        self._getters = {cls: attrgetter("seq", "t_ns", "loc", *s.fields) for cls, s in SCHEMA.items()}
        self._row_encoders = {cls: self._row_encoder(plan) for cls, plan in _PLANS.items()}
        self._numpy_deltas: list[tuple[int, int, int, tuple[int, int]]] = []

    def _row_encoder(self, plan: _Plan) -> Any:
        """A generated ``enc(row, rows, items, blob)`` that appends one event's row, for the
        in-order path: straight-line code with the kind's conversions inlined."""
        w = plan.width
        f = [f"f{i}" for i in range(w)]
        body = [
            f"    {', '.join(f)}, = row",
            "    c = carry_get(cls, zero)",
            "    carry[cls] = (f0, f1)",
            "    l = lids_get(id(f2))",
            "    if l is None:",
            "        l = loc_slow(f2)",
        ]
        exprs = ["f0 - c[0]", "f1 - c[1]", "l"]
        tail = []
        for j, slot, codec in zip(range(3, w), plan.slots, plan.schema.codecs):
            v = f[j]
            if slot == _S_INT:
                exprs.append(v)
            elif slot == _S_STR or slot == _S_ENUM:
                fast = f"sids_get({v})" if slot == _S_STR else f"sids_get({v}._value_)"
                check = "str" if slot == _S_STR else f"enum_{j}"
                body += [f"    s{j} = {fast} if type({v}) is {check} else None",
                         f"    if s{j} is None:", f"        s{j} = sid_slow({v})"]
                exprs.append(f"s{j}")
            elif slot == _S_BOOL:
                exprs.append(f"as_bool({v})")
            elif slot == _S_FLOAT:
                exprs.append(f"float_bits({v})")
            elif slot == _S_TUPLE_INT:
                exprs.append(f"len({v})")
                tail.append(f"    items += {v}")
            elif slot == _S_VAR:
                body.append(f"    v{j} = flat({codec!r}, {v})")
                exprs.append(f"len(v{j})")
                tail.append(f"    items += v{j}")
            else:  # _S_BYTES
                body.append(f"    if type({v}) is not bytes and type({v}) is not bytearray: raise EncodeError('expected bytes')")
                exprs.append(f"len({v})")
                tail.append(f"    blob.append({v})")
        body.append(f"    rows += ({', '.join(exprs)},)")
        body += tail
        scope: dict[str, Any] = {
            "cls": plan.schema.cls, "zero": (0, 0), "carry": self._carry, "carry_get": self._carry.get,
            "lids_get": self._lids.get, "loc_slow": lambda loc: self._loc_list([loc])[0],
            "sids_get": self._sids.get, "sid_slow": self._sid, "as_bool": _as_bool, "float_bits": _float_bits,
            "flat": self._flat, "EncodeError": EncodeError,
        }
        for j, slot, codec, _name in plan.convert:
            if slot == _S_ENUM:
                scope[f"enum_{j}"] = ENUMS[codec[5:]]
        code = _ROW_ENCODER_CODE.get(plan.schema.cls)
        if code is None:  # compiled once per kind; each encoder binds its own tables
            src = "def enc(row, rows, items, blob):\n" + "\n".join(body) + "\n"
            code = _ROW_ENCODER_CODE[plan.schema.cls] = compile(src, f"<vizalloc row encoder {plan.schema.name}>", "exec")
        exec(code, scope)  # noqa: S102 - our own generated code
        return scope["enc"]

    @property
    def compressed(self) -> bool:
        return self._zlib is not None

    def encode(self, events: Sequence[ev.Event]) -> tuple[bytes, bytes]:
        """One chunk of event objects: (stored metadata bytes, raw blob bytes)."""
        return self.encode_rows([e.__class__ for e in events], events)

    def encode_rows(self, classes: Sequence[type[ev.Event]], items: Sequence[Any], *, rows_only: bool = False
                    ) -> tuple[bytes, bytes]:
        """One chunk from parallel lists: each item is an event or its row ``(seq, t_ns, loc, *fields)``.

        ``rows_only`` promises that every item is a row (skips a per-item check).
        """
        for cls in set(classes):
            if cls not in SCHEMA:
                raise EncodeError(f"{getattr(cls, '__name__', cls)} is not an event kind of vizalloc.trace.events")
        if rows_only and len(items) <= ORDERED_MAX_EVENTS:
            saved = dict(self._carry)
            try:
                return self._encode(classes, items, in_order=True, rows_only=True)
            except (EncodeError, TypeError, ValueError, OverflowError, AttributeError):
                self._carry.clear()  # (in place: the row encoders hold this dict)
                self._carry.update(saved)  # the grouped path below wraps deltas and names the culprit
        return self._encode(classes, items, in_order=False, rows_only=rows_only)

    def _encode(self, classes: Sequence[type[ev.Event]], items: Sequence[Any], *, in_order: bool,
                rows_only: bool) -> tuple[bytes, bytes]:
        index = _INDEX
        kinds = bytes(map(index.__getitem__, classes))
        rows_ints: list[int] = []
        item_ints: list[int] = []
        blob: list[bytes] = []
        if in_order:
            encoders = self._row_encoders
            for cls, row in zip(classes, items):
                encoders[cls](row, rows_ints, item_ints, blob)
            rows_arr = _array(_INT64, rows_ints)
            items_arr = _array(_INT64, item_ints)
        else:
            groups: defaultdict[type[ev.Event], list[Any]] = defaultdict(list)
            for cls, item in zip(classes, items):
                groups[cls].append(item)
            self._numpy_deltas = []
            for cls in sorted(groups, key=index.__getitem__):
                group = groups[cls]
                if not rows_only:
                    getter = self._getters[cls]
                    group = [x if type(x) is tuple else getter(x) for x in group]
                try:
                    self._encode_kind(_PLANS[cls], group, rows_ints, item_ints, blob)
                except EncodeError as exc:
                    raise EncodeError(f"{cls.__name__}.{exc}") from None
                except (TypeError, AttributeError, ValueError) as exc:
                    raise EncodeError(f"{cls.__name__}: a field holds a value the trace file cannot store: {exc}"
                                      ) from exc
            try:
                rows_arr = _array(_INT64, rows_ints)
                items_arr = _array(_INT64, item_ints)
            except (TypeError, OverflowError) as exc:
                raise EncodeError(f"{self._culprit(groups)}: not an integer or outside the signed 64-bit "
                                  f"range ({exc})") from exc
            if self._numpy_deltas:
                rows_np = np.frombuffer(rows_arr, dtype=np.int64)
                for offset, w, n, carry in self._numpy_deltas:
                    block = rows_np[offset:offset + w * n].reshape(n, w)
                    for j in (0, 1):  # int64 differences wrap, as the reader's cumsum does
                        block[:, j] = np.diff(block[:, j], prepend=np.int64(carry[j]))
        loc_ints, lens, text = self._pack_tables()  # only now: nothing can fail after this
        arr = _array(_INT64, loc_ints)
        arr.extend(rows_arr)
        arr.extend(items_arr)
        if _BIG_ENDIAN:  # pragma: no cover
            arr.byteswap()
        int_bytes, planes = _pack_planes(np.frombuffer(arr, dtype="<i8"))
        n_strings = len(lens)
        raw = b"".join((
            _HEAD.pack(len(kinds), n_strings, len(loc_ints) // 3, len(rows_ints), len(item_ints), len(text), planes,
                       _IN_ORDER if in_order else 0),
            kinds, _array("I", lens).tobytes() if not _BIG_ENDIAN else struct.pack(f"<{n_strings}I", *lens),
            text, int_bytes,
        ))
        if self._zlib is not None:
            raw = self._zlib.compress(raw) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
        return raw, b"".join(blob)

    def _culprit(self, groups: dict[type[ev.Event], list[Any]]) -> str:
        """Which field held a value int64 cannot store (only called after a failure)."""
        for cls, group in groups.items():
            schema = SCHEMA[cls]
            for x in group:
                row = x if type(x) is tuple else self._getters[cls](x)
                for name, codec, v in zip(("seq", "t_ns", *schema.fields), ("int", "int", *schema.codecs),
                                          (row[0], row[1], *row[3:])):
                    values = v if codec == "tuple<int>" else (v,) if codec == "int" else ()
                    try:
                        _array(_INT64, values)
                    except (TypeError, OverflowError):
                        return f"{schema.name}.{name} = {v!r}"
        return "an integer field"  # pragma: no cover

    # -- tables --------------------------------------------------------------
    def _sid_list(self, values: Sequence[Any]) -> list[int]:
        sids = self._sids
        try:
            return [sids[s] for s in values]
        except (KeyError, TypeError):
            pass
        return [self._sid(s) for s in values]

    def _sid(self, s: Any) -> int:
        i = self._sids.get(s) if type(s) is str else None
        if i is not None:
            return i
        if type(s) is not str:
            if isinstance(s, enum.Enum) and isinstance(s.value, str):
                s = s.value
            elif isinstance(s, str):
                s = str.__str__(s)
            else:
                raise EncodeError(f"expected a string, got {s!r}")
        i = self._sids.get(s)
        if i is None:
            i = self._sids[s] = len(self._sids)
            self._new_strings.append(s)
        return i

    def _loc_list(self, locs: Sequence[Any]) -> list[int]:
        lids = self._lids
        try:
            return [lids[id(loc)] for loc in locs]
        except KeyError:
            pass
        out = []
        for loc in locs:
            i = lids.get(id(loc))
            if i is None:
                if not isinstance(loc, _Location):
                    raise EncodeError(f"loc: expected a Location or None, got {loc!r}")
                i = self._lid_by_value.get(loc)
                if i is None:
                    i = self._lid_by_value[loc] = len(self._lid_by_value) + 1
                    self._new_locs.append(loc)
                lids[id(loc)] = i
                self._locs.append(loc)
            out.append(i)
        return out

    def _pack_tables(self) -> tuple[list[int], list[int], bytes]:
        locs, self._new_locs = self._new_locs, []
        loc_ints: list[int] = []
        for loc in locs:  # their strings may be new too: intern them before the string table
            loc_ints += (self._sid(loc.file), loc.line, self._sid(loc.function))
        strings, self._new_strings = self._new_strings, []
        encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
        return loc_ints, [len(b) for b in encoded], b"".join(encoded)

    # -- rows ------------------------------------------------------------------
    def _encode_kind(self, plan: _Plan, rows: list[tuple[Any, ...]], rows_ints: list[int],
                     item_ints: list[int], blob: list[bytes]) -> None:
        """Append the kind's rows (row-major) and items; ``seq``/``t_ns`` stay raw here."""
        w = plan.width
        flat = list(chain.from_iterable(rows))
        if len(flat) != w * len(rows):
            raise EncodeError(f"{len(flat)} values for {len(rows)} events of {w} values each")
        # seq and t_ns as differences from the previous event of this kind in the file
        cls = plan.schema.cls
        carry = self._carry.get(cls, (0, 0))
        self._carry[cls] = (flat[-w], flat[1 - w])
        if len(rows) >= _NUMPY_DELTAS_FROM:  # big groups: differences in numpy, once the ints are an array
            self._numpy_deltas.append((len(rows_ints), w, len(rows), carry))
        else:
            flat[0::w] = _deltas(flat[0::w], carry[0])
            flat[1::w] = _deltas(flat[1::w], carry[1])
        # replace the non-integer slots in place, column by column (strided slices run in C)
        flat[2::w] = self._loc_list(flat[2::w])
        var_cols: list[Sequence[Any]] = []
        blob_cols: list[Sequence[Any]] = []
        for j, slot, codec, name in plan.convert:
            col = flat[j::w]
            try:
                if slot == _S_STR:
                    flat[j::w] = self._sid_list(col)
                elif slot == _S_TUPLE_INT:
                    flat[j::w] = list(map(len, col))
                    var_cols.append(col)
                elif slot == _S_ENUM:
                    try:
                        values = [v._value_ for v in col]
                    except AttributeError:
                        values = [v._value_ if isinstance(v, enum.Enum) else v for v in col]
                    flat[j::w] = self._sid_list(values)
                elif slot == _S_BOOL:
                    if not all(v is True or v is False or v == 0 or v == 1 for v in col):
                        raise EncodeError("expected booleans")
                    flat[j::w] = [1 if v else 0 for v in col]
                elif slot == _S_FLOAT:
                    flat[j::w] = [_float_bits(v) for v in col]
                elif slot == _S_VAR:
                    items = [self._flat(codec, v) for v in col]
                    flat[j::w] = list(map(len, items))
                    var_cols.append(items)
                else:  # _S_BYTES
                    if not all(isinstance(b, (bytes, bytearray)) for b in col):
                        raise EncodeError("expected bytes")
                    flat[j::w] = list(map(len, col))
                    blob_cols.append(col)
            except EncodeError as exc:
                raise EncodeError(f"{name}: {exc}") from None
        rows_ints += flat
        if var_cols:  # event-major: all items of an event, field after field
            item_ints.extend(chain.from_iterable(chain.from_iterable(zip(*var_cols))))
        if blob_cols:
            blob.extend(chain.from_iterable(zip(*blob_cols)))

    def _flat(self, codec: str, v: Any) -> list[int]:
        """The item ints of one variable-size value (a tuple other than tuple<int>, or a scalar)."""
        if codec == "scalar":
            if v is None:
                return [_TAG_NONE]
            if isinstance(v, bool):
                return [_TAG_BOOL, int(v)]
            if isinstance(v, int):
                return [_TAG_INT, int(v)]
            if isinstance(v, float):
                return [_TAG_FLOAT, _float_bits(v)]
            if isinstance(v, str):
                return [_TAG_STR, self._sid(v)]
            raise EncodeError(f"{v!r} is not an int, float, str, bool or None")
        if not codec.startswith("tuple<"):
            raise EncodeError(f"no item encoding for {codec}")  # pragma: no cover
        if not isinstance(v, tuple):
            raise EncodeError(f"expected a tuple, got {v!r}")
        inner = codec[6:-1]
        if _is_simple(inner):
            return [self._simple(inner, e) for e in v]
        out: list[int] = []
        for e in v:  # complex items carry their own length
            flat = self._flat(inner, e)
            out.append(len(flat))
            out += flat
        return out

    def _simple(self, codec: str, v: Any) -> int:
        if codec == "int":
            if not isinstance(v, int):
                raise EncodeError(f"expected an int, got {v!r}")
            return int(v)
        if codec == "bool":
            return 1 if v else 0
        if codec == "float":
            return _float_bits(v)
        return self._sid(v._value_ if isinstance(v, enum.Enum) else v)  # str, enum


@dataclass(slots=True)
class ChunkParts:
    """What one decoded chunk keeps until its batch is assembled."""

    offset: int             # byte offset of its frame in the file, for messages
    kinds: bytes
    planes: np.ndarray      # (planes present, n) bytes of the zigzag-coded ints
    mask: int               # which byte planes are present
    skip: int               # ints before the rows (new locations)
    n_rows: int             # row ints
    n_items: int            # item ints
    blob: bytes
    in_order: bool          # rows in recording order (else grouped by kind)


class ChunkDecoder:
    """Turns chunk bytes back into events; keeps the file-wide tables between chunks.

    Args:
        kinds: the file's kinds in its index order (None where this vizalloc lacks the kind
            or it has other fields; decoding such a kind raises ValueError naming it).
        names: the file's kind names, for messages.
        compressed: whether the metadata goes through a zlib stream.
    """

    def __init__(self, kinds: Sequence[KindSchema | None], names: Sequence[str], compressed: bool) -> None:
        self._plans = [None if s is None else _PLANS[s.cls] for s in kinds]
        self._names = list(names)
        self._widths = np.array([0 if p is None else p.width for p in self._plans] + [0] * (256 - len(kinds)),
                                dtype=np.int64)
        self._strings: list[str] = []
        self._string_array = np.empty(0, dtype=object)
        self._locs: list[ev.Location | None] = [None]
        self._loc_array = np.empty(0, dtype=object)
        self._enum_values: dict[str, dict[int, Any]] = {}
        self._carry: dict[int, tuple[int, int]] = {}
        self._zlib = zlib.decompressobj() if compressed else None

    @classmethod
    def for_current_schema(cls, compressed: bool = True) -> ChunkDecoder:
        return cls(list(SCHEMA.values()), [s.name for s in SCHEMA.values()], compressed)

    # -- per chunk: the minimum ------------------------------------------------------
    def decode(self, meta: bytes, blob: bytes, n_events: int, offset: int = 0) -> ChunkParts:
        """Decompress and split one chunk; new strings and locations join the tables.

        Raises ValueError (or zlib.error, struct.error, IndexError) on malformed bytes.
        """
        if self._zlib is not None:
            meta = self._zlib.decompress(meta)
        view = memoryview(meta)
        n_ev, n_strings, n_locs, n_rows, n_items, n_text, planes, flags = _HEAD.unpack_from(view, 0)
        if n_ev != n_events:
            raise ValueError(f"chunk holds {n_ev} events, its frame says {n_events}")
        pos = _HEAD.size
        kinds = bytes(view[pos:pos + n_ev])
        pos += n_ev
        lens = _array("I")
        lens.frombytes(view[pos:pos + 4 * n_strings])
        if _BIG_ENDIAN:  # pragma: no cover
            lens.byteswap()
        pos += 4 * n_strings
        text = bytes(view[pos:pos + n_text])
        pos += n_text
        n_ints = 3 * n_locs + n_rows + n_items
        present = _PLANES[planes]
        if len(view) - pos != n_ints * len(present):
            raise ValueError(f"integer section has {len(view) - pos} bytes for {n_ints} values in "
                             f"{len(present)} byte planes")
        ints = np.frombuffer(view, dtype=np.uint8, offset=pos).reshape(len(present), n_ints)
        if len(kinds) != n_ev or len(lens) != n_strings or len(text) != n_text or sum(lens) != n_text:
            raise ValueError("chunk sections do not add up")
        start = 0
        for n in lens:
            self._strings.append(text[start:start + n].decode("utf-8", "surrogatepass"))
            start += n
        if n_locs:
            strings = self._strings
            vals = _join_planes([_unpack_planes(ints[:, : 3 * n_locs].tobytes(), 3 * n_locs, planes)]).tolist()
            for i in range(0, len(vals), 3):
                self._locs.append(ev.Location(strings[vals[i]], vals[i + 1], strings[vals[i + 2]]))
        return ChunkParts(offset, kinds, ints, planes, 3 * n_locs, n_rows, n_items, blob, bool(flags & _IN_ORDER))

    # -- per batch: everything else ---------------------------------------------------
    def assemble(self, parts: Sequence[ChunkParts]) -> list[ev.Event]:
        """The events of consecutive decoded chunks, in recording order.

        Raises ValueError (or IndexError) when the chunks do not fit their schema.
        """
        kinds = np.frombuffer(b"".join(p.kinds for p in parts), dtype=np.uint8)
        n = len(kinds)
        if n == 0:
            return []
        counts = np.array([len(p.kinds) for p in parts], dtype=np.int64)
        present = np.flatnonzero(np.bincount(kinds, minlength=256))
        for k in present.tolist():
            if k >= len(self._plans) or self._plans[k] is None:
                name = self._names[k] if k < len(self._names) else f"#{k}"
                raise ValueError(f"event kind {name} is unknown to this vizalloc or has other fields")
        # the file stores each chunk's events grouped by kind ("layout order")
        chunk_of = np.repeat(np.arange(len(parts)), counts)
        in_order = np.array([p.in_order for p in parts])
        key = np.where(np.repeat(in_order, counts), 0, kinds) if in_order.any() else kinds
        order = np.lexsort((key, chunk_of))
        kinds_l = kinds[order]
        widths = self._widths[kinds_l]
        row_start = np.cumsum(widths) - widths
        chunk_starts = np.cumsum(counts) - counts
        _check_per_chunk(widths, chunk_starts, [p.n_rows for p in parts], "row", parts)
        rows_all, items_all = _gather_planes(parts)
        blob_all = b"".join(p.blob for p in parts)
        if len(self._string_array) != len(self._strings):
            self._string_array = np.empty(len(self._strings), dtype=object)
            self._string_array[:] = self._strings
        if len(self._loc_array) != len(self._locs):
            self._loc_array = np.empty(len(self._locs), dtype=object)
            self._loc_array[:] = self._locs
        # 1. gather each kind's rows; count the items and blob bytes of every event
        by_kind = np.argsort(kinds_l, kind="stable")
        per_kind = np.bincount(kinds_l, minlength=256)
        bounds = np.cumsum(per_kind)
        item_total = np.zeros(n, dtype=np.int64)
        blob_total = np.zeros(n, dtype=np.int64)
        gathered: list[tuple[int, np.ndarray, np.ndarray]] = []
        for k in present.tolist():
            plan = self._plans[k]
            assert plan is not None
            sel = by_kind[bounds[k] - per_kind[k]:bounds[k]]
            rows = rows_all[row_start[sel][:, None] + np.arange(plan.width)]
            if plan.var:
                item_total[sel] = rows[:, plan.var].sum(axis=1)
            if plan.blobs:
                blob_total[sel] = rows[:, plan.blobs].sum(axis=1)
            gathered.append((k, sel, rows))
        if (item_total < 0).any() or (blob_total < 0).any():
            raise ValueError("negative item or byte count")
        _check_per_chunk(item_total, chunk_starts, [p.n_items for p in parts], "item", parts)
        _check_per_chunk(blob_total, chunk_starts, [len(p.blob) for p in parts], "blob byte", parts)
        item_start = np.cumsum(item_total) - item_total
        blob_start = np.cumsum(blob_total) - blob_total
        item_list: list[int] | None = None
        # 2. columns per kind, events per kind, then back into recording order
        out = np.empty(n, dtype=object)
        for k, sel, rows in gathered:
            plan = self._plans[k]
            assert plan is not None
            if plan.var and item_list is None:
                item_list = items_all.tolist()
            cols = self._columns(k, plan, rows, item_start[sel], blob_start[sel], item_list, blob_all)
            out[order[sel]] = np.fromiter(map(plan.schema.new, *cols), dtype=object, count=len(sel))
        result: list[ev.Event] = out.tolist()
        return result

    def _columns(self, k: int, plan: _Plan, rows: np.ndarray, item_at: np.ndarray, blob_at: np.ndarray,
                 items: list[int] | None, blob: bytes) -> list[list[Any]]:
        seq0, t0 = self._carry.get(k, (0, 0))
        seq = np.cumsum(rows[:, 0]) + np.int64(seq0)
        t_ns = np.cumsum(rows[:, 1]) + np.int64(t0)
        self._carry[k] = (int(seq[-1]), int(t_ns[-1]))
        cols: list[list[Any]] = [seq.tolist(), t_ns.tolist(), self._loc_array[rows[:, 2]].tolist()]
        item_pos = item_at.copy()
        blob_pos = blob_at.copy()
        for j, (codec, slot) in enumerate(zip(plan.schema.codecs, plan.slots)):
            col = rows[:, 3 + j]
            if slot == _S_INT:
                cols.append(col.tolist())
            elif slot == _S_STR:
                cols.append(self._string_array[col].tolist())
            elif slot == _S_ENUM:
                cols.append(self._enum_list(codec[5:], col.tolist()))
            elif slot == _S_BOOL:
                cols.append((col != 0).tolist())
            elif slot == _S_FLOAT:
                cols.append([_bits_float(i) for i in col.tolist()])
            elif slot == _S_BYTES:
                starts, ends = blob_pos.tolist(), (blob_pos + col).tolist()
                cols.append([blob[a:b] for a, b in zip(starts, ends)])
                blob_pos += col
            else:
                assert items is not None
                starts, ends = item_pos.tolist(), (item_pos + col).tolist()
                if slot == _S_TUPLE_INT:
                    cols.append([tuple(items[a:b]) for a, b in zip(starts, ends)])
                else:
                    cols.append([self._value(codec, items[a:b]) for a, b in zip(starts, ends)])
                item_pos += col
        return cols

    def _enum_list(self, enum_name: str, ids: list[int]) -> list[Any]:
        cache = self._enum_values.setdefault(enum_name, {})
        try:
            return [cache[i] for i in ids]
        except KeyError:
            pass
        enum_cls = ENUMS[enum_name]
        for i in set(ids):
            if i not in cache:
                text = self._strings[i]
                try:
                    cache[i] = enum_cls(text)
                except ValueError:
                    cache[i] = text  # a value this vizalloc's enum lacks: kept as its string
        return [cache[i] for i in ids]

    def _value(self, codec: str, items: list[int]) -> Any:
        """A variable-size value from its item ints (see ``ChunkEncoder._flat``)."""
        if codec == "scalar":
            tag = items[0]
            if tag == _TAG_NONE and len(items) == 1:
                return None
            if len(items) != 2:
                raise ValueError(f"scalar item of {len(items)} ints")
            if tag == _TAG_INT:
                return items[1]
            if tag == _TAG_FLOAT:
                return _bits_float(items[1])
            if tag == _TAG_STR:
                return self._strings[items[1]]
            if tag == _TAG_BOOL:
                return bool(items[1])
            raise ValueError(f"unknown scalar tag {tag}")
        inner = codec[6:-1]
        if _is_simple(inner):
            if inner == "int":
                return tuple(items)
            if inner == "bool":
                return tuple(i != 0 for i in items)
            if inner == "float":
                return tuple(map(_bits_float, items))
            if inner == "str":
                return tuple(self._strings[i] for i in items)
            return tuple(self._enum_list(inner[5:], items))
        out = []
        pos = 0
        while pos < len(items):
            size = items[pos]
            if size < 0 or pos + 1 + size > len(items):
                raise ValueError("item length runs past its value")
            out.append(self._value(inner, items[pos + 1:pos + 1 + size]))
            pos += 1 + size
        return tuple(out)


def _gather_planes(parts: Sequence[ChunkParts]) -> tuple[np.ndarray, np.ndarray]:
    """All chunks' row ints and item ints, zigzag decoded (one transpose for all chunks)."""
    n_rows = sum(p.n_rows for p in parts)
    n_items = sum(p.n_items for p in parts)
    rows = np.zeros((8, n_rows), dtype=np.uint8)
    items = np.zeros((8, n_items), dtype=np.uint8)
    r = i = 0
    for p in parts:
        present = _PLANES[p.mask]
        k = len(present)
        # the usual case: the low k planes, assigned by slice instead of by index list
        target = slice(0, k) if present[-1:] == [k - 1] else present
        a, b = p.skip, p.skip + p.n_rows
        if p.n_rows:
            rows[target, r:r + p.n_rows] = p.planes[:, a:b]
        if p.n_items:
            items[target, i:i + p.n_items] = p.planes[:, b:]
        r += p.n_rows
        i += p.n_items
    return _join_planes([rows]), _join_planes([items])


def _check_per_chunk(per_event: np.ndarray, chunk_starts: np.ndarray, actual: list[int], what: str,
                     parts: Sequence[ChunkParts]) -> None:
    """Each chunk holds exactly the rows / items / blob bytes its events need."""
    need = np.add.reduceat(per_event, chunk_starts) if len(per_event) else np.zeros(0, dtype=np.int64)
    # reduceat gives a chunk with no events its next element: count those as 0
    need = np.where(np.diff(np.append(chunk_starts, len(per_event))) > 0, need, 0)
    bad = np.flatnonzero(need != np.array(actual, dtype=np.int64))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"the chunk at byte {parts[i].offset} has {actual[i]} {what}s, its events need {int(need[i])}")
