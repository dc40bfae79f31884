"""The fuzz campaigns of ``tests/capture/fuzz.py`` over the raw capture of a real ggml
program, seeded, in one subprocess whose address space is limited: every hostile variant
is a clear error or an accepted capture with a note (or imports unchanged: damage on bytes
nobody reads); none, in any campaign, imports to another result without a note (every
record carries a check over its place in the file and its bytes), no other exception escapes, no case hangs, and a failed import leaves the process able to
import the next capture. ``VIZALLOC_FUZZ_SCALE`` sizes them (1: about 15 s); ``pytest -s`` prints
the counts per campaign."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.capture import fuzz
from tests.trace.fuzz import ADDRESS_SPACE_LIMIT, ROOT, limited_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the capture and RLIMIT_AS: Linux")


@pytest.fixture(scope="module")
def campaigns() -> dict[str, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "tests.capture.fuzz", "--json", "--limit-as",
                           str(ADDRESS_SPACE_LIMIT)], capture_output=True, text=True, env=limited_env(), cwd=ROOT,
                          timeout=1800)
    assert proc.stdout.strip(), f"the fuzz run died (exit {proc.returncode}): {proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nraw-capture fuzz at scale {result['scale']}, seed {result['seed']}, max RSS "
          f"{result['max_rss_kib'] // 1024} MiB (address space limited to {ADDRESS_SPACE_LIMIT >> 20} MiB):")
    for c in result["campaigns"]:
        print(f"  {c['name']}: {c['cases']} cases -> " + ", ".join(f"{n} {k}" for k, n in sorted(c["outcomes"].items()))
              + f"; {len(c['findings'])} findings")
    return {c["name"]: c for c in result["campaigns"]}


def clean(c: dict[str, Any]) -> None:
    # "accepted, differs" is a finding in every campaign: 0 corrupt captures accepted without a note
    assert not c["findings"], "\n".join(c["findings"][:20])
    assert "accepted, differs" not in c["outcomes"]
    assert c["cases"] > 0


def test_every_truncation_point(campaigns: dict[str, dict[str, Any]]) -> None:
    c = campaigns["truncations"]
    clean(c)
    # a cut inside the header is an error; every other cut imports what came before it, and says so
    assert set(c["outcomes"]) == {"error", "accepted with a note"}


@pytest.mark.parametrize("name", ["absurd lengths", "record kinds"])
def test_structural_damage_is_never_accepted_silently(campaigns: dict[str, dict[str, Any]], name: str) -> None:
    c = campaigns[name]
    clean(c)
    assert c["outcomes"].get("error", 0) > 0.9 * c["cases"]


@pytest.mark.parametrize("name", ["byte flips", "word edits", "tensor struct edits", "colliding ids",
                                  "record shuffles"])
def test_value_damage_is_never_accepted_silently(campaigns: dict[str, dict[str, Any]], name: str) -> None:
    c = campaigns[name]
    clean(c)
    # a changed value or a moved record fails its record's check: nearly every case is an error
    # (the rest fell on bytes after the records' end, which nobody reads, or cut the file)
    assert c["outcomes"].get("error", 0) > 0.9 * c["cases"], c["outcomes"]


def test_the_harness_finds_what_escapes_and_what_is_left_behind(tmp_path: Any) -> None:
    """A damaged capture accepted silently, an exception that is not
    a VizallocError, and an import that spoils the next one are all findings."""
    r = fuzz.Runner.__new__(fuzz.Runner)
    r.data, r.workdir, r.baseline = b"", str(tmp_path), ("baseline",)
    c = fuzz.Campaign("byte flips")
    original = fuzz.import_once
    try:
        fuzz.import_once = lambda data, workdir: (type("R", (), {"notes": [], "mismatches": 0, "cut_at": None})(),
                                                   ("other",))  # type: ignore[assignment]
        r.run(c, "silent", b"x")
        fuzz.import_once = lambda data, workdir: (_ for _ in ()).throw(IndexError("boom"))  # type: ignore[assignment]
        r.run(c, "escaped", b"x")
        r.still_clean(c, "a failed import")
    finally:
        fuzz.import_once = original  # type: ignore[assignment]
    assert [f.split(":")[0] for f in c.findings] == ["silent", "escaped", "after a failed import"]
