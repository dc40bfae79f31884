"""The fuzz campaigns of ``tests/trace/fuzz.py``, seeded, in one subprocess whose address
space is limited: every hostile variant of a small trace loads (maybe a prefix) or is a
``VizallocError``, nothing else escapes, and no case needs more memory than the limit.

``VIZALLOC_FUZZ_SCALE`` sizes the campaigns (1: a few seconds; 20 for a long run);
``pytest -s`` prints the counts per campaign.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.trace import fuzz

ROOT = fuzz.ROOT
ADDRESS_SPACE_LIMIT = fuzz.ADDRESS_SPACE_LIMIT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as Linux counts it")


@pytest.fixture(scope="module")
def campaigns() -> dict[str, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "tests.trace.fuzz", "--json", "--limit-as", str(ADDRESS_SPACE_LIMIT)],
                          capture_output=True, text=True, env=fuzz.limited_env(), cwd=ROOT, timeout=1800)
    assert proc.stdout.strip(), f"the fuzz run died (exit {proc.returncode}): {proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nfuzz at scale {result['scale']}, seed {result['seed']}, max RSS {result['max_rss_kib'] // 1024} MiB "
          f"(address space limited to {ADDRESS_SPACE_LIMIT >> 20} MiB):")
    for c in result["campaigns"]:
        print(f"  {c['name']}: {c['cases']} cases -> "
              + ", ".join(f"{n} {k}" for k, n in sorted(c["outcomes"].items())))
    return {c["name"].split(" (")[0]: c for c in result["campaigns"]}


def _clean(c: dict[str, Any]) -> None:
    assert not c["findings"], "\n".join(c["findings"][:20])
    assert c["cases"] > 0


def test_every_truncation_point(campaigns: dict[str, dict[str, Any]]) -> None:
    c = campaigns["truncations"]
    _clean(c)
    # a cut inside the header is an error; every later cut loads its complete frames
    assert c["outcomes"].get("TraceFormatError", 0) > 1000 and c["outcomes"].get("loaded a prefix", 0) > 1000


def test_byte_flips(campaigns: dict[str, dict[str, Any]]) -> None:
    c = campaigns["byte flips"]
    _clean(c)
    assert c["outcomes"].get("TraceFormatError", 0) >= 0.95 * c["cases"]  # the CRCs catch them


def test_frame_edits_with_recomputed_crcs(campaigns: dict[str, dict[str, Any]]) -> None:
    c = campaigns["frame edits"]
    _clean(c)
    assert c["outcomes"].get("TraceFormatError", 0) > 0.5 * c["cases"]


def test_content_edits_through_analysis_and_exports(campaigns: dict[str, dict[str, Any]]) -> None:
    _clean(campaigns["content edits"])


def test_absurd_lengths(campaigns: dict[str, dict[str, Any]]) -> None:
    c = campaigns["absurd lengths"]
    _clean(c)
    assert set(c["outcomes"]) <= {"TraceFormatError", "loaded a prefix"}


def test_decompression_bombs(campaigns: dict[str, dict[str, Any]]) -> None:
    c = campaigns["decompression bombs"]
    _clean(c)
    assert c["outcomes"] == {"TraceFormatError": c["cases"]}


def test_the_harness_finds_what_escapes() -> None:
    """The harness itself: an exception other than a VizallocError is a finding."""
    c = fuzz.Campaign("x")
    c.run("not a trace", b"garbage")
    assert c.outcomes == {"TraceFormatError": 1} and not c.findings
    original = fuzz.read_trace

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise IndexError("boom")

    fuzz.read_trace = broken  # type: ignore[assignment]
    try:
        c.run("broken reader", b"garbage")
    finally:
        fuzz.read_trace = original
    assert c.findings and "IndexError" in c.findings[0]
