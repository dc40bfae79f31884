"""The TUI's loader on traces cut short or damaged: a cut trace is shown with a notice
saying where it is cut; one cut before its first complete frame, or with absurd lengths,
is a clear error in the app (never "MemoryError:", never an empty screen)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vizalloc.errors import TraceFormatError
from vizalloc.trace.fileformat import TraceTruncatedWarning
from vizalloc.tui.app import VizallocApp
from vizalloc.tui.data import analyse_streamed, read_events
from vizalloc.tui.steps import Prescan

from tests.trace import fuzz
from tests.tui.conftest import ready

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


@pytest.fixture(scope="module")
def frames() -> tuple[bytes, list[fuzz.Frame]]:
    data = fuzz.write(fuzz.small_trace(), chunk_events=80)
    return data, fuzz.split(data)[1]


def test_read_events_says_where_a_trace_is_cut(frames, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data, fr = frames
    path = tmp_path / "cut.vztrace"
    path.write_bytes(data[:fr[2].offset + 10])
    said: list[str] = []
    events, _ = read_events(path, Prescan(), on_cut=said.append)
    assert len(events) == fr[0].n_events + fr[1].n_events
    assert len(said) == 1 and "trace cut at byte" in said[0] and "2 complete frames" in said[0]
    with pytest.warns(TraceTruncatedWarning, match="2 complete frames") as caught:
        read_events(path, Prescan())
    assert caught[0].filename == __file__  # the warning points at the line that read the file
    with pytest.warns(TraceTruncatedWarning, match="2 complete frames") as caught:
        analyse_streamed(path, Prescan())
    assert caught[0].filename == __file__
    path.write_bytes(data[:fr[0].offset + 10])
    with pytest.raises(TraceFormatError, match="no complete frame, so no events; there is nothing to show"):
        read_events(path, Prescan(), on_cut=said.append)


async def test_the_app_shows_a_cut_trace_with_a_notice(frames, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data, fr = frames
    path = tmp_path / "cut.vztrace"
    path.write_bytes(data[:fr[2].offset + 10])
    app = VizallocApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.analysis is not None and not app.load_error
        notes = [(n.title, str(n.message)) for n in app._notifications]
        assert any(t == "the trace is cut short" and "2 complete frames" in m for t, m in notes), notes


@pytest.mark.parametrize("cut", ["before the first frame", "absurd length"])
async def test_the_app_reports_a_trace_it_cannot_show(frames, tmp_path: Path, cut: str) -> None:  # type: ignore[no-untyped-def]
    data, fr = frames
    path = tmp_path / "bad.vztrace"
    if cut == "before the first frame":
        path.write_bytes(data[:fr[0].offset + 10])
        expect = "no complete frame"
    else:
        header, _ = fuzz.split(data)
        path.write_bytes(header + b"".join(f.pack(**({"blob_len": 2**63} if i == 0 else {}))
                                           for i, f in enumerate(fr)))
        expect = "more than a chunk can hold"
    app = VizallocApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert expect in app.load_error and "MemoryError" not in app.load_error


async def test_the_app_names_a_trace_file_that_is_not_there(tmp_path: Path) -> None:
    # the library's app, given a path the CLI would have checked: the same clear sentence
    path = tmp_path / "gone.vztrace"
    app = VizallocApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.load_error == f"no trace file at {path}"
