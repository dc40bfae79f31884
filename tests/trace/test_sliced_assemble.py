"""Building a batch's events slice by slice (``slice_events``, what the TUI's reader uses so
its UI thread gets the GIL) yields exactly the events the whole-batch path yields."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vizalloc.errors import UsageError
from vizalloc.trace import chunk_decoder
from vizalloc.trace import events as ev
from vizalloc.trace.api import read_batches, save
from vizalloc.trace.fileformat import TraceFileReader, TraceFileWriter
from vizalloc.trace.value import Trace, TraceHeader

from tests.trace.strategies import ANY_EVENT

HEADER = TraceHeader.new(argv=("prog",))
#: slice sizes: 1, primes and sizes that do not divide the chunks, one bigger than any kind's share
SLICES = [1, 3, 7, 64, 100, 1000, 4096, 100_000]


def _mixed_events(n: int) -> list[ev.Event]:
    """Many events of kinds with every codec the decoder handles in its own way: ints, strings,
    enums, bools, floats, bytes, ``tuple<int>``, ``tuple<scalar>``, nested tuples, locations."""
    locs = [None, ev.Location("train.py", 12, "step"), ev.Location("model.py", 3, "<module>")]
    out: list[ev.Event] = []
    for i in range(1, n + 1):
        loc = locs[i % 3]
        r = i % 9
        if r == 0:
            params: tuple[int | float | str | bool | None, ...] = () if i % 2 else (i, -0.0, f"p{i % 5}", True, None)
            out.append(ev.TensorCreated(i, 7 * i, loc, i, i % 4, f"t{i % 50}", "f32", (i % 8, 4, 1, 1),
                                        (4, 16, 64, 64), "MUL_MAT", params, (i - 1, i - 2)[: i % 3], -1, 0, i % 2,
                                        -1))
        elif r == 1:
            out.append(ev.TensorPlaced(i, 7 * i, loc, i, i % 3, 64 * i, 64, list(ev.PlacedBy)[i % len(ev.PlacedBy)], 5))
        elif r == 2:
            out.append(ev.NodeCompute(i, 7 * i, loc, 1, i % 40, i, "CPU", (i, i + 1)[: i % 3], 1000 - i))
        elif r == 3:
            out.append(ev.TensorNamed(i, 7 * i, loc, i, f"blk.{i % 11}.w"))
        elif r == 4:
            data = bytes([i % 256]) * (i % 5)
            out.append(ev.ValueSnapshot(i, 7 * i, loc, i, 2, "end", "f32", (i % 4, 1, 1, 1), data))
        elif r == 5:
            out.append(ev.PlanEnd(i, 7 * i, loc, i, ((i, i + 1), (), (i % 3,))))
        elif r == 6:
            out.append(ev.ContextCreated(i, 7 * i, loc, i, f"ctx{i % 4}", bool(i % 2)))
        elif r == 7:
            out.append(ev.Marker(i, -(i << 40), loc, f"m{i % 13}"))
        else:
            out.append(ev.GraphExpanded(i, 7 * i, loc, i % 6, (i, i + 1, i + 2)[: i % 4], (i,)))
    return out


def _file(events: list[ev.Event], chunk_sizes: list[int]) -> bytes:
    """A trace file of ``events`` written in chunks of the given sizes (cycled): small chunks are
    stored in recording order, big ones grouped by kind."""
    buf = io.BytesIO()
    w = TraceFileWriter(buf, HEADER)
    i = k = 0
    while i < len(events):
        n = chunk_sizes[k % len(chunk_sizes)]
        w.write_events(events[i:i + n])
        i, k = i + n, k + 1
    w.close()
    return buf.getvalue()


def _read(data: bytes, max_events: int, slice_events: int | None) -> list[list[ev.Event]]:
    return list(TraceFileReader(io.BytesIO(data)).batches(max_events, slice_events=slice_events))


def _same(a: list[ev.Event], b: list[ev.Event]) -> None:
    """Equal events in the same order, down to field types and float signs (``==`` would let
    ``-0.0`` pass for ``0.0`` and an enum member for its string)."""
    assert a == b
    assert [repr(e) for e in a] == [repr(e) for e in b]
    for x, y in zip(a, b):
        assert type(x) is type(y)
        for name in x.__dataclass_fields__:
            assert type(getattr(x, name)) is type(getattr(y, name)), (x, name)


@pytest.mark.parametrize("slice_events", SLICES)
def test_slices_yield_exactly_the_events_of_whole_batches(slice_events: int) -> None:
    events = _mixed_events(6000)
    # grouped chunks of 2,500 / 1,337 events and in-order chunks of 58 / 1 events, so slices
    # span chunk boundaries and kinds continue (seq / t_ns deltas) across chunks and batches
    data = _file(events, [2500, 58, 1337, 1, 58])
    whole = _read(data, 3000, None)
    sliced = _read(data, 3000, slice_events)
    assert [len(b) for b in sliced] == [len(b) for b in whole]
    _same([e for b in sliced for e in b], [e for b in whole for e in b])
    _same([e for b in sliced for e in b], events)


def test_slices_of_every_size_up_to_a_kind_share_and_beyond() -> None:
    events = _mixed_events(900)
    data = _file(events, [900])  # one grouped chunk: 100 events per kind
    whole = _read(data, 1 << 16, None)
    for slice_events in (1, 2, 9, 33, 99, 100, 101, 333, 899, 900, 901):
        _same(_read(data, 1 << 16, slice_events)[0], whole[0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(ANY_EVENT, max_size=60), chunk=st.integers(1, 40), slice_events=st.integers(1, 9))
def test_slices_match_for_any_event_of_any_kind(events: list[ev.Event], chunk: int, slice_events: int) -> None:
    data = _file(events, [chunk])
    whole = [e for b in _read(data, 25, None) for e in b]
    sliced = [e for b in _read(data, 25, slice_events) for e in b]
    assert len(sliced) == len(whole) == len(events)
    _same(sliced, whole)


def test_slicing_releases_the_gil_between_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    monkeypatch.setattr(chunk_decoder, "_sleep", calls.append)
    events = [ev.Marker(i, i, None, "m") for i in range(1, 10_001)]
    data = _file(events, [10_000])
    assert [e for b in _read(data, 1 << 16, None) for e in b] == events
    assert calls == []  # the fast path for load() never sleeps
    assert [e for b in _read(data, 1 << 16, 1000) for e in b] == events
    assert len(calls) >= 10 and set(calls) == {0}


def test_read_batches_takes_slice_events(tmp_path) -> None:  # type: ignore[no-untyped-def]
    events = _mixed_events(3000)
    path = tmp_path / "t.vztrace"
    save(Trace(HEADER, tuple(events)), path, chunk_events=1000)
    _same([e for b in read_batches(path, 1500, slice_events=77) for e in b], events)
    with pytest.raises(UsageError, match="slice_events"):
        next(read_batches(path, slice_events=0))
