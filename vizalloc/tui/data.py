"""Everything the screens show, computed once in a worker: the model, the hazards, the
tensor rows, and memory maps on demand (cached).

    >>> a = analyse([])
    >>> len(a.hazards), len(a.tensors)
    (0, 0)
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from vizalloc.analysis.hazards import Hazard, find_hazards
from vizalloc.analysis.model import TraceModel, build_model
from vizalloc.analysis.placed import reserve_plans
from vizalloc.gcpause import gc_paused
from vizalloc.trace import events as ev
from vizalloc.tui.mapdata import BindingMap, MapKey, build_binding_map, build_plan_map
from vizalloc.tui.steps import Prescan
from vizalloc.tui.tensorrows import (
    RepeatedOrder,
    RepeatedRows,
    TensorOrder,
    TensorRows,
    build_repeated_rows,
    build_tensor_rows,
)

if TYPE_CHECKING:
    from vizalloc.trace.fileformat import TraceFileReader

#: Progress callback: (phase, done, total); phases "read", "reread" (a streamed file read again after
#: a repetition's proof failed), "model", "hazards", "tensors".
Progress = Callable[[str, int, int], None]

MAP_CACHE = 16
#: A bound graph of at most this many tensors (nodes and leafs) has its memory map and node
#: list made on the UI thread when a pane needs them (a few milliseconds); a bigger one in a
#: worker (``VizallocApp.prepare_binding``), the pane saying so until they are ready.
INLINE_TENSORS = 256
#: From this many events on, the analysed objects are frozen (``gc.freeze``) after loading.
FREEZE_EVENTS = 100_000
#: Events built per GIL release while a trace file is read (see ``ChunkDecoder.assemble``):
#: the decoder's bulk steps run in C without letting go of the GIL, a few milliseconds per
#: 4,096 events instead of up to tens of milliseconds per 65,536-event batch.
SLICE_EVENTS = 4096


@dataclass
class Analysis:
    """The analysed trace. Build it with :func:`analyse`."""

    model: TraceModel
    hazards: list[Hazard]
    tensors: TensorRows | RepeatedRows
    header: Any = None
    tensor_order: TensorOrder = field(init=False)
    _maps: OrderedDict[int, BindingMap] = field(default_factory=OrderedDict)
    _maps_lock: threading.Lock = field(default_factory=threading.Lock)
    _binding_seqs: list[tuple[int, int]] = field(default_factory=list)
    binding_ids: list[int] = field(default_factory=list)
    """Every binding's id, in order (a streamed model's bindings are made when read: made once here)."""
    _inplace: dict[int, dict[int, int]] = field(default_factory=dict)
    reserve_ids: list[int] = field(default_factory=list)
    """The plans never bound by their own graph (worst-case reserves), in trace order: the
    memory map shows them at their offsets, between the bindings."""
    _map_keys: list[MapKey] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tensor_order = (RepeatedOrder(self.tensors) if isinstance(self.tensors, RepeatedRows)
                             else TensorOrder(self.tensors))
        self._binding_seqs = sorted((b.begin_seq, b.binding_id) for b in self.model.bindings.values())
        self.binding_ids = sorted(b for _, b in self._binding_seqs)
        self.reserve_ids = reserve_plans(self.model)
        plans = self.model.plans
        self._map_keys = [k for _, k in sorted([(s, MapKey(b, -1)) for s, b in self._binding_seqs]
                                               + [(plans[p].begin_seq, MapKey(-1, p)) for p in self.reserve_ids])]

    def next_map(self, key: MapKey, delta: int) -> MapKey | None:
        """The memory map ``delta`` places after ``key`` among the bindings and reserves in
        trace order, round the end (from the first for a key that is none); None without any."""
        keys = self._map_keys
        if not keys:
            return None
        i = keys.index(key) if key in keys else -1 if delta > 0 else 0
        return keys[(i + delta) % len(keys)]

    def plan_map(self, plan_id: int) -> BindingMap:
        """The memory map of a plan never bound (a worst-case reserve), at its offsets; kept
        with the binding maps.

        Raises:
            KeyError: no such plan, or a plan without its graph.
        """
        key = -2 - plan_id   # binding ids are >= 0
        m = self.cached_map(key)
        if m is None:
            m = build_plan_map(self.model, plan_id)
            with self._maps_lock:
                self._maps[key] = m
                while len(self._maps) > MAP_CACHE:
                    self._maps.popitem(last=False)
        return m

    def next_binding(self, binding_id: int, delta: int) -> int:
        """The binding ``delta`` places after ``binding_id`` in id order, round the end (counted
        from the first one for a binding that is none); -1 without bindings."""
        ids = self.binding_ids
        if not ids:
            return -1
        i = bisect_left(ids, binding_id)
        if i == len(ids) or ids[i] != binding_id:
            i = 0
        return ids[(i + delta) % len(ids)]

    def binding_map(self, binding_id: int) -> BindingMap:
        """The memory map of a binding (computed on first use, a few kept).

        Safe to call from a worker thread while the UI thread reads the cache: the model is
        only read, and the cache is touched under a lock (never held while a map is built).
        """
        m = self.cached_map(binding_id)
        if m is None:
            m = build_binding_map(self.model, binding_id)
            with self._maps_lock:
                self._maps[binding_id] = m
                while len(self._maps) > MAP_CACHE:
                    self._maps.popitem(last=False)
        return m

    def cached_map(self, binding_id: int) -> BindingMap | None:
        """The memory map of a binding if it was built already (None: not yet)."""
        with self._maps_lock:
            m = self._maps.get(binding_id)
            if m is not None:
                self._maps.move_to_end(binding_id)
            return m

    def cheap(self, binding_id: int) -> bool:
        """Whether the views of a binding are quick to make on the UI thread (see :data:`INLINE_TENSORS`)."""
        b = self.model.bindings.get(binding_id)
        if b is None:
            return True
        if b.graph is not None:
            return b.graph.n_nodes + b.graph.n_leafs <= INLINE_TENSORS
        g = self.model.graphs.get(b.graph_id)
        return g is None or len(g.nodes) + len(g.leafs) <= INLINE_TENSORS

    def binding_before(self, seq: int) -> int:
        """The latest binding begun at or before ``seq`` (the first one if none; -1 without bindings)."""
        if not self._binding_seqs:
            return -1
        i = bisect_right(self._binding_seqs, (seq, 1 << 62)) - 1
        return self._binding_seqs[max(i, 0)][1]

    def hazard_binding(self, h: Hazard) -> int:
        """The binding whose memory map shows a hazard."""
        if h.binding_id >= 0 and h.binding_id in self.model.bindings:
            return h.binding_id
        if h.compute_id >= 0 and h.compute_id in self.model.computes:
            return self.binding_before(self.model.computes[h.compute_id].begin_seq)
        return self.binding_before(h.seq)

    def inplace_upto(self, plan_id: int) -> dict[int, int]:
        """``tensor -> parent`` for the in-place decisions of every plan up to ``plan_id``: a
        tensor keeps the bytes it took over in place until something places it again."""
        got: dict[int, int] = {}
        for pid in sorted(p for p in self.model.plans if p <= plan_id):
            got.update(self.inplace(pid))
        return got

    def inplace(self, plan_id: int) -> dict[int, int]:
        """``tensor -> parent`` for the in-place decisions of a plan."""
        got = self._inplace.get(plan_id)
        if got is None:
            plan = self.model.plans.get(plan_id)
            got = {d.tensor_id: d.parent_id for d in plan.inplace} if plan is not None else {}
            self._inplace[plan_id] = got
        return got


def _open_trace(path: str | os.PathLike[str]) -> tuple[BinaryIO, int]:
    """The trace file opened for reading, and its size in bytes (to show progress)."""
    from vizalloc.trace.storage import open_trace_file

    f = open_trace_file(path)
    return f, os.fstat(f.fileno()).st_size


def _say_cut(reader: TraceFileReader, on_cut: Callable[[str], None] | None, frames: int = 0) -> None:
    """Say where a trace cut short is cut, once reading ended: ``on_cut(sentence)``, or a
    ``TraceTruncatedWarning`` at the line that called the reading function (``frames``: the calls
    between that function and this one).

    Raises:
        TraceFormatError: cut before its first complete frame (nothing to show).
    """
    from vizalloc.errors import TraceFormatError

    cut = reader.truncation()
    if cut is None:
        return
    if cut.n_frames == 0:
        raise TraceFormatError(f"{cut}; there is nothing to show yet")
    if on_cut is not None:
        on_cut(str(cut))
    else:
        reader.warn_if_incomplete(stacklevel=4 + frames)  # here, _say_cut, the reading function, its caller


def read_events(path: str | os.PathLike[str], scan: Prescan, on_batch: Callable[[int, int], None] | None = None,
                batch_events: int = 1 << 16, on_cut: Callable[[str], None] | None = None
                ) -> tuple[list[ev.Event], Any]:
    """Read a trace file batch by batch, feeding the pre-scan; returns (events, header).

    ``on_batch(bytes_read, file_bytes)`` is called after each batch, so the timeline can
    be shown while the rest of the file is read. A trace cut short (its writer killed,
    or still running) loads its complete frames and ``on_cut(sentence)`` says where it
    is cut and what was read (without ``on_cut``: a ``TraceTruncatedWarning``).

    Raises:
        UsageError: the file cannot be read.
        TraceFormatError: not a trace, damaged, or cut before its first complete frame.
    """
    from vizalloc.trace.fileformat import TraceFileReader

    f, total = _open_trace(path)
    events: list[ev.Event] = []
    # Reading makes millions of objects that all stay alive; each full collection would walk
    # them all while holding the GIL and freeze the UI.
    with f, gc_paused() as pause:
        reader = TraceFileReader(f, os.fspath(path))
        for batch in reader.batches(batch_events, slice_events=SLICE_EVENTS):
            events.extend(batch)
            scan.feed(batch)
            if on_batch is not None:
                on_batch(reader.offset, total)
        _say_cut(reader, on_cut)
        _freeze_if_big(pause, len(events))
        return events, reader.header


def _freeze_if_big(pause: gc_paused, n_events: int) -> None:
    """Keep a big trace's objects frozen for the UI's lifetime: out of the collector's sight,
    or every full collection would stall the UI. Small traces are left alone (frozen objects
    are never freed)."""
    if n_events >= FREEZE_EVENTS:
        pause.freeze(keep=True)


#: Trace files bigger than this are analysed as a stream (``analyse_streamed``): the model
#: keeps no events (no tensor histories), steps repeated with new ids are analysed once.
STREAM_BYTES = 32 << 20
#: Events per column batch when a trace is analysed as a stream: the timeline shows the steps
#: of the first batch while the rest is read.
STREAM_BATCH_EVENTS = 1 << 16


def streams(path: str | os.PathLike[str]) -> bool:
    """Whether a trace file is analysed as a stream (bigger than :data:`STREAM_BYTES`); False
    for one that cannot be read, which reading it then names (``read_events``)."""
    try:
        return os.path.getsize(path) > STREAM_BYTES
    except OSError:
        return False


def analyse_streamed(path: str | os.PathLike[str], scan: Prescan, on_batch: Callable[[int, int], None] | None = None,
                     on_cut: Callable[[str], None] | None = None, progress: Progress | None = None,
                     on_rescan: Callable[[Prescan], None] | None = None) -> Analysis:
    """Read and analyse a big trace file as a stream (``vizalloc.analysis.stream``), feeding the
    pre-scan with every step, analysed or counted; memory holds the model and a batch of columns.

    When the proof of a skipped repetition fails, the analysis reads the file again and analyses
    every step (``vizalloc.analysis.stream.analysed``): that read feeds a fresh pre-scan, given to
    ``on_rescan`` first (the one fed so far holds the steps read before the proof failed).

    Raises:
        UsageError: the file cannot be read.
        TraceFormatError: not a trace, damaged, or cut before its first complete frame.
    """
    from vizalloc.analysis.stream import StreamAnalysis, analysed
    from vizalloc.trace.columns import iter_columns
    from vizalloc.trace.fileformat import TraceFileReader

    scans: list[Prescan] = []
    said: list[bool] = []   # where the file is cut is said once: a second read finds the same cut

    def run(stream: StreamAnalysis) -> Analysis:
        if scans:   # read again: every step analysed, the steps found anew
            scans.append(Prescan())
            if on_rescan is not None:
                on_rescan(scans[-1])
        else:
            scans.append(scan)
        stream.on_events = scans[-1].feed
        stream.on_skipped = scans[-1].feed_run
        f, total = _open_trace(path)
        with f, gc_paused() as pause:
            reader = TraceFileReader(f, os.fspath(path))
            batches = iter_columns(reader, STREAM_BATCH_EVENTS)
            while (batch := next(batches, None)) is not None:
                stream.feed_columns(batch)
                del batch
                if on_batch is not None:
                    on_batch(reader.offset, total)
                time.sleep(0)
            if not said:
                _say_cut(reader, on_cut, frames=2)   # run, analysed
                said.append(True)
            if progress:
                progress("hazards", 0, 1)
            hazards = stream.finish()
            model = stream.model
            if progress:
                progress("tensors", 0, 1)
            rows = build_repeated_rows(model, stream.runs.runs)
            analysis = Analysis(model, hazards, rows, reader.header)
            analysis.tensor_order.warm()
            pause.freeze(keep=True)
        return analysis

    return analysed(run)


def analyse(events: Sequence[ev.Event], header: Any = None, progress: Progress | None = None) -> Analysis:
    """Model, hazards and tensor rows of a trace's events."""
    with gc_paused() as pause:
        # a list is used as it is (events_of copies anything else)
        model = build_model(events, progress=(lambda d, t: progress("model", d, t)) if progress else None)
        if progress:
            progress("hazards", 0, 1)
        hazards = find_hazards(model)
        if progress:
            progress("tensors", 0, max(len(model.tensors), 1))
        rows = build_tensor_rows(model, progress=(lambda d, t: progress("tensors", d, t)) if progress else None)
        analysis = Analysis(model, hazards, rows, header)
        analysis.tensor_order.warm()
        _freeze_if_big(pause, len(events))
    return analysis
