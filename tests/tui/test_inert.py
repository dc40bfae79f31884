"""Names from a trace are shown inert: no markup, no control sequences."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.text import Text

from vizalloc.tui.inert import inert, inert_text
from vizalloc.tui.render import fit_cell

HOSTILE = [
    "[bold]x[/bold]", "[link=http://evil]click[/link]", "\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "a\nb\rc\td",
    "\u202egnp.exe", "zero\u200bwidth", "\x00nul", "\ud800lone", "\u5f35\u91cf", "x" * 10_000, ":emoji:",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_inert_has_no_control_characters(name: str) -> None:
    s = inert(name)
    assert s.isprintable() or all(ch.isprintable() for ch in s)
    assert "\x1b" not in s and "\n" not in s and "\u202e" not in s and "\x00" not in s


@pytest.mark.parametrize("name", HOSTILE)
def test_inert_text_renders_literally(name: str) -> None:
    console = Console(color_system="truecolor", width=20_000, force_terminal=True, emoji=True, markup=True)
    with console.capture() as cap:
        console.print(inert_text(name))
    out = cap.get()
    # the only escape sequences are Rich's own style codes, never the name's
    assert "\x1b]" not in out and "\x1b[31m" not in out
    if name.startswith("[bold]"):
        assert "[bold]x[/bold]" in out and "\x1b[1m" not in out
    if name == ":emoji:":
        assert ":emoji:" in out


def test_inert_escapes_are_visible() -> None:
    assert inert("a\nb") == "a\\nb"
    assert inert("\x1b[31m") == "\\x1b[31m"
    assert inert("\u202e") == "\\u202e"
    assert inert("\u5f35\u91cf") == "\u5f35\u91cf"  # printable wide characters stay


def test_inert_cuts_long_names() -> None:
    s = inert("y" * 500, 40)
    assert len(s) == 40 and s.endswith("\u2026")


def test_inert_text_is_a_text_without_markup() -> None:
    t = inert_text("[red]boom[/red]", "bold")
    assert isinstance(t, Text) and t.plain == "[red]boom[/red]" and not t.spans


def test_fit_cell_counts_wide_characters() -> None:
    from rich.cells import cell_len

    assert cell_len(fit_cell("\u5f35\u91cf\u5f35\u91cf", 5)) == 5
    assert fit_cell("ab", 4, right=True) == "  ab"
    assert fit_cell("abcdef", 4) == "abc\u2026"
