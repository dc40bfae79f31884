"""Making tensor names inert in DOT and SVG/XML output.

Tensor names are data, written by whoever built the graph: they may hold quotes,
``<script>``, newlines, braces, backslashes, bidi overrides, lone surrogates or ten
kilobytes of text. Every exporter passes them through this module, never through an
f-string alone. The rules, per target:

* :func:`printable` first (the TUI's ``vizalloc.tui.inert`` uses it too): control and format characters (``\\n``, ``\\x00``,
  U+202E) and lone surrogates become visible ``\\xNN``/``\\uNNNN`` escapes, and long
  names are cut with an ellipsis. What is left is printable text.
* DOT HTML-like labels (:func:`dot_html`): ``& < > " '`` become entities and every
  non-ASCII character a numeric reference, so the DOT file is pure ASCII. Graphviz
  reads backslashes and braces in HTML labels literally.
* DOT quoted strings (:func:`dot_quoted`, for tooltips): ``\\`` and ``"`` are
  backslash-escaped (Graphviz's escString would otherwise read ``\\N``, ``\\G``, ...),
  ``& < >`` become entities (Graphviz decodes entities in strings), non-ASCII becomes a
  numeric reference, except characters above U+FFFF, shown as ``\\U`` escapes (Graphviz
  2.43 mis-encodes their references in quoted strings).
* XML/SVG text and attributes (:func:`xml_escape`): ``& < > " '`` become entities.

    >>> dot_html('<script>"x"</script>')
    '&lt;script&gt;&quot;x&quot;&lt;/script&gt;'
    >>> dot_quoted('a "b" \\\\ c')
    '"a \\\\"b\\\\" \\\\\\\\ c"'
    >>> printable("line1\\nline2")
    'line1\\\\nline2'
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

#: Longest name shown in a label; the full (escaped) name goes into the tooltip.
LABEL_CHARS = 40
#: Longest text put into one tooltip line.
TOOLTIP_CHARS = 300
ELLIPSIS = "\u2026"

# General categories that must never reach a renderer as raw characters:
# control (Cc), format (Cf: bidi overrides, zero-width joiners), surrogates (Cs),
# line/paragraph separators (Zl, Zp), private use and unassigned code points.
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


def printable(text: str, max_chars: int | None = None) -> str:
    """Replace unsafe characters by visible escapes and cut to ``max_chars``.

    Args:
        text: any string (a tensor name).
        max_chars: the most characters kept (before escaping for a target); longer
            text ends with an ellipsis. ``None`` keeps everything.

    Returns:
        Text made only of printable characters (spaces included).
    """
    s = text
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


def _entity_non_ascii(s: str) -> str:
    return "".join(ch if ord(ch) < 0x80 else f"&#{ord(ch)};" for ch in s)


def dot_html(text: str, max_chars: int | None = None) -> str:
    """Text for inside a DOT HTML-like label (``label=<...>``): entities only, pure ASCII."""
    s = printable(text, max_chars)
    s = (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
         .replace('"', "&quot;").replace("'", "&#39;"))
    return _entity_non_ascii(s)


def _dot_quoted_body(text: str, max_chars: int | None) -> str:
    s = printable(text, max_chars)
    # Graphviz 2.43 turns numeric references above U+FFFF in quoted strings into invalid
    # UTF-8 (HTML labels are fine), so those characters are shown as \U escapes instead.
    s = "".join(f"\\U{ord(ch):08x}" if ord(ch) > 0xFFFF else ch for ch in s)
    s = (s.replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;")
         .replace("<", "&lt;").replace(">", "&gt;"))
    return _entity_non_ascii(s)


def dot_quoted(text: str, max_chars: int | None = None) -> str:
    """A complete DOT quoted string (with the quotes) holding ``text`` literally."""
    return '"' + _dot_quoted_body(text, max_chars) + '"'


def dot_quoted_lines(lines: Iterable[str], max_chars: int | None = TOOLTIP_CHARS) -> str:
    """A DOT quoted string of several lines (joined by DOT's ``\\n`` escape), for tooltips."""
    return '"' + "\\n".join(_dot_quoted_body(line, max_chars) for line in lines) + '"'


def xml_escape(text: str, max_chars: int | None = None) -> str:
    """Text for XML/SVG character data or a double- or single-quoted attribute value."""
    s = printable(text, max_chars)
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#39;"))
