"""Tensors that keep a pointer into a buffer ggml freed, under the capture: the program must
run exactly as it does alone (the capture never touches the freed buffer object), and the
trace must say where the stale pointers point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.capture.conftest import PROGRAMS, VIZALLOC


def test_a_changed_tensor_with_a_freed_buffer_is_recorded_without_touching_the_buffer(tmp_path: Path) -> None:
    program = [sys.executable, str(PROGRAMS / "stale_after_free.py")]
    alone = subprocess.run(program, capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0 and alone.stdout == "second allocation True\n", alone.stderr
    # the renamed tensor is snapshotted again while its buffer field names the freed buffer:
    # describing that buffer through ggml's accessors would call through freed memory
    traced = subprocess.run([*VIZALLOC, "run", "-o", "t.vztrace", "--", *program], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert (traced.returncode, traced.stdout) == (alone.returncode, alone.stdout), traced.stderr
    assert "0 replay difference(s)" in traced.stderr
    check = subprocess.run([*VIZALLOC, "check", "--json", "t.vztrace"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    hazards = json.loads(check.stdout)["hazards"]
    # both tensors stay in the buffer the first allocator placed them in, which was freed
    dangling = {h["tensor"]["name"]: h["tensor"]["buffer_id"] for h in hazards if h["kind"] == "dangling"}
    assert dangling == {"a_renamed": 0, "f": 0}
    assert {h["kind"] for h in hazards} == {"dangling"}
