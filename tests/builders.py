"""The one trace builder of the tests: writes event records directly (no runtime, no clock),
for the analysis, exporter and TUI tests.

    >>> tb = TraceBuilder()
    >>> buf = tb.buffer(1024)
    >>> x = tb.tensor("x", 16)
    >>> _ = tb.place(x, buf, 0)
    >>> len(tb.events)
    3
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from vizalloc.trace import events as ev

F32 = "f32"


_AUTO: Any = object()


class TraceBuilder:
    """Emit events with increasing seq numbers (``t_ns`` is ``seq * 1000``); ids come from
    counters unless given.

    Args:
        auto_loc: give each event a new source line of ``file``/``function`` (else none,
            unless an event's ``line`` or ``loc`` says otherwise).
    """

    def __init__(self, *, auto_loc: bool = True, file: str = "user.py", function: str = "main") -> None:
        self.events: list[ev.Event] = []
        self.auto_loc = auto_loc
        self.file = file
        self.function = function
        self._seq = 0
        self._tensor_ids = itertools.count(100)
        self._buffer_ids = itertools.count(1)
        self._graph_ids = itertools.count(1)
        self._plan_ids = itertools.count(1)
        self._binding_ids = itertools.count(1)
        self._compute_ids = itertools.count(1)
        self.nbytes: dict[int, int] = {}
        self.line = 1

    def loc(self, line: int | None = None) -> ev.Location:
        if line is None:
            self.line += 1
            line = self.line
        return ev.Location(self.file, line, self.function)

    def emit(self, cls: type[ev.Event], *payload: Any, loc: ev.Location | None = _AUTO,
             line: int | None = None) -> Any:
        """Append a ``cls`` event; ``line`` places it on that line of ``file``, ``loc`` on any."""
        if line is not None:
            loc = self.loc(line)
        elif loc is _AUTO:
            loc = self.loc() if self.auto_loc else None
        self._seq += 1
        e = cls(self._seq, self._seq * 1000, loc, *payload)
        self.events.append(e)
        return e

    # -- tensors ------------------------------------------------------------------
    def tensor(self, name: str, ne0: int = 16, *, ne: Sequence[int] | None = None, op: str = "NONE",
               srcs: Sequence[int] = (), view_src: int = -1, view_offs: int = 0, flags: int = 0,
               copy_of: int = -1, dtype: str = F32, ctx: int = 0, tid: int | None = None,
               line: int | None = None) -> int:
        """A ``TensorCreated`` of a contiguous tensor; returns its id (``tid``, or the next one)."""
        shape = tuple(ne) if ne is not None else (ne0, 1, 1, 1)
        shape = shape + (1,) * (4 - len(shape))
        size = 4 if dtype in ("f32", "i32") else 2
        nb = [size]
        for n in shape[:3]:
            nb.append(nb[-1] * n)
        if tid is None:
            tid = next(self._tensor_ids)
        self.emit(ev.TensorCreated, tid, ctx, name, dtype, shape, tuple(nb), op, (), tuple(srcs), view_src,
                  view_offs, flags, copy_of, line=line)
        n = size
        for d in shape:
            n *= d
        self.nbytes[tid] = n // size * size
        return tid

    def node(self, name: str, op: str, *srcs: int, ne0: int = 16, **kw: Any) -> int:
        return self.tensor(name, ne0, op=op, srcs=srcs, **kw)

    def flags(self, t: int, flags: int) -> None:
        self.emit(ev.TensorFlagsSet, t, flags)

    # -- buffers ------------------------------------------------------------------
    def buffer(self, nbytes: int, *, pool: int = -1, slot: int = 0, chunk: int = 0, usage: str = "compute") -> int:
        bid = next(self._buffer_ids)
        self.emit(ev.BufferAllocated, bid, "CPU", "CPU", 0x10000 * bid, nbytes, 32, usage, pool, slot, chunk, "")
        return bid

    def free(self, buf: int, cause: str = "") -> None:
        self.emit(ev.BufferFreed, buf, cause)

    def clear_buffer(self, buf: int) -> None:
        self.emit(ev.BufferCleared, buf, 0)

    def place(self, t: int, buf: int, offset: int, *, by: ev.PlacedBy = ev.PlacedBy.USER, binding: int = -1,
              nbytes: int | None = None) -> ev.TensorPlaced:
        return self.emit(ev.TensorPlaced, t, buf, offset, self.nbytes[t] if nbytes is None else nbytes, by, binding)

    def clear(self, t: int, by: str = "clear") -> None:
        self.emit(ev.TensorCleared, t, by)

    # -- graphs, plans, bindings ----------------------------------------------------------
    def graph(self, nodes: Sequence[int], leafs: Sequence[int] = ()) -> int:
        gid = next(self._graph_ids)
        self.emit(ev.GraphCreated, gid, 2048, "new", -1)
        self.emit(ev.GraphExpanded, gid, tuple(nodes), tuple(leafs))
        return gid

    def plan(self, galloc: int, graph: int, allocs: Sequence[tuple[int, int, int]] = (), *, n_nodes: int = 0,
             n_leafs: int = 0, size: int | None = None, replan: ev.ReplanCause | None = None,
             frees: Sequence[tuple[int, int, int]] = (), inplace: Sequence[tuple[int, int, int]] = ()) -> int:
        """A plan with (tensor, offset, nbytes) allocations, frees, and (child, parent, offset) in-place steps."""
        pid = next(self._plan_ids)
        if replan is not None:
            self.emit(ev.Replan, galloc, replan, "", -1, -1)
        self.emit(ev.PlanBegin, galloc, pid, graph, n_nodes, n_leafs, (32,))
        for t, off, n in allocs:
            self.emit(ev.PlanAlloc, pid, t, 0, 0, off, n, 3, -1)
        for c, p, off in inplace:
            self.emit(ev.PlanInplace, pid, c, p, 0, 0, off)
        for t, off, n in frees:
            self.emit(ev.PlanFree, pid, t, 0, 0, off, n)
        top = size if size is not None else max([off + n for _, off, n in allocs] or [0])
        self.emit(ev.PlanEnd, pid, ((top,),))
        return pid

    def bind(self, galloc: int, plan: int, graph: int, placements: Sequence[tuple[int, int, int]] = (),
             views: Sequence[tuple[int, int, int]] = ()) -> int:
        """A binding placing (tensor, buffer, offset) with the gallocr and views with view_init."""
        bid = next(self._binding_ids)
        self.emit(ev.BindingBegin, galloc, bid, plan, graph)
        for t, buf, off in placements:
            self.place(t, buf, off, by=ev.PlacedBy.GALLOCR, binding=bid)
        for t, buf, off in views:
            self.place(t, buf, off, by=ev.PlacedBy.VIEW_INIT, binding=bid)
        self.emit(ev.BindingEnd, bid, True)
        return bid

    def sched_reset(self, sched: int = 0) -> None:
        self.emit(ev.SchedReset, sched)

    def sched_split(self, graph: int, nodes: Sequence[int], sched: int = 0) -> None:
        self.emit(ev.SchedSplit, sched, graph, 0, "CPU", tuple(nodes), ())

    def bound_relu(self, name: str = "a") -> tuple[int, int, int, int]:
        """``b = RELU(a)`` (``a`` an input tensor called ``name``) as a graph, planned by galloc 0
        and bound in a new 128-byte buffer, ``a`` at 0 and ``b`` at 64; nothing set or computed.

        Returns:
            ``(a, b, graph, buffer)``.
        """
        a = self.tensor(name, 16, flags=1)
        b = self.node("b", "RELU", a)
        g = self.graph([b], [a])
        buf = self.buffer(128, pool=0)
        plan = self.plan(0, g, [(a, 0, 64), (b, 64, 64)], n_nodes=1, n_leafs=1)
        self.bind(0, plan, g, [(a, buf, 0), (b, buf, 64)])
        return a, b, g, buf

    # -- compute and I/O ------------------------------------------------------------------------
    def compute(self, graph: int, steps: Sequence[tuple[int, Sequence[int]]], *,
                loc: ev.Location | None = None) -> int:
        """A compute: (written tensor, read tensors) per node, in order."""
        cid = next(self._compute_ids)
        where = loc or self.loc()
        self.emit(ev.ComputeBegin, cid, graph, "CPU", len(steps), loc=where)
        for i, (t, reads) in enumerate(steps):
            self.emit(ev.NodeCompute, cid, i, t, "CPU", tuple(reads), 10, loc=where)
        self.emit(ev.ComputeEnd, cid, 100, loc=where)
        return cid

    def set(self, t: int, offset: int = 0, nbytes: int | None = None) -> None:
        self.emit(ev.TensorSet, t, offset, self.nbytes[t] - offset if nbytes is None else nbytes)

    def get(self, t: int) -> None:
        self.emit(ev.TensorGet, t, 0, self.nbytes[t])

    def copy(self, src: int, dst: int) -> None:
        self.emit(ev.TensorCopy, src, dst, self.nbytes[dst])
