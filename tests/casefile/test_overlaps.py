"""The overlap report of a case step equals the all-pairs definition (corpus README,
"Liveness and overlaps"), computed in time proportional to the answer."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vizalloc.analysis.liveness import both_live
from vizalloc.casefile.overlaps import meets_another, overlap_report

Root = tuple[int, int, int, int]  # address, nbytes, first, last


def brute(live: dict[int, tuple[int, int]], extent: dict[int, tuple[int, int]]) -> dict[str, object]:
    pairs = []
    roots = sorted(live)
    for x, a in enumerate(roots):
        for b in roots[x + 1:]:
            (da, na), (db, nb) = extent[a], extent[b]
            if na == 0 or nb == 0 or da >= db + nb or db >= da + na:
                continue
            pairs.append({"a": a, "b": b, "both_live": both_live(live[a], live[b]),
                          "a_live": list(live[a]), "b_live": list(live[b])})
    return {"overlap_pairs": len(pairs), "conflicting_pairs": sum(p["both_live"] for p in pairs),
            "overlaps": pairs, "conflicts": [p for p in pairs if p["both_live"]]}


roots = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 6), st.integers(-1, 8), st.integers(-1, 9)),
                 max_size=24)


@settings(max_examples=300)
@given(roots)
def test_report_equals_the_all_pairs_definition(rs: list[Root]) -> None:
    live = {i: (f, max(f, l)) for i, (_, _, f, l) in enumerate(rs)}
    extent = {i: (1000 + d, n) for i, (d, n, _, _) in enumerate(rs)}
    want = brute(live, extent)
    short = overlap_report(live, extent, full=False)
    full = overlap_report(live, extent, full=True)
    assert short == {k: want[k] for k in ("overlap_pairs", "conflicting_pairs", "conflicts")}
    assert full == {k: want[k] for k in ("overlap_pairs", "conflicting_pairs", "overlaps")}


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 6)), max_size=30))
def test_meets_another(spans: list[tuple[int, int]]) -> None:
    starts = [s for s, _ in spans]
    ends = [s + n for s, n in spans]
    want = {i for i in range(len(spans)) for j in range(len(spans))
            if i != j and max(starts[i], starts[j]) < min(ends[i], ends[j])}
    got = meets_another(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))
    assert set(np.flatnonzero(got).tolist()) == want


def test_an_in_place_chain_has_quadratic_overlaps_but_a_linear_report() -> None:
    n = 3000  # every root on the same bytes, each live only until the next one is written
    live = {i: (i, i + 1) for i in range(n)}
    extent = {i: (4096, 64) for i in range(n)}
    out = overlap_report(live, extent, full=False)
    assert out == {"overlap_pairs": n * (n - 1) // 2, "conflicting_pairs": 0, "conflicts": []}
