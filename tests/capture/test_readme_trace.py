"""The README's "Trace a real ggml program" commands run as written, in bash, line by line
in one shell (its variables carry over), in a scratch directory that sees this
repository's ``tests/`` (the commands run from the repository's root). ``pip install``
lines are not run (the test environment has the packages); ``vizalloc tui`` needs a
terminal, so only its trace is checked. ``vizalloc`` and ``python`` are this interpreter's.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
REPO = README.parent


def section_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Trace a real ggml program\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```bash\n(.*?)```", text[start:end], re.S)


def run_block(block: str, cwd: Path, bin_dir: Path) -> list[tuple[str, int, str]]:
    """Each command line with its exit code and its output (stdout and stderr)."""
    lines = [line for line in block.strip().splitlines() if line.strip()]
    script = ["exec 3>rc"]
    for i, line in enumerate(lines):
        words = shlex.split(line, comments=True)
        if words[:2] in (["pip", "install"], ["vizalloc", "tui"]):
            script.append(f"echo {i} skipped >&3")
            continue
        script.append(f"{{ {line}\n}} >out.{i} 2>&1; echo {i} $? >&3")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env, check=True, timeout=900)
    results = []
    for entry in (cwd / "rc").read_text().splitlines():
        i, rc = entry.split()
        out = (cwd / f"out.{i}").read_text() if rc != "skipped" else ""
        results.append((lines[int(i)], -1 if rc == "skipped" else int(rc), out))
    return results


def test_the_trace_a_real_ggml_program_commands_run_as_written(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in (("vizalloc", f'exec {shlex.quote(sys.executable)} -m vizalloc "$@"'),
                         ("python", f'exec {shlex.quote(sys.executable)} "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{target}\n")
        (bin_dir / name).chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "tests").symlink_to(REPO / "tests")
    llama, programs = section_blocks()

    ran = {line.split("#")[0].strip(): (rc, out) for line, rc, out in run_block(llama, work, bin_dir)}
    run_line = next(line for line in ran if line.startswith("vizalloc run"))
    rc, out = ran[run_line]
    assert rc == 0, out[-3000:]
    # llama.cpp's own line, and vizalloc's of the same buffer
    assert "sched_reserve:        CPU compute buffer size =    94.27 MiB" in out
    assert "CPU compute buffer: 98,848,800 bytes (94.27 MiB) planned by the replay, the same as the process " \
           "allocated" in out
    assert re.search(r"placements checked: 0 replay difference\(s\)", out)
    assert ran["vizalloc check gemma.vztrace"][0] == 0, ran["vizalloc check gemma.vztrace"][1][-2000:]
    assert (work / "gemma.layout.svg").stat().st_size > 0
    rc, out = ran["vizalloc export gemma.vztrace --format layout"]
    # the prompt (4 tokens: the graph that places the most bytes once every view ggml
    # re-initialises is replayed as ggml does), on the second worst-case plan
    assert rc == 0 and "drew graph #9 binding #2, plan #2" in out, out
    rc, out = ran["vizalloc explain gemma.vztrace"]
    assert rc == 0 and "CPU compute buffer: 98,848,800 B = 94.27 MiB" in out and "kq-" in out, out[-2000:]
    assert ran["vizalloc tui gemma.vztrace"][0] == -1 and (work / "gemma.vztrace").stat().st_size > 0

    results = run_block(programs, work, bin_dir)
    codes = [rc for _, rc, _ in results]
    assert codes == [0, 0, 0, 0, 1], [(line, rc, out[-1500:]) for line, rc, out in results]
    assert "0 replay difference(s)" in results[0][2] and "0 replay difference(s)" in results[3][2]
    assert "stale-overlap" in results[4][2]
