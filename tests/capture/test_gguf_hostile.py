"""Hostile GGUF headers through ``vizalloc explain MODEL.gguf`` (and ``--metadata-only``),
as real processes under an address-space limit: absurd dimensions, data offsets and counts,
and a FIFO named ``.gguf``. Each is a one-line error, exit 2, in bounded memory and time.
On main: OverflowError / ``OSError: File too large`` tracebacks, and hangs."""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from vizalloc.capture.gguf_header import GGUFError, read_header  # noqa: E402
from vizalloc.errors import UsageError  # noqa: E402

from tests.trace import fuzz  # noqa: E402

LIMIT = fuzz.ADDRESS_SPACE_LIMIT


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(tensors: list[tuple[str, tuple[int, ...], int]], *, n_tensors: int | None = None, n_kv: int | None = None,
         tail: int = 0) -> bytes:
    """A GGUF v3 header (architecture llama) with F32 ``tensors`` (name, ne, data offset);
    the counts may lie; ``tail`` zero bytes after it."""
    kv = _s("general.architecture") + struct.pack("<I", 8) + _s("llama")
    infos = b"".join(_s(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", 0, off)
                     for name, ne, off in tensors)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors is None else n_tensors,
                                 1 if n_kv is None else n_kv)
    return head + kv + infos + bytes(tail)


def explain(path: Path, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``vizalloc explain PATH`` under the address-space limit."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    return subprocess.run([sys.executable, "-m", "vizalloc", "explain", str(path), *extra], cwd=path.parent,
                          env=fuzz.limited_env(), capture_output=True, text=True, timeout=timeout, preexec_fn=limit)


def one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-3000:]
    for w in words:
        assert w in done.stderr, done.stderr


@pytest.mark.parametrize("dim", [2**63, 2**64 - 1, 2**62], ids=["2^63", "2^64-1", "2^62x2^62"])
def test_absurd_dimensions(tmp_path: Path, dim: int) -> None:
    path = tmp_path / "dims.gguf"
    path.write_bytes(gguf([("w", (dim, 4 if dim == 2**62 else 1), 0)]))
    with pytest.raises(GGUFError, match="more than 2\\^63-1 elements"):
        read_header(path)
    for extra in ((), ("--metadata-only",)):
        one_line_error(explain(path, *extra), "tensor 'w' has dimensions", "hostile header")


def test_a_data_offset_near_2_64(tmp_path: Path) -> None:
    path = tmp_path / "offset.gguf"
    path.write_bytes(gguf([("w", (32,), 2**64 - 32)]))
    with pytest.raises(GGUFError, match="past the largest file"):
        read_header(path)
    one_line_error(explain(path, "--metadata-only"), "claims its data at offset 18,446,744,073,709,551,584")


def test_data_that_no_file_system_holds(tmp_path: Path) -> None:
    """Valid numbers, 2^62 bytes of data: the metadata-only copy cannot be made that long."""
    path = tmp_path / "huge.gguf"
    path.write_bytes(gguf([("w", (2**60,), 0)]))
    assert read_header(path).data_end > 2**62
    one_line_error(explain(path, "--metadata-only"), "more than a file can hold here")


@pytest.mark.parametrize(("field", "count"), [("tensors", 2**32 + 1), ("tensors", 2**64 - 1),
                                              ("metadata entries", 2**40), ("tensors", 300_000)])
def test_absurd_counts_are_refused_before_looping(tmp_path: Path, field: str, count: int) -> None:
    """64 MiB of zeros after the header (a sparse file): zero bytes are valid tensor infos
    (empty name, no dimensions), so on main a header claiming 2^32 tensors kept parsing them
    (600 MB and growing)."""
    path = tmp_path / "count.gguf"
    with open(path, "wb") as f:
        f.write(gguf([], n_tensors=count if field == "tensors" else 0, n_kv=count if field != "tensors" else None))
        f.truncate(64 << 20)
    done = explain(path, "--metadata-only", timeout=60)
    one_line_error(done)
    if count * 13 > 64 << 20:  # more than the file could hold: refused at its end, before the loop
        assert "is cut inside its GGUF header: the header at byte 24 needs" in done.stderr
    else:                       # it could: refused by the count itself
        assert f"the header claims {count:,} {field}, more than any model has" in done.stderr


def test_an_array_claiming_more_items_than_any_model(tmp_path: Path) -> None:
    path = tmp_path / "array.gguf"
    kv = _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2**33)
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv)
        f.truncate(64 << 20)
    one_line_error(explain(path, "--metadata-only", timeout=60), "cut inside its GGUF header")
    kv = _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 0, 2**24)  # 16M one-byte items: they fit
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv)
        f.truncate(64 << 20)
    one_line_error(explain(path, "--metadata-only", timeout=60), "claims 16,777,216 array items")


def test_a_fifo_named_gguf_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="is a FIFO"):
        read_header(fifo)
    one_line_error(explain(fifo, timeout=60), "model.gguf is a FIFO (named pipe), not a regular file")
    one_line_error(explain(fifo, "--metadata-only", timeout=60), "FIFO")
