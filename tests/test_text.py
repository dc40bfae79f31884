"""vizalloc.text.inert: the one rule that makes names and messages inert everywhere."""

from __future__ import annotations

import ast
import time
import unicodedata
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from vizalloc.text import inert, inert_lines

PACKAGE = Path(__file__).resolve().parent.parent / "vizalloc"
UNSAFE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def test_controls_surrogates_and_bidi_become_visible_escapes() -> None:
    assert inert("a\nb\x00c\u202ed\ud800") == "a\\nb\\x00c\\u202ed\\ud800"
    assert inert("\x1b]0;owned\x07\x1b[2J") == "\\x1b]0;owned\\x07\\x1b[2J"
    assert inert("\x9b31m\x7f") == "\\x9b31m\\x7f"  # C1 CSI and DEL
    assert inert("tag\U000e0041") == "tag\\U000e0041"
    assert inert("caf\u00e9 \u4e2d") == "caf\u00e9 \u4e2d"  # printable non-ASCII stays
    assert inert(42) == "42"


def test_bidi_override_cannot_reorder_what_follows() -> None:
    # "\u202egnp.exe" would show as "exe.png" in a terminal; inert shows the override itself
    shown = inert("photo\u202egnp.exe")
    assert shown == "photo\\u202egnp.exe"
    assert all(unicodedata.bidirectional(ch) not in ("RLO", "LRO", "RLE", "LRE", "RLI", "LRI", "FSI", "PDF", "PDI")
               for ch in shown)


def test_cut_with_an_ellipsis_counting_escapes() -> None:
    assert inert("abcdef", 4) == "abc\u2026"
    assert inert("\x1b\x1b\x1b", 5) == "\\x1b\u2026"
    assert inert("abc", 3) == "abc"


def test_a_huge_text_costs_only_what_is_kept() -> None:
    huge = "\u202e" * 20_000_000
    start = time.process_time()
    out = inert(huge, 80)
    assert len(out) == 80
    assert time.process_time() - start < 1.0  # a look at 81 characters, not 20 million


def test_inert_lines_keeps_line_breaks_only() -> None:
    assert inert_lines("a\x1b[2J\nb\rc") == "a\\x1b[2J\nb\\rc"


@given(st.text())
def test_result_is_printable_and_idempotent(text: str) -> None:
    out = inert(text)
    assert all(unicodedata.category(ch) not in UNSAFE for ch in out)
    out.encode("utf-8")  # no lone surrogate left: printing cannot fail
    assert inert(out) == out


def test_no_private_copy_of_the_rule() -> None:
    """The drifting copies (``isprintable`` with ``\\x`` escapes) are gone: one definition."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "text.py" and path.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "isprintable":
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr == "category" and \
                    isinstance(node.value, ast.Name) and node.value.id == "unicodedata":
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []
