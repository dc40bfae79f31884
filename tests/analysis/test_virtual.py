"""The model's containers after a streamed analysis skipped repeated steps (``runs.VirtualMap``,
``VirtualList``, ``VirtualIds``) are what they stand for -- a ``Mapping``, a ``Sequence`` --
with the skipped steps' entries in them for *every* method: membership, indexing (numpy
integers too, negative, slices), iteration both ways, equality, ``index``/``count``, ``get``
and the views. Each is compared, method by method, with the same container of the trace
analysed one event at a time (``build_model``), which skips nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from tests.analysis import decode_loops
from tests.analysis.test_stream import stream_of_columns
from vizalloc.analysis import runs as runs_mod
from vizalloc.analysis.model import build_model


@pytest.fixture(scope="module")
def models() -> tuple[Any, Any]:
    events = decode_loops.record("plain", tokens=12)
    streamed, _, stream = stream_of_columns(events, 1 << 20)
    assert stream.n_skipped_steps == 9
    return streamed, build_model(events)


def _ids(v: Any) -> Any:
    return runs_mod.VirtualIds in type(v).__mro__


def test_the_containers_are_abc_types_not_list_subclasses(models: tuple[Any, Any]) -> None:
    m, _ = models
    assert isinstance(m.tensors, Mapping) and isinstance(m.bindings, Mapping)
    assert isinstance(m.placements, Sequence) and not isinstance(m.placements, list)
    virtual = [b.placements for b in m.buffers.values() if isinstance(b.placements, runs_mod.VirtualIds)]
    assert virtual
    for v in virtual:
        assert isinstance(v, Sequence) and not isinstance(v, list)


@pytest.mark.parametrize("name", ["tensors", "graphs", "bindings", "computes"])
def test_virtual_map_is_a_mapping_with_every_entry(models: tuple[Any, Any], name: str) -> None:
    m, ref = models
    v, r = getattr(m, name), getattr(ref, name)
    assert isinstance(v, runs_mod.VirtualMap)
    keys = list(r)
    assert list(v) == keys and list(v.keys()) == keys and len(v) == len(r) and bool(v)
    virtual_keys = [k for k in keys if k not in v.live]
    assert virtual_keys, "nothing was skipped"
    for k in (keys[0], virtual_keys[0], virtual_keys[-1]):
        for key in (k, np.int64(k), np.int32(k)):
            assert key in v and v[key] is not None and v.get(key) is not None
            assert getattr(v[key], {"tensors": "tensor_id", "graphs": "graph_id", "bindings": "binding_id",
                                    "computes": "compute_id"}[name]) == k
    for missing in (max(keys) + 10_000, -5, "3", 1.5, None):
        assert missing not in v
        assert v.get(missing, "default") == "default"
    with pytest.raises(KeyError):
        v[max(keys) + 10_000]
    assert [k for k, _ in v.items()] == keys and len(list(v.values())) == len(keys)
    assert set(v.keys()) == set(r.keys())
    assert v == v and v != {}


def test_virtual_list_is_a_sequence_of_every_placement(models: tuple[Any, Any]) -> None:
    m, ref = models
    v, r = m.placements, ref.placements
    assert isinstance(v, runs_mod.VirtualList)
    n = len(r)
    assert len(v) == n and [p.index for p in v] == [p.index for p in r]
    virtual = [i for i in range(n) if v.live[i] is None]
    assert virtual, "nothing was skipped"
    i = virtual[len(virtual) // 2]
    assert v[i].index == i and v[np.int64(i)].index == i and v[i - n].index == i
    assert [p.index for p in v[virtual[0]:virtual[-1]:3]] == list(range(virtual[0], virtual[-1], 3))
    assert [p.index for p in v[::-1]] == list(range(n - 1, -1, -1))
    assert [p.index for p in reversed(v)] == list(range(n - 1, -1, -1))
    p = v[i]
    assert p in v and v.index(p) == i and v.count(p) == 1
    with pytest.raises(IndexError):
        v[n]
    with pytest.raises(IndexError):
        v[-n - 1]
    with pytest.raises(TypeError):
        v["1"]  # type: ignore[call-overload]
    assert v == list(v) and list(v) == v and v != list(v)[:-1]


def test_virtual_ids_are_a_sequence_of_every_placement_number(models: tuple[Any, Any],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    m, ref = models
    (buf_id, v), = [(b.buffer_id, b.placements) for b in m.buffers.values()
                    if isinstance(b.placements, runs_mod.VirtualIds)]
    r = list(ref.buffers[buf_id].placements)
    n = len(r)
    assert len(v) == n and list(v) == r and bool(v)
    live = set(v.live)
    skipped = [x for x in r if x not in live]
    assert skipped, "nothing was skipped"
    # membership, equality and reversal see the skipped steps' placements too
    for x in (r[0], skipped[0], skipped[-1]):
        assert x in v and np.int64(x) in v and v.index(x) == r.index(x) and v.count(x) == 1
    assert -1 not in v and "x" not in v
    assert list(reversed(v)) == r[::-1]
    assert v == r and r == v and v != r[:-1] and v != [*r, 0]
    # indexing: every position, numpy and negative indices, slices across the skipped part
    assert [v[k] for k in range(n)] == r and [v[k - n] for k in range(n)] == r
    assert v[np.int64(n // 2)] == r[n // 2]
    assert v[3:n - 3:7] == r[3:n - 3:7] and v[::-1] == r[::-1] and v[n:] == []
    with pytest.raises(IndexError):
        v[n]
    # one element is one element's work, not the whole list rebuilt
    calls = [0]
    real = runs_mod.Run.placement_no

    def counted(self: Any, value: int, k: int) -> int:
        calls[0] += 1
        return real(self, value, k)

    monkeypatch.setattr(runs_mod.Run, "placement_no", counted)
    k = r.index(skipped[len(skipped) // 2])
    assert v[k] == r[k] and calls[0] <= 1
