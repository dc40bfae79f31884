"""ggml built with another GGML_MAX_NAME: a struct ggml_tensor of another size whose other
fields are unchanged is read (the size and the name's length come from the library), where
vizalloc refused it before. ggml's libggml-base is built here from the ggml source inside the
ggml-python 0.0.45 sdist (the one the installed wheel was built from) with
-DGGML_MAX_NAME=128, into a cache outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, run
from tests.conformance.build import download

pytestmark = pytest.mark.slow

SDIST = "ggml-python==0.0.45"
C_SOURCES = ("ggml.c", "ggml-alloc.c", "ggml-quants.c")
CXX_SOURCES = ("ggml.cpp", "ggml-backend.cpp", "ggml-backend-meta.cpp", "ggml-opt.cpp", "ggml-threading.cpp",
               "gguf.cpp")


def _cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "vizalloc-tests" / "ggml-max-name-128"


@pytest.fixture(scope="module")
def max_name_program() -> Path:
    out = _cache()
    program = out / "max_name"
    if program.is_file() and (out / "READY").is_file():
        return program
    out.mkdir(parents=True, exist_ok=True)
    sdist = out / "ggml_python-0.0.45.tar.gz"
    if not sdist.is_file():
        download(SDIST, sdist.name, out)
    src = out / "src"
    if not (src / "ggml_python-0.0.45").is_dir():
        with tarfile.open(sdist) as tar:
            tar.extractall(src, filter="data")
    ggml = src / "ggml_python-0.0.45" / "vendor" / "ggml"
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    cxx = shutil.which("c++") or shutil.which("g++")
    assert cc and cxx, "building ggml needs a C and a C++ compiler (apt install g++)"
    flags = ["-O1", "-fPIC", "-DGGML_MAX_NAME=128", '-DGGML_VERSION="0.15.3"', '-DGGML_COMMIT="max-name-128"',
             "-DGGML_BUILD", "-DGGML_SHARED", f"-I{ggml / 'include'}", f"-I{ggml / 'src'}"]
    jobs = [subprocess.Popen([cc, "-std=gnu11", *flags, "-c", str(ggml / "src" / f), "-o", str(out / f"{f}.o")])
            for f in C_SOURCES]
    jobs += [subprocess.Popen([cxx, "-std=gnu++17", *flags, "-c", str(ggml / "src" / f), "-o", str(out / f"{f}.o")])
             for f in CXX_SOURCES]
    assert all(j.wait(timeout=900) == 0 for j in jobs)
    objects = [str(out / f"{f}.o") for f in (*C_SOURCES, *CXX_SOURCES)]
    subprocess.run([cxx, "-shared", "-o", str(out / "libggml-base.so"), *objects, "-lpthread", "-lm"], check=True)
    subprocess.run([cc, "-DGGML_MAX_NAME=128", f"-I{ggml / 'include'}", str(PROGRAMS / "max_name.c"), f"-L{out}",
                    "-lggml-base", f"-Wl,-rpath,{out}", "-o", str(program)], check=True)
    (out / "READY").write_text("")
    return program


def test_a_ggml_with_128_byte_names_is_read(max_name_program: Path, tmp_path: Path) -> None:
    done = run(["run", "-o", "t.vztrace", "--", str(max_name_program)], tmp_path)
    assert done.returncode == 5, done.stderr
    assert "GGML_MAX_NAME 128, tensor 400 bytes, name 82 chars" in done.stdout
    assert "1 allocator calls replayed, 3 placements checked: 0 replay difference(s)" in done.stderr, done.stderr
    assert "INCOMPLETE" not in done.stderr
    events = load(tmp_path / "t.vztrace").events
    names = [e.name for e in events if isinstance(e, ev.TensorCreated)]
    assert "an input whose name is longer than the sixty-four bytes of a default build of ggml" in names
    assert run(["check", "t.vztrace"], tmp_path).returncode == 0
