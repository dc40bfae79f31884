"""A recorded plan as MiniMalloc input: ``id,lower,upper,size`` rows, one problem per buffer.

MiniMalloc (google/minimalloc, ASPLOS '23) solves static memory planning exactly: each
buffer is live over the half-open time interval ``[lower, upper)`` and needs ``size``
bytes; buffers live at the same time must not share bytes. This module turns one
graph-allocator plan into that problem so the recorded offsets can be compared with
an optimal packing:

* time is the index of the planner's decision (allocation, in-place reuse, free) in
  the order ggml made them; a tensor is live from its allocation to its free, or to
  the end when never freed (leafs, outputs);
* an in-place chain (a node that took over its parent's bytes) is one buffer, from the
  root's allocation to the last member's free: the solver must keep them together;
* ``size`` is the padded size the planner used; one problem per (slot, chunk), since
  each chunk is its own byte array. ``offset`` (optional fifth column) is the
  recorded solution, which MiniMalloc's checker accepts as a solution file;
* ``id`` is the root tensor's name and id (``grad_for_W1#22``), made inert for a CSV
  field that MiniMalloc splits on commas without quoting (:func:`csv_id`). The file has
  no room for a comment: ``vizalloc export`` says on stderr which plan it wrote.

    import io
    from vizalloc.analysis.model import build_model
    from vizalloc.export.minimalloc import plan_problems, write_csv
    for problem in plan_problems(build_model(events), plan_id=0):
        write_csv(problem, io.StringIO())
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import TextIO

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.quality import peak_live
from vizalloc.errors import UsageError
from vizalloc.text import inert
from vizalloc.trace import events as ev


@dataclass(frozen=True)
class Row:
    """One MiniMalloc buffer: ``tensor_id`` is the root of its in-place chain."""

    id: str
    lower: int
    upper: int
    size: int
    offset: int
    tensor_id: int
    members: tuple[int, ...]


@dataclass(frozen=True)
class Problem:
    """The rows of one (slot, chunk) of a plan, and the high-water mark the planner reached."""

    plan_id: int
    slot: int
    chunk: int
    rows: tuple[Row, ...]
    recorded_nbytes: int   # the chunk size ggml recorded (PlanEnd)

    @property
    def recorded_peak(self) -> int:
        """The highest byte the recorded offsets use."""
        return max((r.offset + r.size for r in self.rows), default=0)

    @property
    def lower_bound(self) -> int:
        """The most bytes live at one time: no packing of these rows can use less."""
        return peak_live((r.lower, r.upper, r.size) for r in self.rows)[0]

    def overlaps(self) -> list[tuple[Row, Row]]:
        """Pairs of rows live at the same time whose recorded bytes overlap (a valid plan has none)."""
        bad = []
        rows = sorted(self.rows, key=lambda r: r.lower)
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                if b.lower >= a.upper:
                    break
                if a.offset < b.offset + b.size and b.offset < a.offset + a.size:
                    bad.append((a, b))
        return bad


_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_.()+\-]")


def csv_id(name: str, tensor_id: int) -> str:
    """A MiniMalloc buffer id for a tensor: its name (printable, at most 40 characters, every
    character but letters, digits and ``_.()+-`` as ``_``) and its id, unique in the file.

        >>> csv_id("grad for W1", 22), csv_id('a,b"\\n', 3), csv_id("", 7)
        ('grad_for_W1#22', 'a_b__n#3', 't#7')
    """
    return f"{_UNSAFE_ID.sub('_', inert(name, 40)) or 't'}#{tensor_id}"


def plan_problems(model: TraceModel, plan_id: int) -> list[Problem]:
    """The MiniMalloc problems of one plan, by (slot, chunk).

    Raises:
        UsageError: the plan is not in the trace.
    """
    plan = model.plans.get(plan_id)
    if plan is None:
        known = ", ".join(str(k) for k in sorted(model.plans)) or "none"
        raise UsageError(f"plan #{plan_id} is not in the trace (plans: {known})")
    root_of: dict[int, int] = {}
    start: dict[int, tuple[int, int, int, int, int]] = {}  # root -> (lower, slot, chunk, offset, size)
    members: dict[int, list[int]] = {}
    upper: dict[int, int] = {}
    time = 0
    for d in plan.decisions:
        if isinstance(d, ev.PlanAlloc):
            time += 1
            root_of[d.tensor_id] = d.tensor_id
            start[d.tensor_id] = (time, d.slot, d.chunk, d.offset, d.nbytes)
            members[d.tensor_id] = [d.tensor_id]
        elif isinstance(d, ev.PlanInplace):
            time += 1
            root = root_of.get(d.parent_id, d.parent_id)
            root_of[d.tensor_id] = root
            members.setdefault(root, []).append(d.tensor_id)
            upper.pop(root, None)  # the chain lives on in the child
        elif isinstance(d, ev.PlanFree):
            time += 1
            root = root_of.get(d.tensor_id, d.tensor_id)
            if root in start:
                upper[root] = time
    end = time + 1
    by_region: dict[tuple[int, int], list[Row]] = {}
    for root, (lower, slot, chunk, offset, size) in start.items():
        info = model.tensors.get(root)
        row = Row(csv_id(info.name if info is not None else "", root), lower, upper.get(root, end), size, offset,
                  root, tuple(members[root]))
        by_region.setdefault((slot, chunk), []).append(row)
    problems = []
    for (slot, chunk), rows in sorted(by_region.items()):
        sizes = plan.chunk_sizes[slot] if slot < len(plan.chunk_sizes) else ()
        recorded = sizes[chunk] if chunk < len(sizes) else 0
        rows.sort(key=lambda r: (r.lower, r.tensor_id))
        problems.append(Problem(plan_id, slot, chunk, tuple(rows), recorded))
    return problems


def write_csv(problem: Problem, out: TextIO, *, offsets: bool = False) -> None:
    """Write ``id,lower,upper,size`` rows (``,offset`` too with ``offsets``) with a header line."""
    out.write("id,lower,upper,size,offset\n" if offsets else "id,lower,upper,size\n")
    for r in problem.rows:
        out.write(f"{r.id},{r.lower},{r.upper},{r.size}")
        out.write(f",{r.offset}\n" if offsets else "\n")


def csv_text(problem: Problem, *, offsets: bool = False) -> str:
    buf = io.StringIO()
    write_csv(problem, buf, offsets=offsets)
    return buf.getvalue()
