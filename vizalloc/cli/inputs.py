"""The trace files the commands read: one check, one wording for every command.

    check_trace_path("run.vztrace")          # raises UsageError (exit 2) when it cannot be read
    trace = load_trace("run.vztrace", "check")

``check``, ``summary``, ``diff``, ``export`` and ``tui`` all call it before reading, so
a missing file, a directory or an unreadable file is reported the same way by each.
``load_trace`` says plainly where a trace cut short (its writer killed, or still
running) is cut and what was read, never as a raw Python warning line, and refuses a
trace cut before its first complete frame (there is nothing to check, and "0 events ->
ok" would be a lie).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from vizalloc.errors import TraceFormatError, UsageError

#: The verb of each command, for "there is nothing to ...".
_VERBS = {"summary": "summarize", "diff": "compare"}


def check_trace_path(path: str) -> None:
    """Raise :class:`UsageError` naming ``path`` and what to do unless it is a readable file."""
    if not os.path.exists(path):
        raise UsageError(f"no trace file at {path}; record one with `vizalloc run -o {path} script.py` "
                         "or `vizalloc demo`")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not a trace file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"cannot read the trace file {path}: permission denied")


def load_trace(path: str, command: str) -> Any:
    """``vizalloc.load(path)`` for ``vizalloc COMMAND``.

    A trace without its end record loads its complete frames, and ``vizalloc COMMAND:
    warning: ...`` on stderr says where it is cut and how much was read.

    Raises:
        UsageError: no such file, a directory, unreadable.
        TraceFormatError: not a trace, damaged, or cut before its first complete frame.
    """
    from vizalloc.trace.api import load
    from vizalloc.trace.fileformat import TraceTruncatedWarning

    check_trace_path(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceTruncatedWarning)
        trace = load(path)
    for w in caught:
        if not isinstance(w.message, TraceTruncatedWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        if w.message.n_frames == 0:
            raise TraceFormatError(f"{w.message}; there is nothing to {_VERBS.get(command, command)} (a trace is "
                                   "readable from its first complete frame on, which its writer appends at its "
                                   "first flush)")
        print(f"vizalloc {command}: warning: {w.message}", file=sys.stderr)
    return trace
