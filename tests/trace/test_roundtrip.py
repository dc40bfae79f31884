"""Every field of every event kind survives a trip through a trace file, exactly."""

from __future__ import annotations

import io
import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vizalloc.errors import TraceFormatError
from vizalloc.trace import events as ev
from vizalloc.trace.fileformat import TraceFileReader, TraceFileWriter, read_trace
from vizalloc.trace.schema import SCHEMA, fast_constructor
from vizalloc.trace.value import Trace, TraceHeader

from tests.trace.strategies import ANY_EVENT, event_of

HEADER = TraceHeader.new(argv=("prog", "--flag"))


def _roundtrip(events: list[ev.Event], chunk: int = 1000, level: int | None = 6) -> Trace:
    buf = io.BytesIO()
    w = TraceFileWriter(buf, HEADER, compress_level=level)
    for i in range(0, len(events), chunk):
        w.write_events(events[i:i + chunk])
    w.close()
    return read_trace(io.BytesIO(buf.getvalue()))


@pytest.mark.parametrize("cls", list(SCHEMA), ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_kind_round_trips(cls: type[ev.Event], data: st.DataObject) -> None:
    events = data.draw(st.lists(event_of(cls), min_size=1, max_size=6))
    chunk = data.draw(st.integers(1, 6))
    loaded = _roundtrip(events, chunk)
    assert loaded.events == tuple(events)
    assert loaded.header == HEADER
    # same types too (enum members stay enum members, tuples stay tuples, bool stays bool)
    for a, b in zip(loaded.events, events):
        for name in ("loc", *SCHEMA[cls].fields):
            assert type(getattr(a, name)) is type(getattr(b, name)) or isinstance(getattr(b, name), int), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(ANY_EVENT, max_size=40), chunk=st.integers(1, 17), compress=st.booleans())
def test_mixed_kinds_keep_their_order(events: list[ev.Event], chunk: int, compress: bool) -> None:
    loaded = _roundtrip(events, chunk, 6 if compress else None)
    assert loaded.events == tuple(events)


def _as_row(e: ev.Event) -> tuple[object, ...]:
    return (e.seq, e.t_ns, e.loc, *(getattr(e, f) for f in SCHEMA[type(e)].fields))


def _roundtrip_rows(events: list[ev.Event], chunk: int) -> Trace:
    """Through the recorder's path: rows, not objects (small chunks are encoded in order)."""
    buf = io.BytesIO()
    w = TraceFileWriter(buf, HEADER)
    for i in range(0, len(events), chunk):
        part = events[i:i + chunk]
        w.write_rows([type(e) for e in part], [_as_row(e) for e in part], rows_only=True)
    w.close()
    return read_trace(io.BytesIO(buf.getvalue()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(ANY_EVENT, max_size=40), chunk=st.integers(1, 17))
def test_rows_in_recording_order_round_trip(events: list[ev.Event], chunk: int) -> None:
    assert _roundtrip_rows(events, chunk).events == tuple(events)


def _frames(data: bytes) -> list[tuple[int, int]]:
    """(type, flags) of every frame of a trace file."""
    from vizalloc.trace.fileformat import _FRAME, _HEAD, FRAME_HEADER_SIZE

    json_len = _HEAD.unpack_from(data)[3]
    pos, out = _HEAD.size + json_len + 4, []
    while pos < len(data):
        _, kind, flags, _, meta_len, blob_len, _ = _FRAME.unpack_from(data, pos)
        out.append((kind, flags))
        pos += FRAME_HEADER_SIZE + meta_len + blob_len
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(ANY_EVENT, max_size=40), chunk=st.integers(1, 9), stored=st.lists(st.booleans(), min_size=40,
                                                                                          max_size=40))
def test_stored_and_compressed_chunks_mix_in_one_stream(events: list[ev.Event], chunk: int, stored: list[bool]) -> None:
    buf = io.BytesIO()
    w = TraceFileWriter(buf, HEADER)
    n_chunks = 0
    for k, i in enumerate(range(0, len(events), chunk)):
        part = events[i:i + chunk]
        # a budget of 0 ns stores the chunk as is; None compresses it
        w.write_rows([type(e) for e in part], [_as_row(e) for e in part], rows_only=bool(k % 3),
                     compress_budget_ns=0 if stored[k] else None)
        n_chunks += 1
    w.close()
    data = buf.getvalue()
    assert read_trace(io.BytesIO(data)).events == tuple(events)
    from vizalloc.trace.fileformat import FRAME_CHUNK, FRAME_STORED

    assert [f for k, f in _frames(data) if k == FRAME_CHUNK] == [FRAME_STORED if s else 0 for s in stored[:n_chunks]]


def test_a_session_stores_chunks_whose_compression_would_exceed_its_budget(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import vizalloc
    from vizalloc.trace.fileformat import FRAME_CHUNK, FRAME_STORED

    flags = {}
    for overhead in (None, 0.0, 1e9):
        path = tmp_path / f"o{overhead}.vztrace"
        with vizalloc.trace(path, compress_max_overhead=overhead) as t:
            for i in range(5):
                vizalloc.mark(f"m{i}")
                t.flush()
        assert vizalloc.load(path) == t.trace
        flags[overhead] = {f for k, f in _frames(path.read_bytes()) if k == FRAME_CHUNK}
    assert flags == {None: {0}, 0.0: {FRAME_STORED}, 1e9: {0}}


def test_small_in_order_and_big_grouped_chunks_mix_in_one_file() -> None:
    from vizalloc.trace.chunks import ORDERED_MAX_EVENTS

    loc = ev.Location("a.py", 1, "f")
    events: list[ev.Event] = []
    for i in range(1, 3 * ORDERED_MAX_EVENTS):
        if i % 3 == 0:
            events.append(ev.NodeCompute(i, 10 * i, loc, 1, i, 100 + i, "CPU", (i, i + 1), 5))
        elif i % 3 == 1:
            events.append(ev.TensorPlaced(i, 10 * i, None, i, 2, 64 * i, 64, ev.PlacedBy.GALLOCR, 7))
        else:
            events.append(ev.Marker(i, 10 * i, loc, f"m{i}"))
    buf = io.BytesIO()
    w = TraceFileWriter(buf, HEADER)
    bounds = [0, 7, 30, 30 + 2 * ORDERED_MAX_EVENTS, len(events)]  # small, small, big (grouped), small
    for a, b in zip(bounds, bounds[1:]):
        part = events[a:b]
        w.write_rows([type(e) for e in part], [_as_row(e) for e in part], rows_only=True)
    w.close()
    assert read_trace(io.BytesIO(buf.getvalue())).events == tuple(events)


def test_extreme_seq_values_fall_back_to_the_wrapping_path() -> None:
    big, small = (1 << 63) - 1, -(1 << 63)
    events = [ev.Marker(big, small, None, "a"), ev.Marker(small, big, None, "b"), ev.Marker(0, 0, None, "c")]
    assert _roundtrip_rows(events, 3).events == tuple(events)
    assert _roundtrip(events, 3).events == tuple(events)
    # big groups take their differences in numpy (int64 wraps there as in the reader)
    many = [ev.Marker(big if i % 2 else small, (-1) ** i * i * (1 << 52), None, str(i)) for i in range(700)]
    assert _roundtrip(many, 700).events == tuple(many)
    assert _roundtrip_rows(many, 700).events == tuple(many)


def test_float_bits_and_special_values_survive() -> None:
    params = (0.1, -0.0, math.inf, -math.inf, 5e-324, 1.7976931348623157e308, 3, "x", True, None)
    e = ev.TensorCreated(1, 2, None, 3, 0, "t", "f32", (4, 1, 1, 1), (4, 16, 16, 16), "SCALE", params,
                         (), -1, 0, 0, -1)
    back = _roundtrip([e]).events[0].op_params
    assert [struct.pack("<d", v) if isinstance(v, float) else v for v in back] == \
        [struct.pack("<d", v) if isinstance(v, float) else v for v in params]
    assert [type(v) for v in back] == [type(v) for v in params]
    nan = ev.TensorCreated(1, 2, None, 3, 0, "t", "f32", (1,), (4,), "X", (math.nan,), (), -1, 0, 0, -1)
    assert math.isnan(_roundtrip([nan]).events[0].op_params[0])


def test_value_snapshot_bytes_are_stored_raw_outside_compression() -> None:
    payload = bytes(range(256)) * 64  # 16 KiB that zlib would shrink
    e = ev.ValueSnapshot(1, 2, None, 7, 3, "end", "f32", (4096, 1, 1, 1), payload)
    buf = io.BytesIO()
    w = TraceFileWriter(buf, HEADER)
    w.write_events([e])
    w.close()
    assert payload in buf.getvalue()
    assert read_trace(io.BytesIO(buf.getvalue())).events == (e,)


def test_strings_and_locations_are_interned_across_chunks() -> None:
    loc = ev.Location("/a/very/long/path/to/the/users/training/script.py", 12, "train_step")
    name = "blk.0.attn_norm.weight-" + "x" * 40
    events = [ev.TensorNamed(i, i, loc, i, name) for i in range(1, 2001)]
    one_chunk = io.BytesIO()
    w = TraceFileWriter(one_chunk, HEADER)
    for i in range(0, len(events), 10):
        w.write_events(events[i:i + 10])
    w.close()
    # 200 chunks, yet the long strings appear once
    assert one_chunk.getvalue().count(b"train_step") <= 1
    assert read_trace(io.BytesIO(one_chunk.getvalue())).events == tuple(events)


def test_batches_stream_the_same_events() -> None:
    events = [ev.Marker(i, i * 10, None, f"m{i % 7}") for i in range(1, 5001)]
    events += [ev.ContextFreed(i, i, None, i) for i in range(5001, 6001)]
    buf = io.BytesIO()
    w = TraceFileWriter(buf, HEADER)
    for i in range(0, len(events), 300):
        w.write_events(events[i:i + 300])
    w.close()
    reader = TraceFileReader(io.BytesIO(buf.getvalue()))
    batches = list(reader.batches(max_events=1000))
    assert len(batches) > 3
    assert [e for b in batches for e in b] == events
    assert reader.complete


def test_fast_constructor_matches_the_dataclass() -> None:
    for cls, schema in SCHEMA.items():
        args = [1, 2, None] + [0] * len(schema.fields)
        assert schema.new(*args) == cls(*args)
        assert type(schema.new(*args)) is cls
        with pytest.raises(TypeError):
            schema.new(*args, 5)
    assert not any(hasattr(cls, "__post_init__") for cls in SCHEMA)


def test_bulk_constructor_matches_the_dataclass() -> None:
    for cls, schema in SCHEMA.items():
        rows = [[i, 2 * i, None] + [i] * len(schema.fields) for i in range(5)]
        made = schema.new_many(len(rows), list(zip(*rows)))
        assert made == [cls(*row) for row in rows]
        assert all(type(e) is cls for e in made)
        assert made[0] is not made[1]
        assert schema.new_many(0, [[] for _ in range(3 + len(schema.fields))]) == []
        with pytest.raises(ValueError):  # a column too many
            schema.new_many(1, [[0]] * (4 + len(schema.fields)))


def test_fast_constructor_refuses_post_init() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True, slots=True)
    class Checked(ev.Event):
        x: int

        def __post_init__(self) -> None:
            pass

    with pytest.raises(TypeError, match="__post_init__"):
        fast_constructor(Checked)


def test_unstorable_values_raise_trace_format_error() -> None:
    w = TraceFileWriter(io.BytesIO(), HEADER)
    with pytest.raises(TraceFormatError, match="TensorNamed"):
        w.write_events([ev.TensorNamed(1, 2, None, 3, None)])  # type: ignore[arg-type]
    w = TraceFileWriter(io.BytesIO(), HEADER)
    with pytest.raises(TraceFormatError, match="64-bit"):
        w.write_events([ev.ContextFreed(1, 2, None, 1 << 70)])


def test_a_file_that_writes_less_than_asked_still_gets_every_byte() -> None:
    class Trickle(io.RawIOBase):
        def __init__(self) -> None:
            self.data = bytearray()

        def writable(self) -> bool:
            return True

        def write(self, b) -> int:  # type: ignore[no-untyped-def,override]
            piece = bytes(b[:7])
            self.data += piece
            return len(piece)

    events = [ev.Marker(i, 10 * i, None, f"m{i}" * i) for i in range(1, 40)]
    f = Trickle()
    w = TraceFileWriter(f, HEADER)
    w.write_events(events[:20])
    w.write_rows([type(e) for e in events[20:]], [_as_row(e) for e in events[20:]], rows_only=True,
                 compress_budget_ns=0)
    w.close()
    assert w.nbytes == len(f.data)
    assert read_trace(io.BytesIO(bytes(f.data))).events == tuple(events)
