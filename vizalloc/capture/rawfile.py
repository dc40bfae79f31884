"""The capture library's output: one file per process image, and its one reader.

**File names** (the convention ``launch.py`` and the importer rely on): the capture folder
(``VIZALLOC_CAPTURE_DIR``) holds ``capture.<pid>.<image>.vzcap`` for every process image
that called ggml. ``<image>`` is 0 for a process's first image and counts up with each
``exec`` (an exec keeps the pid); a forked child is a new pid, image 0, with a complete
capture of its own. ``image_files`` lists a folder's files in order (the program's own
images first, in exec order, then every other process's, by pid and image);
``image_key`` reads a name back.

**Contents**: what ``native/interpose.c`` writes. A 32-byte header (``VZCAPTURE``, the
format version, the ``u64`` length of the complete records, header included (0: the file's
length), and 8 reserved bytes), then records back to back, each an 8-byte frame and its
payload. The frame is a little-endian ``u16`` kind (``RecordKind``), a ``u16`` check and a
``u32`` payload length. The check is CRC-CCITT (``binascii.crc_hqx``, started at 0xFFFF)
over the record's sequence number in its file (a little-endian ``u64``, 0 for the first
record after the header), the frame's kind and length bytes and the payload, so a changed
byte, and a record dropped, repeated or moved, is a damaged capture, not another valid one
(``frame`` builds a record with its check). Integers are
8 bytes, strings a ``u32`` length and UTF-8 bytes (undecodable bytes are replaced, never
trusted), tensors the raw bytes of ``struct ggml_tensor`` (decoded by ``layout.py``
against the layout the capture checked). The capture copies records into a memory map of
the file, so a killed process leaves every record it completed; the bytes after the
header's length are zero fill, or a record cut short by a kill in the middle of its copy
(reading stops at the length and says the file was cut there). A ``Thread`` record says
which thread the records after it come from.

    >>> from vizalloc.capture.rawfile import read_records
    >>> header = b"VZCAPTURE\\0\\0\\0\\3\\0\\0\\0" + (32).to_bytes(8, "little") + bytes(8)
    >>> records, cut_at = read_records(header + bytes(4096))  # an empty capture, its window's zero fill
    >>> records, cut_at
    ([], None)
"""

from __future__ import annotations

import binascii
import enum
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vizalloc.errors import TraceFormatError

MAGIC = b"VZCAPTURE\0\0\0"
FORMAT_VERSION = 3
HEADER_SIZE = 32
#: No record is longer than the capture's 1 MiB scratch space (``SCRATCH_CAP``).
MAX_RECORD = 1 << 20


class CaptureFormatError(TraceFormatError):
    """A capture file is not one, or is damaged before its end (the message names the byte offset)."""


def _check_of(seq: int, head: bytes | memoryview, payload: bytes | memoryview) -> int:
    """A record's check (interpose.c's ``rec_check``): see the module docstring."""
    crc = binascii.crc_hqx(seq.to_bytes(8, "little") + bytes(head[0:2]) + bytes(head[4:8]), 0xFFFF)
    return binascii.crc_hqx(payload, crc)


def frame(seq: int, kind: int, payload: bytes) -> bytes:
    """One record as the capture writes it: its frame, with its check for sequence number
    ``seq`` (0 for a file's first record), and its payload."""
    head = struct.pack("<H2xI", kind, len(payload))
    return struct.pack("<HHI", kind, _check_of(seq, head, payload), len(payload)) + payload


# -- file names ------------------------------------------------------------------------

def image_key(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``(pid, image)`` of a capture file's name ``capture.<pid>.<image>.vzcap``, or None."""
    parts = os.path.basename(path).split(".")
    if len(parts) != 4 or parts[0] != "capture" or parts[3] != "vzcap":
        return None
    if not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    return int(parts[1]), int(parts[2])


def image_files(folder: str | os.PathLike[str], program_pid: int | None = None) -> list[Path]:
    """The capture files in ``folder``, in order: ``program_pid``'s images first (in the
    order they were exec'd), then the other processes' (by pid, then image)."""
    found = []
    for entry in os.scandir(folder):
        key = image_key(entry.name)
        if key is not None:
            found.append((key[0] != program_pid, key, Path(entry.path)))
    return [path for *_, path in sorted(found)]


# -- the format's tables: native/interpose.c has the same (tests/capture/test_format.py) --

class RecordKind(enum.IntEnum):
    """A record's kind (``R_*`` in interpose.c). A new kind is a member here with the next
    number, ``R_<NAME>`` in interpose.c's enum, a record dataclass and its ``DECODERS``
    entry; tests/capture/test_format.py fails until all of them agree."""

    HELLO = 1
    LIBRARY = 2
    TYPE = 3
    OP = 4
    BUFT = 5
    BUFFER = 6
    BUFFER_FREE = 7
    BUFFER_CLEAR = 8
    BUFFER_USAGE = 9
    TENSOR = 10
    CALL = 11
    RETURN = 12
    PLACE = 13
    GALLOC = 14
    SCHED = 15
    BYE = 16
    NOTE = 17
    ALLOC_SIZE = 18
    BACKEND = 19
    IO = 20
    THREAD = 21


class CallKind(enum.IntEnum):
    """The ggml function a call record stands for (``C_*`` in interpose.c)."""

    CONTINUATION = 0
    GALLOC_RESERVE_N = 1
    GALLOC_ALLOC_GRAPH = 2
    GALLOC_RESERVE_N_SIZE = 3
    GALLOC_FREE = 4
    SCHED_RESERVE = 5
    SCHED_ALLOC_GRAPH = 6
    SCHED_RESET = 7
    SCHED_COMPUTE = 8
    SCHED_COMPUTE_ASYNC = 9
    BACKEND_COMPUTE = 10
    BACKEND_COMPUTE_ASYNC = 11
    SCHED_RESERVE_SIZE = 12
    SCHED_FREE = 13
    BUFT_ALLOC_BUFFER = 14  # counted (Bye.counts), not recorded as a call
    BUFFER_RESET = 15       # counted, not recorded as a call
    GRAPH_COMPUTE = 16
    GRAPH_COMPUTE_WITH_CTX = 17
    ALLOC_CTX_TENSORS = 18

    @property
    def function(self) -> str:
        return _FUNCTIONS[self]


_FUNCTIONS = {
    CallKind.CONTINUATION: "",
    CallKind.GALLOC_RESERVE_N: "ggml_gallocr_reserve_n",
    CallKind.GALLOC_ALLOC_GRAPH: "ggml_gallocr_alloc_graph",
    CallKind.GALLOC_RESERVE_N_SIZE: "ggml_gallocr_reserve_n_size",
    CallKind.GALLOC_FREE: "ggml_gallocr_free",
    CallKind.SCHED_RESERVE: "ggml_backend_sched_reserve",
    CallKind.SCHED_ALLOC_GRAPH: "ggml_backend_sched_alloc_graph",
    CallKind.SCHED_RESET: "ggml_backend_sched_reset",
    CallKind.SCHED_COMPUTE: "ggml_backend_sched_graph_compute",
    CallKind.SCHED_COMPUTE_ASYNC: "ggml_backend_sched_graph_compute_async",
    CallKind.BACKEND_COMPUTE: "ggml_backend_graph_compute",
    CallKind.BACKEND_COMPUTE_ASYNC: "ggml_backend_graph_compute_async",
    CallKind.SCHED_RESERVE_SIZE: "ggml_backend_sched_reserve_size",
    CallKind.SCHED_FREE: "ggml_backend_sched_free",
    CallKind.BUFT_ALLOC_BUFFER: "ggml_backend_buft_alloc_buffer",
    CallKind.BUFFER_RESET: "ggml_backend_buffer_reset",
    CallKind.GRAPH_COMPUTE: "ggml_graph_compute",
    CallKind.GRAPH_COMPUTE_WITH_CTX: "ggml_graph_compute_with_ctx",
    CallKind.ALLOC_CTX_TENSORS: "ggml_backend_alloc_ctx_tensors_from_buft",
}

GALLOC_CALLS = frozenset({CallKind.GALLOC_RESERVE_N, CallKind.GALLOC_ALLOC_GRAPH, CallKind.GALLOC_RESERVE_N_SIZE})
COMPUTE_CALLS = frozenset({CallKind.SCHED_COMPUTE, CallKind.SCHED_COMPUTE_ASYNC, CallKind.BACKEND_COMPUTE,
                           CallKind.BACKEND_COMPUTE_ASYNC, CallKind.GRAPH_COMPUTE, CallKind.GRAPH_COMPUTE_WITH_CTX})
#: ggml-cpu's own computes: inside a backend's compute they are its work, not another compute
CPU_COMPUTES = frozenset({CallKind.GRAPH_COMPUTE, CallKind.GRAPH_COMPUTE_WITH_CTX})


# -- records -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Hello:
    """A process image began (its file's first record): ``image`` counts the pid's execs,
    ``argv`` is its command line."""

    pid: int
    ppid: int
    t_ns: int
    exe: str
    image: int
    argv: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Thread:
    """The records after this one (up to the next ``Thread``) come from thread ``tid``."""

    tid: int


@dataclass(frozen=True, slots=True)
class Library:
    """A ggml found in the process. ``status``: 1 layout checked, 0 not yet, -1 refused (``reason``)."""

    lib: int
    status: int
    tensor_size: int
    graph_ok: int
    version: str
    commit: str
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class TypeInfo:
    lib: int
    type_id: int
    blck_size: int
    type_size: int
    name: str


class OpFamily(enum.IntEnum):
    OP = 0
    UNARY = 1
    GLU = 2


@dataclass(frozen=True, slots=True)
class OpInfo:
    lib: int
    family: OpFamily
    op_id: int
    name: str


@dataclass(frozen=True, slots=True)
class BufferTypeInfo:
    lib: int
    buft: int
    alignment: int
    max_size: int
    is_host: bool
    name: str


class BufferHow(enum.IntFlag):
    ALLOCATED = 1   # made by ggml_backend_buft_alloc_buffer while we watched
    SEEN = 2        # first seen in use (weights from a pointer, buffers made before the capture)
    MULTI = 4       # a multi-buffer: several buffers behind one handle, no base of its own


@dataclass(frozen=True, slots=True)
class BufferInfo:
    lib: int
    buffer: int
    buft: int
    base: int
    size: int
    usage: int
    how: BufferHow
    owner_galloc: int  # the graph allocator whose call allocated it, or 0
    call: int          # the call it happened in, or 0


@dataclass(frozen=True, slots=True)
class BufferFree:
    buffer: int
    call: int


@dataclass(frozen=True, slots=True)
class BufferClear:
    buffer: int
    value: int


@dataclass(frozen=True, slots=True)
class BufferUsage:
    buffer: int
    usage: int


@dataclass(frozen=True, slots=True)
class TensorBytes:
    """``struct ggml_tensor`` at ``address`` as it was when written (decode with ``layout``)."""

    lib: int
    address: int
    raw: bytes


@dataclass(frozen=True, slots=True)
class Call:
    """A call of ``kind`` began. Graph calls list the graph's nodes and leafs (addresses) and,
    for ``ggml_gallocr_reserve_n``, the buffer id of each."""

    call: int
    parent: int
    kind: CallKind
    lib: int
    obj: int
    graph: int
    t_ns: int
    site: str  # "object<TAB>function" of the code that made the call ("" if unknown)
    nodes: tuple[int, ...]
    leafs: tuple[int, ...]
    node_ids: tuple[int, ...] | None
    leaf_ids: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Return:
    """A call ended. ``sizes``: buffer sizes of the ``*_reserve_size`` calls; scheduler calls
    give ``n_splits`` and each node's backend (``node_backends``, addresses)."""

    call: int
    kind: CallKind
    result: int
    t_ns: int
    sizes: tuple[int, ...]
    n_splits: int
    node_backends: tuple[int, ...]


class PlaceKind(enum.IntEnum):
    TENSOR_ALLOC = 1
    VIEW_INIT = 2


@dataclass(frozen=True, slots=True)
class Place:
    call: int
    kind: PlaceKind
    tensor: int
    buffer: int
    address: int
    result: int


@dataclass(frozen=True, slots=True)
class GallocInfo:
    lib: int
    galloc: int
    parent_call: int
    bufts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SchedBackend:
    backend: int
    buft: int
    name: str


@dataclass(frozen=True, slots=True)
class SchedInfo:
    lib: int
    sched: int
    call: int
    backends: tuple[SchedBackend, ...]


@dataclass(frozen=True, slots=True)
class Bye:
    counts: tuple[int, ...]
    ggml_objects: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Note:
    text: str


class IoKind(enum.IntEnum):
    SET = 1      # ggml_backend_tensor_set(_async)
    GET = 2      # ggml_backend_tensor_get(_async)
    MEMSET = 3   # ggml_backend_tensor_memset
    COPY = 4     # ggml_backend_tensor_copy (``source`` into ``tensor``)


@dataclass(frozen=True, slots=True)
class TensorIo:
    """The program read or wrote a tensor's bytes through ggml's API."""

    kind: IoKind
    tensor: int
    offset: int
    size: int
    source: int
    call: int


@dataclass(frozen=True, slots=True)
class BackendInfo:
    lib: int
    backend: int
    name: str


@dataclass(frozen=True, slots=True)
class AllocSize:
    lib: int
    buft: int
    tensor: int
    size: int


Record = (Hello | Thread | Library | TypeInfo | OpInfo | BufferTypeInfo | BufferInfo | BufferFree | BufferClear
          | BufferUsage | TensorBytes | Call | Return | Place | GallocInfo | SchedInfo | Bye | Note | AllocSize
          | BackendInfo | TensorIo)


# -- decoding ----------------------------------------------------------------------------

class _Cursor:
    """Reads one record's payload; any read past its end is a damaged record."""

    __slots__ = ("data", "pos", "end", "where")

    def __init__(self, data: bytes | memoryview, pos: int, end: int) -> None:
        self.data, self.pos, self.end, self.where = data, pos, end, pos

    def _take(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise CaptureFormatError(f"capture record at byte {self.where - 8} is shorter than its content")
        self.pos = pos + n
        return pos

    def i64(self) -> int:
        return int.from_bytes(self.data[self._take(8):self.pos], "little", signed=True)

    def u64(self) -> int:
        return int.from_bytes(self.data[self._take(8):self.pos], "little")

    def u64s(self, n: int) -> tuple[int, ...]:
        start = self._take(8 * n)
        return struct.unpack_from(f"<{n}Q", self.data, start)

    def i32s(self, n: int) -> tuple[int, ...]:
        start = self._take(4 * n)
        return struct.unpack_from(f"<{n}i", self.data, start)

    def raw(self, n: int) -> bytes:
        start = self._take(n)
        return bytes(self.data[start:self.pos])

    def text(self) -> str:
        n = int.from_bytes(self.data[self._take(4):self.pos], "little")
        start = self._take(n)
        return bytes(self.data[start:self.pos]).decode("utf-8", "replace")

    @property
    def left(self) -> int:
        return self.end - self.pos

    def count(self, n: int, item_size: int) -> int:
        """A count read from the file, checked against what is left of the record."""
        if n < 0 or n * item_size > self.left:
            raise CaptureFormatError(f"capture record at byte {self.where - 8} claims {n} items, more than it holds")
        return n


@dataclass
class _Pending:
    """A call whose node and leaf lists arrive in continuation records (graphs too big for one)."""

    call: Call
    n_nodes: int
    n_leafs: int
    lists: tuple[list[int], list[int], list[int] | None, list[int] | None]  # nodes, leafs, their buffer ids

    def complete(self) -> bool:
        nodes, leafs, node_ids, leaf_ids = self.lists
        return (len(nodes) == self.n_nodes and len(leafs) == self.n_leafs
                and (node_ids is None or len(node_ids) == self.n_nodes)
                and (leaf_ids is None or len(leaf_ids) == self.n_leafs))

    def finish(self) -> Call:
        nodes, leafs, node_ids, leaf_ids = self.lists
        c = self.call
        return Call(c.call, c.parent, c.kind, c.lib, c.obj, c.graph, c.t_ns, c.site, tuple(nodes), tuple(leafs),
                    None if node_ids is None else tuple(node_ids), None if leaf_ids is None else tuple(leaf_ids))


def _call_kind(c: _Cursor, kind: int) -> CallKind:
    try:
        return CallKind(kind)
    except ValueError:
        raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown call kind {kind}") from None


def _call(c: _Cursor, pending: dict[int, _Pending]) -> Call | None:
    call, parent, kind = c.u64(), c.u64(), c.i64()
    if kind == CallKind.CONTINUATION:
        part = pending.get(call)
        if part is None:
            raise CaptureFormatError(f"capture record at byte {c.where - 8} continues call {call}, which never began")
        which, start, n = c.i64(), c.i64(), c.i64()
        items = part.lists[which] if which in (0, 1, 2, 3) and start >= 0 else None
        if items is None:
            raise CaptureFormatError(f"capture record at byte {c.where - 8} has a bad continuation")
        items.extend(c.u64s(c.count(n, 8)) if which < 2 else c.i32s(c.count(n, 4)))
        return pending.pop(call).finish() if part.complete() else None
    kind_ = _call_kind(c, kind)
    lib, obj, graph, t_ns = c.i64(), c.u64(), c.u64(), c.u64()
    n_nodes, n_leafs, has_node_ids, has_leaf_ids = c.i64(), c.i64(), c.i64(), c.i64()
    site = c.text()
    if n_nodes < 0 or n_leafs < 0:
        raise CaptureFormatError(f"capture record at byte {c.where - 8} has negative node counts")
    if c.left == 0 and (n_nodes or n_leafs):  # the lists follow in continuation records
        head = Call(call, parent, kind_, lib, obj, graph, t_ns, site, (), (), None, None)
        pending[call] = _Pending(head, n_nodes, n_leafs,
                                 ([], [], [] if has_node_ids else None, [] if has_leaf_ids else None))
        return None
    nodes = c.u64s(c.count(n_nodes, 8))
    leafs = c.u64s(c.count(n_leafs, 8))
    node_ids = c.i32s(c.count(n_nodes, 4)) if has_node_ids else None
    leaf_ids = c.i32s(c.count(n_leafs, 4)) if has_leaf_ids else None
    return Call(call, parent, kind_, lib, obj, graph, t_ns, site, nodes, leafs, node_ids, leaf_ids)


def _return(c: _Cursor) -> Return:
    call, kind, result, t_ns, n = c.u64(), c.i64(), c.i64(), c.u64(), c.i64()
    kind_ = _call_kind(c, kind)
    if n >= 0:
        return Return(call, kind_, result, t_ns, c.u64s(c.count(n, 8)), -1, ())
    n_splits, m = c.i64(), c.i64()
    return Return(call, kind_, result, t_ns, (), n_splits, c.u64s(c.count(m, 8)))


def _place(c: _Cursor) -> Place:
    call, pk, tensor, buffer, address, result = c.u64(), c.i64(), c.u64(), c.u64(), c.u64(), c.i64()
    try:
        return Place(call, PlaceKind(pk), tensor, buffer, address, result)
    except ValueError:
        raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown placement kind {pk}") from None


def _buffer(c: _Cursor) -> BufferInfo:
    lib, buffer, buft, base, size, usage, how, owner, call = (c.i64(), c.u64(), c.u64(), c.u64(), c.u64(),
                                                              c.i64(), c.i64(), c.u64(), c.u64())
    if not 0 < how <= 7:
        raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown buffer kind {how}")
    return BufferInfo(lib, buffer, buft, base, size, usage, BufferHow(how), owner, call)


def _hello(c: _Cursor) -> Hello:
    pid, ppid, t_ns, exe, image = c.i64(), c.i64(), c.u64(), c.text(), c.i64()
    n = int.from_bytes(c.raw(4), "little")
    argv = c.raw(c.count(n, 1)).rstrip(b"\0").split(b"\0") if n else []
    return Hello(pid, ppid, t_ns, exe, image, tuple(a.decode("utf-8", "replace") for a in argv))


def _op(c: _Cursor) -> OpInfo:
    lib, family, op_id = c.i64(), c.i64(), c.i64()
    if family not in (0, 1, 2):
        raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown op family {family}")
    return OpInfo(lib, OpFamily(family), op_id, c.text())


def _galloc(c: _Cursor) -> GallocInfo:
    lib, galloc, parent, n = c.i64(), c.u64(), c.u64(), c.i64()
    return GallocInfo(lib, galloc, parent, c.u64s(c.count(n, 8)))


def _sched(c: _Cursor) -> SchedInfo:
    lib, sched, call, n = c.i64(), c.u64(), c.u64(), c.i64()
    backends = tuple(SchedBackend(c.u64(), c.u64(), c.text()) for _ in range(c.count(n, 20)))
    return SchedInfo(lib, sched, call, backends)


def _bye(c: _Cursor) -> Bye:
    n = c.i64()
    counts = c.u64s(c.count(n, 8))
    objects = []
    while c.left:
        objects.append(c.text())
    return Bye(counts, tuple(objects))


def _io(c: _Cursor) -> TensorIo:
    io, tensor, offset, size, source, call = c.i64(), c.u64(), c.u64(), c.u64(), c.u64(), c.u64()
    if io not in (1, 2, 3, 4):
        raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown access kind {io}")
    return TensorIo(IoKind(io), tensor, offset, size, source, call)


_Decoder = Callable[[_Cursor, dict[int, _Pending]], "Record | None"]

#: How each kind's payload is read: one entry per ``RecordKind`` (a test checks none is missing).
DECODERS: dict[RecordKind, _Decoder] = {
    RecordKind.HELLO: lambda c, _: _hello(c),
    RecordKind.LIBRARY: lambda c, _: Library(c.i64(), c.i64(), c.u64(), c.i64(), c.text(), c.text(), c.text(),
                                             c.text()),
    RecordKind.TYPE: lambda c, _: TypeInfo(c.i64(), c.i64(), c.i64(), c.u64(), c.text()),
    RecordKind.OP: lambda c, _: _op(c),
    RecordKind.BUFT: lambda c, _: BufferTypeInfo(c.i64(), c.u64(), c.u64(), c.u64(), bool(c.i64()), c.text()),
    RecordKind.BUFFER: lambda c, _: _buffer(c),
    RecordKind.BUFFER_FREE: lambda c, _: BufferFree(c.u64(), c.u64()),
    RecordKind.BUFFER_CLEAR: lambda c, _: BufferClear(c.u64(), c.i64()),
    RecordKind.BUFFER_USAGE: lambda c, _: BufferUsage(c.u64(), c.i64()),
    RecordKind.TENSOR: lambda c, _: TensorBytes(c.i64(), c.u64(), c.raw(c.left)),
    RecordKind.CALL: _call,
    RecordKind.RETURN: lambda c, _: _return(c),
    RecordKind.PLACE: lambda c, _: _place(c),
    RecordKind.GALLOC: lambda c, _: _galloc(c),
    RecordKind.SCHED: lambda c, _: _sched(c),
    RecordKind.BYE: lambda c, _: _bye(c),
    RecordKind.NOTE: lambda c, _: Note(c.text()),
    RecordKind.ALLOC_SIZE: lambda c, _: AllocSize(c.i64(), c.u64(), c.u64(), c.u64()),
    RecordKind.BACKEND: lambda c, _: BackendInfo(c.i64(), c.u64(), c.text()),
    RecordKind.IO: lambda c, _: _io(c),
    RecordKind.THREAD: lambda c, _: Thread(c.u64()),
}
_BY_NUMBER: dict[int, _Decoder] = {int(k): f for k, f in DECODERS.items()}


def _decode(kind: int, c: _Cursor, pending: dict[int, _Pending]) -> Record | None:
    decoder = _BY_NUMBER.get(kind)
    if decoder is None:
        raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown kind {kind}")
    return decoder(c, pending)


#: No process has more address space than 64 bits, nor a buffer larger than Linux's 57-bit user space.
_ADDRESS_SPACE = 2**64
_LARGEST_BUFFER = 2**57


def _check(record: Record, pos: int) -> None:
    """Values no real process writes: refused, so that a damaged capture is never replayed as
    if it were one."""
    if isinstance(record, BufferInfo):
        if record.size > _LARGEST_BUFFER or record.base + record.size > _ADDRESS_SPACE:
            raise CaptureFormatError(f"capture record at byte {pos} describes a buffer of {record.size:,} bytes at "
                                     f"{record.base:#x}: no process has that much address space")
    elif isinstance(record, (Call, Return)) and record.call <= 0:
        raise CaptureFormatError(f"capture record at byte {pos} names call {record.call} (calls count from 1)")
    if isinstance(record, (Hello, Call, Return)) and record.t_ns >= 2**63:
        raise CaptureFormatError(f"capture record at byte {pos} is stamped {record.t_ns:,} ns: no clock reads that "
                                 "(2^63 ns are 292 years)")


def read_records(data: bytes | memoryview) -> tuple[list[Record], int | None]:
    """Every complete record of a capture file's bytes, and where the file was cut (or None).

    Raises:
        CaptureFormatError: not a capture file, a newer format, or a damaged record.
    """
    if len(data) < 16 or bytes(data[:12]) != MAGIC:
        raise CaptureFormatError("not a vizalloc capture file (no VZCAPTURE header at byte 0)")
    version = int.from_bytes(data[12:16], "little")
    if version != FORMAT_VERSION:
        raise CaptureFormatError(f"capture file format {version}; this vizalloc reads format {FORMAT_VERSION}")
    if len(data) < HEADER_SIZE:
        raise CaptureFormatError(f"capture file of {len(data)} bytes is shorter than its {HEADER_SIZE}-byte header")
    records: list[Record] = []
    pending: dict[int, _Pending] = {}
    # the records end where the header says; what follows is zero fill, unless a kill cut a record's copy short
    # (0: not said, as in a file written by other means than the capture's map: to the file's end)
    said = int.from_bytes(data[16:24], "little")
    claimed = said or len(data)
    pos, end = HEADER_SIZE, min(len(data), max(claimed, HEADER_SIZE))
    cut_at: int | None = None
    seq, view = 0, memoryview(data)  # the check reads payloads in place
    if claimed > len(data) or bytes(data[end:end + MAX_RECORD + 8]).strip(b"\0"):
        cut_at = end
    while pos < end:
        if pos + 8 > end:
            cut_at = pos
            break
        kind = int.from_bytes(data[pos:pos + 2], "little")
        length = int.from_bytes(data[pos + 4:pos + 8], "little")
        if kind == 0 and length == 0 and not said:  # zero fill after a crash: nothing more was written
            cut_at = pos
            break
        if length > MAX_RECORD:
            raise CaptureFormatError(f"capture record at byte {pos} claims {length} bytes (at most {MAX_RECORD})")
        if pos + 8 + length > end:
            if said and said <= len(data):
                # the header moves past a record only once all of it is in the map: a record that
                # runs past the end it gives was not cut by a kill, it is damaged
                raise CaptureFormatError(f"capture record at byte {pos} (kind {kind}) claims {length} bytes, past "
                                         f"byte {said:,}, where the header says the complete records end")
            cut_at = pos
            break
        check = int.from_bytes(data[pos + 2:pos + 4], "little")
        if check != _check_of(seq, view[pos:pos + 8], view[pos + 8:pos + 8 + length]):
            raise CaptureFormatError(
                f"capture record at byte {pos} (kind {kind}, record {seq} of the file) fails its check: the capture "
                "file was changed after the capture wrote it (a record altered, dropped, repeated or moved), so it "
                "cannot be replayed as the program's run: capture the program again")
        seq += 1
        cursor = _Cursor(data, pos + 8, pos + 8 + length)
        record = _decode(kind, cursor, pending)
        if cursor.left:  # a length that does not match the content: the record is not what it says
            raise CaptureFormatError(f"capture record at byte {pos} (kind {kind}) says {length} bytes, but its content "
                                     f"ends {cursor.left} bytes before that")
        if record is not None:
            _check(record, pos)
            records.append(record)
        pos += 8 + length
    if pending and cut_at is None:  # a call whose lists were cut off: the file ends inside it
        cut_at = end
    return records, cut_at
