"""The trace files the commands read: one check, one wording for every command.

    check_trace_path("run.vztrace")   # raises UsageError (exit 2) when it cannot be read

``check``, ``summary``, ``diff``, ``export`` and ``tui`` all call it before reading, so
a missing file, a directory or an unreadable file is reported the same way by each.
"""

from __future__ import annotations

import os

from vizalloc.errors import UsageError


def check_trace_path(path: str) -> None:
    """Raise :class:`UsageError` naming ``path`` and what to do unless it is a readable file."""
    if not os.path.exists(path):
        raise UsageError(f"no trace file at {path}; record one with `vizalloc run -o {path} script.py` "
                         "or `vizalloc demo`")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not a trace file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"cannot read the trace file {path}: permission denied")
