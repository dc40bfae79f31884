"""Building the capture library: the C source inside the package, compiled on first use.

``pip install`` never needs a compiler: the library is compiled the first time a real
program is traced, with the system C compiler (``$CC``, else ``cc``, ``gcc`` or
``clang``), into a per-user cache (``$XDG_CACHE_HOME/vizalloc/capture``, default
``~/.cache/vizalloc/capture``). The file name carries a hash of the source and the
compiler, so an upgraded vizalloc or another compiler builds afresh and two vizalloc
versions never share a stale library. ``VIZALLOC_CAPTURE_LIB`` names a prebuilt library
instead, for machines without a compiler (build it elsewhere with the command
``compile_command`` gives).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from vizalloc.errors import VizallocError


class CaptureError(VizallocError):
    """Tracing a real ggml program is not possible here (platform, compiler, program)."""


SOURCE_NAME = "interpose.c"
FLAGS = ("-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread")
LIBS = ("-ldl",)


def check_platform() -> None:
    """Only Linux can be traced today (LD_PRELOAD and the ELF dynamic linker)."""
    if sys.platform.startswith("linux"):
        return
    what = {"darwin": "macOS", "win32": "Windows", "cygwin": "Windows"}.get(sys.platform, sys.platform)
    raise CaptureError(
        f"tracing a real ggml program is not supported on {what} yet: vizalloc's capture needs Linux's "
        "LD_PRELOAD (on macOS it would need DYLD_INSERT_LIBRARIES, on Windows another mechanism entirely); "
        "programs written against vizalloc's own runtime can still be traced with `vizalloc run script.py`"
    )


def source() -> bytes:
    return (resources.files("vizalloc.capture") / "native" / SOURCE_NAME).read_bytes()


def find_compiler() -> str:
    """The C compiler to use, or a CaptureError saying what to install."""
    wanted = os.environ.get("CC")
    candidates = [wanted] if wanted else ["cc", "gcc", "clang"]
    for name in candidates:
        path = shutil.which(name) if name else None
        if path:
            return path
    raise CaptureError(
        "vizalloc needs a C compiler to build its capture library (once, into a cache) and found none"
        + (f" (CC={wanted!r} is not on PATH)" if wanted else " (tried cc, gcc, clang)")
        + ": install one (Debian/Ubuntu: apt install gcc; Fedora: dnf install gcc; Alpine: apk add gcc musl-dev) "
        "or set CC; or point VIZALLOC_CAPTURE_LIB at a library built on another machine"
    )


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vizalloc" / "capture"


def compile_command(compiler: str, src: str, out: str) -> list[str]:
    return [compiler, *FLAGS, "-o", out, src, *LIBS]


def _compiler_identity(compiler: str) -> bytes:
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, timeout=30, check=False)
        return done.stdout[:4096]
    except (OSError, subprocess.SubprocessError):
        return compiler.encode()


def library_path() -> Path:
    """The capture library, compiled now if this source and compiler have no cached build."""
    check_platform()
    prebuilt = os.environ.get("VIZALLOC_CAPTURE_LIB")
    if prebuilt:
        if not os.path.isfile(prebuilt):
            raise CaptureError(f"VIZALLOC_CAPTURE_LIB={prebuilt!r} is not a file; unset it to build the library here")
        return Path(prebuilt)
    compiler = find_compiler()
    code = source()
    digest = hashlib.sha256(code + b"\0" + _compiler_identity(compiler) + b"\0" + " ".join(FLAGS).encode())
    target = cache_dir() / f"libvizalloc-capture-{digest.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vizalloc-build-", dir=target.parent) as tmp:
        src = os.path.join(tmp, SOURCE_NAME)
        with open(src, "wb") as f:
            f.write(code)
        out = os.path.join(tmp, target.name)
        done = subprocess.run(compile_command(compiler, src, out), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise CaptureError(
                f"building the capture library with {compiler} failed (exit {done.returncode}):\n"
                + done.stderr.strip()[-2000:]
                + "\nset CC to another compiler, or report this output as a vizalloc bug"
            )
        os.replace(out, target)  # atomic: a concurrent build of the same source wins harmlessly
    return target
