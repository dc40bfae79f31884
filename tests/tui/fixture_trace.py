"""A small, fixed trace for the TUI tests: the shared-tensor bug in two graphs, with
hostile tensor names, built event by event (no runtime, no clock, no process ids).

Forward graph (binding #0): ``x`` (input) -> ``h = mul_mat(W, x)`` -> ``y = relu(h)`` in
place on ``h`` -> ``loss``. Then the scheduler is reset and the backward graph (binding
#1) reuses ``x h y loss``: the plan skips them as external (their placements are
stale) and puts ``blk.0.grad_y`` on ``x``'s bytes while ``x`` is still read later:
one stale-overlap, and a use-after-reuse in the compute.
"""

from __future__ import annotations

from tests.builders import TraceBuilder
from vizalloc.trace import events as ev
from vizalloc.trace.value import Trace, TraceHeader

X, W, H, Y, LOSS, G1, G2, G3, YV = range(9)

#: Hostile names: markup, an escape sequence, a newline, bidi override, wide characters, a long name.
NAMES = {
    X: "x", W: "W" + "_weight" * 12, H: "[bold]h[/bold]", Y: "\x1b[31my", LOSS: "loss\nnext line",
    G1: "blk.0.grad_y", G2: "blk.0.grad_h", G3: "\u5f35\u91cf\u202egradW", YV: "y_view",
}


def _tensor(b: TraceBuilder, tid: int, op: str, srcs: tuple[int, ...] = (), ne: tuple[int, ...] = (8, 4, 1, 1),
            flags: int = 0, view_src: int = -1, line: int | None = None) -> None:
    b.tensor(NAMES[tid], ne=ne, tid=tid, op=op, srcs=srcs, flags=flags, view_src=view_src, ctx=0 if tid == W else 1,
             line=line)


def shared_tensor_events() -> list[ev.Event]:
    b = TraceBuilder(auto_loc=False, file="train.py", function="step")
    e = b.emit
    e(ev.ContextCreated, 0, "static", True, line=10)
    _tensor(b, W, "NONE", ne=(8, 8, 1, 1), flags=4, line=11)
    e(ev.BufferAllocated, 0, "CPU", "CPU", 4096, 256, 32, "weights", -1, -1, -1, "alloc_ctx_tensors", line=12)
    e(ev.TensorPlaced, W, 0, 0, 256, ev.PlacedBy.TALLOCR, -1, line=12)
    e(ev.TensorSet, W, 0, 256, line=13)
    e(ev.ContextCreated, 1, "compute", True, line=15)
    _tensor(b, X, "NONE", flags=1, line=16)
    _tensor(b, H, "MUL_MAT", (W, X), line=17)
    _tensor(b, Y, "UNARY", (H,), line=18)
    _tensor(b, LOSS, "SUM", (Y,), ne=(1, 1, 1, 1), flags=2, line=19)
    _tensor(b, G1, "MUL", (LOSS, Y), line=21)
    _tensor(b, G2, "MUL", (G1, H), line=22)
    _tensor(b, G3, "OUT_PROD", (G2, X), line=23)
    _tensor(b, YV, "VIEW", (Y,), view_src=Y, line=24)
    e(ev.GraphCreated, 1, 16, "new", -1, line=25)
    e(ev.GraphExpanded, 1, (H, Y, LOSS), (X, W), line=25)
    e(ev.GraphCreated, 2, 16, "new", -1, line=26)
    e(ev.GraphExpanded, 2, (H, Y, LOSS, G1, YV, G2, G3), (X, W), line=26)
    # forward: plan, bind, compute
    e(ev.SchedReset, 0, line=30)
    e(ev.SchedSplit, 0, 1, 0, "CPU", (H, Y, LOSS), (), line=31)
    e(ev.Replan, 0, ev.ReplanCause.FIRST, "", -1, -1, line=31)
    e(ev.PlanBegin, 0, 0, 1, 3, 2, (32,), line=31)
    e(ev.PlanExternal, 0, W, line=31)
    e(ev.PlanAlloc, 0, X, 0, 0, 0, 128, 0, -1, line=31)
    e(ev.PlanAlloc, 0, H, 0, 0, 128, 128, 1, -1, line=31)
    e(ev.PlanInplace, 0, Y, H, 0, 0, 128, line=31)
    e(ev.PlanAlloc, 0, LOSS, 0, 0, 256, 32, 1, -1, line=31)
    e(ev.PlanEnd, 0, ((384,),), line=31)
    e(ev.BufferAllocated, 1, "CPU", "CPU", 8192, 384, 32, "compute", 0, 0, 0, "reserve", line=31)
    e(ev.BindingBegin, 0, 0, 0, 1, line=31)
    for tid, off, n in ((X, 0, 128), (H, 128, 128), (Y, 128, 128), (LOSS, 256, 4)):
        e(ev.TensorPlaced, tid, 1, off, n, ev.PlacedBy.GALLOCR, 0, line=31)
    e(ev.TensorPlaced, YV, 1, 128, 128, ev.PlacedBy.VIEW_INIT, 0, line=31)
    e(ev.BindingEnd, 0, True, line=31)
    e(ev.SchedAlloc, 0, 1, 1, True, line=31)
    e(ev.TensorSet, X, 0, 128, line=32)
    e(ev.ComputeBegin, 0, 1, "CPU", 3, line=33)
    e(ev.NodeCompute, 0, 0, H, "CPU", (W, X), 1000, line=33)
    e(ev.NodeCompute, 0, 1, Y, "CPU", (H,), 1000, line=33)
    e(ev.NodeCompute, 0, 2, LOSS, "CPU", (Y,), 1000, line=33)
    e(ev.ComputeEnd, 0, 3000, line=33)
    e(ev.TensorGet, LOSS, 0, 4, line=34)
    # backward after a reset: x h y loss keep stale pointers and are planned over
    e(ev.SchedReset, 0, line=40)
    e(ev.SchedSplit, 0, 2, 0, "CPU", (H, Y, LOSS, G1, YV, G2, G3), (), line=41)
    e(ev.Replan, 0, ev.ReplanCause.N_NODES, "graph has 7 nodes, the plan 3", -1, -1, line=41)
    e(ev.PlanBegin, 0, 1, 2, 7, 2, (32,), line=41)
    for tid in (W, X, H, Y, LOSS):
        e(ev.PlanExternal, 1, tid, line=41)
    e(ev.PlanAlloc, 1, G1, 0, 0, 0, 128, 1, -1, line=41)
    e(ev.PlanRefused, 1, G2, G1, ev.RefuseReason.CONSUMERS, line=41)
    e(ev.PlanAlloc, 1, G2, 0, 0, 128, 128, 1, 0, line=41)
    e(ev.PlanFree, 1, G1, 0, 0, 0, 128, line=41)
    e(ev.PlanAlloc, 1, G3, 0, 0, 256, 128, 1, 0, line=41)
    e(ev.PlanEnd, 1, ((384,),), line=41)
    e(ev.BindingBegin, 0, 1, 1, 2, line=41)
    for tid, off in ((G1, 0), (G2, 128), (G3, 256)):
        e(ev.TensorPlaced, tid, 1, off, 128, ev.PlacedBy.GALLOCR, 1, line=41)
    e(ev.BindingEnd, 1, True, line=41)
    e(ev.SchedAlloc, 0, 2, 2, True, line=41)
    e(ev.ComputeBegin, 1, 2, "CPU", 7, line=42)
    for i, (tid, reads) in enumerate(((H, (W, X)), (Y, (H,)), (LOSS, (Y,)), (G1, (LOSS, Y)), (YV, (Y,)),
                                      (G2, (G1, H)), (G3, (G2, X)))):
        e(ev.NodeCompute, 1, i, tid, "CPU", reads, 1000, line=42)
    e(ev.ComputeEnd, 1, 7000, line=42)
    e(ev.TensorGet, G3, 0, 128, line=43)
    return b.events


def fixed_trace() -> Trace:
    header = TraceHeader(format_version=1, vizalloc_version="test", python_version="3", created_unix_ns=0, pid=1,
                         argv=("test",), capture_values=False)
    return Trace(header, tuple(shared_tensor_events()))
