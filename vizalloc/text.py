"""Text from data, made inert: the one rule for showing a name anywhere.

Tensor, buffer-type, context and backend names, case-file descriptions, source paths and
messages come from whoever wrote the traced program or the file. On their way to a
terminal, a TUI, a DOT, SVG or Perfetto file they must stay *text*: an escape sequence
(``ESC]0;title``, ``ESC[2J``) must not reach the terminal, a newline must not break a
table row or a DOT line, a bidi override (U+202E) must not reorder what follows it, a lone
surrogate must not make printing fail. Every output passes such text through
:func:`inert`; the exporters then add their own quoting (``vizalloc.export.escape``), the
TUI its Rich ``Text`` (``vizalloc.tui.inert``).

The rule: control and format characters (Unicode categories Cc, Cf: ``\\n``, ``\\x1b``,
C1 controls, U+202E, zero-width joiners), surrogates, private-use and unassigned code
points and line/paragraph separators become visible escapes (``\\n``, ``\\x1b``,
``\\u202e``, ``\\U000e0001``); everything else, non-ASCII letters and wide characters
included, is kept. The result holds printable characters only, so it reads the same on
screen as in a file, and ``inert(inert(s)) == inert(s)``. Long text is cut to
``max_chars`` with an ellipsis, and only the part kept is ever looked at, so a 50 MB
description costs no more than its first ``max_chars`` characters.

This module sits at the package root and imports nothing from vizalloc, so every layer
(runtime error messages, analysis reports, exporters, TUI, CLI) uses the same rule.

    >>> inert("a\\x1b]0;owned\\x07b")
    'a\\\\x1b]0;owned\\\\x07b'
    >>> inert("abc\\u202edef")
    'abc\\\\u202edef'
    >>> inert("x" * 50, 10)
    'xxxxxxxxx…'
"""

from __future__ import annotations

import unicodedata

ELLIPSIS = "\u2026"

# General categories that must never reach a renderer as raw characters:
# control (Cc), format (Cf: bidi overrides, zero-width joiners), surrogates (Cs),
# line/paragraph separators (Zl, Zp), private use (Co) and unassigned (Cn) code points.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_C_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(ch: str) -> str:
    esc = _C_ESCAPES.get(ch)
    if esc is not None:
        return esc
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def inert(text: object, max_chars: int | None = None) -> str:
    """``text`` as printable characters only, cut to ``max_chars`` with an ellipsis.

    Args:
        text: a string (anything else is shown as ``str(text)``).
        max_chars: the most characters kept, escapes counted, the ellipsis included;
            ``None`` keeps everything.

    Returns:
        Text made only of printable characters (spaces included).
    """
    s = text if isinstance(text, str) else str(text)
    if max_chars is not None and len(s) > max_chars:
        # every character becomes at least one, so nothing past here can be kept
        s = s[: max_chars + 1]
    # plain ASCII (nearly every name) needs no per-character look-up
    if not (s.isascii() and s.isprintable()):
        s = "".join(
            ch if (ch.isascii() and ch.isprintable()) or unicodedata.category(ch) not in _UNSAFE_CATEGORIES
            else _visible(ch)
            for ch in s
        )
    if max_chars is not None and len(s) > max_chars:
        s = s[: max(max_chars - 1, 0)] + ELLIPSIS
    return s


def inert_lines(text: str, max_chars: int | None = None) -> str:
    """Multi-line text (a report) with each line made :func:`inert`; the line breaks stay."""
    return "\n".join(inert(line, max_chars) for line in text.split("\n"))
