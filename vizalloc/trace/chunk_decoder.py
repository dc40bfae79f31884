"""Decoding chunks: the per-chunk minimum, then many chunks at once with numpy.

    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.trace.chunk_encoder import ChunkEncoder
    >>> from vizalloc.trace.chunk_decoder import ChunkDecoder
    >>> meta, blob = ChunkEncoder().encode([ev.Marker(1, 100, None, "a")])
    >>> dec = ChunkDecoder.for_current_schema()
    >>> dec.assemble([dec.decode(meta, blob, 1)])[0].text
    'a'
"""

from __future__ import annotations

import zlib
from array import array as _array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from time import sleep as _sleep
from typing import Any

import numpy as np

from vizalloc.trace import events as ev
from vizalloc.trace.chunks import (
    BIG_ENDIAN, HEAD, IN_ORDER, PLANES, ROW_PLANS, S_BOOL, S_BYTES, S_ENUM, S_FLOAT, S_INT, S_STR,
    S_TUPLE_INT, TAG_BOOL, TAG_FLOAT, TAG_INT, TAG_NONE, TAG_STR, bits_float, is_simple, join_planes,
    RowPlan, unpack_planes,
)
from vizalloc.trace.schema import ENUMS, SCHEMA, KindSchema

#: The most bytes one chunk's metadata may inflate to. A writer's usual chunk (65,536
#: events at a flush) holds a few MiB, its largest (``MAX_CHUNK_EVENTS``) about 450 MiB;
#: a chunk that declares more is refused before it is inflated. (What a whole file may
#: inflate to is bounded by its size: ``fileformat.INFLATE_ALLOWANCE``.)
MAX_CHUNK_META_BYTES = 1 << 30
#: The most events a writer puts in one chunk (``max_pending``, ``save(chunk_events=)``),
#: so every chunk it writes stays far below ``MAX_CHUNK_META_BYTES`` (~110 bytes an event).
MAX_CHUNK_EVENTS = 1 << 22

#: Integer fields the graph allocator fills with positions in its plan's buffers: never
#: negative (ggml's are ``size_t``; no user value reaches them). A trace that says
#: otherwise is damaged and is refused when read, naming the event, instead of becoming
#: a negative index downstream. (Fields a user's call fills, such as ``TensorSet.offset``,
#: are kept whatever they hold: a misuse is what a trace is there to show.)
NON_NEGATIVE: dict[type[ev.Event], tuple[str, ...]] = {
    ev.PlanAlloc: ("slot", "chunk", "offset", "nbytes"),
    ev.PlanInplace: ("slot", "chunk", "offset"),
    ev.PlanFree: ("slot", "chunk", "offset", "nbytes"),
}


class ChunkTooLarge(ValueError):
    """A chunk declares more metadata, or more decoded integers, than the reader allows."""


def decoded_cost(meta_bytes: int, n_ints: int) -> int:
    """The bytes a chunk takes while decoded: its metadata and 8 bytes per integer (the
    int64 arrays the integers become; a zero byte plane is not stored, so a few bytes of
    metadata may stand for many integers)."""
    return meta_bytes + 8 * n_ints


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


@dataclass(slots=True)
class Gathered:
    """Rows of a batch of chunks grouped by kind (``ChunkDecoder.gather``)."""

    n: int                  # events
    order: np.ndarray       # layout position -> recording index
    kinds: list[tuple[int, np.ndarray, np.ndarray]]  # (file kind index, layout positions, rows) per kind present
    item_start: np.ndarray  # per layout position: its first item int
    blob_start: np.ndarray  # per layout position: its first blob byte
    items: np.ndarray       # every item int of the batch, in layout order
    blob: bytes


class ChunkDecoder:
    """Turns chunk bytes back into events; keeps the file-wide tables between chunks.

    Args:
        kinds: the file's kinds in its index order (None where this vizalloc lacks the kind
            or it has other fields; decoding such a kind raises ValueError naming it).
        names: the file's kind names, for messages.
        compressed: whether the metadata goes through a zlib stream.
    """

    def __init__(self, kinds: Sequence[KindSchema | None], names: Sequence[str], compressed: bool) -> None:
        self._plans = [None if s is None else ROW_PLANS[s.cls] for s in kinds]
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
        # per kind index: the row columns holding string ids, item or blob byte counts, and
        # values that may not be negative (with the field names, for messages)
        self._checks: list[tuple[list[int], list[int], list[int]] | None] = [
            None if p is None else _row_checks(p) for p in self._plans]
        #: ``decoded_cost`` of every chunk decoded so far (a reader bounds it by the file's size).
        self.decoded_bytes = 0

    @classmethod
    def for_current_schema(cls, compressed: bool = True) -> ChunkDecoder:
        return cls(list(SCHEMA.values()), [s.name for s in SCHEMA.values()], compressed)

    # -- per chunk: the minimum ------------------------------------------------------
    def decode(self, meta: bytes, blob: bytes, n_events: int, offset: int = 0, *, stored: bool = False,
               max_decoded_bytes: int | None = None) -> ChunkParts:
        """Decompress and split one chunk; new strings and locations join the tables.

        ``stored``: the chunk's metadata was written as is, outside the file's zlib stream
        (a frame flag). ``max_decoded_bytes``: refuse (``ChunkTooLarge``) when
        ``decoded_bytes`` would pass it with this chunk; the chunk is refused from its
        26-byte head, before the rest is inflated. Metadata never inflates past the size
        its head declares, nor past ``MAX_CHUNK_META_BYTES``.

        Raises ValueError (or zlib.error, struct.error, IndexError) on malformed bytes.
        """
        limit = MAX_CHUNK_META_BYTES if max_decoded_bytes is None else max_decoded_bytes - self.decoded_bytes
        if self._zlib is not None and not stored:
            meta = self._inflate(meta, n_events, limit)
        else:
            if len(meta) < HEAD.size:
                raise ValueError(f"chunk metadata of {len(meta)} bytes ends inside its {HEAD.size}-byte head")
            self._check_declared(HEAD.unpack_from(meta, 0), n_events, limit)
        view = memoryview(meta)
        # (the head _check_declared checked, its event count against the frame's among them)
        n_ev, n_strings, n_locs, n_rows, n_items, n_text, planes, flags = HEAD.unpack_from(view, 0)
        pos = HEAD.size
        kinds = bytes(view[pos:pos + n_ev])
        pos += n_ev
        lens = _array("I")
        lens.frombytes(view[pos:pos + 4 * n_strings])
        if BIG_ENDIAN:  # pragma: no cover
            lens.byteswap()
        pos += 4 * n_strings
        text = bytes(view[pos:pos + n_text])
        pos += n_text
        n_ints = 3 * n_locs + n_rows + n_items
        present = PLANES[planes]
        if len(view) - pos != n_ints * len(present):
            raise ValueError(f"integer section has {len(view) - pos} bytes for {n_ints} values in "
                             f"{len(present)} byte planes")
        ints = np.frombuffer(view, dtype=np.uint8, offset=pos).reshape(len(present), n_ints)
        if len(kinds) != n_ev or len(lens) != n_strings or len(text) != n_text or sum(lens) != n_text:
            raise ValueError("chunk sections do not add up")
        widths = self._widths[np.frombuffer(kinds, dtype=np.uint8)]
        need_rows = int(widths.sum())
        # (a kind this vizalloc cannot read has width 0: assemble names it)
        if n_rows != need_rows and widths.all():
            raise ValueError(f"chunk holds {n_rows} row integers, its {n_ev} events need {need_rows}")
        self.decoded_bytes += decoded_cost(len(meta), n_ints)
        start = 0
        for n in lens:
            self._strings.append(text[start:start + n].decode("utf-8", "surrogatepass"))
            start += n
        if n_locs:
            strings = self._strings
            vals = join_planes([unpack_planes(ints[:, : 3 * n_locs].tobytes(), 3 * n_locs, planes)]).tolist()
            for i in range(0, len(vals), 3):
                self._locs.append(ev.Location(strings[vals[i]], vals[i + 1], strings[vals[i + 2]]))
        return ChunkParts(offset, kinds, ints, planes, 3 * n_locs, n_rows, n_items, blob, bool(flags & IN_ORDER))

    def _check_declared(self, head: tuple[int, ...], n_events: int, limit: int) -> int:
        """The metadata size a chunk head declares, checked against the frame's event count
        and the bounds; raises ``ChunkTooLarge`` / ``ValueError``."""
        n_ev, n_strings, n_locs, n_rows, n_items, n_text, planes, _ = head
        if n_ev != n_events:
            raise ValueError(f"chunk holds {n_ev} events, its frame says {n_events}")
        if n_locs > n_ev:
            raise ValueError(f"chunk declares {n_locs} new locations for {n_ev} events")
        n_ints = 3 * n_locs + n_rows + n_items
        size = HEAD.size + n_ev + 4 * n_strings + n_text + n_ints * len(PLANES[planes])
        if size > MAX_CHUNK_META_BYTES:
            raise ChunkTooLarge(f"chunk declares {size:,} bytes of metadata, over the {MAX_CHUNK_META_BYTES:,} a "
                                f"chunk may hold")
        cost = decoded_cost(size, n_ints)
        if cost > limit:
            raise ChunkTooLarge(f"chunk declares {size:,} bytes of metadata holding {n_ints:,} integers "
                                f"({cost:,} bytes decoded), more than its file can hold ({max(limit, 0):,} bytes "
                                "left of what its compressed size allows): a decompression bomb or a damaged file")
        return size

    def _inflate(self, data: bytes, n_events: int, limit: int) -> bytes:
        """One chunk's metadata out of the file's zlib stream: the head first, then exactly
        the size it declares (never more: a chunk that would inflate further is refused)."""
        d = self._zlib
        assert d is not None
        head = d.decompress(data, HEAD.size)
        if len(head) < HEAD.size:
            raise ValueError(f"chunk metadata inflates to {len(head)} bytes, less than its {HEAD.size}-byte head")
        size = self._check_declared(HEAD.unpack(head), n_events, limit)
        rest = d.decompress(d.unconsumed_tail, size - HEAD.size) if size > HEAD.size else b""
        if len(rest) < size - HEAD.size:
            raise ValueError(f"chunk metadata inflates to {HEAD.size + len(rest):,} bytes, its head declares "
                             f"{size:,}")
        # the frame's bytes must end exactly there: what is left may flush the stream, not add to it
        tail = d.unconsumed_tail
        while True:
            if d.decompress(tail, 1):
                raise ValueError(f"chunk metadata inflates past the {size:,} bytes its head declares")
            if not d.unconsumed_tail or len(d.unconsumed_tail) >= len(tail):
                break
            tail = d.unconsumed_tail
        if d.unconsumed_tail:  # pragma: no cover - zlib consumes input when it makes no output
            raise ValueError("chunk metadata does not end where its frame does")
        return head + rest

    # -- per batch: everything else ---------------------------------------------------
    def gather(self, parts: Sequence[ChunkParts]) -> Gathered | None:
        """The rows of consecutive decoded chunks grouped by kind, with their items and blob
        bytes (None for no events): what ``assemble`` builds events from, and what
        ``vizalloc.trace.columns`` turns into numpy columns without building any event.

        Raises ValueError (or IndexError) when the chunks do not fit their schema.
        """
        kinds = np.frombuffer(b"".join(p.kinds for p in parts), dtype=np.uint8)
        n = len(kinds)
        if n == 0:
            return None
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
        # gather each kind's rows; count the items and blob bytes of every event
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
            self._check_rows(k, plan, rows, len(items_all), len(blob_all))
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
        return Gathered(n, order, gathered, item_start, blob_start, items_all, blob_all)

    def assemble(self, parts: Sequence[ChunkParts], slice_events: int | None = None) -> list[ev.Event]:
        """The events of consecutive decoded chunks, in recording order.

        ``slice_events``: build each kind's events at most this many at a time, with a
        ``time.sleep(0)`` (which releases the GIL) after each slice. Without it (the fastest
        way, for ``load``) a kind's events are converted and constructed in single calls that
        run in C for milliseconds each on a 65,536-event batch without letting go of the GIL,
        which starves a UI thread while a worker reads the file. The events are the same either way.

        Raises ValueError (or IndexError) when the chunks do not fit their schema.
        """
        if slice_events is not None and slice_events < 1:
            raise ValueError(f"slice_events must be at least 1, got {slice_events}")
        g = self.gather(parts)
        if g is None:
            return []
        n, order, gathered, item_start, blob_start, items_all, blob_all = (
            g.n, g.order, g.kinds, g.item_start, g.blob_start, g.items, g.blob)
        item_list: list[int] | None = None
        # columns per kind, events per kind (in bulk), then back into recording order
        result: list[Any] = [None] * n
        put = result.__setitem__
        for k, sel, rows in gathered:
            plan = self._plans[k]
            assert plan is not None
            if plan.var and item_list is None:
                item_list = _tolist(items_all, slice_events)
            if slice_events is None or len(sel) <= slice_events:
                cols = self._columns(k, plan, rows, item_start[sel], blob_start[sel], item_list, blob_all)
                deque(map(put, order[sel].tolist(), plan.schema.new_many(len(sel), cols)), maxlen=0)
                if slice_events is not None:
                    _sleep(0)
                continue
            # slices in recording order within the kind: _columns carries seq / t_ns from one
            # slice to the next exactly as from one batch to the next
            for a in range(0, len(sel), slice_events):
                part = sel[a:a + slice_events]
                cols = self._columns(k, plan, rows[a:a + slice_events], item_start[part], blob_start[part],
                                     item_list, blob_all)
                deque(map(put, order[part].tolist(), plan.schema.new_many(len(part), cols)), maxlen=0)
                _sleep(0)
        return result

    def _check_rows(self, k: int, plan: RowPlan, rows: np.ndarray, n_items: int, n_blob: int) -> None:
        """Every id in range, every count and size not negative (nor past what the batch
        holds): a damaged trace is refused naming the event, not indexed from the end."""
        checks = self._checks[k]
        assert checks is not None
        id_cols, count_cols, nonneg_cols = checks
        tests: list[tuple[int, np.ndarray, str]] = [(2, (rows[:, 2] < 0) | (rows[:, 2] >= len(self._locs)),
                                                     f"a location id (this trace has {len(self._locs)})")]
        for c in id_cols:
            tests.append((c, (rows[:, c] < 0) | (rows[:, c] >= len(self._strings)),
                          f"a string id (this trace has {len(self._strings)})"))
        for c in count_cols:
            most = n_blob if c in plan.blobs else n_items
            tests.append((c, (rows[:, c] < 0) | (rows[:, c] > most), f"a count of 0..{most}"))
        for c in nonneg_cols:
            tests.append((c, rows[:, c] < 0, "a position in a plan's buffers (never negative)"))
        for c, bad, what in tests:
            if bad.any():
                r = int(np.flatnonzero(bad)[0])
                seq = self._carry.get(k, (0, 0))[0] + int(rows[: r + 1, 0].sum())
                name = "loc" if c == 2 else plan.schema.fields[c - 3]
                raise ValueError(f"event {plan.schema.name} seq {seq}: {name} is {int(rows[r, c])}, not {what}")

    def seq_and_time(self, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``seq`` and ``t_ns`` of a batch's rows of kind index ``k``: the rows hold differences,
        summed on from where the kind's previous batch ended (which this batch then moves on)."""
        seq0, t0 = self._carry.get(k, (0, 0))
        seq = np.cumsum(rows[:, 0]) + np.int64(seq0)
        t_ns = np.cumsum(rows[:, 1]) + np.int64(t0)
        self._carry[k] = (int(seq[-1]), int(t_ns[-1]))
        return seq, t_ns

    def fixed_values(self, slot: int, codec: str, col: np.ndarray) -> list[Any] | None:
        """The values of a fixed-size field (int, str, enum, bool, float) from its row column;
        None for the other slots (tuples, scalars, bytes), whose values are outside the row."""
        out: list[Any]
        if slot == S_INT:
            out = col.tolist()
        elif slot == S_STR:
            out = self._string_array[col].tolist()
        elif slot == S_ENUM:
            out = self._enum_list(codec[5:], col.tolist())
        elif slot == S_BOOL:
            out = (col != 0).tolist()
        elif slot == S_FLOAT:
            out = [bits_float(i) for i in col.tolist()]
        else:
            return None
        return out

    def _columns(self, k: int, plan: RowPlan, rows: np.ndarray, item_at: np.ndarray, blob_at: np.ndarray,
                 items: list[int] | None, blob: bytes) -> list[list[Any]]:
        seq, t_ns = self.seq_and_time(k, rows)
        cols: list[list[Any]] = [seq.tolist(), t_ns.tolist(), self._loc_array[rows[:, 2]].tolist()]
        item_pos = item_at.copy()
        blob_pos = blob_at.copy()
        fixed_values = self.fixed_values
        for j, (codec, slot) in enumerate(zip(plan.schema.codecs, plan.slots)):
            col = rows[:, 3 + j]
            fixed = fixed_values(slot, codec, col)
            if fixed is not None:
                cols.append(fixed)
            elif slot == S_BYTES:
                starts, ends = blob_pos.tolist(), (blob_pos + col).tolist()
                cols.append([blob[a:b] for a, b in zip(starts, ends)])
                blob_pos += col
            else:
                assert items is not None
                starts, ends = item_pos.tolist(), (item_pos + col).tolist()
                if slot == S_TUPLE_INT:
                    cols.append(list(map(tuple, map(items.__getitem__, map(slice, starts, ends)))))
                elif codec != "scalar":
                    # most op_params are empty: () without the general decoder (a tuple
                    # codec's value with no items is () at every nesting level)
                    value = self._value
                    cols.append([value(codec, items[a:b]) if a != b else () for a, b in zip(starts, ends)])
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

    def _string(self, i: int) -> str:
        if not 0 <= i < len(self._strings):
            raise ValueError(f"string id {i} inside a value; this trace has {len(self._strings)} strings")
        return self._strings[i]

    def _value(self, codec: str, items: list[int]) -> Any:
        """A variable-size value from its item ints (see ``ChunkEncoder._flat``)."""
        if codec == "scalar":
            tag = items[0]
            if tag == TAG_NONE and len(items) == 1:
                return None
            if len(items) != 2:
                raise ValueError(f"scalar item of {len(items)} ints")
            if tag == TAG_INT:
                return items[1]
            if tag == TAG_FLOAT:
                return bits_float(items[1])
            if tag == TAG_STR:
                return self._string(items[1])
            if tag == TAG_BOOL:
                return bool(items[1])
            raise ValueError(f"unknown scalar tag {tag}")
        inner = codec[6:-1]
        if is_simple(inner):
            if inner == "int":
                return tuple(items)
            if inner == "bool":
                return tuple(i != 0 for i in items)
            if inner == "float":
                return tuple(map(bits_float, items))
            if inner == "str":
                return tuple(map(self._string, items))
            for i in items:
                self._string(i)
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


def _row_checks(plan: RowPlan) -> tuple[list[int], list[int], list[int]]:
    ids = [3 + j for j, slot in enumerate(plan.slots) if slot in (S_STR, S_ENUM)]
    counts = list(plan.var) + list(plan.blobs)
    nonneg = [3 + plan.schema.fields.index(f) for f in NON_NEGATIVE.get(plan.schema.cls, ())]
    return ids, counts, nonneg


def _tolist(values: np.ndarray, slice_events: int | None) -> list[int]:
    """``values.tolist()``; with ``slice_events``, in pieces (8 ints per event) with a GIL
    release after each."""
    if slice_events is None:
        whole: list[int] = values.tolist()
        return whole
    step = 8 * slice_events
    out: list[int] = []
    for a in range(0, len(values), step):
        out += values[a:a + step].tolist()
        _sleep(0)
    return out


def _gather_planes(parts: Sequence[ChunkParts]) -> tuple[np.ndarray, np.ndarray]:
    """All chunks' row ints and item ints, zigzag decoded (one transpose for all chunks)."""
    n_rows = sum(p.n_rows for p in parts)
    n_items = sum(p.n_items for p in parts)
    rows = np.zeros((8, n_rows), dtype=np.uint8)
    items = np.zeros((8, n_items), dtype=np.uint8)
    r = i = 0
    for p in parts:
        present = PLANES[p.mask]
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
    return join_planes([rows]), join_planes([items])


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

