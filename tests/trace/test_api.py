"""The library API: trace() as a context manager, nesting, threads, mark, load, save."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import vizalloc
from vizalloc.errors import TraceFormatError, UsageError
from vizalloc.runtime import F32, Context
from vizalloc.trace import events as ev
from vizalloc.trace import recorder
from vizalloc.trace.api import TraceSession, read_batches, read_header, save


def _markers(trace: vizalloc.Trace) -> list[str]:
    return [e.text for e in trace.events if isinstance(e, ev.Marker)]


def test_vizalloc_trace_is_callable_and_records_runtime_events(tmp_path: Path) -> None:
    import vizalloc.trace.events  # noqa: F401 - binds the package to vizalloc.trace first

    path = tmp_path / "run.vztrace"
    with vizalloc.trace(path) as t:
        ctx = Context(name="w")
        x = ctx.new_tensor_2d(F32, 4, 3, name="x")
        vizalloc.mark("made x")
    kinds = [type(e).__name__ for e in t.trace.events]
    assert kinds == ["ContextCreated", "TensorCreated", "Marker"]
    created = t.trace.events[1]
    assert isinstance(created, ev.TensorCreated) and created.tensor_id == x.id and created.ne == (4, 3, 1, 1)
    assert created.loc is not None and created.loc.file == __file__
    assert vizalloc.load(path) == t.trace
    assert isinstance(t, TraceSession) and not t.active


def test_off_outside_and_mark_is_a_no_op() -> None:
    assert not recorder.active()
    vizalloc.mark("nobody listens")
    assert recorder.emit(ev.Marker, "x") is None
    with vizalloc.trace() as t:
        assert recorder.active()
    assert not recorder.active()
    assert len(t.trace) == 0


def test_traces_nest(tmp_path: Path) -> None:
    with vizalloc.trace(tmp_path / "outer.vztrace") as outer:
        vizalloc.mark("a")
        with vizalloc.trace(tmp_path / "inner.vztrace") as inner:
            vizalloc.mark("b")
            with vizalloc.trace() as innermost:
                vizalloc.mark("c")
        vizalloc.mark("d")
    assert _markers(outer.trace) == ["a", "b", "c", "d"]
    assert _markers(inner.trace) == ["b", "c"]
    assert _markers(innermost.trace) == ["c"]
    assert vizalloc.load(tmp_path / "outer.vztrace") == outer.trace
    assert vizalloc.load(tmp_path / "inner.vztrace") == inner.trace
    # the inner events are the same events (same seq) in both
    assert [e.seq for e in inner.trace.events] == [e.seq for e in outer.trace.events[1:3]]


def test_events_from_many_threads_are_all_recorded_in_seq_order(tmp_path: Path) -> None:
    n_threads, per_thread = 4, 500
    start = threading.Barrier(n_threads)

    def work(k: int) -> None:
        start.wait()
        for i in range(per_thread):
            vizalloc.mark(f"{k}:{i}")

    with vizalloc.trace(tmp_path / "threads.vztrace", max_pending=97) as t:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    events = t.trace.events
    assert len(events) == n_threads * per_thread
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for k in range(n_threads):  # each thread's own order is kept
        mine = [m for m in _markers(t.trace) if m.startswith(f"{k}:")]
        assert mine == [f"{k}:{i}" for i in range(per_thread)]
    assert vizalloc.load(tmp_path / "threads.vztrace") == t.trace


def test_traces_started_in_two_threads_each_get_their_file(tmp_path: Path) -> None:
    results: dict[int, vizalloc.Trace] = {}

    def own(k: int) -> None:
        with vizalloc.trace(tmp_path / f"{k}.vztrace") as t:
            for i in range(50):
                vizalloc.mark(f"{k}.{i}")
        results[k] = t.trace

    threads = [threading.Thread(target=own, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for k in range(2):
        assert vizalloc.load(tmp_path / f"{k}.vztrace") == results[k]
        assert {f"{k}.{i}" for i in range(50)} <= set(_markers(results[k]))


def test_exception_inside_closes_the_file_and_propagates(tmp_path: Path) -> None:
    path = tmp_path / "boom.vztrace"
    with pytest.raises(ZeroDivisionError):
        with vizalloc.trace(path) as t:
            vizalloc.mark("before")
            1 / 0  # noqa: B018
    assert not recorder.active()
    loaded = vizalloc.load(path)
    assert _markers(loaded) == ["before"] and loaded == t.trace


def test_complete_file_loads_without_a_warning(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    with vizalloc.trace(tmp_path / "ok.vztrace"):
        vizalloc.mark("x")
    vizalloc.load(tmp_path / "ok.vztrace")
    assert not recwarn.list


def test_keep_events_false_writes_only_the_file(tmp_path: Path) -> None:
    path = tmp_path / "lean.vztrace"
    with vizalloc.trace(path, keep_events=False, max_pending=10) as t:
        for i in range(95):
            vizalloc.mark(str(i))
    assert t.n_events == 95
    with pytest.raises(UsageError, match="keep_events=False"):
        _ = t.trace
    assert _markers(vizalloc.load(path)) == [str(i) for i in range(95)]
    with pytest.raises(UsageError):
        vizalloc.trace(None, keep_events=False)


def test_row_and_object_recorders_together_record_the_same_events(tmp_path: Path) -> None:
    path = tmp_path / "mixed.vztrace"
    with vizalloc.trace(path) as t:
        vizalloc.mark("rows only")
        with recorder.StrictRecorder() as lst:   # a recorder without record_row: objects for all
            ctx = Context()
            ctx.new_tensor_1d(F32, 8)
        vizalloc.mark("rows again")
    assert t.trace.events[1:3] == tuple(lst.events)
    assert vizalloc.load(path) == t.trace


def test_an_unstorable_event_is_reported_at_the_end_not_in_the_program(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="TensorNamed"):
        with vizalloc.trace(tmp_path / "bad.vztrace"):
            recorder.emit(ev.TensorNamed, 1, object())   # a runtime bug: not a string
            vizalloc.mark("the program goes on")


def test_wrong_field_count_fails_at_the_emit() -> None:
    with vizalloc.trace():
        with pytest.raises(TypeError):
            recorder.emit(ev.TensorNamed, 1)


def test_save_read_header_and_batches(tmp_path: Path) -> None:
    with vizalloc.trace(capture_values=True) as t:
        for i in range(300):
            vizalloc.mark(f"m{i}")
    path = tmp_path / "saved.vztrace"
    assert save(t.trace, path, chunk_events=64) == path.stat().st_size
    assert vizalloc.load(path) == t.trace
    assert read_header(path) == t.trace.header and t.trace.header.capture_values
    assert [e for batch in read_batches(path, 100) for e in batch] == list(t.trace.events)


def test_trace_value_behaves_like_a_sequence() -> None:
    with vizalloc.trace() as t:
        vizalloc.mark("a")
        vizalloc.mark("b")
    tr = t.trace
    assert len(tr) == 2 and [e.text for e in tr] == ["a", "b"] and tr[1].text == "b"
    assert tr[:1] == tr.events[:1]
    with pytest.raises(AttributeError):
        tr.events = ()  # type: ignore[misc]


def test_a_session_cannot_be_started_twice() -> None:
    t = vizalloc.trace()
    with t:
        pass
    with pytest.raises(UsageError):
        t.start()


def test_unwritable_path_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot write"):
        with vizalloc.trace(tmp_path / "no" / "such" / "dir" / "x.vztrace"):
            pass
    assert not recorder.active()


def test_capture_values_reaches_the_recorder_flag() -> None:
    assert not recorder.capturing_values()
    with vizalloc.trace(capture_values=True):
        assert recorder.capturing_values()
        with vizalloc.trace():
            assert recorder.capturing_values()
    assert not recorder.capturing_values()


def test_parquet_export_keeps_every_row(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from vizalloc.trace.arrow_export import to_parquet

    with vizalloc.trace(tmp_path / "t.vztrace") as t:
        ctx = Context(name="c")
        ctx.new_tensor_2d(F32, 3, 2, name="m")
        for i in range(10):
            vizalloc.mark(f"m{i}")
    counts = to_parquet(tmp_path / "t.vztrace", tmp_path / "pq", batch_events=4)
    assert counts == {"ContextCreated": 1, "TensorCreated": 1, "Marker": 10}
    markers = pq.read_table(tmp_path / "pq" / "Marker.parquet")
    assert markers.column("text").to_pylist() == [f"m{i}" for i in range(10)]
    created = pq.read_table(tmp_path / "pq" / "TensorCreated.parquet").to_pylist()[0]
    assert created["ne"] == [3, 2, 1, 1] and created["loc_file"] == __file__
    assert [e.seq for e in t.trace.events if isinstance(e, ev.Marker)] == markers.column("seq").to_pylist()


def test_source_lines_point_at_user_code_and_packaged_scenarios() -> None:
    import vizalloc.scenarios.shared_tensors as scenario
    sessions = []
    scenario.run("none", steps=1, seed=0, around_loop=lambda: sessions.append(vizalloc.trace()) or sessions[-1])
    files = {e.loc.file for e in sessions[0].trace.events if e.loc is not None}
    assert files and all(f.endswith(("shared_tensors.py", "test_api.py")) or "scenarios" in f for f in files), files
    assert any(f.endswith("shared_tensors.py") for f in files)


def test_follow_reads_a_trace_while_it_is_written(tmp_path: Path) -> None:
    from vizalloc.trace.api import follow

    path = tmp_path / "live.vztrace"
    session = vizalloc.trace(path, flush_interval_s=3600).start()
    try:
        with follow(path) as live:
            assert live.poll() == []
            vizalloc.mark("one")
            assert live.poll() == []          # not flushed yet
            session.flush()
            assert [e.text for e in live.poll()] == ["one"]
            vizalloc.mark("two")
            vizalloc.mark("three")
            session.flush()
            assert [e.text for e in live.poll()] == ["two", "three"]
            assert not live.complete
            session.stop()
            assert live.poll() == [] and live.complete and live.n_events == 3
    finally:
        session.stop()


def test_the_final_trace_is_built_once_on_first_access(tmp_path: Path) -> None:
    path = tmp_path / "lazy.vztrace"
    with vizalloc.trace(path) as t:
        for i in range(10):
            vizalloc.mark(f"m{i}")
        during = t.trace
        assert _markers(during) == [f"m{i}" for i in range(10)]
        vizalloc.mark("last")
    assert t.n_events == 11
    final = t.trace
    assert final is t.trace and len(final) == 11 and t.n_events == 11
    assert _markers(final) == [f"m{i}" for i in range(10)] + ["last"]
    assert vizalloc.load(path) == final
    assert len(during) == 10  # a snapshot taken while recording does not grow
    with pytest.raises(UsageError):
        t.start()


def test_a_kept_file_trace_holds_written_chunks_not_rows(tmp_path: Path) -> None:
    path = tmp_path / "kept.vztrace"
    with vizalloc.trace(path, capture_values=True, flush_interval_s=3600) as t:
        ctx = Context(name="k")
        x = ctx.new_tensor_1d(F32, 4, name="x")
        vizalloc.mark("a")
        t.flush()
        assert t._items == [] and t.n_events == 3    # written: the rows are gone, the chunk is kept
        recorder.emit(ev.ValueSnapshot, x.id, 1, "end", "f32", (4, 1, 1, 1), bytes(range(16)))
        vizalloc.mark("b")
        snapshot = t.trace                            # decoded chunk + rows not written yet
        assert [type(e).__name__ for e in snapshot.events] == [
            "ContextCreated", "TensorCreated", "Marker", "ValueSnapshot", "Marker"]
        t.flush()
        vizalloc.mark("c")
        t.flush()
        assert _markers(t.trace) == ["a", "b", "c"]
    final = t.trace
    assert final.events[:5] == snapshot.events and t.n_events == 6
    assert final.events[3].data == bytes(range(16))  # type: ignore[attr-defined]
    assert vizalloc.load(path) == final
