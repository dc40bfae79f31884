"""Every attribute of the passes the repetition proof relies on is declared (``analysis/state.py``).

The stream analysis skips a repeated step only when the observed step read what the one
before it read; it watches what ``TraceModel``, ``Builder`` and ``AccessScan`` declare in
their ``STATE``. An attribute a pass gains without a declaration would be state the proof
never sees: these tests fail then.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.analysis import decode_loops
from tests.analysis.test_stream import stream_of_columns, trace_file
from vizalloc.analysis import stream as stream_mod
from vizalloc.analysis.state import SIZED, VIEWED, attributes
from vizalloc.trace.columns import iter_columns
from vizalloc.trace.fileformat import TraceFileReader


@pytest.fixture(scope="module")
def analysed() -> Any:
    """A stream fed a decode loop whose tokens it skipped, not finished (``finish`` puts the
    skipped steps' objects into the model's containers for the reports)."""
    stream = stream_mod.StreamAnalysis()
    for batch in iter_columns(TraceFileReader(trace_file(decode_loops.record("kv_rebuild", tokens=8))), 1 << 20):
        stream.feed_columns(batch)
    assert stream.n_skipped_steps
    return stream


def test_every_attribute_is_declared(analysed: Any) -> None:
    for owner, obj in analysed._owners().items():
        declared = type(obj).STATE
        assert sorted(attributes(obj)) == sorted(declared), owner
        for name, held in declared.items():
            assert held.how in VIEWED | SIZED | {"scalar", "counter", "ref", "link"}, (owner, name)
            if held.how in ("map", "set", "bytemaps", "fast"):
                assert held.key in stream_mod._KEY_KIND.values(), (owner, name)
            if held.how == "ref":   # the very object it names, so it gets that one's view
                o, n = held.same_as.split(".")
                assert getattr(obj, name) is getattr(analysed._owners()[o], n), (owner, name)


def test_an_undeclared_attribute_is_found(analysed: Any) -> None:
    scan = analysed.scan
    scan.undeclared = {}
    try:
        assert sorted(attributes(scan)) != sorted(type(scan).STATE)
    finally:
        del scan.undeclared


def test_the_stream_watches_what_is_declared(monkeypatch: Any) -> None:
    """While a step is observed, every declared container is a view, and a reference to another
    pass' container is that one's view (``AccessScan.tensors`` is the model's tensors, once
    kept aside); scalars are noted at the step's start."""
    seen: list[tuple[str, ...]] = []
    logs: list[Any] = []
    feed = stream_mod.StreamAnalysis.feed

    def watched(self: Any, events: Any) -> None:
        if type(self.model.tensors).__name__ == "DictView":
            assert self.scan.tensors is self.model.tensors
            assert self.scan.cpy_dst is self.builder.cpy_dst
            seen.append(tuple(sorted(f"{o}.{n}" for o, obj in self._owners().items()
                                     for n, held in type(obj).STATE.items()
                                     if held.how in VIEWED and "View" in type(getattr(obj, n)).__name__)))
        feed(self, events)

    observed = stream_mod.StreamAnalysis._observed

    def noted(self: Any, *args: Any) -> Any:
        r = observed(self, *args)
        if r is not None:
            logs.append(r[0].log)
        return r

    monkeypatch.setattr(stream_mod.StreamAnalysis, "feed", watched)
    monkeypatch.setattr(stream_mod.StreamAnalysis, "_observed", noted)
    stream_of_columns(decode_loops.record("kv_rebuild", tokens=8), 1 << 20)
    expected = tuple(sorted(f"{o}.{n}" for o, cls in stream_mod.OWNERS.items()
                            for n, held in cls.STATE.items() if held.how in VIEWED))  # type: ignore[attr-defined]
    assert seen and all(s == expected for s in seen)
    assert all({k for n, k, _ in log if n == "scalar"} == set(stream_mod._SCALARS) for log in logs)
    assert "scan.last_compute" in stream_mod._SCALARS and "builder.open_bindings" not in stream_mod._SCALARS
