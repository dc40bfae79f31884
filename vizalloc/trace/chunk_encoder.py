"""Encoding runs of events as chunks (the layout is in ``chunks.py``).

Two paths, both generated per kind from one conversion table (``_CONVERSIONS``): a chunk
of up to ``ORDERED_MAX_EVENTS`` rows (the usual flush at the end of a small graph compute)
is encoded event by event in recording order, which costs less than grouping it; bigger
chunks, and anything the in-order path finds it cannot store, are grouped by kind and
encoded column-wise, which also names the field that holds a bad value.

    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.trace.chunk_encoder import ChunkEncoder
    >>> meta, blob = ChunkEncoder().encode([ev.Marker(1, 100, None, "a")])
    >>> len(blob)
    0
"""

from __future__ import annotations

import enum
import struct
import time
import zlib
from array import array as _array
from collections import defaultdict
from collections.abc import Sequence
from functools import partial
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from vizalloc.trace import chunks
from vizalloc.trace import events as ev
from vizalloc.trace.chunks import EncodeError, RowPlan
from vizalloc.trace.schema import ENUMS, SCHEMA


def _deltas(col: list[int], prev: int) -> list[int]:
    """Differences from the previous value, wrapped into int64 like the reader's cumsum wraps
    (the values themselves must fit int64)."""
    out = [x - p for p, x in zip(chain((prev,), col), col)]
    if min(out) < chunks.I64_MIN or max(out) >= -chunks.I64_MIN:
        _array(chunks.INT64, col)  # OverflowError when a value itself is outside int64
        out = [(d - chunks.I64_MIN) % chunks.I64_SPAN + chunks.I64_MIN for d in out]
    return out


def _int64_array(values: list[int]) -> _array[int]:
    try:
        return _array(chunks.INT64, values)
    except (TypeError, OverflowError) as exc:
        raise EncodeError(f"not an integer or outside the signed 64-bit range ({exc})") from None


def _not_bytes(v: Any) -> int:
    raise EncodeError(f"expected bytes, got {type(v).__name__}")


_KIND_CODE: dict[type[ev.Event], Any] = {}
_INDEX: dict[type[ev.Event], int] = {cls: s.index for cls, s in SCHEMA.items()}
_NUMPY_DELTAS_FROM = 256
_perf_counter_ns = time.perf_counter_ns

#: How a field's value becomes row ints, by slot kind (``int`` fields are stored as they
#: are): ``(convert, row_int, extra)``. ``convert`` turns the value ``{v}`` into ``{x}``
#: (``None``: ``{x}`` is ``{v}``); ``row_int`` is the int stored in the event's row; ``extra``
#: says where ``{x}`` goes as well: ``"items"`` (its ints, after the row ints) or ``"blob"``
#: (its bytes). ``{j}`` is the field's row column (per-field helpers). Both encoders are
#: generated from this one table: the in-order one applies it field after field to each
#: event, the grouped one to each column of a kind's events.
_CONVERSIONS: dict[int, tuple[str | None, str, str | None]] = {
    chunks.S_STR: (None, "(s if type({x}) is str and (s := sids_get({x})) is not None else sid_slow({x}))", None),
    chunks.S_ENUM: (None, "(s if type({x}) is enum_{j} and (s := sids_get({x}._value_)) is not None else sid_slow({x}))",
             None),
    chunks.S_BOOL: (None, "as_bool({x})", None),
    chunks.S_FLOAT: (None, "float_bits({x})", None),
    chunks.S_TUPLE_INT: (None, "len({x})", "items"),
    chunks.S_VAR: ("flat_{j}({v})", "len({x})", "items"),
    chunks.S_BYTES: (None, "(len({x}) if isinstance({x}, (bytes, bytearray)) else not_bytes({x}))", "blob"),
}


def _kind_code(plan: RowPlan) -> Any:
    """The compiled source of a kind's encoders, generated from ``_CONVERSIONS``:

    * ``enc(row, rows, items, blob)`` appends one event's row (the in-order path:
      straight-line code, the kind's conversions inlined);
    * ``conv_<j>(flat, w, var_cols, blob_cols)`` converts row column ``j`` of a kind's
      events in place (the grouped path), keeping what goes to the items or the blob.
    """
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
    columns = []
    for j, slot in zip(range(3, w), plan.slots):
        if slot == chunks.S_INT:
            exprs.append(f[j])
            continue
        convert, row_int, extra = _CONVERSIONS[slot]
        # one event's field, converted in field order (so strings are numbered in that order)
        x = f[j]
        if convert:
            x = f"x{j}"
            body.append(f"    {x} = {convert.format(v=f[j], j=j)}")
        body.append(f"    r{j} = {row_int.format(x=x, j=j)}")
        exprs.append(f"r{j}")
        if extra == "items":
            tail.append(f"    items += {x}")
        elif extra == "blob":
            tail.append(f"    blob.append({x})")
        # a column of a kind's events
        column = [f"def conv_{j}(flat, w, var_cols, blob_cols):", f"    col = flat[{j}::w]"]
        if convert:
            column.append(f"    col = [{convert.format(v='v', j=j)} for v in col]")
        column.append(f"    flat[{j}::w] = [{row_int.format(x='x', j=j)} for x in col]")
        if extra:
            column.append(f"    {'var_cols' if extra == 'items' else 'blob_cols'}.append(col)")
        columns.append("\n".join(column))
    body.append(f"    rows += ({', '.join(exprs)},)")
    body += tail
    src = "def enc(row, rows, items, blob):\n" + "\n".join(body) + "\n\n" + "\n\n".join(columns) + "\n"
    return compile(src, f"<vizalloc encoders of {plan.schema.name}>", "exec")


class _LazyEncoders(dict):  # type: ignore[type-arg]
    """kind -> row encoder, built on first lookup (``d[cls]`` stays a plain dict lookup after that)."""

    def __init__(self, build: Any) -> None:
        super().__init__()
        self._build = build

    def __missing__(self, cls: type[ev.Event]) -> Any:
        if cls not in chunks.ROW_PLANS:
            raise EncodeError(_not_a_kind(cls))
        enc = self[cls] = self._build(cls)
        return enc


def _not_a_kind(cls: Any) -> str:
    return f"{getattr(cls, '__name__', cls)} is not an event kind of vizalloc.trace.events"


class ChunkEncoder:
    """Turns events into chunk bytes; keeps the file-wide tables between chunks.

    Args:
        compress_level: zlib level for the metadata stream, or None for no compression.
    """

    def __init__(self, compress_level: int | None = 1) -> None:
        self._sids: dict[str, int] = {}
        self._new_strings: list[str] = []
        self._lids: dict[int, int] = {id(None): 0}     # id(ev.Location) -> location id (0: None)
        self._lid_by_value: dict[ev.Location, int] = {}
        self._locs: list[ev.Location] = []              # keeps interned objects (and their ids) alive
        self._new_locs: list[ev.Location] = []
        self._carry: dict[type[ev.Event], tuple[int, int]] = {}   # last (seq, t_ns) per kind
        self._zlib = None if compress_level is None else zlib.compressobj(compress_level)
        #: Whether the last chunk's metadata was left uncompressed (see ``encode_rows``).
        self.stored = self._zlib is None
        self._zlib_ns_per_byte = 20.0  # first guess; measured from then on
        self._getters = {cls: attrgetter("seq", "t_ns", "loc", *s.fields) for cls, s in SCHEMA.items()}
        # built on a kind's first event: a trace uses a few of the kinds, and binding all of
        # them would be most of an empty trace's start-up
        self._row_encoders = _LazyEncoders(self._bind)
        #: kind -> [(field name, column converter)], bound with its row encoder
        self._converters: dict[type[ev.Event], list[tuple[str, Any]]] = {}
        self._numpy_deltas: list[tuple[int, int, int, tuple[int, int]]] = []

    def _bind(self, cls: type[ev.Event]) -> Any:
        """Bind a kind's generated encoders (``_kind_code``) to this encoder's tables: returns
        the row encoder, and keeps the column converters in ``_converters``."""
        plan = chunks.ROW_PLANS[cls]
        scope: dict[str, Any] = {
            "cls": plan.schema.cls, "zero": (0, 0), "carry": self._carry, "carry_get": self._carry.get,
            "lids_get": self._lids.get, "loc_slow": lambda loc: self._loc_list([loc])[0],
            "sids_get": self._sids.get, "sid_slow": self._sid, "as_bool": chunks.as_bool, "float_bits": chunks.float_bits,
            "not_bytes": _not_bytes,
        }
        for j, slot, codec, _name in plan.convert:
            if slot == chunks.S_ENUM:
                scope[f"enum_{j}"] = ENUMS[codec[5:]]
            elif slot == chunks.S_VAR:
                scope[f"flat_{j}"] = self._flattener(codec)
        code = _KIND_CODE.get(cls)
        if code is None:  # compiled once per kind; each encoder binds its own tables
            code = _KIND_CODE[cls] = _kind_code(plan)
        exec(code, scope)  # noqa: S102 - our own generated code
        self._converters[cls] = [(name, scope[f"conv_{j}"]) for j, _slot, _codec, name in plan.convert]
        return scope["enc"]

    def _converters_of(self, cls: type[ev.Event]) -> list[tuple[str, Any]]:
        converters = self._converters.get(cls)
        if converters is None:
            self._row_encoders[cls]  # binds both
            converters = self._converters[cls]
        return converters

    @property
    def compressed(self) -> bool:
        return self._zlib is not None

    def encode(self, events: Sequence[ev.Event]) -> tuple[bytes, bytes]:
        """One chunk of event objects: (stored metadata bytes, raw blob bytes)."""
        return self.encode_rows([e.__class__ for e in events], events)

    def encode_rows(self, classes: Sequence[type[ev.Event]], items: Sequence[Any], *, rows_only: bool = False,
                    compress_budget_ns: float | None = None) -> tuple[bytes, bytes]:
        """One chunk from parallel lists: each item is an event or its row ``(seq, t_ns, loc, *fields)``.

        ``rows_only`` promises that every item is a row (skips a per-item check).
        ``compress_budget_ns``: compress the metadata only if that is expected to take at
        most this long (None: always, when the encoder compresses at all); ``stored``
        then tells whether this chunk was left uncompressed.
        """
        self.stored = self._zlib is None
        if rows_only and len(items) <= chunks.ORDERED_MAX_EVENTS:
            # (a class outside the schema has no row encoder: _LazyEncoders raises EncodeError)
            saved = dict(self._carry)
            try:
                return self._encode(classes, items, in_order=True, rows_only=True, budget_ns=compress_budget_ns)
            except (ValueError, TypeError):  # a value the row encoders do not check (EncodeError is a ValueError)
                self._carry.clear()  # (in place: the row encoders hold this dict)
                self._carry.update(saved)  # the grouped path below wraps deltas and names the culprit
        for cls in set(classes):
            if cls not in SCHEMA:
                raise EncodeError(_not_a_kind(cls))
        return self._encode(classes, items, in_order=False, rows_only=rows_only, budget_ns=compress_budget_ns)

    def _encode(self, classes: Sequence[type[ev.Event]], items: Sequence[Any], *, in_order: bool,
                rows_only: bool, budget_ns: float | None = None) -> tuple[bytes, bytes]:
        index = _INDEX
        rows_ints: list[int] = []
        item_ints: list[int] = []
        blob: list[bytes] = []
        if in_order:
            encoders = self._row_encoders
            for cls, row in zip(classes, items):
                encoders[cls](row, rows_ints, item_ints, blob)
            rows_arr = _int64_array(rows_ints)
            items_arr = _int64_array(item_ints)
            kinds = bytes(map(index.__getitem__, classes))  # (every class has an encoder: all are kinds)
        else:
            kinds = bytes(map(index.__getitem__, classes))
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
                    self._encode_kind(chunks.ROW_PLANS[cls], group, rows_ints, item_ints, blob)
                except EncodeError as exc:
                    raise EncodeError(f"{cls.__name__}.{exc}") from None
                except (TypeError, AttributeError, ValueError) as exc:
                    raise EncodeError(f"{cls.__name__}: a field holds a value the trace file cannot store: {exc}"
                                      ) from exc
            try:
                rows_arr = _int64_array(rows_ints)
                items_arr = _int64_array(item_ints)
            except EncodeError as exc:
                raise EncodeError(f"{self._culprit(groups)}: {exc}") from None
            if self._numpy_deltas:
                rows_np = np.frombuffer(rows_arr, dtype=np.int64)
                for offset, w, n, carry in self._numpy_deltas:
                    block = rows_np[offset:offset + w * n].reshape(n, w)
                    for j in (0, 1):  # int64 differences wrap, as the reader's cumsum does
                        block[:, j] = np.diff(block[:, j], prepend=np.int64(carry[j]))
        loc_ints, lens, text = self._pack_tables()  # only now: nothing can fail after this
        arr = _array(chunks.INT64, loc_ints)
        arr.extend(rows_arr)
        arr.extend(items_arr)
        if chunks.BIG_ENDIAN:  # pragma: no cover
            arr.byteswap()
        int_bytes, planes = chunks.pack_planes(np.frombuffer(arr, dtype="<i8"))
        n_strings = len(lens)
        raw = b"".join((
            chunks.HEAD.pack(len(kinds), n_strings, len(loc_ints) // 3, len(rows_ints), len(item_ints), len(text), planes,
                       chunks.IN_ORDER if in_order else 0),
            kinds, _array("I", lens).tobytes() if not chunks.BIG_ENDIAN else struct.pack(f"<{n_strings}I", *lens),
            text, int_bytes,
        ))
        z = self._zlib
        if z is not None:
            if budget_ns is not None and len(raw) * self._zlib_ns_per_byte > budget_ns:
                self.stored = True  # written as is, outside the zlib stream
            else:
                n_raw = len(raw)
                t0 = _perf_counter_ns()
                raw = z.compress(raw) + z.flush(zlib.Z_SYNC_FLUSH)
                # what compressing costs here, per byte (a moving average), for the next decisions
                self._zlib_ns_per_byte += ((_perf_counter_ns() - t0) / max(n_raw, 1) - self._zlib_ns_per_byte) / 8
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
                        _array(chunks.INT64, values)
                    except (TypeError, OverflowError):
                        return f"{schema.name}.{name} = {v!r}"
        return "an integer field"  # pragma: no cover

    # -- tables --------------------------------------------------------------
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
                if not isinstance(loc, ev.Location):
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
    def _encode_kind(self, plan: RowPlan, rows: list[tuple[Any, ...]], rows_ints: list[int],
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
        for name, convert in self._converters_of(cls):
            try:
                convert(flat, w, var_cols, blob_cols)
            except EncodeError as exc:
                raise EncodeError(f"{name}: {exc}") from None
        rows_ints += flat
        if var_cols:  # event-major: all items of an event, field after field
            item_ints.extend(chain.from_iterable(chain.from_iterable(zip(*var_cols))))
        if blob_cols:
            blob.extend(chain.from_iterable(zip(*blob_cols)))

    def _flattener(self, codec: str) -> Any:
        """``v -> self._flat(codec, v)``, with a fast path for the usual values: an empty
        tuple (most ops have no params), and tuples of tuples of exact ints (PlanEnd's
        chunk sizes). Anything else takes ``_flat``, which also names what is wrong."""
        if not codec.startswith("tuple<"):
            return partial(self._flat, codec)
        flat = self._flat

        if codec == "tuple<tuple<int>>":
            def flat_tuple_of_int_tuples(v: Any) -> list[int]:
                if type(v) is tuple:
                    out: list[int] = []
                    for e in v:
                        if type(e) is not tuple or not all(type(x) is int for x in e):
                            break
                        out.append(len(e))
                        out += e
                    else:
                        return out
                return flat(codec, v)
            return flat_tuple_of_int_tuples

        def flat_tuple(v: Any) -> list[int]:
            if type(v) is tuple and not v:
                return []
            return flat(codec, v)
        return flat_tuple

    def _flat(self, codec: str, v: Any) -> list[int]:
        """The item ints of one variable-size value (a tuple other than tuple<int>, or a scalar)."""
        if codec == "scalar":
            if v is None:
                return [chunks.TAG_NONE]
            if isinstance(v, bool):
                return [chunks.TAG_BOOL, int(v)]
            if isinstance(v, int):
                return [chunks.TAG_INT, int(v)]
            if isinstance(v, float):
                return [chunks.TAG_FLOAT, chunks.float_bits(v)]
            if isinstance(v, str):
                return [chunks.TAG_STR, self._sid(v)]
            raise EncodeError(f"{v!r} is not an int, float, str, bool or None")
        if not codec.startswith("tuple<"):
            raise EncodeError(f"no item encoding for {codec}")  # pragma: no cover
        if not isinstance(v, tuple):
            raise EncodeError(f"expected a tuple, got {v!r}")
        inner = codec[6:-1]
        if chunks.is_simple(inner):
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
            return chunks.float_bits(v)
        return self._sid(v._value_ if isinstance(v, enum.Enum) else v)  # str, enum


