"""Hand-made event lists for exporter tests (no runtime needed)."""

from __future__ import annotations

from typing import Any

from vizalloc.trace import events as ev


class Events:
    """Builds a list of events with increasing seq and t_ns (1 µs apart)."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    def add(self, cls: type[ev.Event], *payload: Any) -> ev.Event:
        seq = len(self.events) + 1
        e = cls(seq, seq * 1000, None, *payload)
        self.events.append(e)
        return e

    def tensor(self, tid: int, name: str, op: str = "NONE", srcs: tuple[int, ...] = (), ne: tuple[int, ...] = (4, 1, 1, 1),
               view_src: int = -1, view_offs: int = 0, flags: int = 0, dtype: str = "f32") -> None:
        nb = (4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2])
        self.add(ev.TensorCreated, tid, 0, name, dtype, ne, nb, op, (), srcs, view_src, view_offs, flags, -1)

    def place(self, tid: int, buf: int, offset: int, nbytes: int, by: ev.PlacedBy = ev.PlacedBy.GALLOCR,
              binding: int = -1) -> None:
        self.add(ev.TensorPlaced, tid, buf, offset, nbytes, by, binding)


def three_node_graph() -> Events:
    """a, b leafs; c = add(a, b); d = relu(c) in place; bound by binding 0 into buffer 0."""
    b = Events()
    b.add(ev.ContextCreated, 0, "ctx", True)
    b.tensor(0, "a", flags=1)
    b.tensor(1, "b", flags=1)
    b.tensor(2, "c", "ADD", (0, 1))
    b.tensor(3, "d", "UNARY", (2,), flags=2)
    b.add(ev.GraphCreated, 0, 2048, "new", -1)
    b.add(ev.GraphExpanded, 0, (2, 3), (0, 1))
    b.add(ev.Replan, 0, ev.ReplanCause.FIRST, "", -1, -1)
    b.add(ev.PlanBegin, 0, 0, 0, 2, 2, (32,))
    b.add(ev.PlanAlloc, 0, 0, 0, 0, 0, 32, 1, -1)
    b.add(ev.PlanAlloc, 0, 1, 0, 0, 32, 32, 1, -1)
    b.add(ev.PlanAlloc, 0, 2, 0, 0, 64, 32, 3, -1)
    b.add(ev.PlanInplace, 0, 3, 2, 0, 0, 64)
    b.add(ev.PlanEnd, 0, ((96,),))
    b.add(ev.BufferAllocated, 0, "CPU", "CPU", 0x10000, 96, 32, "compute", 0, 0, 0, "reserve")
    b.add(ev.BindingBegin, 0, 0, 0, 0)
    for tid, off in ((0, 0), (1, 32), (2, 64), (3, 64)):
        b.place(tid, 0, off, 16, binding=0)
    b.add(ev.BindingEnd, 0, True)
    return b
