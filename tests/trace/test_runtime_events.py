"""Every public runtime call that changes memory state reports the event it must, and a
whole traced program reads back from its file as the same trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import vizalloc
from vizalloc.runtime import F32, BufferType, Context, Graph, graph_deep_copy, ops, set_input, set_output
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import clear_tensor_pointers, tensor_get, tensor_set
from vizalloc.trace import events as ev

CPU = BufferType("CPU", alignment=32)


def _only(events: tuple[ev.Event, ...] | list[ev.Event], cls: type[ev.Event]) -> list[ev.Event]:
    return [e for e in events if isinstance(e, cls)]


def test_contexts_tensors_names_and_flags() -> None:
    with vizalloc.trace() as t:
        ctx = Context(name="params")
        w = ctx.new_tensor_2d(F32, 8, 4, name="w")
        view = ctx.view_tensor(w, name="wv")
        w.set_name("weight")
        set_input(w)
        set_output(view)
        ctx.free()
    evs = t.trace.events
    assert _only(evs, ev.ContextCreated) == [ev.ContextCreated(evs[0].seq, evs[0].t_ns, evs[0].loc, ctx.id, "params", True)]
    created = _only(evs, ev.TensorCreated)
    assert [(c.tensor_id, c.name, c.ne, c.nb, c.view_src) for c in created] == [
        (w.id, "w", (8, 4, 1, 1), (4, 32, 128, 128), -1), (view.id, "wv", (8, 4, 1, 1), (4, 32, 128, 128), w.id)]
    assert [(e.tensor_id, e.name) for e in _only(evs, ev.TensorNamed)] == [(w.id, "weight")]
    flags = [(e.tensor_id, e.flags) for e in _only(evs, ev.TensorFlagsSet)]
    assert flags == [(w.id, 1), (view.id, 2), (w.id, 3)]  # set_output marks the view's root too
    assert [e.ctx_id for e in _only(evs, ev.ContextFreed)] == [ctx.id]
    assert all(e.loc is not None and e.loc.file == __file__ for e in evs)


def test_buffers_placements_user_io_and_clearing() -> None:
    ctx = Context(name="weights")
    a = ctx.new_tensor_1d(F32, 4, name="a")
    b = ctx.new_tensor_2d(F32, 3, 2, name="b")
    av = ctx.view_tensor(a, name="av")
    with vizalloc.trace() as t:
        buf = alloc_ctx_tensors(ctx, CPU)
        tensor_set(a, np.arange(4, dtype=np.float32))
        got = tensor_get(a)
        scratch = CPU.alloc_buffer(256, cause="scratch")
        scratch.clear(7)
        clear_tensor_pointers(b, by="clear")
        scratch.free(cause="done")
    assert got.tolist() == [0, 1, 2, 3]
    evs = t.trace.events
    allocated = _only(evs, ev.BufferAllocated)
    assert [(e.buffer_id, e.nbytes, e.buft) for e in allocated] == [(buf.id, 64, "CPU"), (scratch.id, 256, "CPU")]
    placed = [(e.tensor_id, e.buffer_id, e.offset, e.nbytes, e.by) for e in _only(evs, ev.TensorPlaced)]
    assert placed == [
        (a.id, buf.id, 0, 16, ev.PlacedBy.TALLOCR),
        (b.id, buf.id, 32, 24, ev.PlacedBy.TALLOCR),
        (av.id, buf.id, 0, 16, ev.PlacedBy.VIEW_INIT),
    ]
    assert [(e.tensor_id, e.offset, e.nbytes) for e in _only(evs, ev.TensorSet)] == [(a.id, 0, 16)]
    assert [(e.tensor_id, e.offset, e.nbytes) for e in _only(evs, ev.TensorGet)] == [(a.id, 0, 16)]
    assert [(e.buffer_id, e.value) for e in _only(evs, ev.BufferCleared)] == [(scratch.id, 7)]
    assert [(e.tensor_id, e.by) for e in _only(evs, ev.TensorCleared)] == [(b.id, "clear")]
    assert [(e.buffer_id, e.cause) for e in _only(evs, ev.BufferFreed)] == [(scratch.id, "done")]


def test_graphs_shallow_and_deep_copies() -> None:
    ctx = Context()
    x = ctx.new_tensor_1d(F32, 4, name="x")
    y = ctx.new_tensor_1d(F32, 4, name="y")
    with vizalloc.trace() as t:
        s = ops.add(ctx, x, y)
        g = Graph()
        g.build_forward_expand(s)
        g2 = g.dup()
        g3 = graph_deep_copy(Context(name="copies"), g)
    evs = t.trace.events
    add = next(e for e in _only(evs, ev.TensorCreated) if e.tensor_id == s.id)
    assert add.op == "ADD" and add.srcs == (x.id, y.id)
    graphs = [(e.graph_id, e.kind, e.source_graph) for e in _only(evs, ev.GraphCreated)]
    assert graphs == [(g.id, "new", -1), (g2.id, "shallow_copy", g.id), (g3.id, "deep_copy", g.id)]
    expanded = {e.graph_id: e for e in _only(evs, ev.GraphExpanded)}
    assert expanded[g.id].nodes == (s.id,) and expanded[g.id].leafs == (x.id, y.id)
    assert expanded[g2.id].nodes == (s.id,)
    copies = [e for e in _only(evs, ev.TensorCreated) if e.copy_of != -1]
    assert sorted(e.copy_of for e in copies) == sorted([x.id, y.id, s.id])
    assert [n.id for n in g3.nodes] == [e.tensor_id for e in copies if e.copy_of == s.id]


def test_graph_allocator_compute_and_value_capture(tmp_path: Path) -> None:
    from vizalloc.runtime import alloc
    from vizalloc.runtime import backends
    wctx, cctx = Context(name="w"), Context(name="compute")
    w = wctx.new_tensor_2d(F32, 4, 3, name="w")
    x = cctx.new_tensor_2d(F32, 4, 2, name="x")
    set_input(x)
    cpu = backends.CPUBackend()
    backends.alloc_ctx_tensors(wctx, cpu)
    tensor_set(w, np.ones((3, 4), dtype=np.float32))
    y = ops.relu(cctx, ops.mul_mat(cctx, w, x))
    set_output(y)
    g = Graph()
    g.build_forward_expand(y)
    path = tmp_path / "compute.vztrace"
    with vizalloc.trace(path, capture_values=True) as t:
        galloc = alloc.GraphAllocator(cpu.buffer_type)
        assert galloc.alloc_graph(g)
        tensor_set(x, np.full((2, 4), 2.0, dtype=np.float32))
        backends.graph_compute(cpu, g)
        out = tensor_get(y)
    assert out.tolist() == [[8.0] * 3] * 2
    evs = t.trace.events
    kinds = {type(e) for e in evs}
    for cls in (ev.PlanBegin, ev.PlanAlloc, ev.PlanEnd, ev.BindingBegin, ev.BindingEnd,
                ev.ComputeBegin, ev.NodeCompute, ev.ComputeEnd, ev.ValueSnapshot, ev.BufferAllocated):
        assert cls in kinds, cls.__name__
    placed = {e.tensor_id for e in _only(evs, ev.TensorPlaced) if e.by is ev.PlacedBy.GALLOCR}
    assert {x.id, y.id} <= placed and w.id not in placed
    assert [e.tensor_id for e in _only(evs, ev.NodeCompute)] == [n.id for n in g.nodes]
    snaps = {(e.tensor_id, e.when): e for e in _only(evs, ev.ValueSnapshot)}
    assert np.frombuffer(snaps[(y.id, "end")].data, dtype=np.float32).tolist() == [8.0] * 6
    assert np.frombuffer(snaps[(x.id, "begin")].data, dtype=np.float32).tolist() == [2.0] * 8
    assert vizalloc.load(path) == t.trace


def test_scheduler_and_copies_are_reported() -> None:
    import vizalloc.runtime.sched as sched_mod
    from vizalloc.runtime import backends
    ctx = Context(name="c")
    a = ctx.new_tensor_1d(F32, 16, name="a")
    b = ctx.new_tensor_1d(F32, 16, name="b")
    set_input(a)
    set_input(b)
    s = ops.add(ctx, a, b)
    set_output(s)
    g = Graph()
    g.build_forward_expand(s)
    with vizalloc.trace() as t:
        sched = sched_mod.Scheduler([backends.CPUBackend()])
        assert sched.alloc_graph(g)
        tensor_set(a, np.ones(16, dtype=np.float32))
        tensor_set(b, np.ones(16, dtype=np.float32))
        sched.graph_compute(g)
        sched.reset()
        other = Context(name="o").new_tensor_1d(F32, 16)
        backends.alloc_ctx_tensors(other.ctx, backends.CPUBackend())
        backends.tensor_copy(s, other)
    evs = t.trace.events
    for cls in (ev.SchedReset, ev.SchedSplit, ev.SchedAlloc, ev.ComputeEnd, ev.TensorCopy):
        assert _only(evs, cls), cls.__name__
    assert [(e.src_id, e.dst_id, e.nbytes) for e in _only(evs, ev.TensorCopy)] == [(s.id, other.id, 64)]


def test_the_demo_scenario_round_trips_through_its_file(tmp_path: Path) -> None:
    import vizalloc.scenarios.shared_tensors as scenario
    path = tmp_path / "demo.vztrace"
    sessions = []

    def around() -> vizalloc.trace.api.TraceSession:  # type: ignore[name-defined]
        sessions.append(vizalloc.trace(path))
        return sessions[-1]

    scenario.run("none", steps=2, seed=0, around_loop=around)
    trace = sessions[0].trace
    assert len(trace) > 100
    assert vizalloc.load(path) == trace
    # ComputeEnd forces a flush: the file has at least one chunk per graph compute
    assert len(_only(trace.events, ev.ComputeEnd)) >= 4


def test_graph_clear_and_allocator_reserve_are_reported() -> None:
    from vizalloc.runtime import alloc
    ctx = Context()
    a = ctx.new_tensor_1d(F32, 32, name="a")
    set_input(a)
    r = ops.relu(ctx, a)
    set_output(r)
    g = Graph()
    g.build_forward_expand(r)
    with vizalloc.trace() as t:
        galloc = alloc.GraphAllocator(CPU)
        assert galloc.reserve(g)
        assert galloc.alloc_graph(g)
        g2 = g.dup()
        g2.clear()
    evs = t.trace.events
    replans = _only(evs, ev.Replan)
    assert replans and all(isinstance(e.cause, ev.ReplanCause) for e in replans)
    begins = _only(evs, ev.PlanBegin)
    assert begins and begins[0].graph_id == g.id and begins[0].n_nodes == 1
    assert [e.graph_id for e in _only(evs, ev.GraphCleared)] == [g2.id]
    binding = _only(evs, ev.BindingBegin)[0]
    assert binding.graph_id == g.id and binding.plan_id == begins[-1].plan_id


def test_a_paused_recorder_misses_vizalloc_s_own_work_and_resumes() -> None:
    from vizalloc.trace.recorder import ListRecorder, paused

    with ListRecorder() as outer:
        Context(name="before")
        with paused():
            Context(name="hidden")
            with ListRecorder() as inner:
                Context(name="inner")
        Context(name="after")
    names = [e.name for e in outer.events if isinstance(e, ev.ContextCreated)]
    assert names == ["before", "after"]
    assert [e.name for e in inner.events if isinstance(e, ev.ContextCreated)] == ["inner"]
