"""Ctrl-C and closed pipes in every command, handled once in the CLI's entry point.

A reader that leaves early (``vizalloc summary T | head -1``) must end the command quietly
with its usual exit code: on main it exited 1 with no message (rich's broken-pipe exit),
and 1 means "hazards" for ``check``. Here the pipe's reader is gone before the command
writes its first byte, so every write meets the closed pipe. Ctrl-C: a real terminal
(``tests/cli/pty_session.py``), exit 130 at once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vizalloc.scenarios.shared_tensors import run
from vizalloc.trace import api

from tests.cli.pty_session import ROOT, Session


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("traces")
    out = {}
    for strategy in ("none", "dup"):  # "none" has hazards, "dup" none
        path = d / f"{strategy}.vztrace"
        run(strategy, steps=2, seed=0, around_loop=lambda path=path: api.trace(path))
        out[strategy] = path
    return out


def into_closed_pipe(args: list[str], cwd: Path) -> tuple[int, str]:
    read, write = os.pipe()
    os.close(read)  # the reader has left before the first byte
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, "-m", "vizalloc", *args], stdout=write, stderr=subprocess.PIPE,
                              cwd=cwd, env=env, text=True, timeout=300)
    finally:
        os.close(write)
    return done.returncode, done.stderr


@pytest.mark.parametrize(("args", "code"), [
    (["summary", "{none}"], 0),
    (["summary", "--json", "{none}"], 0),
    (["check", "{none}"], 1),   # hazards: still 1, for the hazards
    (["check", "{dup}"], 0),    # none: 0, not 1
    (["explain", "{none}"], 0),
    (["diff", "{none}", "{dup}"], 1),
    (["export", "--format", "json", "-o", "-", "{none}"], 0),
], ids=lambda v: v if isinstance(v, int) else " ".join(v)[:40])
def test_a_closed_pipe_ends_quietly_with_the_command_s_own_code(traces: dict[str, Path], tmp_path: Path,
                                                                args: list[str], code: int) -> None:
    words = [a.format(**{k: str(v) for k, v in traces.items()}) for a in args]
    done = subprocess.run([sys.executable, "-m", "vizalloc", *words], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])),
                          timeout=300)
    assert done.returncode == code, done.stderr  # what it ends with when the output is read
    got, stderr = into_closed_pipe(words, tmp_path)
    assert (got, stderr) == (code, "")


LOOP = textwrap.dedent("""
    import time
    from vizalloc.runtime import Context, F32
    ctx = Context(name="loop")
    print("looping", flush=True)
    while True:
        ctx.new_tensor_1d(F32, 4)
        time.sleep(0.01)
""")


def test_ctrl_c_stops_a_traced_script_at_once(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    s = Session.vizalloc(["run", "-o", "t.vztrace", "loop.py"], tmp_path)
    s.wait_for("looping", 60)
    s.ctrl_c()
    assert s.finish(60) == 130, s.text
    assert "interrupted" in s.text and "Traceback" not in s.text
