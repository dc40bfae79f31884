"""Encoding a run of events as one chunk, and decoding it back.

A chunk is columnar: events are grouped by kind, and every field of a kind becomes
one column (``columns.py``) of the narrowest integer width that fits. Strings and
source locations are interned: a chunk carries only the strings and locations that
no earlier chunk of the file carried, and columns hold their ids. ``seq`` and ``t_ns``
are stored as differences from the previous event of the same kind. Bytes fields
(``ValueSnapshot.data``) go raw into a separate blob. The chunk's metadata then goes
through one zlib stream for the whole file, flushed (``Z_SYNC_FLUSH``) at the end of
every chunk, so small chunks compress as well as large ones and every chunk is
decodable as soon as it is on disk.

Encoder and decoder are stateful (string table, locations, deltas, zlib stream): chunks
must be decoded in file order, which is also what makes a file's prefix readable.

    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.trace.chunks import ChunkEncoder, ChunkDecoder, assemble
    >>> enc, dec = ChunkEncoder(), ChunkDecoder.for_current_schema()
    >>> evs = [ev.Marker(1, 100, None, "a"), ev.ContextFreed(2, 150, None, 7)]
    >>> meta, blob = enc.encode(evs)
    >>> assemble(*dec.decode(meta, blob, len(evs))) == evs
    True
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Sequence
from itertools import accumulate, chain
from operator import attrgetter
from typing import Any

import numpy as np

from vizalloc.trace import events as ev
from vizalloc.trace.columns import pack_bytes, pack_floats, pack_ints, unpack, unpack_bytes
from vizalloc.trace.schema import ENUMS, SCHEMA, KindSchema

_Location = ev.Location
# Tags of the items of a ``scalar`` tuple (op params).
_TAG_INT, _TAG_FLOAT, _TAG_STR, _TAG_BOOL, _TAG_NONE = range(5)


class EncodeError(ValueError):
    """An event field holds a value its codec cannot store."""


class ChunkEncoder:
    """Turns lists of events into chunk bytes; keeps the file-wide tables between chunks.

    Args:
        compress_level: zlib level for the metadata stream, or None for no compression.
    """

    def __init__(self, compress_level: int | None = 6) -> None:
        self._sids: dict[str, int] = {}
        self._new_strings: list[str] = []
        self._lids: dict[int, int] = {id(None): 0}     # id(Location) -> location id (0: None)
        self._lid_by_value: dict[ev.Location, int] = {}
        self._locs: list[ev.Location] = []              # keeps interned objects (and their ids) alive
        self._new_locs: list[ev.Location] = []
        self._carry: dict[int, list[int]] = {}         # kind index -> [last seq, last t_ns]
        self._zlib = None if compress_level is None else zlib.compressobj(compress_level)
        self._getters = {cls: attrgetter("seq", "t_ns", "loc", *s.fields) for cls, s in SCHEMA.items()}

    @property
    def compressed(self) -> bool:
        return self._zlib is not None

    def encode(self, events: Sequence[ev.Event]) -> tuple[bytes, bytes]:
        """One chunk: (stored metadata bytes, raw blob bytes)."""
        groups: dict[type[ev.Event], list[ev.Event]] = {}
        for e in events:
            cls = e.__class__
            group = groups.get(cls)
            if group is None:
                if cls not in SCHEMA:
                    raise EncodeError(f"{cls.__name__} is not an event kind of vizalloc.trace.events")
                group = groups[cls] = []
            group.append(e)
        index = {cls: SCHEMA[cls].index for cls in groups}
        kinds = bytes([index[e.__class__] for e in events])
        blob: list[bytes] = []
        body: list[bytes] = []
        present = sorted(groups, key=index.__getitem__)
        body.append(pack_ints([index[c] for c in present]))
        body.append(pack_ints([len(groups[c]) for c in present]))
        for cls in present:
            self._encode_kind(SCHEMA[cls], groups[cls], body, blob)
        # strings and locations first: the decoder needs them before the columns
        head = [self._pack_tables(), pack_bytes(kinds)]
        raw = b"".join(head + body)
        if self._zlib is not None:
            raw = self._zlib.compress(raw) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
        return raw, b"".join(blob)

    # -- tables --------------------------------------------------------------
    def _sid_list(self, values: Sequence[Any], where: str) -> list[int]:
        sids = self._sids
        try:
            return [sids[s] for s in values]
        except (KeyError, TypeError):
            pass
        out = []
        for s in values:
            if type(s) is not str:
                if isinstance(s, enum.Enum) and isinstance(s.value, str):
                    s = s.value
                elif isinstance(s, str):
                    s = str.__str__(s)
                else:
                    raise EncodeError(f"{where}: expected a string, got {s!r}")
            i = sids.get(s)
            if i is None:
                i = sids[s] = len(sids)
                self._new_strings.append(s)
            out.append(i)
        return out

    def _loc_list(self, locs: Sequence[Any], where: str) -> list[int]:
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
                    raise EncodeError(f"{where}.loc: expected a Location or None, got {loc!r}")
                i = self._lid_by_value.get(loc)
                if i is None:
                    i = self._lid_by_value[loc] = len(self._lid_by_value) + 1
                    self._new_locs.append(loc)
                lids[id(loc)] = i
                self._locs.append(loc)
            out.append(i)
        return out

    def _pack_tables(self) -> bytes:
        strings, self._new_strings = self._new_strings, []
        locs, self._new_locs = self._new_locs, []
        # location strings may be new too: intern them before writing the string table
        files = self._sid_list([loc.file for loc in locs], "Location.file")
        funcs = self._sid_list([loc.function for loc in locs], "Location.function")
        strings += self._new_strings
        self._new_strings = []
        encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
        return b"".join((
            pack_ints([len(b) for b in encoded]), pack_bytes(b"".join(encoded)),
            pack_ints(files), pack_ints([loc.line for loc in locs]), pack_ints(funcs),
        ))

    # -- columns -------------------------------------------------------------
    def _encode_kind(self, schema: KindSchema, group: list[ev.Event], body: list[bytes], blob: list[bytes]) -> None:
        cols = list(zip(*map(self._getters[schema.cls], group)))
        carry = self._carry.setdefault(schema.index, [0, 0])
        where = schema.name
        try:
            for j in (0, 1):
                col = cols[j]
                prev = carry[j]
                body.append(pack_ints([x - p for p, x in zip(chain((prev,), col), col)]))
                carry[j] = col[-1]
            body.append(pack_ints(self._loc_list(cols[2], where)))
            for name, codec, col in zip(schema.fields, schema.codecs, cols[3:]):
                self._encode_column(codec, list(col), body, blob, f"{where}.{name}")
        except (TypeError, OverflowError) as exc:
            raise EncodeError(f"{where}: a field holds a value the trace file cannot store: {exc}") from exc

    def _encode_column(self, codec: str, col: list[Any], body: list[bytes], blob: list[bytes], where: str) -> None:
        if codec == "int":
            body.append(pack_ints(col))
        elif codec == "str":
            body.append(pack_ints(self._sid_list(col, where)))
        elif codec == "bool":
            body.append(pack_bytes(bytes(col)))
        elif codec.startswith("enum:"):
            try:
                values = [v._value_ for v in col]
            except AttributeError:
                values = [v._value_ if isinstance(v, enum.Enum) else v for v in col]
            body.append(pack_ints(self._sid_list(values, where)))
        elif codec.startswith("tuple<"):
            body.append(pack_ints(list(map(len, col))))
            self._encode_column(codec[6:-1], list(chain.from_iterable(col)), body, blob, where)
        elif codec == "scalar":
            self._encode_scalars(col, body, where)
        elif codec == "bytes":
            body.append(pack_ints(list(map(len, col))))
            blob.extend(bytes(b) for b in col)
        elif codec == "float":
            body.append(pack_floats(col))
        else:  # pragma: no cover - schema.codec_of knows no other
            raise EncodeError(f"{where}: unknown codec {codec}")

    def _encode_scalars(self, items: list[Any], body: list[bytes], where: str) -> None:
        tags = bytearray()
        ints: list[int] = []
        floats: list[float] = []
        strs: list[str] = []
        for v in items:
            if v is None:
                tags.append(_TAG_NONE)
            elif isinstance(v, bool):
                tags.append(_TAG_BOOL)
                ints.append(int(v))
            elif isinstance(v, int):
                tags.append(_TAG_INT)
                ints.append(int(v))
            elif isinstance(v, float):
                tags.append(_TAG_FLOAT)
                floats.append(float(v))
            elif isinstance(v, str):
                tags.append(_TAG_STR)
                strs.append(v)
            else:
                raise EncodeError(f"{where}: {v!r} is not an int, float, str, bool or None")
        body += [pack_bytes(bytes(tags)), pack_ints(ints), pack_floats(floats), pack_ints(self._sid_list(strs, where))]


class ChunkDecoder:
    """Turns chunk bytes back into columns; keeps the file-wide tables between chunks.

    Args:
        kinds: the file's kinds in its index order (None where this vizalloc lacks the kind
            or it has other fields; decoding such a kind raises ValueError naming it).
        names: the file's kind names, for messages.
        compressed: whether the metadata goes through a zlib stream.
    """

    def __init__(self, kinds: Sequence[KindSchema | None], names: Sequence[str], compressed: bool) -> None:
        self._kinds = list(kinds)
        self._names = list(names)
        self._strings: list[str] = []
        self._locs: list[ev.Location | None] = [None]
        self._carry: dict[int, list[int]] = {}
        self._enum_values: dict[str, dict[int, Any]] = {}
        self._zlib = zlib.decompressobj() if compressed else None

    @classmethod
    def for_current_schema(cls, compressed: bool = True) -> ChunkDecoder:
        return cls(list(SCHEMA.values()), [s.name for s in SCHEMA.values()], compressed)

    def decode(self, meta: bytes, blob: bytes, n_events: int) -> tuple[bytes, dict[int, list[list[Any]]]]:
        """A chunk's kinds column and, per kind index, its columns (seq, t_ns, loc, fields...).

        Raises ValueError (or zlib.error, struct.error, IndexError) on malformed bytes.
        """
        if self._zlib is not None:
            meta = self._zlib.decompress(meta)
        buf = memoryview(meta)
        pos = self._read_tables(buf, 0)
        kinds, pos = unpack_bytes(buf, pos)
        if len(kinds) != n_events:
            raise ValueError(f"chunk says {n_events} events but has {len(kinds)} kinds")
        present, pos = unpack(buf, pos)
        counts, pos = unpack(buf, pos)
        if len(present) != len(counts) or sum(counts) != n_events:
            raise ValueError("chunk kind counts do not add up")
        if n_events:
            tally = np.bincount(np.frombuffer(kinds, dtype=np.uint8), minlength=256)
            if any(int(tally[k]) != c for k, c in zip(present, counts)) or int(tally.sum()) != sum(counts):
                raise ValueError("chunk kind counts do not match its kinds column")
        out: dict[int, list[list[Any]]] = {}
        blob_view = memoryview(blob)
        blob_pos = [0]
        for k, count in zip(present, counts):
            schema = self._kinds[k] if 0 <= k < len(self._kinds) else None
            if schema is None:
                name = self._names[k] if 0 <= k < len(self._names) else f"#{k}"
                raise ValueError(f"event kind {name} is unknown to this vizalloc or has other fields")
            carry = self._carry.setdefault(k, [0, 0])
            cols: list[list[Any]] = []
            for j in (0, 1):
                deltas, pos = unpack(buf, pos)
                it = accumulate(chain((carry[j],), deltas))
                next(it)
                col = list(it)
                if len(col) != count:
                    raise ValueError(f"{schema.name}: column of {len(col)} values for {count} events")
                carry[j] = col[-1]
                cols.append(col)
            lids, pos = unpack(buf, pos)
            locs = self._locs
            cols.append([locs[i] for i in lids])
            for codec in schema.codecs:
                col, pos = self._decode_column(codec, buf, pos, blob_view, blob_pos)
                if len(col) != count:
                    raise ValueError(f"{schema.name}: column of {len(col)} values for {count} events")
                cols.append(col)
            out[k] = cols
        if pos != len(buf) or blob_pos[0] != len(blob):
            raise ValueError("chunk has bytes left over after its columns")
        return kinds, out

    def _read_tables(self, buf: memoryview, pos: int) -> int:
        lengths, pos = unpack(buf, pos)
        text, pos = unpack_bytes(buf, pos)
        start = 0
        for n in lengths:
            self._strings.append(text[start:start + n].decode("utf-8", "surrogatepass"))
            start += n
        if start != len(text):
            raise ValueError("string table lengths do not match its bytes")
        files, pos = unpack(buf, pos)
        lines, pos = unpack(buf, pos)
        funcs, pos = unpack(buf, pos)
        strings = self._strings
        for f, line, fn in zip(files, lines, funcs, strict=True):
            self._locs.append(ev.Location(strings[f], line, strings[fn]))
        return pos

    def _decode_column(self, codec: str, buf: memoryview, pos: int, blob: memoryview,
                       blob_pos: list[int]) -> tuple[list[Any], int]:
        if codec == "int" or codec == "float":
            return unpack(buf, pos)
        if codec == "str":
            ids, pos = unpack(buf, pos)
            strings = self._strings
            return [strings[i] for i in ids], pos
        if codec == "bool":
            data, pos = unpack_bytes(buf, pos)
            return list(map(bool, data)), pos
        if codec.startswith("enum:"):
            ids, pos = unpack(buf, pos)
            return self._enum_list(codec[5:], ids), pos
        if codec.startswith("tuple<"):
            lens, pos = unpack(buf, pos)
            flat, pos = self._decode_column(codec[6:-1], buf, pos, blob, blob_pos)
            offsets = list(accumulate(lens, initial=0))
            if offsets[-1] != len(flat) or min(lens, default=0) < 0:
                raise ValueError("tuple lengths do not match their items")
            return [tuple(flat[a:b]) for a, b in zip(offsets, offsets[1:])], pos
        if codec == "scalar":
            return self._decode_scalars(buf, pos)
        if codec == "bytes":
            lens, pos = unpack(buf, pos)
            start = blob_pos[0]
            out = []
            for n in lens:
                if n < 0 or start + n > len(blob):
                    raise ValueError("bytes field runs past the chunk's blob")
                out.append(bytes(blob[start:start + n]))
                start += n
            blob_pos[0] = start
            return out, pos
        raise ValueError(f"unknown codec {codec}")  # pragma: no cover

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

    def _decode_scalars(self, buf: memoryview, pos: int) -> tuple[list[Any], int]:
        tags, pos = unpack_bytes(buf, pos)
        ints, pos = unpack(buf, pos)
        floats, pos = unpack(buf, pos)
        sids, pos = unpack(buf, pos)
        strings = self._strings
        it_i, it_f, it_s = iter(ints), iter(floats), iter(sids)
        out: list[Any] = []
        for tag in tags:
            if tag == _TAG_INT:
                out.append(next(it_i))
            elif tag == _TAG_FLOAT:
                out.append(next(it_f))
            elif tag == _TAG_STR:
                out.append(strings[next(it_s)])
            elif tag == _TAG_BOOL:
                out.append(bool(next(it_i)))
            elif tag == _TAG_NONE:
                out.append(None)
            else:
                raise ValueError(f"unknown scalar tag {tag}")
        return out, pos


def assemble(kinds: bytes, columns: dict[int, list[list[Any]]], schemas: Sequence[KindSchema | None] | None = None
             ) -> list[ev.Event]:
    """Build the events of one or more decoded chunks, in their original order.

    ``kinds`` is the per-event kind index column, ``columns`` the per-kind columns (all
    chunks of a batch concatenated). Each kind's events are built in one ``map`` over
    its columns with the kind's fast constructor; then they are put back in order.
    """
    kind_list = list(SCHEMA.values()) if schemas is None else schemas
    built: dict[int, list[ev.Event]] = {}
    for k, cols in columns.items():
        schema = kind_list[k]
        assert schema is not None, f"kind {k} decoded without a schema"
        built[k] = list(map(schema.new, *cols))
    if len(built) <= 1:
        return next(iter(built.values()), [])
    order = np.argsort(np.frombuffer(kinds, dtype=np.uint8), kind="stable")
    out = np.empty(len(kinds), dtype=object)
    flat = np.empty(len(kinds), dtype=object)
    flat[:] = list(chain.from_iterable(built[k] for k in sorted(built)))
    out[order] = flat
    return out.tolist()  # type: ignore[no-any-return]
