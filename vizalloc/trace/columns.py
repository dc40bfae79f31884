"""A trace file as numpy columns, batch by batch: one set of arrays per event kind, no event objects.

Loading a trace into event objects costs about a microsecond and a few hundred bytes per
event; a real run's trace (tens of millions of events) does not fit that way. Here a
batch of chunks becomes, per kind, one int64 array per field (``seq``, ``t_ns``, the
location id, then every payload field) plus, for tuple fields, their items in one flat
array with start offsets. Strings and enum values stay ids into the file's string table,
locations ids into its location table (0 is ``None``). Only the events a caller asks for
are built as objects (``ColumnBatch.events``), and they are equal to what ``load`` gives.

    >>> import io
    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.trace.fileformat import TraceFileWriter
    >>> from vizalloc.trace.value import TraceHeader
    >>> f = io.BytesIO()
    >>> w = TraceFileWriter(f, TraceHeader.new())
    >>> w.write_events([ev.TensorNamed(1, 5, None, 7, "x"), ev.Marker(2, 6, None, "m")]); w.close()
    >>> _ = f.seek(0)
    >>> batch = next(iter_columns(TraceFileReader(f)))
    >>> batch.of(ev.TensorNamed).col("tensor_id").tolist(), batch.text(batch.of(ev.TensorNamed).col("name")[0])
    ([7], 'x')
    >>> batch.events() == [ev.TensorNamed(1, 5, None, 7, "x"), ev.Marker(2, 6, None, "m")]
    True
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from vizalloc.errors import TraceFormatError
from vizalloc.trace import events as ev
from vizalloc.trace.chunk_decoder import ChunkDecoder, ChunkParts, Gathered
from vizalloc.trace.chunks import (
    S_BOOL,
    S_BYTES,
    S_ENUM,
    S_FLOAT,
    S_INT,
    S_STR,
    S_TUPLE_INT,
    RowPlan,
)
from vizalloc.trace.fileformat import BATCH_EVENTS, TraceFileReader
from vizalloc.trace.schema import SCHEMA
from vizalloc.trace.storage import open_reader

_EMPTY = np.zeros(0, dtype=np.int64)
#: event class by schema index
SCHEMA_CLASSES = {s.index: cls for cls, s in SCHEMA.items()}


@dataclass(slots=True)
class KindColumns:
    """The events of one kind in a batch, as columns (in recording order).

    ``index[i]`` is the recording index (within the batch) of the kind's ``i``-th event.
    ``cols[name]`` holds, per event, the field's slot: the value (ints; bools as 0/1;
    floats as their IEEE bits), a string id (strings, enum values), or the number of
    items (tuples, scalars) or bytes (``bytes``). ``items[name]`` is ``(starts, values)``
    for tuple fields: event ``i``'s items are ``values[starts[i]:starts[i + 1]]`` (for
    ``tuple<int>`` the ints themselves, for other tuples and scalars the encoded item ints).
    """

    cls: type[ev.Event]
    plan: RowPlan
    index: np.ndarray
    seq: np.ndarray
    t_ns: np.ndarray
    loc: np.ndarray
    cols: dict[str, np.ndarray]
    items: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    blobs: dict[str, np.ndarray] = field(default_factory=dict)  # bytes fields: start of each value in the batch blob

    def __len__(self) -> int:
        return len(self.index)

    def col(self, name: str) -> np.ndarray:
        return self.cols[name]


class ColumnBatch:
    """Consecutive chunks of a trace as columns per kind (see ``KindColumns``).

    ``kind_of[j]`` is the schema index (``SCHEMA[cls].index``) of the batch's ``j``-th event
    in recording order, ``pos[j]`` its row in its kind's columns.
    """

    def __init__(self, decoder: ChunkDecoder, n: int, first_index: int, blob: bytes) -> None:
        """An empty batch of ``n`` events (``from_gathered``, ``part`` and ``join`` fill it)."""
        self.decoder = decoder
        self.n = n
        #: index of the batch's first event in the file
        self.first_index = first_index
        self.blob = blob
        self.kind_of = np.zeros(n, dtype=np.uint8)
        self.pos = np.zeros(n, dtype=np.int64)
        self.by_kind: dict[type[ev.Event], KindColumns] = {}
        self.strings = decoder._string_array
        self.locs = decoder._loc_array

    @classmethod
    def from_gathered(cls, decoder: ChunkDecoder, g: Gathered, first_index: int) -> ColumnBatch:
        """The batch of a decoder's gathered chunks (``ChunkDecoder.gather``)."""
        batch = cls(decoder, g.n, first_index, g.blob)
        items_all = g.items
        for k, sel, rows in g.kinds:
            plan = decoder._plans[k]
            assert plan is not None
            kind = plan.schema.cls
            index = g.order[sel]
            batch.kind_of[index] = SCHEMA[kind].index
            batch.pos[index] = np.arange(len(sel))
            seq, t_ns = decoder.seq_and_time(k, rows)
            cols: dict[str, np.ndarray] = {}
            kc = KindColumns(kind, plan, index, seq, t_ns, rows[:, 2].copy(), cols)
            item_pos = g.item_start[sel].copy()
            blob_pos = g.blob_start[sel].copy()
            for j, (name, slot) in enumerate(zip(plan.schema.fields, plan.slots)):
                col = rows[:, 3 + j].copy()
                cols[name] = col
                if slot == S_BYTES:
                    kc.blobs[name] = blob_pos.copy()
                    blob_pos += col
                elif slot not in (S_INT, S_STR, S_ENUM, S_BOOL, S_FLOAT):
                    starts = np.zeros(len(col) + 1, dtype=np.int64)
                    np.cumsum(col, out=starts[1:])
                    total = int(starts[-1])
                    if total:
                        at = np.repeat(item_pos - starts[:-1], col) + np.arange(total, dtype=np.int64)
                        kc.items[name] = (starts, items_all[at])
                    else:
                        kc.items[name] = (starts, _EMPTY)
                    item_pos += col
            batch.by_kind[kind] = kc
        return batch

    def part(self, lo: int, hi: int | None = None) -> ColumnBatch:
        """The batch's events ``lo..hi`` as a batch of their own (copied: this one can go)."""
        hi = self.n if hi is None else hi
        out = ColumnBatch(self.decoder, hi - lo, self.first_index + lo, self.blob)
        out.kind_of[:] = self.kind_of[lo:hi]
        for cls, kc in self.by_kind.items():
            a, z = np.searchsorted(kc.index, [lo, hi]).tolist()
            if a == z:
                continue
            part = KindColumns(cls, kc.plan, kc.index[a:z] - lo, kc.seq[a:z].copy(), kc.t_ns[a:z].copy(),
                               kc.loc[a:z].copy(), {n: c[a:z].copy() for n, c in kc.cols.items()})
            for name, (starts, values) in kc.items.items():
                part.items[name] = (starts[a:z + 1] - starts[a], values[int(starts[a]):int(starts[z])].copy())
            for name, at in kc.blobs.items():
                part.blobs[name] = at[a:z].copy()
            out.by_kind[cls] = part
            out.pos[part.index] = np.arange(len(part.index))
        return out

    @staticmethod
    def join(first: ColumnBatch, second: ColumnBatch) -> ColumnBatch:
        """``first``'s events followed by ``second``'s, as one batch (both from the same file, in order)."""
        out = ColumnBatch(second.decoder, first.n + second.n, first.first_index, first.blob + second.blob)
        out.kind_of[:first.n] = first.kind_of
        out.kind_of[first.n:] = second.kind_of
        for cls in list(dict.fromkeys([*first.by_kind, *second.by_kind])):
            a, b = first.by_kind.get(cls), second.by_kind.get(cls)
            if a is None or b is None:
                only = a if a is not None else b
                assert only is not None
                shift = 0 if a is not None else first.n
                kc = KindColumns(cls, only.plan, only.index + shift, only.seq, only.t_ns, only.loc, dict(only.cols),
                                 dict(only.items), {n: v + (0 if a is not None else len(first.blob))
                                                    for n, v in only.blobs.items()})
            else:
                kc = KindColumns(cls, a.plan, np.concatenate([a.index, b.index + first.n]),
                                 np.concatenate([a.seq, b.seq]), np.concatenate([a.t_ns, b.t_ns]),
                                 np.concatenate([a.loc, b.loc]),
                                 {n: np.concatenate([a.cols[n], b.cols[n]]) for n in a.cols})
                for name, (sa, va) in a.items.items():
                    sb, vb = b.items[name]
                    kc.items[name] = (np.concatenate([sa, sb[1:] + sa[-1]]), np.concatenate([va, vb]))
                for name, at in a.blobs.items():
                    kc.blobs[name] = np.concatenate([at, b.blobs[name] + len(first.blob)])
            out.by_kind[cls] = kc
            out.pos[kc.index] = np.arange(len(kc.index))
        return out

    def of(self, cls: type[ev.Event]) -> KindColumns:
        """The columns of one kind (empty columns when the batch has none)."""
        kc = self.by_kind.get(cls)
        if kc is None:
            from vizalloc.trace.chunks import ROW_PLANS

            plan = ROW_PLANS[cls]
            empty = _EMPTY
            kc = KindColumns(cls, plan, empty, empty, empty, empty, {n: empty for n in plan.schema.fields},
                             {n: (np.zeros(1, dtype=np.int64), empty) for n, s in zip(plan.schema.fields, plan.slots)
                              if s not in (S_INT, S_STR, S_ENUM, S_BOOL, S_FLOAT, S_BYTES)})
        return kc

    def seq_at(self, j: int) -> int:
        """The seq of the batch's ``j``-th event."""
        kc = self.by_kind[SCHEMA_CLASSES[int(self.kind_of[j])]]
        return int(kc.seq[int(self.pos[j])])

    def text(self, string_id: int) -> str:
        """The string with this id (a ``str`` or enum field's value)."""
        return str(self.strings[int(string_id)])

    def events(self, lo: int = 0, hi: int | None = None) -> list[ev.Event]:
        """The batch's events ``lo..hi`` (recording order) as objects, equal to what ``load`` builds."""
        hi = self.n if hi is None else hi
        result: list[Any] = [None] * max(hi - lo, 0)
        if hi <= lo:
            return result
        put = result.__setitem__
        for kc in self.by_kind.values():
            a, b = np.searchsorted(kc.index, [lo, hi]).tolist()
            if a == b:
                continue
            cols = self._convert(kc, a, b)
            deque(map(put, (kc.index[a:b] - lo).tolist(), kc.plan.schema.new_many(b - a, cols)), maxlen=0)
        return result

    def events_of(self, cls: type[ev.Event], lo: int = 0, hi: int | None = None) -> list[ev.Event]:
        """The batch's events of kind ``cls`` among events ``lo..hi``, in order (the others not made)."""
        hi = self.n if hi is None else hi
        kc = self.by_kind.get(cls)
        if kc is None or hi <= lo:
            return []
        a, b = np.searchsorted(kc.index, [lo, hi]).tolist()
        return list(kc.plan.schema.new_many(b - a, self._convert(kc, a, b))) if a < b else []

    def _convert(self, kc: KindColumns, a: int, b: int) -> list[list[Any]]:
        """Field values of events ``a..b`` of one kind, as the decoder converts them."""
        dec = self.decoder
        cols: list[list[Any]] = [kc.seq[a:b].tolist(), kc.t_ns[a:b].tolist(), self.locs[kc.loc[a:b]].tolist()]
        for name, codec, slot in zip(kc.plan.schema.fields, kc.plan.schema.codecs, kc.plan.slots):
            col = kc.cols[name][a:b]
            fixed = dec.fixed_values(slot, codec, col)
            if fixed is not None:
                cols.append(fixed)
            elif slot == S_BYTES:
                starts = kc.blobs[name][a:b].tolist()
                blob = self.blob
                cols.append([blob[s:s + n] for s, n in zip(starts, col.tolist())])
            else:
                starts, values = kc.items[name]
                s = starts[a:b + 1].tolist()
                flat = values[s[0]:s[-1]].tolist()
                base = s[0]
                pairs = [(x - base, y - base) for x, y in pairwise(s)]
                if slot == S_TUPLE_INT:
                    cols.append([tuple(flat[x:y]) for x, y in pairs])
                elif codec != "scalar":
                    cols.append([dec._value(codec, flat[x:y]) if x != y else () for x, y in pairs])
                else:
                    cols.append([dec._value(codec, flat[x:y]) for x, y in pairs])
        return cols


def iter_columns(reader: TraceFileReader, max_events: int = BATCH_EVENTS) -> Iterator[ColumnBatch]:
    """Column batches of about ``max_events`` events (whole chunks) from a trace file's reader, in
    order; memory stays bounded by a batch. The reader's ``complete``, ``truncated_at`` and
    ``n_events`` then say how reading ended (``warn_if_incomplete`` warns like ``load``).

    Raises:
        TraceFormatError: the file is damaged (the message names the byte offset).
    """
    decoder = reader._decoder
    parts: list[ChunkParts] = []
    pending = 0
    done = 0
    for part in reader.chunks():
        parts.append(part)
        pending += len(part.kinds)
        if pending >= max_events:
            batch = _batch(reader, decoder, parts, done)
            done += batch.n
            parts, pending = [], 0   # the chunks' bytes go before the batch is used
            yield batch
            del batch
    if parts:
        batch = _batch(reader, decoder, parts, done)
        parts = []
        yield batch


def _batch(reader: TraceFileReader, decoder: ChunkDecoder, parts: list[ChunkParts], done: int) -> ColumnBatch:
    try:
        g = decoder.gather(parts)
        if g is None:
            raise ValueError("no events")
        return ColumnBatch.from_gathered(decoder, g, done)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise TraceFormatError(f"{reader.name}: undecodable chunks at bytes {parts[0].offset}..{reader.offset}: {exc}"
                               ) from exc


def read_columns(path: str | os.PathLike[str], max_events: int = BATCH_EVENTS) -> Iterator[ColumnBatch]:
    """Column batches of a trace file (see ``iter_columns``); warns like ``load`` when the file ends early.

    Raises:
        TraceFormatError: the file is not a trace or is damaged.
        UsageError: the file does not exist or cannot be read.
    """
    with open_reader(path) as reader:
        yield from iter_columns(reader, max_events)
        reader.warn_if_incomplete()
