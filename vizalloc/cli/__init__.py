"""The ``vizalloc`` command: the only place that touches paths and turns errors into exit codes.

Each subcommand lives in its own module ``vizalloc/cli/<name>.py`` that defines
``add_arguments(parser)`` and ``execute(args) -> int``; its docstring is its ``--help``
text, and its one-line help is in ``COMMANDS`` (the one place: ``vizalloc --help`` lists
every command without importing its module). Modules are imported only when their command
runs, so ``vizalloc --help`` stays fast and a missing optional dependency only affects
the command that needs it.

Exit codes: 0 success (and "no hazards"), 1 findings (hazards, plan differences),
2 bad input or usage, 3 an internal error (a bug in vizalloc: the traceback is
printed; never 1, which a CI job would read as findings), 130 interrupted.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import re
import importlib.util
import sys
from collections.abc import Sequence
from typing import Any

from vizalloc.errors import VizallocError
from vizalloc.text import inert_lines

#: The exit code of an exception that is not a ``VizallocError``: a bug in vizalloc.
INTERNAL_ERROR = 3

#: subcommand -> (module, one-line help). The order is the order ``--help`` shows.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("vizalloc.cli.demo", "run the shared-tensor training loop with and without a fix and compare"),
    "run": ("vizalloc.cli.run", "trace a Python script, or a real ggml program after --, into a trace file (like memray run)"),
    "check": ("vizalloc.cli.check", "report hazards in a trace; exit 1 if any (for CI)"),
    "summary": ("vizalloc.cli.summary", "tables of graphs, plans, buffers, peaks and hazards"),
    "diff": ("vizalloc.cli.diff", "compare two traces or two plans"),
    "plan": ("vizalloc.cli.plan", "plan a graph file (golden format) and print or check the offsets"),
    "explain": ("vizalloc.cli.explain", "why a compute buffer is as big as it is: what is live at its peak (a trace, "
                "or a GGUF model via llama.cpp)"),
    "export": ("vizalloc.cli.export", "write DOT, SVG, layout, Perfetto, JSON or MiniMalloc files"),
    "tui": ("vizalloc.cli.tui", "browse a trace in the terminal"),
}


def _available() -> dict[str, str]:
    found = {}
    for name, (module, help_text) in COMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = help_text
    return found


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. With ``only``, just that command's module is imported (the
    others are listed by name and help line), so ``vizalloc check`` does not pay for
    importing the runtime, the TUI or the exporters."""
    parser = argparse.ArgumentParser(
        prog="vizalloc",
        description="Shows and checks where every byte of a ggml-style compute graph lives.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in _available().items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(COMMANDS[name][0])
        p = sub.add_parser(name, help=help_text, description=plain_help(getattr(module, "__doc__", None) or help_text),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def plain_help(doc: str) -> str:
    """A command module's docstring as ``--help`` shows it: reST literals without their
    double backticks (an option or a file name bare, a phrase in single backticks).

        >>> plain_help("``--shadow`` replays, like ``memray run``")
        '--shadow replays, like `memray run`'
    """
    return re.sub(r"``([^`]+)``", lambda m: m.group(1) if " " not in m.group(1) else f"`{m.group(1)}`", doc)


class _VersionAction(argparse.Action):
    """``--version``, as argparse's own action prints it, but looked up only when asked
    for: reading the installed package's metadata would cost every command its time."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, nargs=0,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        sys.stdout.write(_version() + "\n")
        parser.exit()


def _version() -> str:
    try:
        from importlib.metadata import version

        return f"vizalloc {version('vizalloc')}"
    except Exception:
        return "vizalloc (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    Two ways a user ends a command are handled here, once for every command: Ctrl-C (and
    SIGTERM/SIGHUP while a program runs under ``vizalloc run`` or ``explain MODEL``) stops
    it at once with ``128 + N`` (130), and a reader that closes the pipe early
    (``vizalloc summary T | head -1``) ends its output quietly: what the command writes
    afterwards is dropped and it ends with its usual exit code (``check``: 1 only for findings).
    """
    guards = _PipeGuard.install()
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # Ctrl-C before or after the command's own work
        return _interrupted(exc)
    finally:
        for name, _ in guards:
            getattr(sys, name).flush()  # what is buffered, while a closed pipe is still caught
        _PipeGuard.remove(guards)


def _interrupted(exc: KeyboardInterrupt) -> int:
    import signal

    number = getattr(exc, "signum", signal.SIGINT)
    try:
        print("interrupted" if number == signal.SIGINT else f"stopped by signal {number}", file=sys.stderr)
    except OSError:
        pass
    return 128 + int(number)


class _PipeGuard:
    """``sys.stdout`` / ``sys.stderr`` for a command: when the reader of a pipe has gone
    (EPIPE), the stream's descriptor is pointed at /dev/null and the write reports success,
    so the command finishes as it would have and returns its own exit code; nothing more
    reaches the pipe and no traceback or "Exception ignored" is printed."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @classmethod
    def install(cls) -> list[tuple[str, Any]]:
        """Guard the process's own stdout and stderr (not a test's captured streams)."""
        saved = []
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and stream is getattr(sys, f"__{name}__"):
                saved.append((name, stream))
                setattr(sys, name, cls(stream))
        return saved

    @staticmethod
    def remove(saved: list[tuple[str, Any]]) -> None:
        for name, stream in saved:
            setattr(sys, name, stream)

    def _closed(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()
            try:
                self._stream.flush()  # what was buffered goes to /dev/null
            except OSError:
                pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=_chosen(words))
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args._module.execute(args))
    except VizallocError as exc:
        # a message may quote names and paths from the file or the program: shown inert
        print(f"vizalloc {args.command}: error: {inert_lines(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BrokenPipeError:  # a write that went around the guards (a binary stream): the reader left
        return 0
    except MemoryError:
        print(f"vizalloc {args.command}: error: out of memory: this process may not use the memory the command "
              "needs (what it holds grows with the tensors and placements the trace keeps alive, not with its "
              "length); free memory, raise the process' limit, or run it on a bigger machine", file=sys.stderr)
        return 2
    except Exception:  # a bug, not the input: say so, and never exit 1 ("findings")
        import traceback

        traceback.print_exc()
        print(f"vizalloc {args.command}: internal error: this is a bug in vizalloc, not in the input; please "
              "report it with the traceback above", file=sys.stderr)
        return INTERNAL_ERROR


#: what commands handed to ``keep_until_exit``; set by ``run_main``: the process ends when ``main`` returns
_kept: list[Any] = []
_process_ends = False


def keep_until_exit(*objects: Any) -> None:
    """Hold a command's large results until the process ends.

    Under ``run_main`` a FAST_EXIT command's process ends with ``os._exit``, which gives
    back all its memory at once: freeing 100,000s of objects one by one as the command
    returns would only take time. They are frozen too (``gc.freeze``), so the cyclic
    collector, back on after the command's work, never traverses them. Where ``main``
    runs in a longer-lived process (a test), nothing is held.
    """
    if _process_ends:
        _kept.extend(objects)
        gc.freeze()


def run_main() -> None:
    """Console-script entry point.

    Commands that only read files (``FAST_EXIT = True`` in their module: check, summary,
    diff, export, plan) end the process without freeing their objects one by one, which
    takes about half a second after analysing a 2M-event trace. Commands that run user
    code (run, demo, tui) exit normally so the program's ``atexit`` handlers still run.
    """
    global _process_ends
    _process_ends = True  # what is kept goes with the process (os._exit, or the interpreter's exit)
    code = main()
    module = sys.modules.get(COMMANDS.get(_chosen(sys.argv[1:]) or "", ("", ""))[0])
    if getattr(module, "FAST_EXIT", False):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:  # `vizalloc check T | head`: the reader left, nothing to lose
            pass
        os._exit(code)
    raise SystemExit(code)
