"""Host accesses (tensor_set, tensor_get, copies) are blamed on the step they belong to:
the inputs set after binding N+1 belong to binding N+1's compute, not to the compute before."""

from __future__ import annotations

from vizalloc.analysis.hazards import HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.export.findings import highlights
from vizalloc.scenarios.shared_tensors import run
from vizalloc.trace.recorder import StrictRecorder
from vizalloc.tui.steps import Prescan, StepKind, count_hazards

from tests.builders import TraceBuilder


def two_steps() -> tuple[TraceBuilder, dict[str, int]]:
    """Step 1: bind a graph, set its input, compute, read the result. Step 2: the allocator
    re-plans into a bigger buffer (the old one is freed), binds a graph that still uses the
    input at its old (now dangling) place, and the program sets that input again."""
    tb = TraceBuilder()
    a = tb.tensor("a", 16, flags=1)
    b = tb.node("b", "RELU", a)
    g1 = tb.graph([b], [a])
    old = tb.buffer(128, pool=0)
    p1 = tb.plan(0, g1, [(a, 0, 64), (b, 64, 64)], n_nodes=1, n_leafs=1)
    tb.bind(0, p1, g1, [(a, old, 0), (b, old, 64)])
    tb.set(a)
    c1 = tb.compute(g1, [(b, [a])])
    tb.get(b)
    c = tb.node("c", "SQR", a, ne0=64)
    g2 = tb.graph([c], [a])
    p2 = tb.plan(0, g2, [(c, 0, 256)], n_nodes=1, n_leafs=1)
    tb.free(old, "plan grew")
    new = tb.buffer(256, pool=0)
    bind2 = tb.bind(0, p2, g2, [(c, new, 0)])
    tb.set(a)  # a still points into the freed buffer: a dangling write, in step 2
    c2 = tb.compute(g2, [(c, [a])])
    return tb, dict(a=a, b=b, c=c, c1=c1, c2=c2, bind2=bind2)


def test_a_set_after_the_next_binding_counts_at_that_bindings_compute():
    tb, ids = two_steps()
    hazards = find_hazards(build_model(tb.events))
    dangling = [h for h in hazards if h.kind is HazardKind.DANGLING and h.tensor_id == ids["a"]
                and h.binding_id < 0]
    assert len(dangling) == 1
    h = dangling[0]
    assert h.access.startswith("WRITE by the user (tensor_set) after binding #")
    assert f"after binding #{ids['bind2']}" in h.access
    # the set and the read of node 0 are one finding, counted once, at compute 2 only
    assert (h.compute_id, h.steps, h.occurrences) == (ids["c2"], (ids["c2"],), 2)
    assert h.report().endswith(f"(2 occurrences, last at seq {h.last_seq}; steps #{ids['c2']})")
    assert f"compute #{ids['c2']} host access" in highlights([h])[0].reason  # not "node -1"


def test_the_timeline_counts_nothing_at_the_clean_first_compute():
    tb, ids = two_steps()
    hazards = find_hazards(build_model(tb.events))
    scan = Prescan()
    scan.feed(tb.events)
    count_hazards(scan.steps, hazards)
    per_compute = {s.step_id: s.n_hazards for s in scan.steps if s.kind is StepKind.COMPUTE}
    assert per_compute[ids["c1"]] == 0
    assert per_compute[ids["c2"]] >= 1


def test_a_read_after_a_compute_counts_at_that_compute():
    """tensor_get fetches the results of the compute before it."""
    tb = TraceBuilder()
    a = tb.tensor("a", 16, flags=1)
    b = tb.node("b", "RELU", a)
    g = tb.graph([b], [a])
    buf = tb.buffer(64, pool=0)
    plan = tb.plan(0, g, [(a, 0, 64), (b, 0, 64)], n_nodes=1, n_leafs=1, inplace=[(b, a, 0)])
    tb.bind(0, plan, g, [(a, buf, 0), (b, buf, 0)])
    tb.set(a)
    c1 = tb.compute(g, [(b, [a])])
    tb.set(a)  # the in-place result b is overwritten by the next input ...
    tb.get(b)  # ... and read back after that: the compute #1 result is gone
    hazards = find_hazards(build_model(tb.events))
    clobbered = [h for h in hazards if h.kind is HazardKind.CLOBBERED_OUTPUT]
    assert len(clobbered) == 1
    assert (clobbered[0].compute_id, clobbered[0].steps) == (c1, (c1,))
    assert f"(tensor_get) after compute #{c1}" in clobbered[0].access


def test_host_writes_prepare_the_next_compute_even_without_a_binding():
    """A loop that binds once and sets the input before every compute: a set into a freed
    buffer after compute #1 counts at compute #2, which reads it, and not at compute #1."""
    tb = TraceBuilder()
    a = tb.tensor("a", 16, flags=1)
    b = tb.node("b", "RELU", a)
    g = tb.graph([b], [a])
    buf = tb.buffer(128, pool=0)
    plan = tb.plan(0, g, [(a, 0, 64), (b, 64, 64)], n_nodes=1, n_leafs=1)
    tb.bind(0, plan, g, [(a, buf, 0), (b, buf, 64)])
    tb.set(a)
    c1 = tb.compute(g, [(b, [a])])
    tb.free(buf, "freed by the user")
    tb.set(a)
    c2 = tb.compute(g, [(b, [a])])
    dangling = [h for h in find_hazards(build_model(tb.events)) if h.tensor_id == a]
    assert [h.kind for h in dangling] == [HazardKind.DANGLING]
    h = dangling[0]
    assert f"(tensor_set) after compute #{c1}" in h.access
    assert (h.compute_id, h.steps) == (c2, (c2,))


def test_a_write_no_compute_follows_has_no_step():
    tb = TraceBuilder()
    a = tb.tensor("a", 16, flags=1)
    b = tb.node("b", "RELU", a)
    g = tb.graph([b], [a])
    buf = tb.buffer(128, pool=0)
    plan = tb.plan(0, g, [(a, 0, 64), (b, 64, 64)], n_nodes=1, n_leafs=1)
    tb.bind(0, plan, g, [(a, buf, 0), (b, buf, 64)])
    tb.set(a)
    tb.compute(g, [(b, [a])])
    tb.free(buf, "freed by the user")
    tb.set(a)
    dangling = [h for h in find_hazards(build_model(tb.events)) if h.tensor_id == a]
    assert [(h.kind, h.compute_id, h.steps) for h in dangling] == [(HazardKind.DANGLING, -1, ())]


def test_demo_first_step_is_clean_and_input_sets_count_at_the_backward_compute():
    """The demo loop without a fix: the first (forward) compute has no hazard; the inputs set
    into the freed buffer after each backward binding count at that backward compute."""
    rec = StrictRecorder()
    run("none", steps=2, seed=0, around_loop=lambda: rec)
    model = build_model(rec.events)
    hazards = find_hazards(model)
    first = min(model.computes)
    assert all(first not in h.steps and h.compute_id != first for h in hazards), \
        [h.report() for h in hazards if first in h.steps]
    scan = Prescan()
    scan.feed(rec.events)
    count_hazards(scan.steps, hazards)
    assert next(s for s in scan.steps if s.kind is StepKind.COMPUTE).n_hazards == 0
    sets = [h for h in hazards if h.kind is HazardKind.DANGLING and "(tensor_set)" in h.access]
    assert {model.tensors[h.tensor_id].name for h in sets} == {"x", "labels"}
    backward = sorted(c.compute_id for c in model.computes.values()
                      if c.graph is not None and len(c.graph.nodes) > 12)
    for h in sets:
        assert h.compute_id == backward[0] and h.steps[0] == backward[0]
        binding = max(b.binding_id for b in model.bindings.values()
                      if b.begin_seq < model.computes[backward[0]].begin_seq)
        assert f"after binding #{binding}" in h.access
