"""vizalloc.capture.gguf_header: a GGUF header read with every length checked, and the
metadata-only copy (the header's bytes, then a sparse hole up to the data's end)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from vizalloc.capture.gguf_header import (  # noqa: E402
    GGUFError, check_complete, is_gguf, read_header, write_metadata_only,
)
from vizalloc.errors import UsageError  # noqa: E402

from tests.capture.gguf_models import write_llama_gguf  # noqa: E402


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A llama-architecture GGUF with a small vocabulary and its data (zeros) written out."""
    path = tmp_path_factory.mktemp("gguf") / "small.gguf"
    write_llama_gguf(path, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128, n_vocab=300, with_data=True)
    return path


def test_header_of_a_complete_file(small: Path) -> None:
    h = read_header(small)
    assert is_gguf(small) and h.version == 3 and h.architecture == "llama"
    assert h.hparam("block_count") == 2 and h.hparam("attention.head_count_kv") == 2
    assert h.array_lengths["tokenizer.ggml.tokens"] == 300
    assert len(h.kv["tokenizer.ggml.tokens"]) == 64  # the vocabulary is walked, not kept
    assert h.data_offset % h.alignment == 0 and h.header_end <= h.data_offset
    assert h.complete and h.data_end == h.file_size
    names = {t.name: t for t in h.tensors}
    q = names["blk.0.attn_q.weight"]
    assert q.type_name == "q4_0" and q.ne == (64, 64) and q.nbytes == 64 * 64 // 32 * 18
    check_complete(h)


def test_metadata_only_copy_is_the_header_and_a_hole(small: Path, tmp_path: Path) -> None:
    h = read_header(small)
    out = tmp_path / "meta.gguf"
    write_metadata_only(h, out)
    data = out.read_bytes()
    assert len(data) == small.stat().st_size == h.data_end
    assert data[:h.header_end] == small.read_bytes()[:h.header_end]
    assert data[h.header_end:] == b"\0" * (len(data) - h.header_end)
    again = read_header(out)
    assert [(t.name, t.ne, t.type_id, t.offset) for t in again.tensors] == \
        [(t.name, t.ne, t.type_id, t.offset) for t in h.tensors]
    # exclusive: an existing file or a link is never written over without overwrite=True
    with pytest.raises(UsageError, match="already exists"):
        write_metadata_only(h, out)
    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "link.gguf"
    os.symlink(target, link)
    with pytest.raises(UsageError, match="symbolic link"):
        write_metadata_only(h, link)
    assert target.read_text() == "keep"


def test_sparse_on_disk(tmp_path: Path) -> None:
    """A 64 MiB model's metadata-only copy takes the header's blocks on disk, not 64 MiB."""
    big = tmp_path / "big.gguf"
    write_llama_gguf(big, n_embd=1024, n_layer=8, n_head=8, n_head_kv=8, n_ff=4096, n_vocab=1000, with_data=False)
    h = read_header(big)
    assert h.data_end > 64 << 20
    out = tmp_path / "meta.gguf"
    write_metadata_only(h, out)
    st = out.stat()
    assert st.st_size == h.data_end
    if st.st_blocks * 512 >= st.st_size:  # a file system without holes (rare): nothing to measure
        pytest.skip("this file system does not keep sparse files")
    assert st.st_blocks * 512 < 4 << 20


def test_a_file_cut_after_its_header(small: Path, tmp_path: Path) -> None:
    h = read_header(small)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(small.read_bytes()[:h.data_offset + 100])
    hc = read_header(cut)
    assert not hc.complete and [t.name for t in hc.tensors] == [t.name for t in h.tensors]
    with pytest.raises(GGUFError, match=r"is cut: its tensor data end at byte .*--metadata-only"):
        check_complete(hc)
    out = tmp_path / "meta.gguf"
    write_metadata_only(hc, out)
    assert out.stat().st_size == h.data_end


@pytest.mark.parametrize("keep", [3, 8, 20, 200, 2000, -1])
def test_a_file_cut_inside_its_header(small: Path, tmp_path: Path, keep: int) -> None:
    h = read_header(small)
    end = h.header_end - 1 if keep < 0 else keep
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(small.read_bytes()[:end])
    with pytest.raises(GGUFError) as info:
        read_header(cut)
    text = str(info.value)
    assert "cut inside its GGUF header" in text or "not a GGUF model file" in text
    assert "\n" not in text


def _header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


@pytest.mark.parametrize(("data", "message"), [
    (b"<html>404 not found</html>", "not a GGUF model file"),
    (b"", "not a GGUF model file"),
    (_header(0, 0, version=1), "version 1"),
    (_header(0, 0, version=0x03000000), "big-endian"),
    # counts far beyond the file: refused at the file's end, without reading or allocating
    (_header(2**62, 2**62), "cut inside its GGUF header"),
    (_header(0, 1) + struct.pack("<Q", 2**60) + b"k", "cut inside its GGUF header"),
    (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 0, 2**61), "cut inside its GGUF header"),
    (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 77), "unknown GGUF value type 77"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9), "9 dimensions"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 4242, 0), "type id 4242"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 33, 2, 0), "not a multiple of its block"),
])
def test_damaged_or_hostile_headers(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(GGUFError, match=message):
        read_header(path)


def test_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        read_header(tmp_path / "missing.gguf")
    assert not is_gguf(tmp_path / "missing.gguf")
