"""Comparing a replay's results with the results a case file recorded from real ggml.

Only the keys a step records are compared, so a file with fewer fields (or an older
corpus) is checked on what it has. Each difference is one line naming the step, the
field and both values; values are shown short (:func:`brief`), so a hostile recorded
value (deep, huge) never makes a line long or the comparison fail.

    >>> brief([1, 2, 3]), brief({"a": [[[]]]})
    ('[1, 2, 3]', '{"a": [[[]]]}')
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from vizalloc.casefile.parse import Case, show
from vizalloc.text import inert

#: The longest value shown in a difference line.
BRIEF_CHARS = 200


def compare_results(case: Case, results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every difference between the recorded results of ``case`` and ``results``."""
    diffs: list[str] = []
    for step, got in zip(case.steps, results):
        exp = step.expected
        if exp is None:
            continue
        where = f"step {step.index} ({step.action})"
        for key, want in exp.items():
            if key not in got:
                diffs.append(f"{where}: {inert(key, 60)} not produced (expected {brief(want)})")
                continue
            have = got[key]
            if key == "tensors" and isinstance(want, dict):
                _compare_tensors(where, want, have, case, diffs)
            elif key == "plan" and isinstance(want, dict):
                for part in ("nodes", "leafs", "chunk_max_sizes"):
                    w, h = want.get(part), have.get(part)
                    if w != h:
                        if isinstance(w, list) and isinstance(h, list) and len(w) == len(h):
                            for j, (a, b) in enumerate(zip(w, h)):
                                if a != b:
                                    diffs.append(f"{where}: plan.{part}[{j}] expected {brief(a)}, got {brief(b)}")
                        else:
                            diffs.append(f"{where}: plan.{part} expected {brief(w)}, got {brief(h)}")
            elif want != have:
                diffs.append(f"{where}: {inert(key, 60)} expected {brief(want)}, got {brief(have)}")
    if len(results) != len(case.steps):
        diffs.append(f"replayed {len(results)} steps, the case has {len(case.steps)}")
    return diffs


def _compare_tensors(where: str, want: Mapping[str, Any], have: Mapping[str, Any], case: Case,
                     diffs: list[str]) -> None:
    def name(k: str) -> str:
        i = int(k)  # keys were checked by parse_case
        return f"tensor {k} {inert(repr(case.tensors[i].name), 60)}"

    for k, w in want.items():
        h = have.get(k)
        if h is None:
            diffs.append(f"{where}: {name(k)} has no data (expected {brief(w)})")
            continue
        for field, wv in w.items():
            if h.get(field) != wv:
                diffs.append(f"{where}: {name(k)} {inert(field, 40)} expected {brief(wv)}, got {brief(h.get(field))}")
    for k in have:
        if k not in want:
            diffs.append(f"{where}: {name(k)} has data but the case lists none ({brief(have[k])})")


def brief(v: Any) -> str:
    """``v`` as short JSON (cut to :data:`BRIEF_CHARS`), or a description when it cannot be shown."""
    try:
        s = json.dumps(v, sort_keys=True)
    except (RecursionError, ValueError, TypeError):
        return show(v)
    return inert(s, BRIEF_CHARS) if len(s) <= BRIEF_CHARS else inert(s[:BRIEF_CHARS - 3], BRIEF_CHARS) + "..."
