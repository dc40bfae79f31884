"""Making tensor names inert in DOT and SVG/XML output.

Tensor names are data, written by whoever built the graph: they may hold quotes,
``<script>``, newlines, braces, backslashes, bidi overrides, lone surrogates or ten
kilobytes of text. Every exporter passes them through this module, never through an
f-string alone. The rules, per target:

* :func:`vizalloc.text.inert` first (the one rule every output uses): control and format
  characters (``\\n``, ``\\x00``, U+202E) and lone surrogates become visible
  ``\\xNN``/``\\uNNNN`` escapes, and long names are cut with an ellipsis. What is left is
  printable text. DOT text is always cut (:data:`DOT_TEXT_CHARS` when the caller gives no
  limit): Graphviz refuses strings over 16,384 bytes.
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
"""

from __future__ import annotations

from collections.abc import Iterable

from vizalloc.text import inert

#: Longest name shown in a label; the full (escaped) name goes into the tooltip.
LABEL_CHARS = 40
#: Longest line of a label that holds a name among other text (buffer, backend, legend rows).
LINE_CHARS = 100
#: Longest text put into one tooltip line.
TOOLTIP_CHARS = 300
#: Longest piece of text put into a DOT string when the caller gives no limit. Graphviz
#: refuses a quoted string or an HTML text run over 16,384 bytes; a character can take
#: up to 10 bytes once escaped (``\\U0001f600``, ``&#128512;``), so 1,000 stays under it.
DOT_TEXT_CHARS = 1000
#: Most bytes of one DOT quoted string of several lines (a tooltip); lines past it are
#: summarised as "... N more lines".
DOT_STRING_BYTES = 12000


def _entity_non_ascii(s: str) -> str:
    return "".join(ch if ord(ch) < 0x80 else f"&#{ord(ch)};" for ch in s)


def _dot_limit(max_chars: int | None) -> int:
    return DOT_TEXT_CHARS if max_chars is None else min(max_chars, DOT_TEXT_CHARS)


def dot_html(text: str, max_chars: int | None = None) -> str:
    """Text for inside a DOT HTML-like label (``label=<...>``): entities only, pure ASCII."""
    s = inert(text, _dot_limit(max_chars))
    s = (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
         .replace('"', "&quot;").replace("'", "&#39;"))
    return _entity_non_ascii(s)


def _dot_quoted_body(text: str, max_chars: int | None) -> str:
    s = inert(text, _dot_limit(max_chars))
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
    """A DOT quoted string of several lines (joined by DOT's ``\\n`` escape), for tooltips.

    Lines past :data:`DOT_STRING_BYTES` are left out and counted on a last line.
    """
    parts: list[str] = []
    size = 0
    rest = list(lines)
    for i, line in enumerate(rest):
        body = _dot_quoted_body(line, max_chars)
        if parts and size + len(body) + 2 > DOT_STRING_BYTES:
            parts.append(f"... {len(rest) - i} more lines")
            break
        parts.append(body)
        size += len(body) + 2
    return '"' + "\\n".join(parts) + '"'


def xml_escape(text: str, max_chars: int | None = None) -> str:
    """Text for XML/SVG character data or a double- or single-quoted attribute value."""
    s = inert(text, max_chars)
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#39;"))
