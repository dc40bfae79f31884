"""One number per graph: reports name a graph by the program's graph, its scheduler copy and
split views by what they are (``TraceModel.program_graph``/``graph_name``)."""

from __future__ import annotations

import re

from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.scenarios.shared_tensors import run
from vizalloc.trace.recorder import ListRecorder


def test_a_scheduler_copy_is_named_by_the_programs_graph() -> None:
    with ListRecorder() as rec:
        run("none", steps=2, config="A", driver="graphs")
    model = build_model(rec.events)
    allocs = {a.sched_graph_id: a.graph_id for s in model.scheds.values() for a in s.allocs}
    assert allocs and any(k != v for k, v in allocs.items())
    for copy, program in allocs.items():   # what the scheduler itself recorded
        assert model.program_graph(copy) == program
        if copy != program:
            assert model.graph_name(copy) == f"graph #{program} (sched copy #{copy})"
    for g in model.graphs.values():
        if g.kind == "new":
            assert model.graph_name(g.graph_id) == f"graph #{g.graph_id}"
    # check's reports use the same names
    texts = " ".join(h.report() for h in find_hazards(model))
    named = set(re.findall(r"graph #(\d+) \(sched copy #(\d+)\)", texts))
    assert named and all(allocs[int(c)] == int(p) for p, c in named)
