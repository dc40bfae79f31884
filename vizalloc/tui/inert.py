"""Trace text made inert for the terminal: no Rich markup, no control sequences.

Tensor names, op names and source paths come from whoever wrote the traced program.
On the way to the screen they must stay *text*: ``[bold]`` must not become bold, an
escape sequence (``\\x1b[31m``) must not reach the terminal, a newline must not break
a table row, a bidi override must not reorder the line. Every string from a trace
that the TUI shows goes through :func:`inert` (a ``str``; the one rule of
:mod:`vizalloc.text`, so a name reads the same on screen as in a DOT or SVG file) or
:func:`inert_text` (a ``rich.text.Text``, which Rich never parses for markup).

    >>> inert("a\\x1b[31mred")
    'a\\\\x1b[31mred'
    >>> inert_text("[bold]x[/]").plain
    '[bold]x[/]'
    >>> inert("x" * 50, 10)
    'xxxxxxxxx…'
"""

from __future__ import annotations

from rich.text import Text

from vizalloc.text import inert

__all__ = ["inert", "inert_text"]


def inert_text(text: object, style: str = "", max_chars: int | None = None) -> Text:
    """A ``Text`` holding :func:`inert` of ``text`` with one style (markup never parsed)."""
    return Text(inert(text, max_chars), style=style, no_wrap=True, end="")
