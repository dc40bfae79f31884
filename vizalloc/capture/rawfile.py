"""The capture library's output: one ``capture.<pid>.vzcap`` file per process.

The file is what ``native/interpose.c`` writes, and this module is its one reader. After
a 16-byte header (``VZCAPTURE``, format version), records follow back to back: a
little-endian ``u16`` kind, two reserved bytes, a ``u32`` payload length, the payload.
Integers are 8 bytes, strings a ``u32`` length and UTF-8 bytes (undecodable bytes are
replaced, never trusted), tensors the raw bytes of ``struct ggml_tensor`` (decoded by
``layout.py`` against the layout the capture checked). A process killed mid-write leaves
a last record cut short: reading stops there and says where.

    >>> from vizalloc.capture.rawfile import read_records
    >>> records, cut_at = read_records(b"VZCAPTURE\\0\\0\\0\\1\\0\\0\\0")
    >>> records, cut_at
    ([], None)
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from vizalloc.errors import TraceFormatError

MAGIC = b"VZCAPTURE\0\0\0"
FORMAT_VERSION = 1
HEADER_SIZE = 16
#: No record is longer than the capture's 1 MiB buffer.
MAX_RECORD = 1 << 20


class CaptureFormatError(TraceFormatError):
    """A capture file is not one, or is damaged before its end (the message names the byte offset)."""


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
    pid: int
    ppid: int
    t_ns: int
    exe: str


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


Record = (Hello | Library | TypeInfo | OpInfo | BufferTypeInfo | BufferInfo | BufferFree | BufferClear
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


def _decode(kind: int, c: _Cursor, pending: dict[int, _Pending]) -> Record | None:
    if kind == 10:
        lib, address = c.i64(), c.u64()
        return TensorBytes(lib, address, c.raw(c.left))
    if kind == 13:
        call, pk, tensor, buffer, address, result = c.u64(), c.i64(), c.u64(), c.u64(), c.u64(), c.i64()
        try:
            return Place(call, PlaceKind(pk), tensor, buffer, address, result)
        except ValueError:
            raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown placement kind {pk}") from None
    if kind == 11:
        return _call(c, pending)
    if kind == 12:
        return _return(c)
    if kind == 6:
        lib, buffer, buft, base, size, usage, how, owner, call = (c.i64(), c.u64(), c.u64(), c.u64(), c.u64(),
                                                                  c.i64(), c.i64(), c.u64(), c.u64())
        return BufferInfo(lib, buffer, buft, base, size, usage, BufferHow(how & 7), owner, call)
    if kind == 1:
        return Hello(c.i64(), c.i64(), c.u64(), c.text())
    if kind == 2:
        return Library(c.i64(), c.i64(), c.u64(), c.i64(), c.text(), c.text(), c.text(), c.text())
    if kind == 3:
        return TypeInfo(c.i64(), c.i64(), c.i64(), c.u64(), c.text())
    if kind == 4:
        lib, family, op_id = c.i64(), c.i64(), c.i64()
        if family not in (0, 1, 2):
            raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown op family {family}")
        return OpInfo(lib, OpFamily(family), op_id, c.text())
    if kind == 5:
        return BufferTypeInfo(c.i64(), c.u64(), c.u64(), c.u64(), bool(c.i64()), c.text())
    if kind == 7:
        return BufferFree(c.u64(), c.u64())
    if kind == 8:
        return BufferClear(c.u64(), c.i64())
    if kind == 9:
        return BufferUsage(c.u64(), c.i64())
    if kind == 14:
        lib, galloc, parent, n = c.i64(), c.u64(), c.u64(), c.i64()
        return GallocInfo(lib, galloc, parent, c.u64s(c.count(n, 8)))
    if kind == 15:
        lib, sched, call, n = c.i64(), c.u64(), c.u64(), c.i64()
        backends = tuple(SchedBackend(c.u64(), c.u64(), c.text()) for _ in range(c.count(n, 20)))
        return SchedInfo(lib, sched, call, backends)
    if kind == 16:
        n = c.i64()
        counts = c.u64s(c.count(n, 8))
        objects = []
        while c.left:
            objects.append(c.text())
        return Bye(counts, tuple(objects))
    if kind == 17:
        return Note(c.text())
    if kind == 18:
        return AllocSize(c.i64(), c.u64(), c.u64(), c.u64())
    if kind == 19:
        return BackendInfo(c.i64(), c.u64(), c.text())
    if kind == 20:
        io, tensor, offset, size, source, call = c.i64(), c.u64(), c.u64(), c.u64(), c.u64(), c.u64()
        if io not in (1, 2, 3, 4):
            raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown access kind {io}")
        return TensorIo(IoKind(io), tensor, offset, size, source, call)
    raise CaptureFormatError(f"capture record at byte {c.where - 8} has an unknown kind {kind}")


def read_records(data: bytes | memoryview) -> tuple[list[Record], int | None]:
    """Every complete record of a capture file's bytes, and where the file was cut (or None).

    Raises:
        CaptureFormatError: not a capture file, a newer format, or a damaged record.
    """
    if len(data) < HEADER_SIZE or bytes(data[:12]) != MAGIC:
        raise CaptureFormatError("not a vizalloc capture file (no VZCAPTURE header at byte 0)")
    version = int.from_bytes(data[12:16], "little")
    if version != FORMAT_VERSION:
        raise CaptureFormatError(f"capture file format {version}; this vizalloc reads format {FORMAT_VERSION}")
    records: list[Record] = []
    pending: dict[int, _Pending] = {}
    pos, end = HEADER_SIZE, len(data)
    cut_at: int | None = None
    while pos < end:
        if pos + 8 > end:
            cut_at = pos
            break
        kind = int.from_bytes(data[pos:pos + 2], "little")
        length = int.from_bytes(data[pos + 4:pos + 8], "little")
        if kind == 0 and length == 0:  # zero fill after a crash: nothing more was written
            cut_at = pos
            break
        if length > MAX_RECORD:
            raise CaptureFormatError(f"capture record at byte {pos} claims {length} bytes (at most {MAX_RECORD})")
        if pos + 8 + length > end:
            cut_at = pos
            break
        record = _decode(kind, _Cursor(data, pos + 8, pos + 8 + length), pending)
        if record is not None:
            records.append(record)
        pos += 8 + length
    if pending and cut_at is None:  # a call whose lists were cut off: the file ends inside it
        cut_at = end
    return records, cut_at
