"""MiniMalloc CSV: exact rows for the seed case, and recorded plans are valid solutions of their own problem."""

from __future__ import annotations

import random

import pytest

from tests.export.scenarios import mlp_chain, seed_stale, two_backends
from vizalloc.analysis.model import build_model
from vizalloc.errors import UsageError
from vizalloc.export.minimalloc import csv_text, plan_problems
from vizalloc.runtime import Context, F32, Graph, ops
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.tensor import set_input, set_output
from vizalloc.trace.recorder import StrictRecorder


def test_seed_plans_exact_rows():
    model = build_model(seed_stale())
    first, second = sorted(model.plans)
    ids = {info.name: t for t, info in model.tensors.items()}
    (a,) = plan_problems(model, first)
    # x allocated (1), t and u take it over in place (2, 3), s allocated (4), u's chain freed (5)
    assert csv_text(a) == f"id,lower,upper,size\nx#{ids['x']},1,5,256\ns#{ids['s']},4,6,32\n"
    assert a.rows[0].members == (ids["x"], ids["t"], ids["u"])
    assert (a.recorded_nbytes, a.recorded_peak, a.lower_bound) == (288, 288, 288)
    (b,) = plan_problems(model, second)
    # x and t are external in the second plan: not in the problem at all
    assert csv_text(b, offsets=True) == (f"id,lower,upper,size,offset\ny#{ids['y']},1,4,256,0\n"
                                         f"q#{ids['q']},3,5,32,256\n")
    assert b.overlaps() == []


def test_ids_are_inert_names():
    """Names are data: a comma, a quote, a newline or a bidi override never reaches the CSV
    field (MiniMalloc splits on commas without quoting); ids stay unique."""
    model = build_model(seed_stale(("x,1", 't"2', "u\nv", "s\u202e", "y y", "z", "q")))
    first = min(model.plans)
    text = csv_text(plan_problems(model, first)[0])
    rows = text.splitlines()
    assert len(rows) == 3 and all(len(r.split(",")) == 4 for r in rows)
    ids = [r.split(",")[0] for r in rows[1:]]
    assert ids[0].startswith("x_1#") and ids[1].startswith("s_u202e#")
    assert len(set(ids)) == len(ids)


def test_unknown_plan_is_a_usage_error():
    with pytest.raises(UsageError, match="plan #12345 is not in the trace"):
        plan_problems(build_model(seed_stale()), 12345)


def test_one_problem_per_buffer_slot():
    model = build_model(two_backends(compute=False))
    (plan,) = model.plans
    problems = plan_problems(model, plan)
    assert [(p.slot, p.chunk) for p in problems] == [(0, 0), (1, 0)]
    for p in problems:
        assert p.overlaps() == [] and p.recorded_peak <= p.recorded_nbytes


def _random_graph(rng: random.Random, n: int) -> list:
    with StrictRecorder() as rec:
        ctx = Context(no_alloc=True)
        pool = []
        for i in range(3):
            t = ctx.new_tensor_1d(F32, rng.choice((8, 16, 40, 64)), f"in{i}")
            set_input(t)
            pool.append(t)
        for i in range(n):
            a = rng.choice(pool[-6:])
            kind = rng.random()
            if kind < 0.4:
                t = ops.sqr(ctx, a)
            elif kind < 0.7:
                b = rng.choice([p for p in pool if p.ne == a.ne] or [a])
                t = ops.add(ctx, a, b)
            else:
                t = ops.relu(ctx, a)
            pool.append(t.set_name(f"n{i}"))
        set_output(pool[-1])
        g = Graph()
        for t in pool[-3:]:
            g.build_forward_expand(t)
        assert GraphAllocator([BufferType("CPU", alignment=32)]).alloc_graph(g)
    return rec.events


@pytest.mark.parametrize("seed", range(8))
def test_recorded_plan_is_a_valid_solution_and_above_the_lower_bound(seed):
    model = build_model(_random_graph(random.Random(seed), 25))
    for plan in model.plans:
        for p in plan_problems(model, plan):
            assert p.overlaps() == [], f"seed {seed}: live rows share bytes"
            assert p.lower_bound <= p.recorded_peak <= p.recorded_nbytes
            assert all(r.lower < r.upper for r in p.rows)


def test_layers_chain_problem_covers_every_planned_tensor():
    model = build_model(mlp_chain(5))
    (plan_id,) = model.plans
    (p,) = plan_problems(model, plan_id)
    planned = {d.tensor_id for d in model.plans[plan_id].allocs}
    assert {r.tensor_id for r in p.rows} == planned
    in_place = {d.tensor_id for d in model.plans[plan_id].inplace}
    assert {m for r in p.rows for m in r.members} == planned | in_place
