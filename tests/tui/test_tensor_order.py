"""The tensor table's sort orders and the loading worker's GIL-friendly helpers."""

from __future__ import annotations

import random

import numpy as np
import pytest

from vizalloc.tui import tensorrows
from vizalloc.tui.tensorrows import TensorOrder, TensorRows, TensorState


def _rows(n: int, seed: int = 3) -> TensorRows:
    rnd = random.Random(seed)
    r = TensorRows()
    r.ids = list(range(n))
    # few letters, so many ties (stable order matters); mixed case, non-ASCII, empty names
    r.names = ["".join(rnd.choice("abAB.\u00e9_1 ") for _ in range(rnd.randrange(0, 6))) for _ in range(n)]
    r.ops = [rnd.choice(["ADD", "MUL", "", "VIEW", "mul"]) for _ in range(n)]
    r.nbytes = [rnd.randrange(0, 50) for _ in range(n)]
    r.first_use = [rnd.randrange(-1, 9) for _ in range(n)]
    r.states = [rnd.choice(list(TensorState)) for _ in range(n)]
    return r


@pytest.mark.parametrize("chunk", [4, 16384])
def test_name_and_number_orders_match_python_stable_sorts(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(tensorrows, "ARRAY_CHUNK", chunk)
    r = _rows(3000)
    order = TensorOrder(r)
    for key, col in (("name", r.names), ("op", r.ops), ("nbytes", r.nbytes), ("first", r.first_use)):
        assert order.perm(key).tolist() == sorted(range(len(r)), key=col.__getitem__), key


@pytest.mark.parametrize("items", [["a", "bcd", "", "xyzzy", "\u00e9\u00e9", "q"], [5, -1, 2**40, 0, 7, 3, 1]])
def test_chunked_array_equals_np_array(monkeypatch: pytest.MonkeyPatch, items: list[object]) -> None:
    monkeypatch.setattr(tensorrows, "ARRAY_CHUNK", 2)
    dtype = str if isinstance(items[0], str) else np.int64
    got = tensorrows._array(items, dtype)
    want = np.array(items, dtype=dtype)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_name_filter_uses_lowercase_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensorrows, "ARRAY_CHUNK", 4)
    r = _rows(200)
    got = TensorOrder(r).order("id", False, "A.", None).tolist()
    assert got == [i for i, n in enumerate(r.names) if "a." in n.lower()]
