"""A GGUF model file's header, read without its weights, and a metadata-only copy.

llama.cpp sizes its compute buffers from a model's metadata and tensor shapes alone: the
weights are never read while a context is created (as measured with the Gemma 3 270M
model: a copy holding only the header, the rest a sparse hole, creates the same contexts).
So a prediction needs only the file's first megabytes, the header, as an HTTP range
request would fetch them.

* :func:`read_header` reads the header of a file (complete, or cut anywhere after its
  header) with every count and length checked against the bytes there are, so a damaged
  or hostile file is refused with the byte offset, never read past its end;
* :func:`write_metadata_only` writes the header's bytes unchanged to a new file and
  extends it, as a sparse hole, to where the last tensor's data would end. The file has
  the original's size on paper and a few megabytes on disk; llama.cpp maps it and reads
  zeros where weights would be.

    header = read_header("model.gguf")
    header.complete          # False: the file is cut (a download's first megabytes)
    write_metadata_only(header, "model.meta.gguf")

Tensor sizes use the tensor type ids of the ``gguf`` package (an optional dependency,
``pip install 'vizalloc[llama]'``) and vizalloc's own table of ggml's block sizes.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Any

from vizalloc.errors import UsageError, VizallocError

MAGIC = b"GGUF"
#: llama.cpp's default when ``general.alignment`` is absent
DEFAULT_ALIGNMENT = 32
#: the largest metadata string kept in memory (longer ones are skipped; their length is checked)
KEEP_STRING = 4096
#: the most array items kept in memory per array (the vocabulary is walked, not kept)
KEEP_ITEMS = 64
#: The most tensors, metadata entries and items of one array a header may claim. Models have
#: hundreds to a few thousand tensors, tens of entries, vocabularies and merges of up to a
#: few hundred thousand; a larger count is a damaged or hostile header, refused before any
#: of it is read (each tensor kept costs far more memory than its bytes in the file).
MAX_TENSORS = 1 << 18
MAX_KV = 1 << 16
MAX_ITEMS = 1 << 23
#: ggml's ne and nbytes are int64_t: a dimension, an element count or a byte offset past this is not a tensor
INT64_MAX = 2**63 - 1
# the fewest bytes one tensor info and one metadata entry take (an empty name, its dimension
# count or value type): a count whose items cannot fit in what is left is refused at once
_TENSOR_INFO_MIN = 8 + 4
_KV_MIN = 8 + 4

# GGUF value types
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GGUFError(VizallocError):
    """A file is not a GGUF model, or its header is damaged or cut short."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ne: tuple[int, ...]
    type_id: int
    type_name: str
    offset: int   # from the start of the data section
    nbytes: int


@dataclass
class GGUFHeader:
    """What a GGUF header says, and where the file stands."""

    path: str
    version: int
    header_end: int                    # the first byte after the tensor infos
    data_offset: int                   # where the tensor data start (aligned)
    alignment: int
    file_size: int
    tensors: list[TensorInfo] = field(default_factory=list)
    #: metadata: scalars and strings as they are, arrays as their first KEEP_ITEMS items
    kv: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)

    @property
    def data_end(self) -> int:
        """Where the last tensor's data end: the size of a complete file."""
        return self.data_offset + max((t.offset + t.nbytes for t in self.tensors), default=0)

    @property
    def complete(self) -> bool:
        return self.file_size >= self.data_end

    @property
    def architecture(self) -> str:
        arch = self.kv.get("general.architecture")
        return arch if isinstance(arch, str) else ""

    def hparam(self, name: str) -> Any:
        """``<architecture>.<name>`` (``block_count``, ``attention.head_count``, ...), or None."""
        return self.kv.get(f"{self.architecture}.{name}")


class _Cursor:
    """Reads little-endian values from a byte view, refusing to pass its end."""

    def __init__(self, data: Any, path: str) -> None:
        self.data, self.pos, self.path = data, 0, path
        self.what = "the file's start"

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise GGUFError(
                f"{self.path} is cut inside its GGUF header: {self.what} at byte {self.pos:,} needs {n:,} more bytes "
                f"but the file ends at byte {len(self.data):,}; the whole header is needed (download more of the "
                "file's start)")

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size)
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def count(self, n: int, at_least: int, most: int, what: str) -> int:
        """A count from the file, refused before looping when it exceeds ``most`` or when
        ``n`` items of ``at_least`` bytes each cannot fit in what is left of the file."""
        self.need(n * at_least)
        if n > most:
            raise GGUFError(f"{self.path}: {self.what} claims {n:,} {what}, more than any model has (at most "
                            f"{most:,}): a damaged or hostile header")
        return n

    def string(self, keep: bool = True) -> str:
        n = self.unpack("<Q")
        self.need(n)
        raw = bytes(self.data[self.pos:self.pos + min(n, KEEP_STRING)]) if keep else b""
        self.pos += n
        return raw.decode("utf-8", "replace")


def _value(cur: _Cursor, vtype: int, depth: int = 0) -> tuple[Any, int]:
    """A value (arrays: their first items) and, for arrays, their length (else -1)."""
    if vtype in _SCALARS:
        return cur.unpack(_SCALARS[vtype]), -1
    if vtype == _STRING:
        return cur.string(), -1
    if vtype == _ARRAY:
        if depth > 2:
            raise GGUFError(f"{cur.path}: arrays nested deeper than 3 at byte {cur.pos:,} (not a model's metadata)")
        item_type = cur.unpack("<I")
        n = cur.unpack("<Q")
        least = struct.calcsize(_SCALARS[item_type]) if item_type in _SCALARS else 8 if item_type == _STRING else 12
        cur.count(n, least, MAX_ITEMS, "array items")
        if item_type in _SCALARS:
            size = struct.calcsize(_SCALARS[item_type])
            cur.need(n * size)
            kept = [struct.unpack_from(_SCALARS[item_type], cur.data, cur.pos + i * size)[0]
                    for i in range(min(n, KEEP_ITEMS))]
            cur.pos += n * size
            return kept, n
        if item_type not in (_STRING, _ARRAY):
            raise GGUFError(f"{cur.path}: unknown GGUF value type {item_type} in an array at byte {cur.pos:,}")
        items = []
        if item_type == _STRING:
            # the vocabulary: hundreds of thousands of strings, walked with their lengths only
            data, pos, end = cur.data, cur.pos, len(cur.data)
            for i in range(n):  # each item takes at least 8 bytes, so a false count ends at the file's end
                if pos + 8 > end:
                    cur.pos = pos
                    cur.need(8)
                length = int.from_bytes(data[pos:pos + 8], "little")
                if pos + 8 + length > end:
                    cur.pos = pos + 8
                    cur.need(length)
                if i < KEEP_ITEMS:
                    items.append(bytes(data[pos + 8:pos + 8 + min(length, KEEP_STRING)]).decode("utf-8", "replace"))
                pos += 8 + length
            cur.pos = pos
            return items, n
        for i in range(n):
            v, _ = _value(cur, item_type, depth + 1)
            if i < KEEP_ITEMS:
                items.append(v)
        return items, n
    raise GGUFError(f"{cur.path}: unknown GGUF value type {vtype} at byte {cur.pos - 4:,}")


def _type_sizes() -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, elements per block, bytes per block)."""
    try:
        from gguf import GGMLQuantizationType
    except ImportError:
        raise UsageError("reading a GGUF file needs the gguf package: pip install 'vizalloc[llama]'") from None
    from vizalloc.runtime.dtype import DType

    out = {}
    for t in GGMLQuantizationType:
        try:
            dt = DType.from_label(t.name)
        except ValueError:
            continue
        out[int(t.value)] = (dt.label, dt.blck_size, dt.type_size)
    return out


def is_gguf(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts with GGUF's magic; a ``UsageError`` for a path that is no
    regular file (a FIFO named ``.gguf`` would block the read forever), before it is opened."""
    from vizalloc.files import open_regular

    name = os.fspath(path)
    if os.path.isdir(name) or not os.path.exists(name):
        return False
    fd = open_regular(name, what="the model file")
    try:
        return os.read(fd, 4) == MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read a GGUF file's header (see the module docstring). Raises ``GGUFError``, or
    ``UsageError`` for a path that is no regular file (refused before it is opened)."""
    from vizalloc.files import open_regular

    name = os.fspath(path)
    f = os.fdopen(open_regular(name, what="the model file"), "rb")
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < 4 or f.read(4) != MAGIC:
            raise GGUFError(f"{name} is not a GGUF model file (it does not start with 'GGUF')")
        try:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise GGUFError(f"cannot map {name} ({size:,} bytes) to read its header: {exc}") from None
        with data:
            return _parse(memoryview(data), name, size)


def _parse(data: memoryview, name: str, size: int) -> GGUFHeader:
    try:
        cur = _Cursor(data, name)
        cur.pos = 4
        cur.what = "the version"
        version = cur.unpack("<I")
        if version not in (2, 3):
            swapped = struct.unpack("<I", struct.pack(">I", version))[0]
            hint = " (a big-endian file, which llama.cpp on this machine cannot load)" if swapped in (2, 3) else ""
            raise GGUFError(f"{name}: GGUF version {version} is not one llama.cpp reads (2 or 3){hint}")
        cur.what = "the counts"
        n_tensors = cur.unpack("<Q")
        n_kv = cur.unpack("<Q")
        cur.what = "the header"
        cur.count(n_kv, _KV_MIN, MAX_KV, "metadata entries")
        if n_tensors > MAX_TENSORS:
            cur.count(n_tensors, _TENSOR_INFO_MIN, MAX_TENSORS, "tensors")
        header = GGUFHeader(name, version, 0, 0, DEFAULT_ALIGNMENT, size)
        for i in range(n_kv):
            cur.what = f"metadata entry {i + 1} of {n_kv:,}"
            key = cur.string()
            vtype = cur.unpack("<I")
            cur.what = f"the value of {key!r}"
            value, n = _value(cur, vtype)
            header.kv[key] = value
            if n >= 0:
                header.array_lengths[key] = n
        align = header.kv.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise GGUFError(f"{name}: general.alignment is {align!r}, not a power of two")
        header.alignment = align
        sizes = _type_sizes()
        cur.what = "the header"
        cur.count(n_tensors, _TENSOR_INFO_MIN, MAX_TENSORS, "tensors")
        for i in range(n_tensors):
            cur.what = f"tensor info {i + 1} of {n_tensors:,}"
            tname = cur.string()
            n_dims = cur.unpack("<I")
            if n_dims > 4:
                raise GGUFError(f"{name}: tensor {tname!r} has {n_dims} dimensions (ggml has at most 4)")
            ne = tuple(cur.unpack("<Q") for _ in range(n_dims))
            type_id = cur.unpack("<I")
            offset = cur.unpack("<Q")
            if any(d > INT64_MAX for d in ne) or math.prod(ne) > INT64_MAX:
                raise GGUFError(f"{name}: tensor {tname!r} has dimensions {list(ne)}: more than 2^63-1 elements "
                                "(ggml counts them in int64_t), a damaged or hostile header")
            if type_id not in sizes:
                raise GGUFError(f"{name}: tensor {tname!r} has type id {type_id}, which this vizalloc does not know")
            tlabel, blck, tsize = sizes[type_id]
            if ne and ne[0] % blck:
                raise GGUFError(f"{name}: tensor {tname!r} of type {tlabel} has {ne[0]} columns, not a multiple of "
                                f"its block of {blck}")
            if offset % align:
                raise GGUFError(f"{name}: tensor {tname!r} starts at data offset {offset}, not a multiple of the "
                                f"alignment {align}")
            nbytes = math.prod(ne) // blck * tsize
            if offset + nbytes > INT64_MAX - size:
                raise GGUFError(f"{name}: tensor {tname!r} claims its data at offset {offset:,} ({nbytes:,} bytes): "
                                "past the largest file there can be (2^63 bytes), a damaged or hostile header")
            header.tensors.append(TensorInfo(tname, ne, type_id, tlabel, offset, nbytes))
        header.header_end = cur.pos
        header.data_offset = (cur.pos + align - 1) // align * align
        return header
    finally:
        data.release()


def check_complete(header: GGUFHeader) -> None:
    """Refuse a file cut after its header (as llama.cpp would: its weights are missing)."""
    if not header.complete:
        raise GGUFError(
            f"{header.path} is cut: its tensor data end at byte {header.data_end:,} but the file has "
            f"{header.file_size:,} bytes (an incomplete download?); pass --metadata-only to predict from its "
            f"header alone (the first {header.data_offset:,} bytes are enough)")


def write_metadata_only(header: GGUFHeader, output: str | os.PathLike[str], *, overwrite: bool = False) -> int:
    """Write ``header``'s bytes and a hole up to ``header.data_end`` to a new file (created
    exclusively, never through a link); the bytes written."""
    from vizalloc.files import create_new

    from vizalloc.files import read_regular

    head = read_regular(header.path, header.header_end, what="the model file")
    if len(head) != header.header_end:
        raise GGUFError(f"{header.path} changed while it was read (its header is now shorter)")
    end = max(header.data_end, header.data_offset)
    with create_new(output, overwrite=overwrite, flag="-f") as out:
        out.write(head)
        out.write(b"\0" * (header.data_offset - header.header_end))
        out.flush()
        try:
            os.ftruncate(out.fileno(), end)
        except (OSError, OverflowError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise GGUFError(f"{header.path}: its tensor data would end at byte {end:,}, more than a file can hold "
                            f"here ({why}); the header claims more than any real model") from None
    return header.data_offset
