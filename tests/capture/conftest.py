"""Real processes under the capture. The capture library is built once per session into a
private cache and named to every process through VIZALLOC_CAPTURE_LIB."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
#: the command line, as a user runs it
VIZALLOC = [sys.executable, "-m", "vizalloc"]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``vizalloc ARGS`` in ``cwd``, its output captured."""
    return subprocess.run([*VIZALLOC, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="session", autouse=True)
def capture_lib(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if not sys.platform.startswith("linux"):
        pytest.skip("the capture needs Linux (LD_PRELOAD); tests/capture/test_platform.py covers the message")
    from vizalloc.capture.build import library_path

    saved = {k: os.environ.get(k) for k in ("XDG_CACHE_HOME", "VIZALLOC_CAPTURE_LIB")}
    os.environ.pop("VIZALLOC_CAPTURE_LIB", None)
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    lib = library_path()  # a missing compiler fails the tests: CI machines have one
    os.environ["VIZALLOC_CAPTURE_LIB"] = str(lib)
    yield lib
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
