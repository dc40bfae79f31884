"""Opening a trace file for a command: one wording for a file that is missing, a
directory or unreadable; a trace cut short said plainly (never a raw Python warning
line); a trace cut before its first complete frame refused (there is nothing to check,
and saying "0 events -> ok" would be a lie).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from vizalloc.errors import TraceFormatError, UsageError


_VERBS = {"summary": "summarize", "diff": "compare"}


def check_trace_path(path: str) -> None:
    """Raise ``UsageError`` when ``path`` is not a readable file."""
    if not os.path.exists(path):
        raise UsageError(f"no such trace file: {path}; record one with `vizalloc run -o {path} script.py` "
                         "or `vizalloc demo`")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not a trace file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"cannot read {path}: permission denied")


def load_trace(path: str, command: str) -> Any:
    """``vizalloc.load(path)`` for ``vizalloc COMMAND``.

    A trace without its end record (its writer was killed, or still runs) loads its
    complete frames and ``vizalloc COMMAND: warning: ...`` on stderr says where it is cut
    and how much was read.

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
