"""The rich console the commands print their tables on, and the words they count and size with.

On a terminal it is the terminal's width; into a file or a pipe it is as wide as the
tables need, so nothing is cut to 80 columns ("gall…") when the output is saved, or, for
the commands whose tables are made to fit (``summary``, ``diff``: their cells wrap), a
width a reader can take in: ``$COLUMNS``, else ``READABLE_WIDTH``.

    >>> plural(1, "graph"), plural(2, "graph"), plural(1_000, "hazard")
    ('1 graph', '2 graphs', '1,000 hazards')
    >>> sized(4_920_608), sized(1_414_594_560), sized(512)
    ('4,920,608 B (4.7 MiB)', '1,414,594,560 B (1.3 GiB)', '512 B')
"""

from __future__ import annotations

import sys
from typing import Any

#: Width used when stdout is not a terminal: tables take only the width their cells need.
PIPE_WIDTH = 1000
#: Width of tables that wrap their cells, into a file or a pipe without ``$COLUMNS``
READABLE_WIDTH = 120


def stdout_console(*, fits: bool = False) -> Any:
    """A ``rich.console.Console`` on stdout, without highlighting (data is not markup).
    ``fits``: the tables wrap their cells, so into a file or pipe the console is as wide as
    ``$COLUMNS`` says, else ``READABLE_WIDTH``, instead of as wide as the longest cell."""
    import os

    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False)
    width = PIPE_WIDTH
    if fits:
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and 40 <= int(columns) <= PIPE_WIDTH else READABLE_WIDTH
    return Console(highlight=False, width=width)


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, in the plural unless one (``s`` added: the words the commands count)."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def sized(nbytes: int) -> str:
    """Bytes, exactly, and in the binary unit that reads best (GiB past 1 GiB) when 1 KiB or more."""
    from vizalloc.export.units import fmt_bytes

    return f"{nbytes:,} B" + (f" ({fmt_bytes(nbytes)})" if nbytes >= 1024 else "")
