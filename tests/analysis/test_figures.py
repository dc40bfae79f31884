"""The figures every view shows for a buffer (``analysis.placed.buffer_figures``): defined
once, computed per buffer, and consistent on every sample program: max live <= peak <=
the buffer, the plan's lower bound <= max live, and no bound where the plan put nothing."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

import vizalloc
from vizalloc.analysis.model import NEVER, build_model
from vizalloc.analysis.placed import buffer_figures, max_live_bytes, placed_roots
from vizalloc.analysis.quality import plan_quality

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
RUNS = [
    pytest.param("shared_tensors", ["--fix", "none", "--steps", "2"], id="shared-none"),
    pytest.param("shared_tensors", ["--fix", "none", "--steps", "2", "--config", "B"], id="shared-none-B"),
    pytest.param("shared_tensors", ["--fix", "invalidate", "--steps", "2"], id="shared-invalidate"),
    pytest.param("shared_tensors", ["--fix", "clear", "--steps", "2"], id="shared-clear"),
    pytest.param("shared_tensors", ["--fix", "dup", "--steps", "2"], id="shared-dup"),
    pytest.param("shared_tensors", ["--fix", "static", "--steps", "2"], id="shared-static"),
    pytest.param("shared_tensors", ["--driver", "opt", "--fix", "none", "--presize", "--steps", "2"], id="opt"),
    pytest.param("invalidate_defeated", ["--steps", "2"], id="invalidate-defeated"),
    pytest.param("weight_transform", [], id="weight-transform"),
    pytest.param("transformer_block", [], id="transformer"),
    pytest.param("transformer_block", ["--parallel", "--tokens", "4"], id="transformer-parallel"),
]


def _sample(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"figures_sample_{name}", SAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _brute(extents: list[tuple[int, int, int, int]]) -> tuple[int, int]:
    best, at = 0, -2
    steps = sorted({s for lo, hi, first, last in extents for s in range(first, last + 1)})
    for s in steps:
        held: set[int] = set()
        for lo, hi, first, last in extents:
            if first <= s <= last:
                held.update(range(lo, hi))
        if len(held) > best:
            best, at = len(held), s
    return best, at


def test_max_live_counts_shared_bytes_once() -> None:
    # two stale tensors on the same 100 bytes and a third beside them: 150 bytes, not 250
    assert max_live_bytes([(0, 100, -1, 5), (0, 100, 2, 8), (100, 150, 3, 4)]) == (150, 3)
    # a node's sources and its result are live together at the node (steps inclusive)
    assert max_live_bytes([(0, 64, 0, 2), (64, 128, 2, 4)]) == (128, 2)
    assert max_live_bytes([]) == (0, -2)
    assert max_live_bytes([(10, 10, 0, 3), (0, 8, 4, 3)]) == (0, -2)   # empty ranges, reversed spans


def test_max_live_matches_a_byte_by_byte_count() -> None:
    rng = random.Random(14)
    for _ in range(500):
        extents = []
        for _ in range(rng.randint(0, 9)):
            lo = rng.randint(0, 60)
            first = rng.randint(-1, 12)
            extents.append((lo, lo + rng.randint(0, 40), first, first + rng.randint(-1, 8)))
        assert max_live_bytes(extents) == _brute(extents), extents


@pytest.mark.parametrize(("name", "argv"), RUNS)
def test_figures_agree_on_every_sample(name: str, argv: list[str], tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    mod = _sample(name)
    with vizalloc.trace(str(tmp_path / "t.vztrace")) as t:
        assert mod.main(argv) == 0
    capsys.readouterr()
    model = build_model(t.trace.events)
    bounds = {q.plan_id: q for q in plan_quality(model)}
    checked = 0
    for b in model.bindings.values():
        cut = b.end_seq if b.end_seq != NEVER else model.events[-1].seq
        for buffer_id, roots in placed_roots(model, b.graph, b.plan_id, cut).items():
            f = buffer_figures(model, buffer_id, roots, b.plan_id, cut)
            where = f"binding #{b.binding_id} buffer #{buffer_id}: {f}"
            assert 0 <= f.max_live <= f.highest <= f.size, where
            if f.lower_bound is None:
                assert not any(r.planned for r in roots), where
            else:
                assert any(r.planned for r in roots), where
                assert f.lower_bound <= f.max_live, where
                # one chunk: the buffer's bound is the plan's bound for the slot (one definition)
                buf = model.buffers[buffer_id]
                plan = model.plans[b.plan_id]
                if buf.slot < len(plan.chunk_sizes) and len(plan.chunk_sizes[buf.slot]) == 1:
                    slot = next(s for s in bounds[b.plan_id].slots if s.slot == buf.slot)
                    assert f.lower_bound == slot.lower_bound_bytes, where
            assert f.freed == (model.buffers[buffer_id].freed_seq <= cut), where
            checked += 1
    assert checked > 0
