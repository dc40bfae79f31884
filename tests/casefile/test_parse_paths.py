"""parse_case checks each tensor twice over: a quick path for well-formed tensors and a
careful one that names the bad field. The quick path may only accept what the careful
one accepts, with the same result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vizalloc.casefile import parse as P
from vizalloc.errors import CaseFormatError

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
ROOTS = json.loads((GOLDEN / "views02_views_of_views.json").read_text())["tensors"]

ints = st.one_of(st.integers(-3, 70), st.sampled_from([2**62, 2**63, 2**64, -(2**63)]))
values = st.one_of(ints, st.booleans(), st.none(), st.floats(allow_nan=True), st.text(max_size=3),
                   st.lists(ints, max_size=5), st.dictionaries(st.text(max_size=2), ints, max_size=2))
FIELDS = ["id", "name", "type", "ne", "nb", "op", "unary_op", "src", "view_src", "view_offs", "flags_raw", "external"]


def _careful(t: Any, i: int, out: list[P.TensorSpec]) -> P.TensorSpec | None:
    try:
        return P._tensor(t, i, len(ROOTS), out)
    except CaseFormatError:
        return None


@settings(max_examples=1500)
@given(st.integers(0, len(ROOTS) - 1), st.lists(st.tuples(st.sampled_from(FIELDS + ["ne.0", "nb.1", "src.0"]),
                                                          values), max_size=3))
def test_quick_path_accepts_only_what_the_careful_one_does(i: int, edits: list[tuple[str, Any]]) -> None:
    prefix: list[P.TensorSpec] = []
    for k, t in enumerate(ROOTS[:i]):
        prefix.append(P._tensor(t, k, len(ROOTS), prefix))
    t = json.loads(json.dumps(ROOTS[i]))
    for field, v in edits:
        if "." in field:
            name, idx = field.split(".")
            if isinstance(t.get(name), list) and int(idx) < len(t[name]):
                t[name][int(idx)] = v
        else:
            t[field] = v
    quick = P._tensor_quick(t, i, prefix)
    careful = _careful(t, i, prefix)
    if quick is not None:
        assert careful == quick


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_both_paths_agree_on_the_corpus(path: Path) -> None:
    tensors = json.loads(path.read_text())["tensors"]
    out: list[P.TensorSpec] = []
    for i, t in enumerate(tensors):
        quick = P._tensor_quick(t, i, out)
        assert quick is not None and quick == P._tensor(t, i, len(tensors), out)
        out.append(quick)
