"""The TUI's file reader (``read_events``, which builds events in GIL-releasing slices)
returns exactly the events ``load`` returns, and pre-scans the same steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from vizalloc.trace.api import load, save
from vizalloc.trace.value import Trace
from vizalloc.tui import data
from vizalloc.tui.data import read_events
from vizalloc.tui.steps import Prescan


@pytest.mark.parametrize("slice_events", [1, 2, 5, 7, None])
def test_read_events_in_slices_equals_load(trace: Trace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           slice_events: int | None) -> None:
    path = tmp_path / "fixed.vztrace"
    # several copies of the fixed trace (fresh seq numbers) in chunks of 23: slices cross chunks
    events = [type(e)(i + 1, *[getattr(e, n) for n in e.__dataclass_fields__][1:])
              for i, e in enumerate(list(trace.events) * 4)]
    save(Trace(trace.header, tuple(events)), path, chunk_events=23)
    monkeypatch.setattr(data, "SLICE_EVENTS", slice_events)
    scan, whole_scan = Prescan(), Prescan()
    got, header = read_events(path, scan, batch_events=40)
    assert header == trace.header
    assert got == list(load(path).events) == events
    assert [repr(e) for e in got] == [repr(e) for e in events]
    whole_scan.feed(events)
    assert scan.n_events == whole_scan.n_events == len(events)
    assert scan.steps == whole_scan.steps and len(scan.steps) > 4
