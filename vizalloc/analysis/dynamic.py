"""The access pass: replays every read and write of the trace over per-buffer last-writer
maps and reports use-after-reuse, uninitialized reads, clobbered outputs and dangling
accesses.

Writes: a node's own tensor (``NodeCompute``), ``TensorSet``, a ``TensorCopy``'s
destination, a ``BufferCleared`` (the whole buffer). Reads: a node's sources (except a
destination listed as a source: the node itself, as casts list it, and ``ggml_cpy``'s
second source), a copy's source, ``TensorGet``. Reads are checked before the node's write, as a kernel reads its
inputs before writing (ggml's in-place pattern). Accesses to a freed buffer are reported
as dangling *and* still tracked: vizalloc keeps freed bytes reachable (poisoned), so
stale tensors there really do overwrite each other, as in C with a quarantined heap.

Host accesses (``tensor_set``, ``tensor_get``, copies) are counted at the step they belong
to: a write or a copy prepares the compute that comes next, and so does anything after a
binding that no compute has followed yet (the inputs of the graph just bound); a read with
no binding since the last compute fetches that compute's results.

Tensors that share bytes on purpose share an *alias key*: a view has its root's key, a
deep copy that aliases an allocated tensor (``PlacedBy.COPY``) has the original's key.
A read of T is fine when every byte of T was last written by T's key (or by a buffer
clear). Otherwise, per foreign piece:

* written by another key after T's key last wrote (since T's placement) → use-after-reuse
  (clobbered-output for ``tensor_get``);
* T never wrote those bytes since it was placed → uninitialized-read when T was placed by
  a graph allocator (its bytes hold whatever was there before); for an external tensor
  (weights, user memory) a foreign writer is a use-after-reuse, a gap is nothing. In a
  trace captured from a real process, graph inputs (flag INPUT) are judged like external
  tensors: the program may write them straight into host memory, unseen by the capture.

    >>> from vizalloc.analysis.model import build_model
    >>> from vizalloc.analysis.hazards import Collector
    >>> scan_accesses(build_model([]), Collector())
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

from vizalloc.analysis.bytemap import ByteMap
from vizalloc.analysis.hazards import (
    NEXT_STEP,
    Collector,
    Hazard,
    HazardKind,
    merge_ranges,
    qlabel,
    tensor_ref,
)
from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.state import Held
from vizalloc.analysis.records import FLAG_INPUT, Placement, TensorInfo, cpy_destination
from vizalloc.trace import events as ev

CLEAR_KEY = -2  # the alias key of a buffer clear (initialises, never conflicts)


class AccessScan:
    """The access pass as a stream: ``feed`` it the events in order (all at once, or batch
    by batch once ``model`` holds their placements), findings go to ``col``; ``finish`` after
    the last event.

    ``model.placements`` must hold, in order, one placement per ``TensorPlaced`` fed (the
    model builder makes them); ``cpy_dst`` maps each ``CPY`` node to the source that is
    its destination (not read), see ``cpy_destinations``.

    The helpers below take the ``step`` a finding counts at: the compute id of a node's
    access, or of a host access; ``NEXT_STEP`` for one that prepares the next compute.
    """

    #: every attribute, as the stream analysis' repetition proof sees it (``state.Held``)
    STATE: ClassVar[dict[str, Held]] = {
        "model": Held.link(), "col": Held.link(), "tensors": Held.ref("model.tensors"),
        "cur": Held.map("tensor", grows=True), "placed_seq": Held.map("tensor", grows=True),
        "last_write": Held.map("tensor", grows=True), "maps": Held("bytemaps", "buffer"),
        "freed": Held.map("buffer"), "freed_loc": Held.map("buffer"), "cpy_dst": Held.ref("builder.cpy_dst"),
        "compute_id": Held.scalar("compute"), "last_compute": Held.scalar("compute"),
        "after_binding": Held.scalar("binding"), "next_placement": Held.counter(),
        "fast": Held("fast", "tensor", grows=True),
    }

    def __init__(self, model: TraceModel, col: Collector, cpy_dst: dict[int, int]) -> None:
        self.model = model
        self.col = col
        self.tensors = model.tensors
        self.cur: dict[int, Placement] = {}      # tensor -> current placement
        self.placed_seq: dict[int, int] = {}     # alias key -> seq its root was placed
        self.last_write: dict[int, int] = {}     # alias key -> seq of its last write
        self.maps: dict[int, ByteMap] = {}       # buffer -> last-writer map
        self.freed: dict[int, int] = {}          # buffer -> seq freed
        self.freed_loc: dict[int, ev.Location | None] = {}  # buffer -> where it was freed
        self.cpy_dst = cpy_dst
        self.compute_id = -1
        self.last_compute = -1                   # the compute begun last
        self.after_binding = -1                  # a binding begun since then (-1: none)
        self.next_placement = 0
        # tensor -> (buffer, start, end, alias key, last-writer map, placement) of its current
        # placement: the hot loop reads one tuple instead of attributes and a map lookup
        self.fast: dict[int, tuple[int, int, int, int, ByteMap, Placement]] = {}

    @property
    def unseen_input_writes(self) -> bool:
        """A real process (vizalloc.capture) may write its inputs straight into host memory,
        which the capture cannot see: reads of its INPUT tensors are not judged uninitialized."""
        return bool(self.model.captured)

    def feed(self, events: Sequence[ev.Event], progress: Callable[[int, int], None] | None = None,
             done: int = 0, total: int = 0) -> None:
        """Scan ``events`` (the next ones of the trace). ``progress(done + i, total)`` is called
        at every compute begin when given."""
        st = self
        col = self.col
        model = self.model
        placements = model.placements
        next_placement = self.next_placement
        cur = self.cur
        placed_seq = self.placed_seq
        maps = self.maps
        last_write = self.last_write
        freed = self.freed
        compute_id = self.compute_id
        not_read = self.cpy_dst
        NodeCompute, TensorPlaced, TensorCleared = ev.NodeCompute, ev.TensorPlaced, ev.TensorCleared
        TensorSet, TensorGet, TensorCopy = ev.TensorSet, ev.TensorGet, ev.TensorCopy
        BufferCleared, BufferFreed, ComputeBegin = ev.BufferCleared, ev.BufferFreed, ev.ComputeBegin
        BindingBegin = ev.BindingBegin
        relevant = frozenset({NodeCompute, TensorPlaced, TensorCleared, TensorSet, TensorGet, TensorCopy,
                              BufferCleared, BufferFreed, ComputeBegin, BindingBegin})
        fast = self.fast
        fast_get = fast.get
        try:
            for i, e in enumerate(events):
                cls = type(e)
                if cls is NodeCompute:
                    seq = e.seq
                    t = e.tensor_id  # type: ignore[attr-defined]
                    skip = not_read.get(t, t)
                    for r in e.reads:  # type: ignore[attr-defined]
                        if r == t or r == skip:
                            continue
                        c = fast_get(r)
                        if c is None:
                            continue
                        b, a, end, k, bm, pl = c
                        if b in freed:
                            _dangling(st, col, r, pl, e, "read", compute_id)
                        # the hot path, inlined ByteMap.covering: one interval written by the reader's own key
                        ends = bm.ends
                        lo = bisect_right(ends, a)
                        if lo < len(ends) and bm.starts[lo] <= a and ends[lo] >= end:
                            w = bm.recs[lo][0]
                            if w == k or w == CLEAR_KEY:
                                continue
                        _check_read(st, col, r, pl, k, e, compute_id, HazardKind.USE_AFTER_REUSE)
                    c = fast_get(t)
                    if c is None:
                        continue
                    b, a, end, k, bm, pl = c
                    if b in freed:
                        _dangling(st, col, t, pl, e, "write", compute_id)
                    # the common write: exactly over an interval already there (the same tensor again)
                    ends = bm.ends
                    lo = bisect_right(ends, a)
                    if lo < len(ends) and bm.starts[lo] == a and ends[lo] == end:
                        bm.recs[lo] = (k, t, seq, e)
                    else:
                        bm.write(a, end, (k, t, seq, e))
                    last_write[k] = seq
                elif cls not in relevant:
                    continue
                elif cls is TensorPlaced:
                    pl = placements[next_placement]
                    next_placement += 1
                    t = pl.tensor_id
                    cur[t] = pl
                    b = pl.buffer_id
                    pm = maps.get(b)
                    if pm is None:
                        pm = maps[b] = ByteMap()
                    fast[t] = (b, pl.offset, pl.offset + pl.nbytes, pl.alias, pm, pl)
                    if pl.alias == t:
                        placed_seq[t] = pl.seq
                elif cls is TensorCleared:
                    cur.pop(e.tensor_id, None)  # type: ignore[attr-defined]
                    fast.pop(e.tensor_id, None)  # type: ignore[attr-defined]
                elif cls is ComputeBegin:
                    compute_id = st.last_compute = e.compute_id  # type: ignore[attr-defined]
                    st.after_binding = -1
                    col.settle(compute_id)  # the host accesses that prepared it
                    if progress is not None:
                        progress(done + i, total)
                elif cls is BindingBegin:
                    st.after_binding = e.binding_id  # type: ignore[attr-defined]
                elif cls is TensorSet:
                    _write_range(st, col, e.tensor_id, e.offset, e.nbytes, e, NEXT_STEP)  # type: ignore[attr-defined]
                elif cls is TensorGet:
                    t = e.tensor_id  # type: ignore[attr-defined]
                    p = cur.get(t)
                    if p is None:
                        continue
                    step = NEXT_STEP if st.after_binding >= 0 else compute_id
                    if p.buffer_id in freed:
                        _dangling(st, col, t, p, e, "read", step)
                    _check_read(st, col, t, p, p.alias, e, step, HazardKind.CLOBBERED_OUTPUT,
                                e.offset, e.nbytes)  # type: ignore[attr-defined]
                elif cls is TensorCopy:
                    src = e.src_id  # type: ignore[attr-defined]
                    p = cur.get(src)
                    if p is not None:
                        if p.buffer_id in freed:
                            _dangling(st, col, src, p, e, "read", NEXT_STEP)
                        _check_read(st, col, src, p, p.alias, e, NEXT_STEP, HazardKind.USE_AFTER_REUSE,
                                    0, e.nbytes)  # type: ignore[attr-defined]
                    _write_range(st, col, e.dst_id, 0, e.nbytes, e, NEXT_STEP)  # type: ignore[attr-defined]
                elif cls is BufferCleared:
                    buf = model.buffers.get(e.buffer_id)  # type: ignore[attr-defined]
                    if buf is not None:
                        cm = maps.get(buf.buffer_id)
                        if cm is None:
                            cm = maps[buf.buffer_id] = ByteMap()
                        cm.write(0, buf.nbytes, (CLEAR_KEY, -1, e.seq, e))
                elif cls is BufferFreed:
                    freed[e.buffer_id] = e.seq  # type: ignore[attr-defined]
                    self.freed_loc[e.buffer_id] = e.loc  # type: ignore[attr-defined]
        finally:
            self.next_placement = next_placement
            self.compute_id = compute_id

    def finish(self) -> None:
        """No more events: host accesses after the last compute that no compute followed."""
        self.col.settle(-1)


def cpy_destinations(tensors: Iterable[TensorInfo]) -> dict[int, int]:
    """``CPY`` node -> the source that is its destination (``records.cpy_destination``)."""
    return {info.tensor_id: cpy_destination(info.tensor_id, info.srcs) for info in tensors if info.op == "CPY"}


def scan_accesses(model: TraceModel, col: Collector, *,
                  progress: Callable[[int, int], None] | None = None) -> None:
    """Run the access pass over ``model.events``, adding findings to ``col``."""
    scan = AccessScan(model, col, cpy_destinations(model.tensors.values()))
    n = len(model.events)
    scan.feed(model.events, progress, 0, n)
    scan.finish()
    if progress is not None:
        progress(n, n)


def _write_range(st: AccessScan, col: Collector, t: int, offset: int, nbytes: int, e: ev.Event,
                 step: int) -> None:
    p = st.cur.get(t)
    if p is None:
        return
    if p.buffer_id in st.freed:
        _dangling(st, col, t, p, e, "write", step)
    k = p.alias
    bm = st.maps.get(p.buffer_id)
    if bm is None:
        bm = st.maps[p.buffer_id] = ByteMap()
    a = p.offset + offset
    bm.write(a, a + min(nbytes, p.nbytes - offset), (k, t, e.seq, e))
    st.last_write[k] = e.seq


def _moment(st: AccessScan) -> tuple[int, int]:
    """Where the pass stands between bindings and computes (for a host access's report)."""
    return st.after_binding, st.last_compute


def _access_text(model: TraceModel, moment: tuple[int, int], e: ev.Event, verb: str) -> tuple[str, int]:
    if isinstance(e, ev.NodeCompute):
        node = qlabel(model, e.tensor_id)
        op = model.tensors[e.tensor_id].op if e.tensor_id in model.tensors else "?"
        return f"{verb} by node {e.index} {node} ({op}) of compute #{e.compute_id}", e.index
    # a host access: say where it stands between bindings and computes
    after_binding, last_compute = moment
    when = (f" after binding #{after_binding}" if after_binding >= 0
            else f" after compute #{last_compute}" if last_compute >= 0 else " before any compute")
    if isinstance(e, ev.TensorGet):
        return f"{verb} by the user (tensor_get){when}", -1
    if isinstance(e, ev.TensorSet):
        return f"{verb} by the user (tensor_set){when}", -1
    if isinstance(e, ev.TensorCopy):
        return f"{verb} by a copy {qlabel(model, e.src_id)} -> {qlabel(model, e.dst_id)}{when}", -1
    return f"{verb} at seq {e.seq}", -1


def _writer_text(model: TraceModel, e: ev.Event) -> str:
    """How the writer event ``e`` is named in a report."""
    seq = e.seq
    if isinstance(e, ev.NodeCompute):
        return f"node {e.index} of compute #{e.compute_id}, seq {seq}"
    if isinstance(e, ev.TensorSet):
        return f"tensor_set, seq {seq}"
    if isinstance(e, ev.TensorCopy):
        return f"a copy from {qlabel(model, e.src_id)}, seq {seq}"
    return f"seq {seq}"


def _check_read(st: AccessScan, col: Collector, t: int, p: Placement, k: int, e: ev.Event, step: int,
                clobber_kind: HazardKind, offset: int = 0, nbytes: int | None = None) -> None:
    """The slow path of a read: cut T's bytes by last writer and classify the foreign pieces."""
    a = p.offset + offset
    b = a + (p.nbytes - offset if nbytes is None else min(nbytes, p.nbytes - offset))
    bm = st.maps.get(p.buffer_id)
    pieces = bm.scan(a, b) if bm is not None else [(a, b, None)]
    placed = st.placed_seq.get(k, -1)
    lw = st.last_write.get(k)
    if lw is not None and lw < placed:
        lw = None  # written only under an earlier placement: not since this one
    if st.unseen_input_writes:
        info = st.tensors.get(t)
        if info is not None and info.flags & FLAG_INPUT:
            return  # the program may have written these bytes unseen: nothing can be judged
    pool = p.pool
    found: dict[tuple[HazardKind, int], list[tuple[int, int, int, ev.Event | None]]] = {}
    for s, end, rec in pieces:
        if rec is None:
            if pool and lw is None:
                found.setdefault((HazardKind.UNINITIALIZED_READ, -1), []).append((s, end, -1, None))
            continue
        wkey, writer, wseq, wevent = rec
        if wkey == k or wkey == CLEAR_KEY:
            continue
        if lw is not None and wseq > lw:
            kind = clobber_kind
        elif pool:
            kind = HazardKind.UNINITIALIZED_READ
        elif lw is None:
            kind = clobber_kind
        else:
            continue
        found.setdefault((kind, writer), []).append((s, end, wseq, wevent))
    for (kind, writer), ranges in found.items():
        _report_access(st, col, kind, t, p, writer, ranges, e, step, lw)


def _report_access(st: AccessScan, col: Collector, kind: HazardKind, t: int, p: Placement, writer: int,
                   ranges: list[tuple[int, int, int, ev.Event | None]], e: ev.Event, step: int,
                   lw: int | None) -> None:
    model = st.model
    key = (kind, t, writer, p.buffer_id)
    if col.bump(key, e.seq, step):
        return
    merged = merge_ranges([(r[0], r[1]) for r in ranges])
    last = max(ranges, key=lambda r: r[2])
    wseq, wevent = last[2], last[3]
    # what the pass knows now, not when the report is made
    wplacement = st.cur.get(writer) if writer >= 0 else None
    moment = _moment(st)

    def make() -> Hazard:
        verb = "READ"
        access, index = _access_text(model, moment, e, verb)
        other = None
        other_loc = None
        if writer >= 0:
            other = tensor_ref(model, writer, wplacement)
            other_loc = wevent.loc if wevent is not None else None
        wtext = _writer_text(model, wevent) if wevent is not None else f"seq {wseq}"
        if kind is HazardKind.UNINITIALIZED_READ:
            what = (f"nothing wrote these bytes since {qlabel(model, t)} was placed" if writer < 0 else
                    f"these bytes still hold {qlabel(model, writer)}'s data (written at {wtext}); "
                    f"{qlabel(model, t)} never wrote them since it was placed")
        else:
            since = f"seq {lw}" if lw is not None else "it was placed (it was never written in the trace)"
            what = (f"last written by {qlabel(model, writer)} at {wtext}, after "
                    f"{qlabel(model, t)} was written at {since}")
        return Hazard(kind, e.seq, tensor_ref(model, t, p), other, p.buffer_id, tuple(merged), access=access,
                      access_loc=e.loc, other_seq=wseq if writer >= 0 else -1, other_loc=other_loc, detail=what,
                      compute_id=max(step, -1), node_index=index)

    col.add(key, make, step, e.seq)


def _dangling(st: AccessScan, col: Collector, t: int, p: Placement, e: ev.Event, verb: str, step: int) -> None:
    model = st.model
    key = (HazardKind.DANGLING, t, -1, p.buffer_id)
    if col.bump(key, e.seq, step):
        return
    freed_seq = st.freed[p.buffer_id]
    freed_loc = st.freed_loc.get(p.buffer_id)
    moment = _moment(st)

    def make() -> Hazard:
        access, index = _access_text(model, moment, e, verb.upper())
        buf = model.buffers.get(p.buffer_id)
        cause = buf.free_cause if buf is not None and buf.free_cause else "no cause given"
        return Hazard(HazardKind.DANGLING, e.seq, tensor_ref(model, t, p), None, p.buffer_id,
                      ((p.offset, p.offset + p.nbytes),), access=access, access_loc=e.loc, other_seq=freed_seq,
                      other_loc=freed_loc,
                      detail=f"buffer #{p.buffer_id} was freed at seq {freed_seq} ({cause}); the tensor still points "
                             "into it", compute_id=max(step, -1), node_index=index)

    col.add(key, make, step, e.seq)
