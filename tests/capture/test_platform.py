"""Off Linux, ``vizalloc run -- PROGRAM`` says the capture is not supported there yet (it
needs LD_PRELOAD), exits 2 and never starts the program; ``vizalloc run script.py`` still
traces a program on vizalloc's own runtime. The platform is faked in a subprocess
(``sys.platform`` set before vizalloc is imported), with and without a capture library
named by ``VIZALLOC_CAPTURE_LIB``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: ``vizalloc ARGS`` as ``python -m vizalloc`` runs it, on the platform ``sys.argv[1]`` names
FAKED = ("import runpy, sys\n"
         "sys.platform = sys.argv.pop(1)\n"
         "sys.argv[0] = 'vizalloc'\n"
         "runpy.run_module('vizalloc', run_name='__main__', alter_sys=True)\n")


def _run(platform: str, args: list[str], cwd: Path, lib: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if not lib:
        env.pop("VIZALLOC_CAPTURE_LIB", None)
    return subprocess.run([sys.executable, "-c", FAKED, platform, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize(("platform", "name"), [("darwin", "macOS"), ("win32", "Windows"), ("freebsd14", "freebsd14")])
@pytest.mark.parametrize("lib", [True, False], ids=["prebuilt-lib", "no-lib"])
def test_run_of_a_program_is_not_supported_off_linux(tmp_path: Path, platform: str, name: str, lib: bool) -> None:
    marker = tmp_path / "ran"
    done = _run(platform, ["run", "-o", "t.vztrace", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                tmp_path, lib)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"tracing a real ggml program is not supported on {name} yet" in done.stderr, done.stderr
    assert "LD_PRELOAD" in done.stderr and "vizalloc run script.py" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists() and not (tmp_path / "t.vztrace").exists()


def test_a_script_on_vizalloc_s_runtime_still_traces_off_linux(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("from vizalloc.runtime import Context, F32\nContext().new_tensor_1d(F32, 4, 'x')\n")
    done = _run("darwin", ["run", "-o", "s.vztrace", str(script)], tmp_path, lib=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "s.vztrace").stat().st_size > 0
