"""The queries over a trace's model: tensors with their history, placements at any step,
the memory map of any buffer at any step, and the one pass that builds it (``build_model``).

The records it holds are in ``records.py``; ``build.py`` is the pass. ``build_model``
makes one linear pass over the events and keeps integer ids, lists and small records;
nothing here imports the runtime. A "step" is an event's ``seq``: the memory map at seq
``s`` is the state right after the event numbered ``s``.

    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.analysis.model import build_model
    >>> m = build_model([
    ...     ev.BufferAllocated(1, 0, None, 7, "CPU", "CPU", 65536, 1024, 32, "compute", -1, -1, -1, ""),
    ...     ev.TensorCreated(2, 0, None, 3, 0, "x", "f32", (16, 1, 1, 1), (4, 64, 64, 64), "NONE",
    ...                      (), (), -1, 0, 0, -1),
    ...     ev.TensorPlaced(3, 0, None, 3, 7, 0, 64, ev.PlacedBy.USER, -1),
    ... ])
    >>> [(e.name, e.offset, e.nbytes, e.state.value) for e in m.memory_map(7, 3)]
    [('x', 0, 64, 'live')]

Staleness (architecture.md, "stale"): a placement made by a graph allocator binding
becomes stale when that allocator plans again (``PlanBegin``), when the scheduler that
drives it is reset (``SchedReset``), or when its buffer is freed (``BufferFreed``).
The placement itself lasts until the tensor's pointers are cleared or it is placed
again; a placement into a freed buffer is *dangling* from the free on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from vizalloc.analysis.records import (
    BindingInfo, BufferInfo, ComputeInfo, GraphInfo, HistoryEntry, MapEntry, Placement, PlacementState, PlanInfo,
    SchedInfo, TensorInfo, history_kind,
)
from vizalloc.gcpause import gc_paused
from vizalloc.trace import events as ev


@dataclass(slots=True)
class TraceModel:
    """Everything the analysis knows about a trace. Build it with ``build_model``."""

    events: list[ev.Event]
    tensors: dict[int, TensorInfo] = field(default_factory=dict)
    buffers: dict[int, BufferInfo] = field(default_factory=dict)
    graphs: dict[int, GraphInfo] = field(default_factory=dict)
    plans: dict[int, PlanInfo] = field(default_factory=dict)
    bindings: dict[int, BindingInfo] = field(default_factory=dict)
    scheds: dict[int, SchedInfo] = field(default_factory=dict)
    computes: dict[int, ComputeInfo] = field(default_factory=dict)
    placements: list[Placement] = field(default_factory=list)
    replans: list[ev.Replan] = field(default_factory=list)
    copies: list[ev.TensorCopy] = field(default_factory=list)
    snapshots: list[ev.ValueSnapshot] = field(default_factory=list)
    markers: list[ev.Marker] = field(default_factory=list)
    contexts: dict[int, ev.ContextCreated] = field(default_factory=dict)
    #: tensors the scheduler made to hold an input copy for a split (``SchedCopy.copy_id``)
    input_copies: set[int] = field(default_factory=set)
    #: the real process this trace was captured from (``vizalloc.capture``), if any
    captured: list[ev.ProcessCaptured] = field(default_factory=list)
    #: where vizalloc's replay of a captured process disagreed with it
    replay_mismatches: list[ev.ReplayMismatch] = field(default_factory=list)
    #: where the import of a captured process stopped (or that it captured nothing)
    capture_incomplete: list[ev.CaptureIncomplete] = field(default_factory=list)
    #: events a streaming build was fed without keeping them (``build.Builder.feed``), and the
    #: seq of the last of them
    n_streamed: int = 0
    streamed_last_seq: int = 0
    _seq_index: dict[int, int] | None = None
    _map_index: dict[int, Any] | None = None

    @property
    def seq_index(self) -> dict[int, int]:
        """Position in ``events`` of each seq (built on first use)."""
        if self._seq_index is None:
            self._seq_index = {e.seq: i for i, e in enumerate(self.events)}
        return self._seq_index

    # -- tensors --------------------------------------------------------------
    def tensor(self, tensor_id: int) -> TensorInfo:
        return self.tensors[tensor_id]

    def label(self, tensor_id: int) -> str:
        info = self.tensors.get(tensor_id)
        return info.label if info is not None else f"#{tensor_id}"

    def root(self, tensor_id: int) -> int:
        info = self.tensors.get(tensor_id)
        return info.root if info is not None else tensor_id

    def history(self, tensor_id: int) -> list[HistoryEntry]:
        """Everything that happened to a tensor, in order, with source lines."""
        info = self.tensors[tensor_id]
        out = []
        for idx in info.history:
            e = self.events[idx]
            out.append(HistoryEntry(e.seq, history_kind(e, tensor_id), e.loc, e))
        return out

    def placement_at(self, tensor_id: int, seq: int) -> Placement | None:
        """The placement a tensor carries right after event ``seq`` (None: no data)."""
        info = self.tensors.get(tensor_id)
        if info is None:
            return None
        for idx in reversed(info.placements):
            p = self.placements[idx]
            if p.seq <= seq:
                return p if seq < p.end_seq else None
        return None

    def placement_state(self, p: Placement, seq: int) -> PlacementState:
        buf = self.buffers.get(p.buffer_id)
        if buf is not None and buf.freed_seq <= seq:
            return PlacementState.DANGLING
        if p.stale_seq <= seq:
            return PlacementState.STALE
        return PlacementState.LIVE

    # -- memory maps ----------------------------------------------------------
    def memory_map(self, buffer_id: int, seq: int, *, views: bool = True) -> list[MapEntry]:
        """Which tensors hold which bytes of a buffer right after event ``seq``, by offset.

        Roots own bytes; views are listed too unless ``views=False``. Overlapping rows are
        normal for in-place reuse and views; a STALE or DANGLING row overlapping a LIVE one
        is what the hazards look at.
        """
        rows = []
        for idx in self.placements_alive(buffer_id, seq):
            p = self.placements[idx]
            info = self.tensors.get(p.tensor_id)
            is_view = info.is_view if info is not None else False
            if is_view and not views:
                continue
            rows.append(MapEntry(p.tensor_id, self.label(p.tensor_id), p.offset, p.nbytes,
                                 self.placement_state(p, seq), is_view, idx))
        rows.sort(key=lambda r: (r.offset, r.is_view, r.tensor_id))
        return rows

    def placements_alive(self, buffer_id: int, seq: int) -> list[int]:
        """Indices of the placements in a buffer that exist right after event ``seq``.

        Uses per-buffer numpy arrays of start/end seqs (built on first use), so a query
        costs one vectorised comparison, not a Python loop over the buffer's history.
        """
        if self._map_index is None:
            self._map_index = {}
        index = self._map_index.get(buffer_id)
        if index is None:
            import numpy as np

            ids = self.buffers[buffer_id].placements
            starts = np.fromiter((self.placements[i].seq for i in ids), dtype=np.int64, count=len(ids))
            ends = np.fromiter((self.placements[i].end_seq for i in ids), dtype=np.int64, count=len(ids))
            index = self._map_index[buffer_id] = (np.asarray(ids, dtype=np.int64), starts, ends)
        ids_a, starts, ends = index
        live: list[int] = ids_a[(starts <= seq) & (seq < ends)].tolist()
        return live

    def buffers_at(self, seq: int) -> list[BufferInfo]:
        """Buffers allocated and not freed right after event ``seq``."""
        return [b for b in self.buffers.values() if b.alive_at(seq)]

    # -- steps ----------------------------------------------------------------
    def event_at(self, seq: int) -> ev.Event:
        return self.events[self.seq_index[seq]]

    def node_seq(self, compute_id: int, index: int) -> int:
        """The seq of node ``index`` of a compute."""
        return self.computes[compute_id].nodes[index].seq

    def bindings_of(self, galloc_id: int) -> list[BindingInfo]:
        return [b for b in self.bindings.values() if b.galloc_id == galloc_id]

    def plans_of(self, galloc_id: int) -> list[PlanInfo]:
        return [p for p in self.plans.values() if p.galloc_id == galloc_id]

    @property
    def n_events(self) -> int:
        return len(self.events) + self.n_streamed

    @property
    def last_seq(self) -> int:
        """The seq of the trace's last event (0 for none)."""
        return self.events[-1].seq if self.events else self.streamed_last_seq

    @property
    def streamed(self) -> bool:
        """Built from a stream: no events, tensor histories or compute node lists are kept."""
        return self.n_streamed > 0 and not self.events


def events_of(trace: Any) -> list[ev.Event]:
    """The events of a ``Trace``, a recorder, or any iterable of events, as a list."""
    evs = getattr(trace, "events", trace)
    return evs if isinstance(evs, list) else list(evs)


def build_model(trace: Any, *, progress: Callable[[int, int], None] | None = None) -> TraceModel:
    """Build the model of a trace in one pass (a ``Trace``, anything with ``.events``, or events).

    ``progress(done, total)`` is called every 65536 events when given.
    """
    from vizalloc.analysis.build import Builder

    with gc_paused():
        return Builder(events_of(trace)).run(progress)


def iter_events(model: TraceModel, kinds: Iterable[type[ev.Event]]) -> Iterable[ev.Event]:
    """The model's events of the given kinds, in order."""
    wanted = tuple(kinds)
    return (e for e in model.events if isinstance(e, wanted))
