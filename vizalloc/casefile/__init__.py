"""Graph case files (the golden corpus format ``vizalloc-golden/1``): read one, replay it
through vizalloc's allocators, compare the results with what real ggml recorded.

    >>> import json
    >>> from vizalloc.casefile import parse_case, replay_case, compare_results
    >>> case = parse_case(open("tests/data/golden/ew01_unary_chain_inplace.json").read())  # doctest: +SKIP
    >>> compare_results(case, replay_case(case))                                            # doctest: +SKIP
    []

* :mod:`~vizalloc.casefile.parse` — every field checked (``CaseFormatError`` naming it);
* :mod:`~vizalloc.casefile.replay` — rebuild the tensors, run the steps, one result per step;
* :mod:`~vizalloc.casefile.overlaps` — the harness's liveness overlap analysis of a step;
* :mod:`~vizalloc.casefile.compare` — every difference from the recorded results.

Case files are not runtime: they drive the runtime from outside, as a test harness or the
``vizalloc plan`` command does, so this package sits beside ``replay`` (it may use the
runtime, the trace seam and the analysis' liveness rule; nothing below imports it). Only
the CLI and tests open files; these modules take JSON text or parsed values.
"""

from __future__ import annotations

from vizalloc.casefile.compare import compare_results
from vizalloc.casefile.parse import FORMAT, Case, CaseStep, decode_case, parse_case
from vizalloc.casefile.replay import CaseReplay, replay_case

__all__ = ["FORMAT", "Case", "CaseReplay", "CaseStep", "compare_results", "decode_case", "parse_case", "replay_case"]
