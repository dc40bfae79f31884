"""Source locations: the user's line for every event, with the recorder's location cache.

The recorder remembers the location seen from frames of vizalloc's own code that are still
executing (a planner loop emits many events from one frame). These tests build "internal"
functions (code whose file is inside the vizalloc package) that emit from plain frames,
generators, callbacks into user code and threads, and check each event's line against
the user's line that caused it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import vizalloc
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

_FAKE_FILE = os.path.join(os.path.dirname(vizalloc.__file__), "_test_fake_internal.py")
_FAKE_SRC = '''
def emit_n(n, tag):
    for i in range(n):
        emit(Marker, f"{tag}:{i}")

def outer(n, tag):
    emit(Marker, f"{tag}:begin")
    emit_n(n, tag)
    emit(Marker, f"{tag}:end")

def with_callback(cb, tag):
    emit(Marker, f"{tag}:before")
    cb()
    emit(Marker, f"{tag}:after")

def gen(tag):
    i = 0
    while True:
        emit(Marker, f"{tag}:{i}")
        deep(1, f"{tag}:{i}:deep")
        i += 1
        yield i

def advance(g):
    return next(g)

def around_callback(cb, tag):
    emit_n(1, f"{tag}:before")
    cb()
    emit_n(1, f"{tag}:after")

def deep(k, tag):
    if k == 0:
        emit(Marker, tag)
        return
    deep(k - 1, tag)
'''
_fake: dict[str, Any] = {"emit": recorder.emit, "Marker": ev.Marker}
exec(compile(_FAKE_SRC, _FAKE_FILE, "exec"), _fake)  # noqa: S102 - test helper posing as vizalloc code
emit_n: Callable[[int, str], None] = _fake["emit_n"]
outer: Callable[[int, str], None] = _fake["outer"]
with_callback: Callable[[Callable[[], None], str], None] = _fake["with_callback"]
gen: Callable[[str], Iterator[int]] = _fake["gen"]
deep: Callable[[int, str], None] = _fake["deep"]
advance: Callable[[Iterator[int]], int] = _fake["advance"]
around_callback: Callable[[Callable[[], None], str], None] = _fake["around_callback"]


def _line() -> int:
    """The caller's line."""
    return sys._getframe(1).f_lineno


def _lines(t: vizalloc.TraceSession) -> dict[str, tuple[int, str]]:
    out = {}
    for e in t.trace.events:
        assert isinstance(e, ev.Marker)
        assert e.loc is not None and e.loc.file == __file__, e
        out[e.text] = (e.loc.line, e.loc.function)
    return out


def test_events_of_one_internal_frame_and_its_callees_get_the_calling_line() -> None:
    with vizalloc.trace() as t:
        a = _line(); outer(3, "a")  # noqa: E702 - the line number is the point
        b = _line(); outer(2, "b")  # noqa: E702
        for i in range(3):
            c = _line(); deep(i * 3, f"c{i}")  # noqa: E702
    got = _lines(t)
    fn = "test_events_of_one_internal_frame_and_its_callees_get_the_calling_line"
    assert {k: v for k, v in got.items() if k.startswith("a")} == {k: (a, fn) for k in
                                                                    ("a:begin", "a:0", "a:1", "a:2", "a:end")}
    assert {k: v for k, v in got.items() if k.startswith("b")} == {k: (b, fn) for k in ("b:begin", "b:0", "b:1", "b:end")}
    assert [got[f"c{i}"] for i in range(3)] == [(c, fn)] * 3


def test_a_callback_into_user_code_gets_its_own_line_and_the_caller_keeps_its_line() -> None:
    lines: dict[str, int] = {}

    def callback() -> None:
        lines["inner"] = _line(); outer(1, "inner")  # noqa: E702
        lines["mark"] = _line(); vizalloc.mark("mark")  # noqa: E702

    with vizalloc.trace() as t:
        lines["outer"] = _line(); with_callback(callback, "cb")  # noqa: E702
    got = _lines(t)
    assert got["cb:before"][0] == got["cb:after"][0] == lines["outer"]
    assert got["inner:begin"] == got["inner:0"] == got["inner:end"] == (lines["inner"], "callback")
    assert got["mark"] == (lines["mark"], "callback")


def test_a_generator_resumed_from_different_lines_reports_each_line() -> None:
    with vizalloc.trace() as t:
        g = gen("g")
        first = _line(); next(g)  # noqa: E702
        second = _line(); next(g)  # noqa: E702
        for _ in range(2):
            third = _line(); next(g)  # noqa: E702
        fifth = _line(); advance(g)  # noqa: E702 - resumed from vizalloc's own frame
        sixth = _line(); advance(g)  # noqa: E702
    got = _lines(t)
    want = [first, second, third, third, fifth, sixth]
    assert [got[f"g:{i}"][0] for i in range(6)] == want
    assert [got[f"g:{i}:deep"][0] for i in range(6)] == want


def test_the_outer_frame_keeps_its_line_after_a_callback_resumed_a_generator() -> None:
    lines: dict[str, int] = {}
    g = gen("g")

    def callback() -> None:
        lines["g"] = _line(); next(g)  # noqa: E702

    with vizalloc.trace() as t:
        lines["outer"] = _line(); around_callback(callback, "cb")  # noqa: E702
    got = _lines(t)
    assert got["g:0"][0] == got["g:0:deep"][0] == lines["g"]
    assert got["cb:before:0"][0] == got["cb:after:0"][0] == lines["outer"]


def test_a_returned_frame_is_never_taken_for_a_new_call() -> None:
    lines = []
    with vizalloc.trace() as t:
        for i in range(50):  # new frames of the same code, often at the same address
            if i % 2:
                lines.append(_line()); emit_n(2, f"n{i}")  # noqa: E702
            else:
                lines.append(_line()); outer(1, f"n{i}")  # noqa: E702
    got = _lines(t)
    for i, line in enumerate(lines):
        assert {v[0] for k, v in got.items() if k.split(":")[0] == f"n{i}"} == {line}


def test_threads_emitting_from_internal_frames_get_their_own_lines() -> None:
    barrier = threading.Barrier(3)
    lines: dict[str, int] = {}

    def work(k: int) -> None:
        barrier.wait()
        for j in range(200):
            if k == 0:
                lines["t0"] = _line(); outer(3, f"t{k}.{j}")  # noqa: E702
            elif k == 1:
                lines["t1"] = _line(); deep(4, f"t{k}.{j}")  # noqa: E702
            else:
                lines["t2"] = _line(); emit_n(2, f"t{k}.{j}")  # noqa: E702

    with vizalloc.trace() as t:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    got = _lines(t)
    assert len(got) == 200 * (5 + 1 + 2)
    for text, (line, function) in got.items():
        assert (line, function) == (lines[text.split(".")[0]], "work"), text


def test_no_frame_is_held_after_the_trace_ends() -> None:
    with vizalloc.trace():
        outer(2, "x")
        assert recorder._loc_cache[0] is not None  # the planner-like frame was remembered
    assert recorder._loc_cache == (None, None, None, None)


def test_runtime_events_of_one_allocator_call_get_the_calling_line() -> None:
    from vizalloc.runtime import F32, Context, ops
    from vizalloc.runtime.alloc import GraphAllocator
    from vizalloc.runtime.backends import CPUBackend
    from vizalloc.runtime.graph import Graph

    ctx = Context(name="w")
    a = ctx.new_tensor_1d(F32, 8, name="a")
    b = ctx.new_tensor_1d(F32, 8, name="b")
    g = Graph()
    g.build_forward_expand(ops.add(ctx, ops.mul(ctx, a, b), a))
    galloc = GraphAllocator([CPUBackend().buffer_type])
    with vizalloc.trace() as t:
        first = _line(); galloc.alloc_graph(g)  # noqa: E702
        vizalloc.mark("between")
        second = _line(); galloc.alloc_graph(g)  # noqa: E702
    events = list(t.trace.events)
    cut = next(i for i, e in enumerate(events) if isinstance(e, ev.Marker))
    before, after = events[:cut], events[cut + 1:]
    assert any(isinstance(e, ev.PlanBegin) for e in before) and any(isinstance(e, ev.BindingEnd) for e in after)
    assert {(e.loc.file, e.loc.line) for e in before if e.loc is not None} == {(__file__, first)}
    assert {(e.loc.file, e.loc.line) for e in after if e.loc is not None} == {(__file__, second)}
    assert sum(e.loc is None for e in events) == 0
