"""The stream analysis reports what the object path reports.

``build_model`` + ``find_hazards`` (every event in memory) is the reference; the stream
analysis (``vizalloc.analysis.stream``: batches of events, or column batches read from a
file with repeated steps skipped) must give the same hazards, the same report texts, the
same summary and the same JSON report, whatever the batch sizes. The traces: the
scenarios the other tests build (shared-tensor training loops with every fix strategy and
driver, the exporters' scenarios, real-ggml bug shapes, the TUI's fixture) and decode
loops (``decode_loops.py``, some with a KV cache each token reads and writes) whose
repeated tokens are skipped, followed by what touches what they left (a re-plan, a buffer
free, reads, clears and renames of old tokens' tensors, the host writing the cache).

``VIZALLOC_CORPUS_DIR=DIR python -m pytest tests`` writes every trace the whole suite
analyses; ``python -m tests.analysis.test_stream DIR`` then compares both paths on each.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.analysis import decode_loops
from tests.analysis.test_runtime_traces import index_leaf_run, mismatch_run
from tests.export import scenarios
from tests.tui.fixture_trace import shared_tensor_events
from vizalloc.analysis.hazards import HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.analysis.repeat import cut_steps, repetitions
from vizalloc.analysis.stream import analyse_columns, analyse_events
from vizalloc.cli.summary import summarize
from vizalloc.export.report import report_dict
from vizalloc.scenarios.shared_tensors import STRATEGIES, run
from vizalloc.trace import events as ev
from vizalloc.trace.columns import iter_columns
from vizalloc.trace.fileformat import TraceFileReader, TraceFileWriter
from vizalloc.trace.recorder import ListRecorder
from vizalloc.trace.value import TraceHeader


def _training(strategy: str, driver: str, config: str = "A") -> list[ev.Event]:
    with ListRecorder() as rec:
        run(strategy, steps=3, config=config, driver=driver)
    return rec.events


CORPUS: dict[str, Callable[[], list[ev.Event]]] = {
    "seed_stale": scenarios.seed_stale,
    "two_backends": scenarios.two_backends,
    "mlp_chain": lambda: scenarios.mlp_chain(5),
    "index_leaf": lambda: index_leaf_run()[0],
    "plan_mismatch": lambda: mismatch_run("mul"),
    "tui_fixture": shared_tensor_events,
    **{f"training_{s}_{d}": (lambda s=s, d=d: _training(s, d)) for s in STRATEGIES for d in ("graphs", "opt")},
    "training_none_B": lambda: _training("none", "graphs", "B"),
    **{f"decode_{s}": (lambda s=s: decode_loops.record(s)) for s in decode_loops.SCENARIOS if s != "rename_old"},
}


def outputs(model: Any, hazards: list[Any]) -> tuple[Any, ...]:
    """Everything a user sees of an analysis: hazards, their reports, the summary, the JSON report."""
    return ([h.to_dict() for h in hazards], [h.report() for h in hazards], summarize(model, hazards),
            report_dict(model, hazards))


def trace_file(events: list[ev.Event], per_compute: bool = True, chunk: int = 64) -> io.BytesIO:
    """The events as a trace file: a chunk per graph compute (as a live trace flushes) or per ``chunk`` events."""
    f = io.BytesIO()
    w = TraceFileWriter(f, TraceHeader.new())
    pending: list[ev.Event] = []
    for e in events:
        pending.append(e)
        if (per_compute and type(e) is ev.ComputeEnd) or (not per_compute and len(pending) >= chunk):
            w.write_events(pending)
            pending = []
    if pending:
        w.write_events(pending)
    w.close()
    f.seek(0)
    return f


def stream_of_columns(events: list[ev.Event], batch: int, per_compute: bool = True) -> tuple[Any, list[Any], Any]:
    from vizalloc.gcpause import gc_paused
    from vizalloc.analysis.stream import StreamAnalysis

    stream = StreamAnalysis()
    with gc_paused():
        for b in iter_columns(TraceFileReader(trace_file(events, per_compute)), batch):
            stream.feed_columns(b)
        hazards = stream.finish()
    return stream.model, hazards, stream


@pytest.fixture(scope="module", params=sorted(CORPUS))
def case(request: pytest.FixtureRequest) -> tuple[list[ev.Event], tuple[Any, ...]]:
    events = CORPUS[request.param]()
    model = build_model(events)
    return events, outputs(model, find_hazards(model))


@pytest.mark.parametrize("batch", [1, 7, 1 << 16])
def test_event_batches_analyse_alike(case: tuple[list[ev.Event], tuple[Any, ...]], batch: int) -> None:
    events, expected = case
    model, hazards = analyse_events(events[i:i + batch] for i in range(0, len(events), batch))
    assert outputs(model, hazards) == expected


@pytest.mark.parametrize(("batch", "per_compute"), [(1 << 20, True), (1 << 20, False), (300, True), (97, False)])
def test_column_batches_analyse_alike(case: tuple[list[ev.Event], tuple[Any, ...]], batch: int,
                                      per_compute: bool) -> None:
    events, expected = case
    model, hazards, _ = stream_of_columns(events, batch, per_compute)
    assert outputs(model, hazards) == expected


@pytest.mark.parametrize("scenario", [s for s in decode_loops.SCENARIOS if s not in ("two_shapes",)])
def test_repeated_tokens_are_skipped(scenario: str) -> None:
    """In a trace read as one batch, the tokens between the first two and the last are counted, not analysed."""
    events = decode_loops.record(scenario, tokens=12)
    _, _, stream = stream_of_columns(events, 1 << 20)
    assert stream.n_skipped_steps == 9
    model = stream.model
    # the skipped tokens' tensors are in the model, made from one token's records when asked
    assert len(model.tensors) == len(build_model(events).tensors)
    if "reuse" not in scenario:  # a reused graph makes no tensors per token
        assert len(model.tensors) - len(model.tensors.live) >= 9 * 10   # ~15 tensors per token


@pytest.mark.parametrize("scenario", ["kv_reuse", "kv_rebuild"])
def test_a_token_that_reads_what_the_token_before_wrote_is_skipped(scenario: str, monkeypatch: Any) -> None:
    """A KV cache is read and written by every token: each token reads what the one before wrote.
    Such tokens are skipped too (``relative`` runs); the last one reads the state the token
    before it would have left (the writers' seqs moved), which its check proves: without that
    move the analysis stops with a RepetitionError instead of reporting from the wrong state."""
    from vizalloc.analysis import stream as stream_mod

    events = decode_loops.record(scenario, tokens=12)
    model, hazards, stream = stream_of_columns(events, 1 << 20)
    assert stream.n_skipped_steps == 9 and [r.relative for r in stream.runs.runs] == [True]
    expected = build_model(events)
    assert outputs(model, hazards) == outputs(expected, find_hazards(expected))
    monkeypatch.setattr(stream_mod.StreamAnalysis, "_move_writes", lambda self, run, steps: None)
    with pytest.raises(stream_mod.RepetitionError, match="did not repeat"):
        stream_of_columns(events, 1 << 20)


def test_a_token_reading_bytes_written_twice_in_the_token_before_is_skipped() -> None:
    """llama.cpp's reused decode graph at small micro-batches: each token's first node reads an
    input the host set once, whose bytes the token before wrote twice (a small node, then a
    bigger one over it). Moving the observed token's writes for the last token once rewrote
    each write range apart and cut the bigger writer's interval in two: the last token's read
    then saw two pieces where the observed token saw one, and the proof failed."""
    events = decode_loops.record("reuse_unset_input", tokens=12)
    model, hazards, stream = stream_of_columns(events, 1 << 20)
    assert stream.n_skipped_steps == 9 and [r.relative for r in stream.runs.runs] == [True]
    expected = build_model(events)
    assert outputs(model, hazards) == outputs(expected, find_hazards(expected))


def _unmoved(monkeypatch: Any) -> None:
    """A proof that fails: the last step of a relative run reads the writes as the observed step left them."""
    from vizalloc.analysis import stream as stream_mod

    monkeypatch.setattr(stream_mod.StreamAnalysis, "_move_writes", lambda self, run, steps: None)


def test_a_failed_proof_falls_back_to_analysing_every_step(monkeypatch: Any) -> None:
    """When a skipped repetition's last step reads other state than its observed steps, the
    trace is read again and every step analysed: the result is that of repeat=False."""
    from vizalloc.analysis import stream as stream_mod

    events = decode_loops.record("kv_reuse", tokens=12)
    _unmoved(monkeypatch)
    with pytest.raises(stream_mod.RepetitionError):   # the batches themselves cannot be read again
        analyse_columns(iter_columns(TraceFileReader(trace_file(events)), 1 << 20))
    reads: list[bool] = []

    def read() -> Any:
        reads.append(True)
        return iter_columns(TraceFileReader(trace_file(events)), 1 << 20)

    model, hazards = analyse_columns(read)
    assert len(reads) == 2
    plain = analyse_columns(read, repeat=False)
    expected = build_model(events)
    assert outputs(model, hazards) == outputs(*plain) == outputs(expected, find_hazards(expected))


def test_check_and_summary_fall_back_on_their_own(monkeypatch: Any, tmp_path: Any,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The commands' analysis of a file (``cli.check.analyse_file``) reads it again after a failed
    proof; check and summary print what they print with VIZALLOC_REPEAT=0, exit 0."""
    from vizalloc.cli import main

    path = tmp_path / "kv.vztrace"
    path.write_bytes(trace_file(decode_loops.record("kv_reuse", tokens=12)).getvalue())
    printed = {}
    for repeat in ("0", "1"):
        monkeypatch.setenv("VIZALLOC_REPEAT", repeat)
        if repeat == "1":
            _unmoved(monkeypatch)
        for command in ("check", "summary"):
            assert main([command, str(path)]) == 0
            printed[repeat, command] = capsys.readouterr().out
    assert printed["1", "check"] == printed["0", "check"] and "-> ok" in printed["1", "check"]
    assert printed["1", "summary"] == printed["0", "summary"]


def test_a_template_keeps_each_tensors_state_by_name() -> None:
    """``runs.Template.state``: per tensor, the builder's and the access pass' state by name, as
    the template step left it (the cache-writing CPY's destination, its last write in the step)."""
    from vizalloc.analysis.runs import TensorState

    events = decode_loops.record("kv_rebuild", tokens=8)
    model, _, stream = stream_of_columns(events, 1 << 20)
    (run,) = stream.runs.runs
    states = run.template.state
    assert states and all(type(s) is TensorState for s in states.values())
    lo, hi = run.observed[0].seqs
    assert all(s.last_write is None or lo <= s.last_write <= hi for s in states.values())
    cpy = [t for t, s in states.items() if s.cpy_dst is not None]
    assert cpy and all(model.tensors[t].op == "CPY" for t in cpy)


def test_a_token_that_finds_hazards_is_analysed_every_time() -> None:
    """A step whose analysis finds something is never skipped (its findings would have to be repeated)."""
    events = decode_loops.record("reuse_then_other", tokens=8)
    model = build_model(events)
    assert find_hazards(model)
    with ListRecorder() as rec:
        run("none", steps=4, config="A", driver="graphs")
    _, hazards, stream = stream_of_columns(rec.events, 1 << 20)
    assert hazards and stream.n_skipped_steps == 0


def test_a_rename_after_its_binding_is_seen_as_of_the_binding() -> None:
    """The one place where the two paths may differ, on purpose: a binding is checked with its
    tensors as they are when it is bound (what ggml saw); the object path reads them as the
    trace leaves them, so renaming an old token's output at the end made it report a plan
    reused for another graph. Everything else agrees."""
    events = decode_loops.record("rename_old")
    model = build_model(events)
    expected = find_hazards(model)
    _, hazards, _ = stream_of_columns(events, 300)
    assert not [h for h in hazards if h.kind is HazardKind.PLAN_MISMATCH]
    same = [h for h in expected if h.kind is not HazardKind.PLAN_MISMATCH]
    assert [h.to_dict() for h in hazards] == [h.to_dict() for h in same]
    # the renamed tensor's reports use its last name on both paths
    assert any("'old-out'" in h.report() for h in hazards)


def test_repetitions_need_ids_to_move_alike() -> None:
    """A stretch of steps is a repetition only when each step's ids move by one amount per id kind
    and every other field stays."""
    events = decode_loops.record("reuse", tokens=6)
    batch = next(iter_columns(TraceFileReader(trace_file(events)), 1 << 20))
    steps = cut_steps(batch)
    reps = repetitions(batch, steps)
    assert len(reps) == 1 and reps[0].shift.ids == {"compute": (reps[0].shift.ids["compute"][0], 1)}
    # a node that reads another tensor in one step breaks the stretch there
    k = 5
    mid = steps[k]
    changed = list(events)
    for i in range(mid[0], mid[1]):
        e = changed[i]
        if isinstance(e, ev.NodeCompute) and len(e.reads) == 2:
            changed[i] = ev.NodeCompute(e.seq, e.t_ns, e.loc, e.compute_id, e.index, e.tensor_id, e.backend,
                                        (e.reads[1], e.reads[0]), e.wall_ns)
            break
    batch = next(iter_columns(TraceFileReader(trace_file(changed)), 1 << 20))
    reps = repetitions(batch, cut_steps(batch), min_steps=2)
    assert all(not (r.first < k <= r.last) for r in reps)


def test_memory_stays_with_what_the_trace_keeps_alive_not_its_length() -> None:
    """Four times the tokens of a decode loop, read 5,000 events at a time: the analysis' peak
    memory barely grows. The skipped tokens' objects are one token's records per batch (each
    batch starts its repetitions anew), one batch of columns is held at a time."""
    import gc
    import tracemalloc

    from vizalloc.analysis.stream import StreamAnalysis

    def peak(tokens: int) -> int:
        f = trace_file(decode_loops.record("plain", tokens=tokens))
        gc.collect()
        tracemalloc.start()
        try:
            stream = StreamAnalysis()
            for b in iter_columns(TraceFileReader(f), 5000):
                stream.feed_columns(b)
                del b
            stream.finish()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, big = peak(400), peak(1600)
    assert big < 1.5 * small, (small, big)


def test_a_trace_still_being_written_is_checked_up_to_its_last_frame(tmp_path: Any) -> None:
    """A file without its end record (its writer still running, or killed): the stream analyses
    every complete frame, and finds what the object path finds in the same events."""
    import warnings

    from vizalloc.trace.fileformat import TraceTruncatedWarning

    events = decode_loops.record("free_after", tokens=8)
    data = trace_file(events).getvalue()
    cut = data[: data.rindex(b"VF") - 40]   # the end record and part of the last chunk gone
    reader = TraceFileReader(io.BytesIO(cut))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, hazards = analyse_columns(iter_columns(reader, 1 << 20))
        reader.warn_if_incomplete()
    assert any(issubclass(w.category, TraceTruncatedWarning) for w in caught)
    kept = events[:model.n_events]
    assert 0 < len(kept) < len(events)
    expected = build_model(kept)
    assert outputs(model, hazards) == outputs(expected, find_hazards(expected))


def compare_corpus(directory: str) -> int:
    """Compare both paths on every ``.vztrace`` in ``directory``; print the differing ones; the number of them."""
    import glob
    import warnings

    from vizalloc.trace.api import load

    bad = 0
    files = sorted(glob.glob(f"{directory}/*.vztrace"))
    for path in files:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            events = list(load(path).events)
        model = build_model(events)
        expected = outputs(model, find_hazards(model))
        for batch, per_compute in ((1 << 20, True), (97, False)):
            smodel, hazards, _ = stream_of_columns(events, batch, per_compute)
            if outputs(smodel, hazards) != expected:
                bad += 1
                print(f"differs: {path} (batch {batch})")
                break
    print(f"{len(files)} traces, {bad} differ")
    return bad


if __name__ == "__main__":
    sys.exit(1 if compare_corpus(sys.argv[1]) else 0)
