"""vizalloc tui TRACE: browse a trace in the terminal.

    vizalloc tui run.vztrace                   # timeline, memory map, tensors, hazards, graph
    vizalloc tui run.vztrace --export-dir out  # where the `e` key writes (default: beside the trace)

Keys: tab / 1-5 switch panes, arrows or hjkl move, enter follows (a step to its memory
map, a hazard to its place, a tensor to its history), / searches, e exports the view
(layout SVG, or DOT/SVG in the graph pane), ? lists every key, q quits. A big trace
shows its timeline while the rest is still being analysed.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from vizalloc.cli.inputs import check_trace_path
from vizalloc.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="a trace file (.vztrace)")
    parser.add_argument("--export-dir", metavar="DIR",
                        help="where the `e` key writes exported views (default: the trace's directory)")


def export_writer(directory: str | os.PathLike[str], stem: str) -> Callable[[str, str], str]:
    """A writer for the TUI's `e` key: ``<directory>/<stem><suffix>``, never overwriting
    (``-1``, ``-2`` ... are added when the name is taken). Returns the path written."""
    base = Path(directory)

    def write(suffix: str, text: str) -> str:
        from vizalloc.files import create_new

        path = base / f"{stem}{suffix}"
        k = 1
        while True:
            try:
                f = create_new(path, text=True)
            except UsageError:
                if not os.path.lexists(path):
                    raise
                path = base / f"{stem}-{k}{suffix}"
                k += 1
                continue
            with f:
                f.write(text)
            return str(path)

    return write


def open_tui(trace_path: str, export_dir: str | None = None) -> int:
    """Run the TUI on a trace file until the user quits (used by `tui`, and `run`/`demo --tui`)."""
    from vizalloc.trace.api import read_header
    from vizalloc.tui.app import VizallocApp

    check_trace_path(trace_path)
    read_header(trace_path)  # a bad file fails here, with the reader's message, before the screen opens
    directory = export_dir if export_dir is not None else (os.path.dirname(os.path.abspath(trace_path)))
    if not os.path.isdir(directory):
        raise UsageError(f"--export-dir {directory!r} is not a directory; create it first")
    stem = Path(trace_path).name.split(".", 1)[0] or "trace"
    VizallocApp(trace_path, export=export_writer(directory, stem)).run()
    return 0


def execute(args: argparse.Namespace) -> int:
    return open_tui(args.trace, args.export_dir)
