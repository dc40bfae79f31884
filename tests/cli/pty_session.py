"""A command in a pseudo-terminal that is its controlling terminal, as a shell runs it: the
terminal's Ctrl-C (``\\x03``) sends SIGINT to its foreground process group, the command and
every child it started. ``tests/cli/test_terminal.py``'s helper gives a command the
terminal as its streams only, where ``\\x03`` would be a character and no signal."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from pathlib import Path

import vizalloc

ROOT = Path(vizalloc.__file__).resolve().parents[1]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


def _take_terminal() -> None:  # in the child, after setsid: the pty on fd 0 becomes its terminal
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Session:
    """``argv`` started in a new session whose controlling terminal is a fresh pty (80x24)."""

    def __init__(self, argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        base = dict(os.environ if env is None else env)
        base.update(TERM="xterm-256color", PYTHONPATH=os.pathsep.join([str(ROOT), base.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=base,
                                     start_new_session=True, preexec_fn=_take_terminal, close_fds=True)
        os.close(slave)
        self.master = master
        self.raw = b""

    @classmethod
    def vizalloc(cls, args: Sequence[str], cwd: Path) -> Session:
        return cls([sys.executable, "-m", "vizalloc", *args], cwd)

    @property
    def text(self) -> str:
        return _ANSI.sub("", self.raw.decode("utf-8", "replace").replace("\r\n", "\n"))

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: no process holds the terminal any more
            return False
        self.raw += data
        return bool(data)

    def wait_for(self, text: str, timeout: float) -> None:
        """Read until ``text`` has been written (AssertionError after ``timeout`` s or at its end)."""
        deadline = time.monotonic() + timeout
        while text not in self.text:
            if time.monotonic() > deadline or (not self._read(0.2) and text not in self.text):
                raise AssertionError(f"{text!r} never appeared; the terminal shows:\n{self.text[-3000:]}")

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def finish(self, timeout: float) -> int:
        """The exit code once it has ended (killed after ``timeout`` s: AssertionError)."""
        deadline = time.monotonic() + timeout
        try:
            while self.proc.poll() is None:
                if time.monotonic() > deadline:
                    os.killpg(self.proc.pid, 9)
                    raise AssertionError(f"still running {timeout} s later; the terminal shows:\n{self.text[-3000:]}")
                self._read(0.2)
            while self._read(0.1):
                pass
            return self.proc.wait()
        finally:
            os.close(self.master)
