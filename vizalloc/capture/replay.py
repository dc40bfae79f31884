"""Import a captured real process: replay its record through vizalloc's own allocators and
emit ordinary trace events, checking every offset against what the process did.

The capture sees a real ggml from outside: the graphs handed to the allocator, the buffers,
every placement and every compute. It cannot see the planner's own decisions (which block
it took, which node reused a parent's bytes in place, what it freed when). Replaying each
top-level ``ggml_gallocr_reserve_n`` / ``ggml_gallocr_alloc_graph`` /
``ggml_gallocr_reserve_n_size`` call through a ``GraphAllocator`` built from the same buffer
types (with the traced ggml version's rules, ``alloc.rules``) recovers them as the usual
``Plan*`` events. Then every placement the real call made is compared with the replay's: a
difference in a tensor's buffer or offset, a buffer's size or a call's result becomes a
``ReplayMismatch`` event (``check`` and ``summary`` report it) and the mirror takes the
real placement, so one difference does not cascade into others. The placements of ggml's
tensor allocator (``ggml_backend_alloc_ctx_tensors_from_buft``) are re-made the same way by
a ``TensorAllocator`` on the buffer that call made, and checked one by one.

The mirror world: one vizalloc tensor per C tensor (keyed by address, renewed when a new
tensor appears at an old address, as when llama.cpp rebuilds its graph every batch), one
buffer per ggml buffer (``VIRTUAL`` memory: addresses and sizes, no bytes), one graph
allocator per ``ggml_gallocr``. Placements the capture saw but did not replay (weights by
``ggml_backend_tensor_alloc``, views by ``ggml_backend_view_init``) are replayed as such;
data that appeared unseen (memory a context allocated itself) is placed ``by=observed``,
through ``memory.observe_placement`` (the one way the import places a tensor itself).
Computes become ``ComputeBegin`` / ``NodeCompute`` / ``ComputeEnd`` in ggml's execution order
(per-node wall times are not observed: they are 0). Events carry the process's own clock
and, as source line, the program's function that made the ggml call.

An import that cannot go on (a record naming a tensor the capture never described, a layout
refused) stops there and says so in the trace (``CaptureIncomplete``: the record, the call,
the tensor, what was missing), as does a capture that holds no ggml call; ``check`` reports
it as ``incomplete-capture``.
"""

from __future__ import annotations

import itertools
import shlex
import shutil
import subprocess
from bisect import bisect_right
from dataclasses import dataclass, field

from vizalloc.capture import rawfile as rf
from vizalloc.capture.layout import SUPPORTED, TENSOR_SIZE, TensorStruct, decode, name_length
from vizalloc.errors import VizallocError
from vizalloc.runtime import memory
from vizalloc.runtime.alloc import GraphAllocator, TensorAllocator
from vizalloc.runtime.alloc.rules import DEFAULT, AllocatorRules, is_known, rules_for
from vizalloc.runtime.backends.base import NOOP_OPS
from vizalloc.runtime.buffer import VIRTUAL, Buffer, BufferType, Usage, own_addresses
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.tensor import Op, Tensor
from vizalloc.trace import events as ev
from vizalloc.trace import recorder


_SCHED_COMPUTES = frozenset({rf.CallKind.SCHED_COMPUTE, rf.CallKind.SCHED_COMPUTE_ASYNC})


class CaptureImportError(VizallocError):
    """A capture cannot be replayed (a graph that names a tensor never described, a layout
    this vizalloc cannot read). ``tensor``: the tensor concerned, ``missing``: what the
    capture lacked (both "" when unknown); the import records them in the trace as a
    ``CaptureIncomplete`` event and stops there."""

    def __init__(self, message: str, *, tensor: str = "", missing: str = "") -> None:
        super().__init__(message)
        self.tensor = tensor
        self.missing = missing


_USAGES = {0: Usage.ANY, 1: Usage.WEIGHTS, 2: Usage.COMPUTE}
#: records that describe things a later record names
_DESCRIPTIONS = (rf.TensorBytes, rf.TypeInfo, rf.OpInfo, rf.BufferTypeInfo, rf.BufferInfo, rf.Library, rf.AllocSize,
                 rf.Note)
_IO_FUNCTIONS = {rf.IoKind.SET: "ggml_backend_tensor_set", rf.IoKind.GET: "ggml_backend_tensor_get",
                 rf.IoKind.MEMSET: "ggml_backend_tensor_memset", rf.IoKind.COPY: "ggml_backend_tensor_copy"}


@dataclass(frozen=True)
class ComputeBuffer:
    """One buffer of a graph allocator after its last plan: the bytes vizalloc's replay
    planned, and the bytes of the buffers the real allocator held then (as the capture saw
    them with ``ggml_backend_buffer_get_size``; None if it held none)."""

    buft: str
    planned: int
    allocated: int | None


@dataclass
class ImportResult:
    """What the import found, for the command line to report."""

    program: str = ""
    pid: int = -1
    libraries: list[rf.Library] = field(default_factory=list)
    ggml_objects: tuple[str, ...] = ()
    n_records: int = 0
    cut_at: int | None = None
    replayed_calls: int = 0
    placements_checked: int = 0
    mismatches: int = 0
    computes: int = 0
    buffers: int = 0
    notes: list[str] = field(default_factory=list)
    #: why the import stopped before the capture's end ("" if it did not): the trace holds
    #: what came before, and a ``CaptureIncomplete`` event says so
    incomplete: str = ""
    #: the buffers of each graph allocator's last plan, as replayed and as the process had them
    compute_buffers: list[ComputeBuffer] = field(default_factory=list)

    @property
    def saw_ggml(self) -> bool:
        return bool(self.libraries) or bool(self.ggml_objects)


@dataclass
class _Mirror:
    tensor: Tensor
    struct: TensorStruct
    struct_lib: int
    copy_of: Tensor | None = None  # the tensor whose bytes it aliases from birth (a deep copy)


def _retyped(old: Buffer, buft: BufferType) -> None:
    """A live buffer handle allocated again: a buffer type whose ``alloc_buffer`` allocates a
    buffer of another type and gives it its own type (ggml-cpu's ``CPU_REPACK`` allocates a
    ``CPU`` buffer, then sets ``buffer->buft``). One block of memory, one handle, freed once:
    the first buffer ends here (the new one holds its bytes), so memory is counted once."""
    old.free(cause=f"became a {buft.name} buffer (its buffer type's alloc_buffer)")


@dataclass
class _RealBuffer:
    ptr: int
    base: int
    size: int
    mirror: Buffer | None  # None for a multi-buffer (no base of its own)
    galloc: int = 0        # the graph allocator owning it as a chunk, if any
    buft: int = 0          # its buffer type (for chunks of a graph allocator)

    def holds(self, address: int) -> bool:
        return self.base <= address < self.base + max(self.size, 1)


@dataclass
class _OpenCall:
    call: rf.Call
    replayed: bool = False
    galloc: _Galloc | None = None
    graph: Graph | None = None
    result: bool | None = None
    sizes: list[int] | None = None
    new_chunks: list[Buffer] = field(default_factory=list)
    error: str = ""
    computes: int = 0  # backend computes nested in a scheduler compute
    inner: bool = False  # ggml-cpu's own compute inside a backend's: that compute's work
    #: ggml_backend_alloc_ctx_tensors_from_buft: the tensor allocator replayed on each new buffer
    tallocs: dict[int, TensorAllocator] = field(default_factory=dict)
    compute_id: int = -1  # the compute it began (a backend's async compute)


@dataclass
class _Galloc:
    ga: GraphAllocator
    lib: int


def demangle(names: set[str]) -> dict[str, str]:
    """C++ names made readable with ``c++filt`` when it is installed (else unchanged)."""
    mangled = sorted(n for n in names if n.startswith("_Z"))
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return {}
    try:
        done = subprocess.run([tool], input="\n".join(mangled), capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    out = done.stdout.split("\n")
    return {m: d for m, d in zip(mangled, out) if d} if len(out) >= len(mangled) else {}


class Importer:
    """Replays one process's records (see the module docstring); run inside a trace session."""

    def __init__(self, records: list[rf.Record], *, program: str = "", cut_at: int | None = None) -> None:
        self.records = records
        self.result = ImportResult(program=program, n_records=len(records), cut_at=cut_at)
        self.libs: dict[int, rf.Library] = {}
        self.rules: dict[int, AllocatorRules] = {}
        self.contexts: dict[int, Context] = {}
        self.dtypes: dict[tuple[int, int], DType] = {}
        self.ops: dict[tuple[int, int, int], str] = {}
        self.bufts: dict[int, BufferType] = {}
        self.buffers: dict[int, _RealBuffer] = {}
        #: freed buffers by their object's address (the last one freed there): tensors the program
        #: keeps still point at them, stale, as the replayed allocator's tensors do
        self.freed: dict[int, _RealBuffer] = {}
        self._by_base: list[tuple[int, _RealBuffer]] = []  # live buffers sorted by base, for lookups
        self._by_base_dirty = False
        self.tensors: dict[int, _Mirror] = {}        # by address: the tensor living there now
        self._root_at: dict[int, _Mirror] = {}       # by real data address: the root tensor placed there
        self._by_id: dict[int, _Mirror] = {}         # by mirror tensor id
        self.gallocs: dict[int, _Galloc] = {}
        self.scheds: dict[int, int] = {}             # sched pointer -> sched id
        self._n_scheds = 0
        self._early_scheds: set[int] = set()         # given an id by a reset before their record
        self.backends: dict[int, str] = {}
        self.graphs: dict[int, tuple[tuple[int, ...], tuple[int, ...], Graph]] = {}
        self.stack: list[_OpenCall] = []             # the open calls of the thread whose records these are
        self._stacks: dict[int, list[_OpenCall]] = {0: self.stack}  # by thread id (rf.Thread)
        self._locs: dict[int, ev.Location | None] = {}
        self._tid = 0
        self.dirty: dict[int, None] = {}             # tensors whose memory must be synced
        self.now = 0
        self.loc: ev.Location | None = None
        self.sites: dict[str, str] = demangle({r.site.split("\t", 1)[-1] for r in records if isinstance(r, rf.Call)})
        self._unknown_memory: dict[int, Buffer] = {}
        self._compute_ids = itertools.count()
        self._placeholder: Buffer | None = None
        self._buffer_sizes: dict[int, list[ComputeBuffer]] = {}
        self._at = 0  # the record being imported
        self._cpu_computes = 0  # ggml-cpu's own computes outside any backend's

    # -- driving -------------------------------------------------------------------------
    def run(self) -> ImportResult:
        """Emit the events of the whole record (call inside ``vizalloc.trace(...)``)."""
        if not recorder.active():
            raise CaptureImportError("Importer.run emits trace events: call it inside `with vizalloc.trace(path):`")
        handlers = {
            rf.Hello: self._hello, rf.Library: self._library, rf.TypeInfo: self._type, rf.OpInfo: self._op,
            rf.BufferTypeInfo: self._buft, rf.BufferInfo: self._buffer, rf.BufferFree: self._buffer_free,
            rf.BufferClear: self._buffer_clear, rf.BufferUsage: self._buffer_usage, rf.TensorBytes: self._tensor,
            rf.Call: self._call, rf.Return: self._return, rf.Place: self._place, rf.GallocInfo: self._galloc,
            rf.SchedInfo: self._sched, rf.Bye: self._bye, rf.Note: self._note, rf.AllocSize: self._alloc_size,
            rf.BackendInfo: self._backend, rf.TensorIo: self._io, rf.Thread: self._thread,
        }
        # the mirrors die with the import: their addresses are the next import's too
        with recorder.replaying(lambda: self.now, lambda: self.loc), own_addresses():
            index = 0
            try:
                for index, record in enumerate(self.records):
                    self._at = index
                    if self.libs and all(lib.status < 0 for lib in self.libs.values()):
                        break  # every ggml it used was refused: nothing after is read (that is the finding)
                    if self.dirty and not isinstance(record, (rf.TensorBytes, rf.Place)):
                        self._sync_dirty()
                    handlers[type(record)](record)  # type: ignore[operator]
                index = len(self.records)
                if self.dirty:
                    self._sync_dirty()
            except (CaptureImportError, rf.CaptureFormatError) as exc:
                self._stop(index, exc)
            else:
                if not self.libs:
                    # the capture saw no ggml call: what it found is in its notes (ggml linked
                    # into one of the program's own objects, or loaded and not used)
                    said = "; ".join(self.result.notes) or "the capture holds no call of any ggml"
                    recorder.emit(ev.ProcessCaptured, self.result.program, self.result.pid, "", "", "", said, loc=None)
                    self._incomplete(0, "", "", "every ggml call of the program", said, nothing=True)
                if self.result.cut_at is not None:
                    self._incomplete(len(self.records), "", "", "the rest of the capture",
                                     f"the capture file ends inside a record (cut at byte {self.result.cut_at:,}): "
                                     "the process stopped mid-write, and what it did after its last flush is lost")
        self.result.compute_buffers = self._compute_buffers()
        if self._cpu_computes and not self.result.replayed_calls:
            self.result.notes.append(
                f"ggml computed {self._cpu_computes} graph(s) with ggml_graph_compute and no graph allocator: their "
                "tensors are in memory the program's contexts allocated themselves, placed as observed; no "
                "allocator call was there to replay and check")
        return self.result

    def _stop(self, index: int, exc: VizallocError) -> None:
        """The import cannot go on at record ``index``: say where and why, in the trace too."""
        call = self._call_at(index)
        tensor = getattr(exc, "tensor", "")
        missing = getattr(exc, "missing", "") or "a record the import needs"
        where = f" in {call}" if call else ""
        self._incomplete(index, call, tensor, missing,
                         f"the import stopped at record {index:,} of {len(self.records):,}{where}: {exc}")

    def _call_at(self, index: int) -> str:
        """The ggml call record ``index`` belongs to: the capture describes a call's tensors
        just before its own record (or a placement's, an access's), so it is the next record
        that is not a description, else the innermost open call."""
        for record in itertools.islice(self.records, index, index + 4096):
            if isinstance(record, rf.Call):
                return record.kind.function
            if isinstance(record, rf.Place):
                tensor_alloc = record.kind == rf.PlaceKind.TENSOR_ALLOC
                return "ggml_backend_tensor_alloc" if tensor_alloc else "ggml_backend_view_init"
            if isinstance(record, rf.TensorIo):
                return _IO_FUNCTIONS[record.kind]
            if not isinstance(record, _DESCRIPTIONS):
                break
        return self.stack[-1].call.kind.function if self.stack else ""

    def _incomplete(self, index: int, call: str, tensor: str, missing: str, reason: str, *,
                    nothing: bool = False) -> None:
        """Say in the trace where the import stopped (``nothing``: the capture holds no ggml call)."""
        self.result.incomplete = reason
        recorder.emit(ev.CaptureIncomplete, index, 0 if nothing else len(self.records), call, tensor, missing,
                      reason)

    # -- process and library -------------------------------------------------------------
    def _hello(self, r: rf.Hello) -> None:
        self.result.pid = r.pid
        if not self.result.program:
            program = shlex.join(r.argv) if r.argv else r.exe
            self.result.program = f"{program} (image {r.image} of pid {r.pid}, after exec)" if r.image else program
        self.now = r.t_ns

    def _thread(self, r: rf.Thread) -> None:
        """The records that follow come from thread ``r.tid``: its own open calls and call site."""
        self._locs[self._tid] = self.loc
        self._tid = r.tid
        self.stack = self._stacks.setdefault(r.tid, [])
        self.loc = self._locs.get(r.tid)

    def _library(self, r: rf.Library) -> None:
        if r.lib in self.libs and self.libs[r.lib].status == r.status:
            return
        self.libs[r.lib] = r
        self.result.libraries.append(r)
        if r.status < 0:
            note = (f"ggml {r.version} at {r.path} was not read: {r.reason} (vizalloc reads the layout of "
                    f"ggml {SUPPORTED[0]} to {SUPPORTED[1]})")
            self.result.notes.append(note)
            recorder.emit(ev.ProcessCaptured, self.result.program, self.result.pid, r.version, r.path, "", note, loc=None)
            # nothing this ggml does is recorded from here on: the trace cannot speak for it
            self._incomplete(self._at, "", "", f"every call of the ggml at {r.path}", note)
            return
        rules = rules_for(r.version)
        self.rules[r.lib] = rules
        # the library is described when the capture first needs it, which can be after its
        # first graph allocator was made: those follow its rules too
        for g in self.gallocs.values():
            if g.lib == r.lib:
                g.ga.rules = rules
        note = "" if is_known(r.version) else (
            f"ggml {r.version} is not a version vizalloc was checked against; its graphs are replayed with the "
            f"rules of {rules.version} and every difference is reported")
        if note:
            self.result.notes.append(note)
        recorder.emit(ev.ProcessCaptured, self.result.program, self.result.pid, r.version, r.path, rules.version,
                      note, loc=None)

    def _ctx(self, lib: int) -> Context:
        ctx = self.contexts.get(lib)
        if ctx is None:
            ctx = self.contexts[lib] = Context(f"ggml ({self._version(lib)})")
        return ctx

    def _version(self, lib: int) -> str:
        info = self.libs.get(lib)
        return info.version if info else "unknown"

    def _type(self, r: rf.TypeInfo) -> None:
        try:
            dt = DType.from_label(r.name)
        except ValueError:
            # a type this vizalloc does not know: a replay needs its sizes only, so a known type
            # with the same block size and bytes per block stands in for it
            same = next((d for d in DType if (d.blck_size, d.type_size) == (r.blck_size, r.type_size)), None)
            if same is None:
                raise CaptureImportError(
                    f"the traced ggml {self._version(r.lib)} uses tensor type {r.name!r} (id {r.type_id}: "
                    f"{r.blck_size} elements in {r.type_size} bytes per block), which this vizalloc does not know "
                    "and no type it knows has these sizes; upgrade vizalloc",
                    tensor="", missing=f"the sizes of tensor type {r.name!r}") from None
            self.result.notes.append(
                f"tensor type {r.name!r} (id {r.type_id}) of ggml {self._version(r.lib)} is not one vizalloc knows: "
                f"its tensors are imported as {same.label} ({r.blck_size} elements in {r.type_size} bytes per "
                "block, the same sizes)")
            self.dtypes[r.lib, r.type_id] = same
            return
        if (dt.blck_size, dt.type_size) != (r.blck_size, r.type_size):
            raise CaptureImportError(
                f"tensor type {r.name} has {r.blck_size} elements in {r.type_size} bytes per block in the traced "
                f"ggml {self._version(r.lib)}, but {dt.blck_size} in {dt.type_size} in vizalloc; upgrade vizalloc")
        self.dtypes[r.lib, r.type_id] = dt

    def _op(self, r: rf.OpInfo) -> None:
        name = r.name
        if r.family == rf.OpFamily.OP and (name not in Op.__members__ or name == Op.OPAQUE.name):
            # a replay needs sizes, types, views and in-place rules, not kernels: an op this
            # vizalloc does not know is imported as an opaque node, in no in-place rule
            self.result.notes.append(
                f"op {name!r} (id {r.op_id}) of ggml {self._version(r.lib)} is not one vizalloc knows: its tensors "
                "are imported as OPAQUE nodes with the sizes, types, sources and views the process gave them "
                "(no in-place rule names it; a difference it makes is reported)")
            name = Op.OPAQUE.name
        self.ops[r.lib, int(r.family), r.op_id] = name

    def _note(self, r: rf.Note) -> None:
        self.result.notes.append(r.text)

    def _bye(self, r: rf.Bye) -> None:
        self.result.ggml_objects = r.ggml_objects

    def _alloc_size(self, r: rf.AllocSize) -> None:
        # Buffer types with their own alloc size (device backends padding quantized rows) are
        # replayed with ggml_nbytes; say so once per buffer type
        buft = self.bufts.get(r.buft)
        text = (f"buffer type {buft.name if buft else hex(r.buft)} gives some tensors more bytes than ggml_nbytes "
                "(ggml_backend_buft_get_alloc_size); vizalloc's replay uses ggml_nbytes, so offsets after them may "
                "differ (reported as replay differences)")
        if text not in self.result.notes:
            self.result.notes.append(text)

    # -- buffers ---------------------------------------------------------------------------
    def _buft(self, r: rf.BufferTypeInfo) -> None:
        if r.buft not in self.bufts:
            self.bufts[r.buft] = BufferType(r.name, alignment=max(1, r.alignment), max_size=r.max_size,
                                            device=VIRTUAL, is_host=r.is_host)

    def _backend(self, r: rf.BackendInfo) -> None:
        self.backends[r.backend] = r.name

    def _buffer(self, r: rf.BufferInfo) -> None:
        old = self.buffers.get(r.buffer)
        if old is not None and r.how & rf.BufferHow.SEEN:
            return  # already known (a buffer described again after the capture forgot it)
        buft = self.bufts.get(r.buft)
        if buft is None:  # checked first: a graph allocator's chunk was paired without its type
            raise CaptureImportError(f"buffer {r.buffer:#x} names a buffer type never described")
        owner = self.gallocs.get(r.owner_galloc) if r.owner_galloc else None
        call = self._replay_call()
        if owner is not None and call is not None and call.galloc is owner:
            self._pair_chunk(call, r)
            return
        if r.how & rf.BufferHow.MULTI:
            self._add_buffer(_RealBuffer(r.buffer, 0, r.size, None))
            return
        cause = "ggml_backend_buft_alloc_buffer" if r.how & rf.BufferHow.ALLOCATED else "seen in use"
        if old is not None and old.mirror is not None and r.how & rf.BufferHow.ALLOCATED:
            _retyped(old.mirror, buft)
        mirror = buft.alloc_buffer(r.size, _USAGES.get(r.usage, Usage.ANY), cause=cause)
        self._add_buffer(_RealBuffer(r.buffer, r.base, r.size, mirror))

    def _add_buffer(self, rb: _RealBuffer) -> None:
        self.buffers[rb.ptr] = rb
        self._by_base_dirty = True
        self.result.buffers += 1

    def _pair_chunk(self, call: _OpenCall, r: rf.BufferInfo) -> None:
        """A chunk buffer the real allocator made during a replayed call: the replay's next one."""
        if not call.new_chunks:
            self._mismatch("buffers", -1, f"a {r.size}-byte buffer", "no new buffer", call)
            buft = self.bufts[r.buft]
            mirror = buft.alloc_buffer(r.size, _USAGES.get(r.usage, Usage.ANY), cause="real allocator (not replayed)")
            self._add_buffer(_RealBuffer(r.buffer, r.base, r.size, mirror, r.owner_galloc, r.buft))
            return
        mirror = call.new_chunks.pop(0)
        if mirror.nbytes != r.size:
            self._mismatch("buffer_size", -1, f"{r.size} bytes", f"{mirror.nbytes} bytes (buffer #{mirror.id})", call)
        self._add_buffer(_RealBuffer(r.buffer, r.base, r.size, mirror, r.owner_galloc, r.buft))

    def _buffer_free(self, r: rf.BufferFree) -> None:
        rb = self.buffers.pop(r.buffer, None)
        self._by_base_dirty = True
        if rb is None or rb.mirror is None:
            return
        self.freed[r.buffer] = rb
        if rb.galloc:
            # the replayed allocator frees its own chunks when it re-plans; a real free it did
            # not make is a difference
            if not rb.mirror.freed:
                call = self._replay_call()
                if call is not None:
                    self._mismatch("buffers", -1, f"buffer #{rb.mirror.id} freed", "kept", call)
                rb.mirror.free(cause="ggml_backend_buffer_free")
            return
        rb.mirror.free(cause="ggml_backend_buffer_free")

    def _buffer_clear(self, r: rf.BufferClear) -> None:
        rb = self.buffers.get(r.buffer)
        if rb is not None and rb.mirror is not None:
            rb.mirror.clear(r.value)

    def _buffer_usage(self, r: rf.BufferUsage) -> None:
        rb = self.buffers.get(r.buffer)
        if rb is not None and rb.mirror is not None:
            rb.mirror.set_usage(_USAGES.get(r.usage, Usage.ANY))

    def _buffer_at(self, address: int) -> _RealBuffer | None:
        """The live buffer whose bytes hold ``address``."""
        if self._by_base_dirty:
            self._by_base = sorted(((rb.base, rb) for rb in self.buffers.values() if rb.mirror is not None),
                                   key=lambda x: x[0])
            self._by_base_dirty = False
        i = bisect_right(self._by_base, address, key=lambda x: x[0]) - 1
        if i >= 0:
            _, rb = self._by_base[i]
            if rb.holds(address):
                return rb
        return None

    # -- tensors ---------------------------------------------------------------------------
    def _tensor(self, r: rf.TensorBytes) -> None:
        info = self.libs.get(r.lib)
        size = info.tensor_size if info is not None and info.status >= 0 else TENSOR_SIZE
        if len(r.raw) != size or name_length(size) is None:
            raise rf.CaptureFormatError(f"a tensor record of {len(r.raw)} bytes (expected {size})")
        s = decode(r.address, r.raw)
        m = self.tensors.get(r.address)
        if m is None or not m.struct.same_tensor(s) or not self._same_sources(m) or self._became_copy(m, s):
            m = self._new_mirror(r.lib, s)
        elif m.struct.flags != s.flags:
            m.tensor._set_flags(s.flags)
        m.struct = s
        self.dirty[r.address] = None

    def _same_sources(self, m: _Mirror) -> bool:
        """Whether the tensors at the addresses ``m`` reads are still the ones it was made with: a
        tensor rebuilt unchanged over a source that was renewed at the same address is new too."""
        t, s = m.tensor, m.struct
        for k, address in enumerate(s.src):
            if address and (k >= len(t.src) or self._current(address) is not t.src[k]):
                return False
        return not s.view_src or self._current(s.view_src) is t.view_src

    def _current(self, address: int) -> Tensor | None:
        m = self.tensors.get(address)
        return m.tensor if m is not None else None

    def _mirror_of(self, address: int, what: str, tensor: str = "") -> Tensor:
        m = self.tensors.get(address)
        if m is None:
            raise CaptureImportError(f"the capture names {what} at {address:#x} before describing it",
                                     tensor=tensor or f"{address:#x}",
                                     missing=f"the description of the tensor at {address:#x}")
        return m.tensor

    def _new_mirror(self, lib: int, s: TensorStruct) -> _Mirror:
        dtype = self.dtypes.get((lib, s.type_id))
        op_name = self.ops.get((lib, 0, s.op_id))
        if dtype is None or op_name is None:
            raise CaptureImportError(f"tensor {s.name!r} at {s.address:#x} has a type or op never described")
        # ggml_cast makes its result its own second source: the slot is set once the tensor exists
        srcs = [self._mirror_of(a, f"source {k} of {s.name!r}", s.name) if a and a != s.address else None
                for k, a in enumerate(s.src)]
        view_src = self._mirror_of(s.view_src, f"the view source of {s.name!r}", s.name) if s.view_src else None
        params = _op_params(s, op_name, self.ops, lib)
        original = self._copied(s)
        t = self._ctx(lib).new_tensor_impl(
            dtype, s.ne, view_src, s.view_offs, nb=s.nb, op=Op[op_name], src=srcs, op_params=params, name=s.name,
            copy_of=original,
        )
        for k, a in enumerate(s.src):
            if a and a == s.address:
                while len(t.src) <= k:
                    t.src.append(None)
                t.src[k] = t
                recorder.emit(ev.TensorSrcSet, t.id, k, t.id)
        if s.flags:
            t._set_flags(s.flags)
        m = _Mirror(t, s, lib, original)
        self.tensors[s.address] = m
        self._by_id[t.id] = m
        return m

    def _copied(self, s: TensorStruct) -> Tensor | None:
        """The tensor a new tensor is a copy of: a root first seen outside the allocator with its
        data already set to exactly the bytes of another live root of the same type and shape
        (ggml-opt's dup_graph copies data, buffer and extra). Such tensors alias on purpose:
        what one writes the other reads, as with a view."""
        if not s.data or s.view_src or self._replay_call() is not None:
            return None
        m = self._root_at.get(s.data)
        if m is None or self.tensors.get(m.struct.address) is not m or m.struct.data != s.data \
                or m.tensor.storage is None or m.tensor.storage.freed:
            return None
        o = m.struct
        if (o.type_id, o.ne, o.nb) != (s.type_id, s.ne, s.nb):
            return None
        return m.tensor

    def _became_copy(self, m: _Mirror, s: TensorStruct) -> bool:
        """Whether the tensor at ``m``'s address is now a copy of another root: its data was set,
        outside the allocator, to exactly that root's bytes. ggml-opt makes its graph copies in
        a context it re-creates over the same memory, so a copy may sit where the previous
        round's copy of the same tensor was, byte for byte but for its data (or with the same
        data, in a new buffer at the old one's address)."""
        if not s.data or s.view_src:
            return False
        original = self._copied(s)
        return original is not None and original is not m.tensor and m.copy_of is not original

    def _sync_dirty(self) -> None:
        """Bring changed tensors' memory up to date, except during a replayed allocator call,
        whose tensors are compared all at once when it returns."""
        if self._replay_call() is not None:
            return
        dirty, self.dirty = self.dirty, {}
        for address in dirty:
            self._force(self.tensors[address], ev.PlacedBy.OBSERVED)

    def _where(self, s: TensorStruct) -> tuple[Buffer, int] | None:
        """The mirror buffer and offset of a real tensor's data (None: no data)."""
        if not s.data:
            return None
        rb = self.buffers.get(s.buffer) if s.buffer else None
        if rb is None or rb.mirror is None or not rb.holds(s.data):
            # a stale pointer into a freed buffer stays there (it is not memory of a later
            # buffer that happens to hold the address, nor memory of no buffer at all)
            gone = self.freed.get(s.buffer) if s.buffer else None
            rb = gone if gone is not None and gone.mirror is not None and gone.holds(s.data) else \
                self._buffer_at(s.data)
        if rb is not None and rb.mirror is not None:
            return rb.mirror, s.data - rb.base
        # memory that is no ggml buffer (a context that allocated its own): a buffer of its own
        root = s.view_src or s.address
        buf = self._unknown_memory.get(root)
        if buf is None:
            size = max(self.tensors[root].tensor.nbytes if root in self.tensors else 0, 1)
            host = BufferType("host memory", alignment=1, device=VIRTUAL)
            buf = self._unknown_memory[root] = host.alloc_buffer(size, cause="not a ggml buffer")
        return buf, (s.view_offs if s.view_src else 0)

    def _force(self, m: _Mirror, by: ev.PlacedBy) -> bool:
        """Give the mirror the real tensor's memory; False if it had it already."""
        t = m.tensor
        where = self._where(m.struct)
        if where is not None and not m.struct.view_src:
            held = self._root_at.get(m.struct.data)
            # the root there is the one in this allocation: a root left in a freed buffer at the
            # same address is another allocation's (a buffer is its allocation, not its address)
            if held is None or self.tensors.get(held.struct.address) is not held or held.struct.data != m.struct.data \
                    or held.tensor.storage is not where[0]:
                self._root_at[m.struct.data] = m
        if where is None and t.data is None:
            # a buffer but no data yet (a model loaded with no_alloc): ggml's planner counts
            # such a tensor as allocated elsewhere, so the mirror keeps the buffer too
            rb = self.buffers.get(m.struct.buffer) if m.struct.buffer else None
            buffer = rb.mirror if rb is not None else None
            if t.buffer is buffer or (buffer is None and m.struct.buffer == 0):
                return False
            if buffer is None:  # a buffer the capture never described: any non-None marker will do
                buffer = self._placeholder_buffer()
            t.buffer = buffer
            return True
        if where is None:  # the real tensor lost its memory
            memory.clear_tensor_pointers(t, by="program")
            return True
        buf, offset = where
        original = m.copy_of
        if original is not None and original.storage is buf and original.offset == offset:
            by = ev.PlacedBy.COPY
        return memory.observe_placement(t, buf, offset, names_buffer=bool(m.struct.buffer), by=by)

    def _placeholder_buffer(self) -> Buffer:
        if self._placeholder is None:
            self._placeholder = BufferType("unknown", device=VIRTUAL).alloc_buffer(0, cause="never described")
        return self._placeholder

    def _verify(self, call: _OpenCall) -> None:
        """After a replayed call: every tensor of its graph must sit where the real one does."""
        graph = call.graph
        if graph is None:
            return
        seen: set[int] = set()
        for t in (*graph.leafs, *graph.nodes):
            for u in (t.view_src, t) if t.view_src is not None else (t,):
                if u.id in seen:
                    continue
                seen.add(u.id)
                m = self._by_id.get(u.id)
                if m is None or self.tensors.get(m.struct.address) is not m:
                    continue
                replayed = _describe_placement(u)
                if m.struct.data:
                    self.result.placements_checked += 1
                if self._force(m, ev.PlacedBy.OBSERVED):
                    self._mismatch("offset", u.id, _describe(self._where(m.struct)), replayed, call)

    def _place(self, r: rf.Place) -> None:
        m = self.tensors.get(r.tensor)
        if m is None:
            raise CaptureImportError(f"a placement names the tensor at {r.tensor:#x} before describing it",
                                     tensor=f"{r.tensor:#x}", missing=f"the description of the tensor at {r.tensor:#x}")
        if self._in_replay(r.call) or r.result != 0:
            return  # the replayed allocator's own placement (verified when its call returns), or a refused one
        self.dirty.pop(r.tensor, None)
        t = m.tensor
        rb = self.buffers.get(r.buffer)
        ctx_call = self.stack[-1] if self.stack and self.stack[-1].call.kind == rf.CallKind.ALLOC_CTX_TENSORS \
            and self.stack[-1].call.call == r.call else None
        if ctx_call is not None and r.kind == rf.PlaceKind.TENSOR_ALLOC and rb is not None \
                and rb.mirror is not None and t.view_src is None:
            self._talloc(ctx_call, m, rb)
            return
        if r.kind == rf.PlaceKind.TENSOR_ALLOC and rb is not None and rb.mirror is not None and t.view_src is None:
            if t.data is not None:
                memory.clear_tensor_pointers(t, by="program")
            memory.tensor_alloc(rb.mirror, t, rb.mirror.base + (r.address - rb.base), by=ev.PlacedBy.TALLOCR)
        elif r.kind == rf.PlaceKind.VIEW_INIT and t.view_src is not None and t.view_src.data is not None:
            if t.data is not None:
                memory.clear_tensor_pointers(t, by="program")
            memory.view_init(t)
        self._force(m, ev.PlacedBy.OBSERVED)  # whatever the runtime's rules did differently, the real one wins

    def _talloc(self, call: _OpenCall, m: _Mirror, rb: _RealBuffer) -> None:
        """A placement by ggml's tensor allocator (ggml_backend_alloc_ctx_tensors_from_buft): the
        replay's own allocator places the tensor after the ones before it in that buffer, and
        its offset is checked against the process's."""
        assert rb.mirror is not None
        t = m.tensor
        talloc = call.tallocs.get(rb.ptr)
        if talloc is None:
            talloc = call.tallocs[rb.ptr] = TensorAllocator(rb.mirror)
        if t.data is not None or t.buffer is not None:
            memory.clear_tensor_pointers(t, by="program")
        replayed = ""
        try:
            talloc.alloc(t)
            replayed = _describe_placement(t)
        except VizallocError as exc:
            replayed = f"{type(exc).__name__}: {exc}"
        self.result.placements_checked += 1
        if self._force(m, ev.PlacedBy.OBSERVED):
            self._mismatch("offset", t.id, _describe(self._where(m.struct)), replayed, call)

    def _check_tallocs(self, call: _OpenCall) -> None:
        """After ggml_backend_alloc_ctx_tensors_from_buft: each buffer it made is as large as the
        replay's tensor allocator filled it (ggml sizes it for exactly those tensors)."""
        for handle, talloc in call.tallocs.items():
            rb = self.buffers.get(handle)
            if rb is not None and rb.size != talloc.offset:
                self._mismatch("buffer_size", -1, f"{rb.size} bytes", f"{talloc.offset} bytes "
                               f"(buffer #{talloc.buffer.id} filled by the replay's tensor allocator)", call)

    def _io(self, r: rf.TensorIo) -> None:
        t = self._mirror_of(r.tensor, "a tensor read or written")
        if r.kind == rf.IoKind.COPY:
            src = self._mirror_of(r.source, "a copied tensor")
            recorder.emit(ev.TensorCopy, src.id, t.id, src.nbytes)
        elif r.kind == rf.IoKind.GET:
            recorder.emit(ev.TensorGet, t.id, r.offset, r.size)
        else:
            recorder.emit(ev.TensorSet, t.id, r.offset, r.size)

    # -- allocators and calls ----------------------------------------------------------------
    def _galloc(self, r: rf.GallocInfo) -> None:
        bufts = []
        for p in r.bufts:
            buft = self.bufts.get(p)
            if buft is None:
                raise CaptureImportError(f"graph allocator {r.galloc:#x} names a buffer type never described")
            bufts.append(buft)
        ga = GraphAllocator(bufts, rules=self.rules.get(r.lib, DEFAULT))
        self.gallocs[r.galloc] = _Galloc(ga, r.lib)

    def _sched(self, r: rf.SchedInfo) -> None:
        if r.sched in self._early_scheds:
            self._early_scheds.discard(r.sched)
        else:
            self.scheds[r.sched] = self._n_scheds
            self._n_scheds += 1
        for b in r.backends:
            self.backends[b.backend] = b.name

    def _replay_call(self) -> _OpenCall | None:
        """The replayed allocator call that is running (the outermost one), if any."""
        for c in self.stack:
            if c.replayed:
                return c
        return None

    def _in_replay(self, call_id: int) -> bool:
        """Whether a record made in call ``call_id`` belongs to the replayed allocator call that
        is open: that call or one inside it. Another thread's placement while it runs (its
        call is another, or none) is the program's own, as any other."""
        replayed = self._replay_call()
        if replayed is None:
            return False
        inside = False
        for c in self.stack:
            inside = inside or c is replayed
            if inside and c.call.call == call_id:
                return True
        return False

    def _location(self, call: rf.Call) -> ev.Location:
        obj, _, fn = call.site.partition("\t")
        fn = self.sites.get(fn, fn)
        return ev.Location(obj or self.result.program or "?", 0, f"{fn} -> {call.kind.function}" if fn
                           else call.kind.function)

    def _graph(self, call: rf.Call) -> Graph:
        # The capture writes a tensor again only when its bytes change, so a tensor rebuilt
        # unchanged over a renewed source was not looked at: renew it now, sources first
        # (leafs, then nodes in execution order).
        for address in (*call.leafs, *call.nodes):
            m = self.tensors.get(address)
            if m is not None and not self._same_sources(m):
                self._force(self._new_mirror(m.struct_lib, m.struct), ev.PlacedBy.OBSERVED)
        nodes = tuple(self._mirror_of(a, "a graph node").id for a in call.nodes)
        leafs = tuple(self._mirror_of(a, "a graph leaf").id for a in call.leafs)
        cached = self.graphs.get(call.graph)
        if cached is not None and cached[0] == nodes and cached[1] == leafs:
            return cached[2]
        g = Graph.of([self.tensors[a].tensor for a in call.nodes], [self.tensors[a].tensor for a in call.leafs])
        self.graphs[call.graph] = (nodes, leafs, g)
        return g

    def _call(self, r: rf.Call) -> None:
        self.now = r.t_ns
        if not self.stack:  # the program's own call site: the outermost ggml call
            self.loc = self._location(r)
        open_ = _OpenCall(r)
        kind = r.kind
        if kind in rf.CPU_COMPUTES and any(c.call.kind in rf.COMPUTE_CALLS for c in self.stack):
            open_.inner = True
        if kind in rf.GALLOC_CALLS and self._replay_call() is None:
            self._replay(open_)
        elif kind == rf.CallKind.ALLOC_CTX_TENSORS and self._replay_call() is None:
            self.result.replayed_calls += 1  # its placements are replayed one by one (_place)
        elif kind == rf.CallKind.BACKEND_COMPUTE_ASYNC:
            backend = self.backends.get(r.obj, "?")
            sched = next((c for c in self.stack if c.call.kind in _SCHED_COMPUTES), None)
            if sched is not None:  # one split of the scheduler's graph, run by one backend
                nodes = tuple(self._mirror_of(a, "a split node").id for a in r.nodes)
                recorder.emit(ev.SchedSplit, self.scheds.get(sched.call.obj, -1), self._graph(sched.call).id,
                              sched.computes, backend, nodes, ())
            open_.compute_id = self._compute(r, backend)
            for outer in self.stack:
                outer.computes += 1
        elif kind == rf.CallKind.SCHED_RESET:
            sched_id = self.scheds.get(r.obj)
            if sched_id is None:
                # ggml_backend_sched_new resets the scheduler it makes before it returns, so
                # the first reset comes before the record that describes the scheduler (it
                # was shown as "scheduler #-1"): the scheduler gets its id here
                sched_id = self.scheds[r.obj] = self._n_scheds
                self._n_scheds += 1
                self._early_scheds.add(r.obj)
            recorder.emit(ev.SchedReset, sched_id)
        elif kind == rf.CallKind.SCHED_FREE:
            self.scheds.pop(r.obj, None)  # another scheduler may be made at the same address
        elif kind == rf.CallKind.GALLOC_FREE:
            g = self.gallocs.pop(r.obj, None)
            if g is not None:
                for chunks in g.ga.buffers:
                    for b in chunks or ():
                        if not b.freed:
                            b.free(cause="ggml_gallocr_free")
        self.stack.append(open_)

    def _replay(self, open_: _OpenCall) -> None:
        r = open_.call
        g = self.gallocs.get(r.obj)
        if g is None:
            raise CaptureImportError(f"{r.kind.function} on a graph allocator at {r.obj:#x} that was never created")
        open_.replayed, open_.galloc = True, g
        open_.graph = graph = self._graph(r)
        ga = g.ga
        before = {id(b) for chunks in ga.buffers for b in chunks or ()}
        self.result.replayed_calls += 1
        try:
            if r.kind == rf.CallKind.GALLOC_RESERVE_N:
                open_.result = ga.reserve_n(graph, r.node_ids, r.leaf_ids)
            elif r.kind == rf.CallKind.GALLOC_ALLOC_GRAPH:
                open_.result = ga.alloc_graph(graph)
            else:
                open_.sizes = ga.reserve_n_size(graph, r.node_ids, r.leaf_ids)
        except VizallocError as exc:
            open_.error = f"{type(exc).__name__}: {exc}"
        seen: set[int] = set()
        for chunks in ga.buffers:
            for b in chunks or ():
                if id(b) not in before and id(b) not in seen:
                    seen.add(id(b))
                    open_.new_chunks.append(b)

    def _return(self, r: rf.Return) -> None:
        self.now = r.t_ns
        if not self.stack or self.stack[-1].call.call != r.call:
            raise rf.CaptureFormatError(f"call {r.call} ({r.kind.function}) returns but is not the innermost open call")
        open_ = self.stack[-1]
        if r.kind != open_.call.kind:
            raise rf.CaptureFormatError(f"call {r.call} began as {open_.call.kind.function} but returns as "
                                        f"{r.kind.function}")
        if open_.replayed:
            self._verify(open_)
            self._check_return(open_, r)
        elif open_.tallocs:
            self._check_tallocs(open_)
        self.stack.pop()
        if open_.replayed and self.dirty:
            self._sync_dirty()
        if r.kind == rf.CallKind.BACKEND_COMPUTE_ASYNC:
            recorder.emit(ev.ComputeEnd, open_.compute_id, r.t_ns - open_.call.t_ns)
        elif r.kind in rf.COMPUTE_CALLS and open_.computes == 0 and not open_.inner:
            # a synchronous or scheduler compute whose backend computes were not seen (they
            # ran inside ggml without a call we could interpose), or ggml-cpu's own compute
            # over context memory: its own graph, as one compute
            backend = "CPU" if r.kind in rf.CPU_COMPUTES else self.backends.get(open_.call.obj, "?")
            if r.kind in rf.CPU_COMPUTES:
                self._cpu_computes += 1
            self._compute(open_.call, backend, end_ns=r.t_ns)
            for outer in self.stack:
                outer.computes += 1
        if not self.stack:
            self.loc = None  # placements between calls (weights) have no call site

    def _check_return(self, open_: _OpenCall, r: rf.Return) -> None:
        real_ok = bool(r.result)
        if open_.error:
            self._mismatch("result", -1, "ok" if real_ok else "failed", open_.error, open_)
        elif open_.sizes is not None:
            if tuple(open_.sizes) != tuple(r.sizes[:len(open_.sizes)]):
                self._mismatch("buffer_size", -1, f"sizes {list(r.sizes)}", f"sizes {open_.sizes}", open_)
        elif open_.result is not None and open_.result != real_ok:
            self._mismatch("result", -1, str(real_ok), str(open_.result), open_)
        for b in open_.new_chunks:
            self._mismatch("buffers", -1, "no buffer", f"a {b.nbytes}-byte buffer #{b.id}", open_)
        ga = open_.galloc.ga if open_.galloc else None
        if ga is not None and open_.sizes is None:
            # slots of one buffer type share one buffer (ggml_gallocr_reserve_n: two CPU
            # backends in one scheduler): it is counted once, for the first of them
            first = [next(j for j, b in enumerate(ga.bufts) if b is buft) for buft in ga.bufts]
            held: dict[int, list[int]] = {}
            for rb in self.buffers.values():
                if rb.galloc == open_.call.obj:
                    buft = self.bufts.get(rb.buft)
                    held.setdefault(next((i for i, b in enumerate(ga.bufts) if b is buft), -1), []).append(rb.size)
            self._buffer_sizes[id(ga)] = [
                ComputeBuffer(buft.name, ga.buffer_size(i), sum(held[i]) if i in held else None)
                for i, buft in enumerate(ga.bufts) if first[i] == i]
        elif ga is not None and open_.sizes is not None:
            # a measurement without buffers (llama.cpp's no_alloc): what the buffers would need
            self._buffer_sizes[id(ga)] = [ComputeBuffer(buft.name, size, None)
                                          for buft, size in zip(ga.bufts, open_.sizes)]

    def _compute(self, call: rf.Call, backend: str, end_ns: int | None = None) -> int:
        graph = self._graph(call)
        compute_id = next(self._compute_ids)
        self.result.computes += 1
        recorder.emit(ev.ComputeBegin, compute_id, graph.id, backend, len(graph.nodes))
        for index, t in enumerate(graph.nodes):
            if t.op in NOOP_OPS or not t.nelements:
                continue
            reads = tuple(s.id for s in t.src if s is not None)
            recorder.emit(ev.NodeCompute, compute_id, index, t.id, backend, reads, 0)
        if end_ns is not None:
            recorder.emit(ev.ComputeEnd, compute_id, end_ns - call.t_ns)
        return compute_id

    def _mismatch(self, what: str, tensor_id: int, observed: str, replayed: str, call: _OpenCall) -> None:
        self.result.mismatches += 1
        version = self._version(call.call.lib)
        recorder.emit(ev.ReplayMismatch, what, tensor_id, observed, replayed, call.call.kind.function, version)

    def _compute_buffers(self) -> list[ComputeBuffer]:
        """The buffers of each graph allocator's last plan (freed allocators included)."""
        return [b for sizes in self._buffer_sizes.values() for b in sizes if b.planned or b.allocated]


def _describe_placement(t: Tensor) -> str:
    storage, offset = t.storage, t.offset
    if storage is None or offset is None:
        return "no memory"
    buft = getattr(storage, "buft", None)
    return f"buffer #{storage.id} ({buft.name if buft else 'memory'}) + {offset}"


def _describe(where: tuple[Buffer, int] | None) -> str:
    if where is None:
        return "no memory"
    buf, offset = where
    return f"buffer #{buf.id} ({buf.buft.name}) + {offset}"


def _op_params(s: TensorStruct, op_name: str, ops: dict[tuple[int, int, int], str], lib: int) -> tuple[int | str, ...]:
    """The op params as ggml stores them (int32 words, trailing zeros dropped), with the
    unary or GLU function's name in front, as vizalloc's own ops record them."""
    words = list(s.op_params)
    while words and words[-1] == 0:
        words.pop()
    if op_name in ("UNARY", "GLU"):
        family = 1 if op_name == "UNARY" else 2
        first = s.op_params[0]
        return (ops.get((lib, family, first), str(first)), *words[1:])
    return tuple(words)
