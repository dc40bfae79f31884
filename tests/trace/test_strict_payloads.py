"""Every ``emit`` payload fits the event schema: the scenarios run under ``StrictRecorder``,
which checks each event's fields against their codecs as it is emitted (``emit`` itself
does not check; the trace file would store a wrong type, or fail to, much later)."""

from __future__ import annotations

import numpy as np
import pytest

from vizalloc.runtime import F32, BufferType, Context, Graph, ops
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.scenarios import shared_tensors, transformer_block, weight_transform
from vizalloc.trace import events as ev
from vizalloc.trace import recorder
from vizalloc.trace.api import mark
from vizalloc.trace.recorder import StrictRecorder
from vizalloc.trace.schema import check_event


@pytest.mark.parametrize("driver", ["graphs", "opt"])
@pytest.mark.parametrize("strategy", shared_tensors.STRATEGIES)
def test_training_loop_payloads_fit_the_schema(strategy: str, driver: str) -> None:
    with StrictRecorder(capture_values=True) as rec:
        shared_tensors.run(strategy, 2, 0, "A", driver=driver)
    kinds = {type(e) for e in rec.events}
    assert {ev.PlanAlloc, ev.TensorPlaced, ev.NodeCompute, ev.ValueSnapshot} <= kinds


def test_scheduler_and_transform_payloads_fit_the_schema() -> None:
    with StrictRecorder(capture_values=True) as rec:
        transformer_block.run()
        weight_transform.run_graph_transform()
    kinds = {type(e) for e in rec.events}
    assert {ev.SchedSplit, ev.SchedAlloc, ev.TensorCopy} <= kinds


def test_clears_and_markers_fit_the_schema() -> None:
    with StrictRecorder() as rec:
        ctx = Context()
        a = ctx.new_tensor_1d(F32, 8, name="a")
        g = Graph()
        g.build_forward_expand(ops.sqr(ctx, a))
        galloc = GraphAllocator(BufferType("CPU", alignment=32))
        assert galloc.alloc_graph(g)
        buffers = galloc.buffers[0]
        assert buffers is not None
        buffers[0].clear(0)
        g.clear()
        mark("done")
    kinds = {type(e) for e in rec.events}
    assert {ev.BufferCleared, ev.GraphCleared, ev.Marker} <= kinds


@pytest.mark.parametrize(("field", "bad"), [
    ("tensor_id", np.int64(3)),     # a numpy int is not an int
    ("name", b"x"),                 # bytes are not a str
])
def test_a_field_of_another_type_is_named(field: str, bad: object) -> None:
    good = ev.TensorNamed(1, 2, None, 3, "x")
    check_event(good)
    fields = {"tensor_id": 3, "name": "x", field: bad}
    with pytest.raises(TypeError, match=rf"TensorNamed\.{field} = .*the schema says"):
        check_event(ev.TensorNamed(1, 2, None, fields["tensor_id"], fields["name"]))  # type: ignore[arg-type]


def test_bools_tuples_enums_and_locations_are_checked_exactly() -> None:
    ok = ev.BindingEnd(1, 2, None, 4, True)
    check_event(ok)
    with pytest.raises(TypeError, match="BindingEnd.ok = 1"):
        check_event(ev.BindingEnd(1, 2, None, 4, 1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="PlanEnd.chunk_sizes"):
        check_event(ev.PlanEnd(1, 2, None, 0, [[64]]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="TensorPlaced.by = 'gallocr'"):
        check_event(ev.TensorPlaced(1, 2, None, 3, 4, 0, 64, "gallocr", -1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Marker.loc"):
        check_event(ev.Marker(1, 2, ("file.py", 3, "f"), "x"))  # type: ignore[arg-type]


def test_strict_recorder_raises_at_the_emit() -> None:
    with StrictRecorder() as rec, pytest.raises(TypeError, match="TensorNamed.name = 7"):
        recorder.emit(ev.TensorNamed, 3, 7)
    assert rec.events == []
