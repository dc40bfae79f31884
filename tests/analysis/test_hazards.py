"""Every hazard kind from event records written by hand, with negative cases."""

from __future__ import annotations

from vizalloc.analysis.hazards import Hazard, HazardKind, find_hazards
from vizalloc.analysis.model import build_model
from vizalloc.trace import events as ev

from tests.builders import TraceBuilder


def kinds(hazards: list[Hazard]) -> dict[str, int]:
    out: dict[str, int] = {}
    for h in hazards:
        out[h.kind.value] = out.get(h.kind.value, 0) + 1
    return out


def check(tb: TraceBuilder) -> list[Hazard]:
    return find_hazards(build_model(tb.events))


def stale_scenario(fix: str = "none"):
    """semantics §9.1 in miniature: graph A bound, reset, graph B planned over A's stale pointers."""
    tb = TraceBuilder()
    x = tb.tensor("x", 64, flags=1)
    t = tb.node("t", "SQR", x, ne0=64)
    u = tb.node("u", "SQR", t, ne0=64)
    s = tb.node("s", "SUM", u, ne0=1, flags=2)
    g_a = tb.graph([t, u, s], [x])
    buf = tb.buffer(288, pool=0)
    p_a = tb.plan(0, g_a, [(x, 0, 256), (s, 256, 32)], n_nodes=3, n_leafs=1)
    tb.bind(0, p_a, g_a, [(x, buf, 0), (t, buf, 0), (u, buf, 0), (s, buf, 256)])
    tb.set(x)
    tb.compute(g_a, [(t, [x]), (u, [t]), (s, [u])])
    tb.get(s)
    tb.sched_reset()
    if fix == "clear":
        for tid in (x, t, u, s):
            tb.clear(tid)
    y = tb.tensor("y", 64, flags=1)
    z = tb.node("z", "ADD", t, y, ne0=64)
    q = tb.node("q", "SUM", z, ne0=1, flags=2)
    g_b = tb.graph([t, z, q], [x, y])
    if fix == "clear":
        p_b = tb.plan(0, g_b, [(x, 0, 256), (t, 256, 256), (y, 512, 256), (z, 256, 256), (q, 768, 32)],
                      n_nodes=3, n_leafs=2, replan=ev.ReplanCause.N_NODES)
        tb.bind(0, p_b, g_b, [(x, buf, 0), (t, buf, 256), (y, buf, 512), (z, buf, 256), (q, buf, 768)])
    else:
        p_b = tb.plan(0, g_b, [(y, 0, 256), (q, 256, 32)], n_nodes=3, n_leafs=2, replan=ev.ReplanCause.N_NODES)
        tb.bind(0, p_b, g_b, [(y, buf, 0), (z, buf, 0), (q, buf, 256)])
    tb.set(x)
    tb.set(y)
    tb.compute(g_b, [(t, [x]), (z, [t, y]), (q, [z])])
    tb.get(q)
    return tb, dict(x=x, t=t, u=u, s=s, y=y, z=z, q=q)


def test_stale_overlap_and_use_after_reuse_in_the_seed_shape():
    tb, ids = stale_scenario()
    hz = check(tb)
    stale = [h for h in hz if h.kind is HazardKind.STALE_OVERLAP]
    pairs = {frozenset((h.tensor_id, h.other_id)) for h in stale}
    # both_live pairs of graph B: (x, y) and (y, t); (x, t) is the in-place pattern, not a conflict
    assert pairs == {frozenset((ids["x"], ids["y"])), frozenset((ids["y"], ids["t"]))}
    uar = {(h.tensor_id, h.other_id) for h in hz if h.kind is HazardKind.USE_AFTER_REUSE}
    assert (ids["x"], ids["y"]) in uar  # writing input y destroyed x before t = sqr(x) read it
    assert (ids["y"], ids["t"]) in uar  # recomputing t (stale, on y's bytes) destroyed y
    assert kinds(hz)["replan"] == 1


def test_clear_fix_gives_no_memory_hazard():
    tb, _ = stale_scenario("clear")
    hz = check(tb)
    assert [h.kind for h in hz] == [HazardKind.REPLAN]


def test_report_reads_like_a_sanitizer():
    tb, ids = stale_scenario()
    hz = check(tb)
    h = next(h for h in hz if h.kind is HazardKind.USE_AFTER_REUSE and h.tensor_id == ids["x"])
    text = h.report()
    lines = text.splitlines()
    assert lines[0].startswith("==vizalloc== ERROR: use-after-reuse on tensor 'x'")
    assert "READ by node 0 't' (SQR) of compute #2" in text
    assert "256 bytes [0, 256) of buffer #1" in text
    assert "conflicting tensor 'y'" in text
    assert "user.py:" in text and "created at" in text and "placed in buffer #1 [0, 256) by gallocr binding #1" in text
    assert lines[-1].startswith("SUMMARY: vizalloc: use-after-reuse 'x'")
    stale = next(h for h in hz if h.kind is HazardKind.STALE_OVERLAP)
    assert "stale since its allocator was re-planned" in stale.report()


def test_results_are_sorted_and_deterministic():
    tb, _ = stale_scenario()
    a = check(tb)
    b = check(tb)
    assert a == b
    assert [h.sort_key() for h in a] == sorted(h.sort_key() for h in a)


def test_use_after_reuse_leaf_index_read_by_backward():
    """spinel #1449: an index leaf freed after the forward get_rows; its bytes go to the
    loss, and the backward pass reads the index again."""
    tb = TraceBuilder()
    w = tb.tensor("w", 64)
    idx = tb.tensor("idx", 8, dtype="i32", flags=1)
    rows = tb.node("rows", "GET_ROWS", w, idx, ne0=8)
    loss = tb.node("loss", "SUM", rows, ne0=8, flags=2)
    grad = tb.node("grad_w", "GET_ROWS_BACK", loss, idx, ne0=64)
    static = tb.buffer(256, usage="weights")
    tb.place(w, static, 0)
    tb.set(w)
    g = tb.graph([rows, loss, grad], [w, idx])
    buf = tb.buffer(1024, pool=0)
    plan = tb.plan(0, g, [(idx, 0, 32), (rows, 32, 32), (loss, 0, 32), (grad, 64, 256)], n_nodes=3, n_leafs=2)
    tb.bind(0, plan, g, [(idx, buf, 0), (rows, buf, 32), (loss, buf, 0), (grad, buf, 64)])
    tb.set(idx)
    tb.compute(g, [(rows, [w, idx]), (loss, [rows]), (grad, [loss, idx])])
    hz = check(tb)
    uar = [h for h in hz if h.kind is HazardKind.USE_AFTER_REUSE]
    assert [(h.tensor_id, h.other_id, h.node_index) for h in uar] == [(idx, loss, 2)]
    assert uar[0].ranges == ((0, 32),)
    # the static check at the binding also sees that idx and loss are both live on the same bytes
    assert not [h for h in hz if h.kind is HazardKind.STALE_OVERLAP]


def test_views_and_in_place_reuse_are_not_hazards():
    tb = TraceBuilder()
    a = tb.tensor("a", 16, flags=1)
    b = tb.node("b", "UNARY", a)             # in place over a (a dies here)
    v = tb.tensor("v", 8, op="VIEW", srcs=(b,), view_src=b, view_offs=0)
    c = tb.node("c", "ADD", b, v)              # reads b and a view of b
    g = tb.graph([b, v, c], [a])
    buf = tb.buffer(256, pool=0)
    plan = tb.plan(0, g, [(a, 0, 64), (c, 64, 64)], inplace=[(b, a, 0)], n_nodes=3, n_leafs=1)
    tb.bind(0, plan, g, [(a, buf, 0), (b, buf, 0), (c, buf, 64)], views=[(v, buf, 0)])
    tb.set(a)
    tb.compute(g, [(b, [a]), (c, [b, v])])
    tb.get(c)
    assert check(tb) == []


def test_uninitialized_read():
    tb = TraceBuilder()
    a, b, g, _ = tb.bound_relu()
    tb.compute(g, [(b, [a])])  # nobody set the input
    hz = check(tb)
    assert [(h.kind, h.tensor_id, h.other_id) for h in hz] == [(HazardKind.UNINITIALIZED_READ, a, -1)]
    assert "nothing wrote these bytes" in hz[0].report()


def test_uninitialized_read_of_bytes_left_by_an_earlier_tensor():
    tb = TraceBuilder()
    buf = tb.buffer(128, pool=0)
    old = tb.tensor("old", 16, flags=1)
    g0 = tb.graph([], [old])
    p0 = tb.plan(0, g0, [(old, 0, 64)], n_leafs=1)
    tb.bind(0, p0, g0, [(old, buf, 0)])
    tb.set(old)
    a = tb.tensor("a", 16, flags=1)
    b = tb.node("b", "RELU", a)
    g = tb.graph([b], [a])
    p1 = tb.plan(0, g, [(a, 0, 64), (b, 64, 64)], n_nodes=1, n_leafs=1, replan=ev.ReplanCause.N_NODES)
    tb.bind(0, p1, g, [(a, buf, 0), (b, buf, 64)])
    tb.compute(g, [(b, [a])])
    hz = [h for h in check(tb) if h.kind is not HazardKind.REPLAN]
    assert [(h.kind, h.tensor_id, h.other_id) for h in hz] == [(HazardKind.UNINITIALIZED_READ, a, old)]


def test_weights_never_written_are_not_uninitialized():
    tb = TraceBuilder()
    w = tb.tensor("w", 16)
    static = tb.buffer(64, usage="weights")
    tb.place(w, static, 0, by=ev.PlacedBy.TALLOCR)
    out = tb.node("out", "RELU", w)
    g = tb.graph([out], [w])
    buf = tb.buffer(64, pool=0)
    plan = tb.plan(0, g, [(out, 0, 64)], n_nodes=1, n_leafs=1)
    tb.bind(0, plan, g, [(out, buf, 0)])
    tb.compute(g, [(out, [w])])
    tb.get(out)
    assert check(tb) == []


def test_buffer_clear_initialises():
    tb = TraceBuilder()
    acc = tb.tensor("acc", 16)
    buf = tb.buffer(64, pool=0)
    g = tb.graph([], [acc])
    plan = tb.plan(0, g, [(acc, 0, 64)], n_leafs=1)
    tb.bind(0, plan, g, [(acc, buf, 0)])
    tb.clear_buffer(buf)
    out = tb.node("out", "RELU", acc)
    tb.compute(g, [(out, [acc])])
    assert check(tb) == []


def test_clobbered_output():
    tb = TraceBuilder()
    a = tb.tensor("a", 16, flags=1)
    b = tb.node("b", "RELU", a)
    c = tb.node("c", "NEG", b)
    g = tb.graph([b, c], [a])
    buf = tb.buffer(128, pool=0)
    # b is not flagged output, so c may take its bytes in place
    plan = tb.plan(0, g, [(a, 0, 64), (b, 64, 64)], inplace=[(c, b, 64)], n_nodes=2, n_leafs=1)
    tb.bind(0, plan, g, [(a, buf, 0), (b, buf, 64), (c, buf, 64)])
    tb.set(a)
    tb.compute(g, [(b, [a]), (c, [b])])
    tb.get(c)
    tb.get(b)  # the user expected b's value
    hz = check(tb)
    assert [(h.kind, h.tensor_id, h.other_id) for h in hz] == [(HazardKind.CLOBBERED_OUTPUT, b, c)]
    assert "READ by the user (tensor_get)" in hz[0].report()


def test_dangling_read_after_buffer_replaced():
    tb = TraceBuilder()
    a, b, g, buf = tb.bound_relu()
    tb.set(a)
    tb.compute(g, [(b, [a])])
    tb.free(buf, cause="resized to 4096")
    tb.buffer(4096, pool=0)
    tb.compute(g, [(b, [a])])
    tb.compute(g, [(b, [a])])
    hz = check(tb)
    dang = [h for h in hz if h.kind is HazardKind.DANGLING]
    assert {h.tensor_id for h in dang} == {a, b}
    read = next(h for h in dang if h.tensor_id == a)
    assert read.occurrences == 2 and read.steps == (2, 3)
    assert "resized to 4096" in read.report()


def test_dangling_kept_by_a_binding():
    tb, ids = stale_scenario()
    # a third graph over the stale t after the pool buffer was replaced
    tb.free(1, cause="grow")
    big = tb.buffer(4096, pool=0)
    w = tb.node("w", "NEG", ids["t"], ne0=64, flags=2)
    g = tb.graph([w], [ids["t"]])
    plan = tb.plan(0, g, [(w, 0, 256)], n_nodes=1, n_leafs=1, replan=ev.ReplanCause.N_NODES)
    tb.bind(0, plan, g, [(w, big, 0)])
    hz = [h for h in check(tb) if h.kind is HazardKind.DANGLING]
    assert [(h.tensor_id, h.binding_id) for h in hz] == [(ids["t"], 3)]
    assert "kept in graph" in hz[0].access


def test_plan_mismatch_when_a_position_changes_op():
    """llama.cpp #28448: the size-only check reuses a plan for a graph whose node changed."""
    tb = TraceBuilder()
    buf = tb.buffer(512, pool=0)

    def build(op2: str) -> tuple[int, list[int]]:
        a = tb.tensor("a", 16, flags=1)
        b = tb.node("b", "RELU", a)
        c = tb.node("c", op2, b, a)
        d = tb.node("d", "SUM", c, ne0=1, flags=2)
        return tb.graph([b, c, d], [a]), [a, b, c, d]

    g1, t1 = build("ADD")
    plan = tb.plan(0, g1, [(t1[0], 0, 64), (t1[1], 64, 64), (t1[2], 0, 64), (t1[3], 128, 32)],
                   n_nodes=3, n_leafs=1)
    tb.bind(0, plan, g1, [(t1[0], buf, 0), (t1[1], buf, 64), (t1[2], buf, 0), (t1[3], buf, 128)])
    g2, t2 = build("ADD")  # the same structure rebuilt: no hazard
    tb.bind(0, plan, g2, [(t2[0], buf, 0), (t2[1], buf, 64), (t2[2], buf, 0), (t2[3], buf, 128)])
    g3, t3 = build("MUL")  # another op at position 1, sizes fit
    tb.bind(0, plan, g3, [(t3[0], buf, 0), (t3[1], buf, 64), (t3[2], buf, 0), (t3[3], buf, 128)])
    hz = [h for h in check(tb) if h.kind is HazardKind.PLAN_MISMATCH]
    assert len(hz) == 1
    h = hz[0]
    assert (h.tensor_id, h.other_id, h.node_index, h.binding_id) == (t3[2], t1[2], 1, 3)
    assert "MUL" in h.detail and "ADD" in h.detail


def test_replan_counts_causes_and_reports_churn():
    tb = TraceBuilder()
    buf = tb.buffer(256, pool=0)
    a = tb.tensor("a", 16, flags=1)
    g = tb.graph([], [a])
    for step in range(4):
        cause = ev.ReplanCause.FIRST if step == 0 else ev.ReplanCause.N_NODES
        plan = tb.plan(0, g, [(a, 0, 64)], n_leafs=1, replan=cause)
        tb.bind(0, plan, g, [] if step else [(a, buf, 0)])
    hz = check(tb)
    assert [(h.kind, h.cause, h.occurrences) for h in hz] == [
        (HazardKind.REPLAN, "churn", 1), (HazardKind.REPLAN, "n_nodes", 3)]
    assert hz[1].report().startswith("==vizalloc== WARNING: replan (n_nodes)")


def test_no_churn_for_occasional_replans():
    tb = TraceBuilder()
    tb.buffer(256, pool=0)
    a = tb.tensor("a", 16, flags=1)
    g = tb.graph([], [a])
    plan = tb.plan(0, g, [(a, 0, 64)], n_leafs=1, replan=ev.ReplanCause.FIRST)
    for _ in range(3):
        tb.bind(0, plan, g)
    plan = tb.plan(0, g, [(a, 0, 64)], n_leafs=1, replan=ev.ReplanCause.NODE_SIZE)
    tb.bind(0, plan, g)
    hz = check(tb)
    assert [(h.kind, h.cause) for h in hz] == [(HazardKind.REPLAN, "node_size")]


def test_deep_copies_alias_the_static_original():
    """graph_deep_copy copies of an allocated parameter share its bytes (PlacedBy.COPY): not a conflict."""
    tb = TraceBuilder()
    static = tb.buffer(64, usage="weights")
    p = tb.tensor("p", 16, flags=4)
    tb.place(p, static, 0, by=ev.PlacedBy.TALLOCR)
    tb.set(p)
    buf = tb.buffer(256, pool=0)
    for step in range(2):
        pc = tb.tensor("p", 16, flags=4, copy_of=p)
        tb.place(pc, static, 0, by=ev.PlacedBy.COPY)
        upd = tb.tensor("upd", 16, op="OPT_STEP_SGD", srcs=(pc,), view_src=pc)
        tb.place(upd, static, 0, by=ev.PlacedBy.VIEW_CREATE)
        out = tb.node("out", "RELU", pc)
        g = tb.graph([out, upd], [])
        plan = tb.plan(0, g, [(out, 0, 64)], n_nodes=2)
        tb.bind(0, plan, g, [(out, buf, 0)])
        tb.compute(g, [(out, [pc]), (upd, [pc])])
    assert [h for h in check(tb) if h.kind is not HazardKind.REPLAN] == []


def test_to_dict_is_plain_data():
    import json

    tb, _ = stale_scenario()
    data = [h.to_dict() for h in check(tb)]
    text = json.dumps(data)
    assert '"kind": "stale-overlap"' in text
