"""Trace text made inert for the terminal: no Rich markup, no control sequences.

Tensor names, op names and source paths come from whoever wrote the traced program.
On the way to the screen they must stay *text*: ``[bold]`` must not become bold, an
escape sequence (``\\x1b[31m``) must not reach the terminal, a newline must not break
a table row, a bidi override must not reorder the line. Every string from a trace
that the TUI shows goes through :func:`inert` (a ``str``) or :func:`inert_text`
(a ``rich.text.Text``, which Rich never parses for markup).

    >>> inert("a\\x1b[31mred")
    'a\\\\x1b[31mred'
    >>> inert_text("[bold]x[/]").plain
    '[bold]x[/]'
    >>> inert("x" * 50, 10)
    'xxxxxxxxx…'
"""

from __future__ import annotations

import unicodedata

from rich.text import Text

ELLIPSIS = "\u2026"

# Control (Cc), format (Cf: bidi overrides, zero-width), surrogates (Cs), private use
# (Co), unassigned (Cn) and line/paragraph separators never reach the terminal raw.
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def inert(text: object, max_chars: int | None = None) -> str:
    """``text`` as printable characters only, cut to ``max_chars`` with an ellipsis.

    Unsafe characters become visible escapes (``\\n``, ``\\x1b``, ``\\u202e``); everything
    else, including non-ASCII letters and wide characters, is kept as it is.
    """
    s = str(text)
    if not (s.isascii() and s.isprintable()):
        s = "".join(
            ch if (ch.isascii() and ch.isprintable()) or unicodedata.category(ch) not in _UNSAFE else _escape(ch)
            for ch in s
        )
    if max_chars is not None and len(s) > max_chars:
        s = s[: max(max_chars - 1, 0)] + ELLIPSIS
    return s


def inert_text(text: object, style: str = "", max_chars: int | None = None) -> Text:
    """A ``Text`` holding :func:`inert` of ``text`` with one style (markup never parsed)."""
    return Text(inert(text, max_chars), style=style, no_wrap=True, end="")
