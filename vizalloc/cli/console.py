"""The rich console the commands print their tables on.

On a terminal it is the terminal's width; into a file or a pipe it is as wide as the
tables need, so nothing is cut to 80 columns ("gall…") when the output is saved.
"""

from __future__ import annotations

import sys
from typing import Any

#: Width used when stdout is not a terminal: tables take only the width their cells need.
PIPE_WIDTH = 1000


def stdout_console() -> Any:
    """A ``rich.console.Console`` on stdout, without highlighting (data is not markup)."""
    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else PIPE_WIDTH)
