"""Traces whose frames are valid but whose content is not what this vizalloc expects:
enum values it does not know are shown as unknown everywhere; values that cannot be
right (a negative slot, an id out of range) are refused when read, naming the event."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest

from vizalloc.cli import main
from vizalloc.errors import TraceFormatError
from vizalloc.trace import events as ev
from vizalloc.trace.chunk_decoder import ChunkDecoder
from vizalloc.trace.chunk_encoder import ChunkEncoder
from vizalloc.trace.chunks import HEAD, PLANES, join_planes, pack_planes, unpack_planes
from vizalloc.trace.fileformat import read_trace
from vizalloc.trace.value import Trace

from tests.trace import fuzz

UNKNOWN = "from-the-future"


@pytest.fixture(scope="module")
def trace_() -> Trace:
    return fuzz.small_trace()


def _with_unknown_enums(t: Trace) -> Trace:
    """Every enum field set to a value no vizalloc enum has (as a newer writer might)."""
    out = []
    for e in t.events:
        changes = {f.name: UNKNOWN for f in dataclasses.fields(e)
                   if isinstance(getattr(e, f.name), ev.enum.Enum)}
        out.append(dataclasses.replace(e, **changes) if changes else e)
    return Trace(t.header, tuple(out))


def test_enum_text() -> None:
    assert ev.enum_text(ev.PlacedBy.GALLOCR) == "gallocr"
    assert ev.enum_text(UNKNOWN) == f"unknown ({UNKNOWN})"


def test_unknown_enum_values_are_shown_as_unknown_in_every_output(trace_: Trace, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # tables wide enough to show the causes whole
    odd = _with_unknown_enums(trace_)
    changed = sum(a != b for a, b in zip(odd.events, trace_.events))
    assert changed > 20  # placements, re-plans, refusals
    path = tmp_path / "future.vztrace"
    path.write_bytes(fuzz.write(odd))
    loaded = read_trace(io.BytesIO(path.read_bytes()))
    placed = [e for e in loaded.events if isinstance(e, ev.TensorPlaced)]
    assert placed and all(e.by == UNKNOWN for e in placed)  # kept as its text, not dropped

    shown = f"unknown ({UNKNOWN})"
    for fmt in ("json", "perfetto", "layout", "dot", "minimalloc"):
        assert main(["export", str(path), "--format", fmt, "-o", "-"]) == 0, fmt
        out = capsys.readouterr().out
        if fmt in ("json", "perfetto"):
            json.loads(out)
            assert shown in out, fmt
    assert main(["summary", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert any(shown in p["causes"] for p in summary["plans"])
    assert main(["summary", str(path)]) == 0
    assert shown in capsys.readouterr().out
    assert main(["check", str(path), "--json"]) == 1  # the stale overlaps are still found
    report = json.loads(capsys.readouterr().out)
    assert report["hazards"] and shown in json.dumps(report["hazards"])
    assert main(["check", str(path)]) == 1
    assert shown in capsys.readouterr().out


def test_unknown_enum_values_in_the_tui_data(trace_: Trace) -> None:
    from vizalloc.tui.data import analyse
    from vizalloc.tui.history import history_rows
    from vizalloc.tui.steps import Prescan

    odd = _with_unknown_enums(trace_)
    scan = Prescan()
    scan.feed(list(odd.events))
    a = analyse(list(odd.events), odd.header)
    for b in a.model.bindings:
        a.binding_map(b)
    lines = [str(row) for t in a.model.tensors for row in history_rows(a.model, t)]
    assert any(f"unknown ({UNKNOWN})" in line for line in lines)


@pytest.mark.parametrize(("field", "value"), [("slot", -7), ("chunk", -1), ("offset", -64), ("nbytes", -1)])
def test_a_negative_position_is_refused_naming_the_event(trace_: Trace, field: str, value: int) -> None:
    events = list(trace_.events)
    i = next(k for k, e in enumerate(events) if isinstance(e, ev.PlanAlloc))
    events[i] = dataclasses.replace(events[i], **{field: value})
    data = fuzz.write(Trace(trace_.header, tuple(events)))
    with pytest.raises(TraceFormatError, match=rf"event PlanAlloc seq {events[i].seq}: {field} is {value}, not a position"):
        read_trace(io.BytesIO(data), "t.vztrace")


def _marker_chunk_with_row(edit) -> tuple[bytes, bytes]:  # type: ignore[no-untyped-def]
    """One Marker chunk (stored, not compressed) with its row integers changed by ``edit``."""
    meta, blob = ChunkEncoder(None).encode([ev.Marker(1, 5, None, "hello")])
    n_ev, n_strings, n_locs, n_rows, n_items, n_text, planes, flags = HEAD.unpack_from(meta)
    pos = HEAD.size + n_ev + 4 * n_strings + n_text
    n_ints = 3 * n_locs + n_rows + n_items
    ints = join_planes([unpack_planes(meta[pos:], n_ints, planes)]).copy()
    edit(ints)
    packed, mask = pack_planes(np.asarray(ints, dtype=np.int64))
    head = HEAD.pack(n_ev, n_strings, n_locs, n_rows, n_items, n_text, mask, flags)
    return head + meta[HEAD.size:pos] + packed, blob


@pytest.mark.parametrize(("column", "value", "message"), [
    (3, -1, "event Marker seq 1: text is -1, not a string id"),   # the text's string id
    (3, 1, "event Marker seq 1: text is 1, not a string id"),
    (2, -2, "event Marker seq 1: loc is -2, not a location id"),
    (2, 5, "event Marker seq 1: loc is 5, not a location id"),
])
def test_ids_out_of_range_are_refused_naming_the_event(column: int, value: int, message: str) -> None:
    def edit(ints: np.ndarray) -> None:
        ints[column] = value

    meta, blob = _marker_chunk_with_row(edit)
    dec = ChunkDecoder.for_current_schema(compressed=False)
    with pytest.raises(ValueError, match=message):
        dec.assemble([dec.decode(meta, blob, 1)])
    # unchanged, it decodes
    meta, blob = _marker_chunk_with_row(lambda ints: None)
    dec = ChunkDecoder.for_current_schema(compressed=False)
    assert dec.assemble([dec.decode(meta, blob, 1)])[0].text == "hello"
    assert PLANES  # (the layout helpers used above)
