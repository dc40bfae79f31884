"""The ``.vztrace`` file: a header, then self-checking frames, each holding one chunk.

Layout (all integers little-endian; ``docs/trace-format.md`` is the full description)::

    file   = header frame* end?
    header = "VZTRACE\\0" u16:version u16:flags u32:json_len json u32:crc32(all before)
    frame  = "VF" u8:type u8:flags u32:n_events u32:meta_len u64:blob_len u32:payload_crc
             u32:header_crc meta[meta_len] blob[blob_len]
    type   = 1 (a chunk of events, ``chunks.py``) | 2 (end: n_events = events in the file)
    flags  = bit 0: the chunk's meta is stored as is, outside the file's zlib stream

Frames are only ever appended, each in one write, so a file cut anywhere (a process
killed by SIGKILL, a disk full) still holds every frame written before the cut. The
reader loads that prefix and warns; a checksum or structure error raises
``TraceFormatError`` naming the byte offset.

    >>> import io
    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.trace.value import TraceHeader
    >>> from vizalloc.trace.fileformat import TraceFileWriter, read_trace
    >>> f = io.BytesIO()
    >>> w = TraceFileWriter(f, TraceHeader.new())
    >>> w.write_events([ev.Marker(1, 5, None, "hello")]); w.close()
    >>> read_trace(io.BytesIO(f.getvalue())).events[0].text
    'hello'
"""

from __future__ import annotations

import io
import json
import os
import struct
import warnings
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, fields
from typing import Any, BinaryIO

from vizalloc.errors import TraceFormatError, UsageError
from vizalloc.gcpause import gc_paused
from vizalloc.trace import events as ev
from vizalloc.trace.chunk_decoder import MAX_CHUNK_META_BYTES, ChunkDecoder, ChunkParts
from vizalloc.trace.chunk_encoder import ChunkEncoder
from vizalloc.trace.chunks import EncodeError
from vizalloc.trace.schema import BY_NAME, SCHEMA, KindSchema
from vizalloc.trace.value import FORMAT_VERSION, Trace, TraceHeader

MAGIC = b"VZTRACE\0"
FRAME_MAGIC = b"VF"
FLAG_ZLIB = 1
FRAME_CHUNK = 1
FRAME_END = 2
#: Frame flag: the chunk's metadata is stored as is, outside the file's zlib stream.
FRAME_STORED = 1

_HEAD = struct.Struct("<8sHHI")
_CRC = struct.Struct("<I")
_FRAME = struct.Struct("<2sBBIIQI")
FRAME_HEADER_SIZE = _FRAME.size + _CRC.size  # 28 bytes

#: Default number of events per batch when reading in batches (big enough to amortize the
#: per-batch numpy work, small enough that its arrays are reused instead of paged in anew).
BATCH_EVENTS = 1 << 16


#: What a file's chunks may decode to: this many bytes, plus ``MAX_INFLATE_RATIO`` times
#: the compressed metadata read so far (see ``chunk_decoder.decoded_cost``). Traces the
#: runtime writes decode to 3-60 times their compressed metadata; a decompression bomb
#: (zlib inflates up to ~1,000 times) is refused before it is inflated.
INFLATE_ALLOWANCE = 64 << 20
MAX_INFLATE_RATIO = 256
#: A frame's compressed metadata is never much bigger than the metadata it inflates to.
MAX_FRAME_META = MAX_CHUNK_META_BYTES + (1 << 20)
#: Frame lengths past this (256 TiB) are damage, whatever the file's size.
MAX_FRAME_BYTES = 1 << 48
#: Largest single read: a damaged length never makes one huge allocation.
_READ_PIECE = 16 << 20


class TraceTruncatedWarning(UserWarning):
    """A trace file ends early (its writer was killed or is still running); its prefix was loaded.

    Attributes: ``path``, ``cut_at`` (the byte where the complete frames end),
    ``file_size``, ``n_events`` and ``n_frames`` (what was read).
    """

    def __init__(self, message: str, *, path: str = "", cut_at: int = 0, file_size: int | None = None,
                 n_events: int = 0, n_frames: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.cut_at = cut_at
        self.file_size = file_size
        self.n_events = n_events
        self.n_frames = n_frames


# -- writing -------------------------------------------------------------------

#: The event schema as the header stores it (the same for every file this vizalloc writes).
_KINDS_JSON = json.dumps([[s.name, [list(p) for p in zip(s.fields, s.codecs)]] for s in SCHEMA.values()],
                         separators=(",", ":"), ensure_ascii=True)


def _header_bytes(header: TraceHeader, compressed: bool) -> bytes:
    head_json = json.dumps(asdict(header), separators=(",", ":"), ensure_ascii=True)
    body = f'{{"format":"vztrace","header":{head_json},"kinds":{_KINDS_JSON}}}'.encode("ascii")
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, FLAG_ZLIB if compressed else 0, len(body)) + body
    return head + _CRC.pack(zlib.crc32(head))


def _frame(kind: int, n_events: int, meta: bytes, blob: bytes, flags: int = 0) -> list[bytes]:
    """A frame as pieces to write in order (a large blob is not copied into one buffer)."""
    crc = zlib.crc32(blob, zlib.crc32(meta))
    head = _FRAME.pack(FRAME_MAGIC, kind, flags, n_events, len(meta), len(blob), crc)
    first = head + _CRC.pack(zlib.crc32(head)) + meta
    if len(blob) < 1 << 16:
        return [first + blob]
    return [first, blob]


class TraceFileWriter:
    """Appends chunks of events to a binary file; each ``write_events`` is one frame, one write.

    Args:
        file: a binary file opened for writing (unbuffered is best: each frame then
            reaches the OS in one ``write``, which is what makes the file crash-safe).
        header: the trace header to write first.
        compress_level: zlib level for chunk metadata (None: store it raw).
    """

    def __init__(self, file: BinaryIO, header: TraceHeader, *, compress_level: int | None = 1) -> None:
        self._file = file
        self._file_flush = getattr(file, "flush", None)
        self._encoder = ChunkEncoder(compress_level)
        self.n_events = 0
        #: Bytes written so far (header, frames, end record).
        self.nbytes = 0
        self.closed = False
        self._write([_header_bytes(header, self._encoder.compressed)])

    def _write(self, pieces: list[bytes]) -> None:
        write = self._file.write
        for data in pieces:
            n = write(data)
            if n is not None and n < len(data):  # raw files may write less than asked
                view = memoryview(data)[n:]
                while view:
                    n = write(view)
                    view = view[n:] if n is not None else view[len(view):]
            self.nbytes += len(data)
        if self._file_flush is not None:
            self._file_flush()

    def write_events(self, events: Sequence[ev.Event]) -> None:
        """Encode ``events`` as one chunk and append it (nothing for an empty list)."""
        self.write_rows([e.__class__ for e in events], events)

    def write_rows(self, classes: Sequence[type[ev.Event]], items: Sequence[Any], *, rows_only: bool = False,
                   compress_budget_ns: float | None = None) -> tuple[bytes, bytes, int, bool] | None:
        """Append one chunk of events given as kinds and events-or-rows (see ``ChunkEncoder.encode_rows``).

        ``compress_budget_ns``: compress this chunk only if that should take at most this
        long (None: always, if the file is compressed); otherwise it is stored as is.

        Returns the chunk as written, ``(meta, blob, n_events, stored)`` (what
        ``ChunkDecoder.decode`` takes, in file order), or None for no events.
        """
        if self.closed:
            raise TraceFormatError("the trace file is closed; no more events can be written")
        if not items:
            return None
        try:
            meta, blob = self._encoder.encode_rows(classes, items, rows_only=rows_only,
                                                   compress_budget_ns=compress_budget_ns)
        except EncodeError as exc:
            raise TraceFormatError(f"cannot write event: {exc}") from exc
        stored = FRAME_STORED if self._encoder.stored and self._encoder.compressed else 0
        self._write(_frame(FRAME_CHUNK, len(items), meta, blob, stored))
        self.n_events += len(items)
        return meta, blob, len(items), bool(stored)

    def close(self) -> None:
        """Append the end record (the file is then known to be complete)."""
        if not self.closed:
            self._write(_frame(FRAME_END, self.n_events, b"", b""))
            self.closed = True


# -- reading -------------------------------------------------------------------

def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at the end of the file), read in bounded pieces."""
    parts = []
    while n > 0:
        b = f.read(min(n, _READ_PIECE))
        if not b:
            break
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def _file_size(f: BinaryIO) -> int | None:
    try:
        left = _bytes_left(f)
        return None if left is None else f.tell() + left
    except (AttributeError, OSError, ValueError):
        return None


def _bytes_left(f: BinaryIO) -> int | None:
    """How many bytes the file holds after the current position (None when unknown: a pipe)."""
    if isinstance(f, io.BytesIO):
        return f.getbuffer().nbytes - f.tell()
    try:
        return os.fstat(f.fileno()).st_size - f.tell()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass
    try:
        if f.seekable():
            here = f.tell()
            end = f.seek(0, io.SEEK_END)
            f.seek(here)
            return end - here
    except (AttributeError, OSError, ValueError):
        pass
    return None


class TraceFileReader:
    """Reads a trace file frame by frame; ``header`` is read at construction.

    Args:
        file: a binary file positioned at its start.
        name: how to name the file in messages.

    Raises:
        TraceFormatError: not a trace, a newer format version, or a damaged header.
    """

    def __init__(self, file: BinaryIO, name: str = "trace") -> None:
        self._file = file
        self.name = name
        head = _read_exact(file, _HEAD.size)
        if head[: len(MAGIC)] != MAGIC[: len(head)] or not head:
            raise TraceFormatError(f"{name}: not a vizalloc trace (no 'VZTRACE' magic at byte 0)")
        if len(head) < _HEAD.size:
            raise TraceFormatError(f"{name}: the file ends inside its header at byte {len(head)}; nothing to load")
        _, version, flags, json_len = _HEAD.unpack(head)
        if version != FORMAT_VERSION:
            raise TraceFormatError(
                f"{name}: trace format version {version} at byte 8; this vizalloc reads version {FORMAT_VERSION}"
                + (" (upgrade vizalloc)" if version > FORMAT_VERSION else "")
            )
        end = _HEAD.size + json_len + _CRC.size
        left = _bytes_left(file)
        if left is not None and json_len + _CRC.size > left:
            body, crc = b"", b""
        else:
            body = _read_exact(file, json_len)
            crc = _read_exact(file, _CRC.size)
        if len(body) < json_len or len(crc) < _CRC.size:
            raise TraceFormatError(
                f"{name}: the header at byte 0 is cut short or its length field (byte 12) is damaged: it declares "
                f"{end:,} bytes, the file ends at byte {_HEAD.size + (left if left is not None else len(body) + len(crc))}; "
                "nothing to load"
            )
        if _CRC.unpack(crc)[0] != zlib.crc32(head + body):
            raise TraceFormatError(f"{name}: header checksum mismatch (bytes 0..{end}): the file is corrupt")
        try:
            doc = json.loads(body)
            hdr = doc["header"]
            hdr["argv"] = tuple(hdr["argv"])
            self.header = TraceHeader(**{f.name: hdr[f.name] for f in fields(TraceHeader)})
            file_kinds = [(str(name_), [tuple(p) for p in flds]) for name_, flds in doc["kinds"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise TraceFormatError(f"{name}: malformed header at byte {_HEAD.size}: {exc}") from exc
        self.kind_names = [k for k, _ in file_kinds]
        self.kinds: list[KindSchema | None] = []
        for kname, flds in file_kinds:
            schema = BY_NAME.get(kname)
            ok = schema is not None and list(zip(schema.fields, schema.codecs)) == [tuple(p) for p in flds]
            self.kinds.append(schema if ok else None)
        self._decoder = ChunkDecoder(self.kinds, self.kind_names, bool(flags & FLAG_ZLIB))
        self.offset = end
        #: Events decoded so far, in how many chunk frames; whether the end record was seen;
        #: where reading stopped early (the end of the last complete frame), and why.
        self.n_events = 0
        self.n_frames = 0
        self.complete = False
        self.truncated_at: int | None = None
        self.cut_declared = 0  # the size the cut frame declares (0: unknown, or cut between frames)
        self._meta_read = 0  # compressed metadata bytes of the chunk frames read

    def chunks(self) -> Iterator[ChunkParts]:
        """Decoded chunks in file order; stops at the end record or at a truncation.

        Calling it again resumes after the last complete frame (for a file still being written).
        """
        f = self._file
        if f.seekable():
            f.seek(self.offset)
        while True:
            at = self.offset
            head = _read_exact(f, FRAME_HEADER_SIZE)
            if not head:
                self.truncated_at = at  # a clean frame boundary, but no end record
                self.cut_declared = 0
                return
            if len(head) < FRAME_HEADER_SIZE:
                if head != FRAME_MAGIC[: len(head)] and head[:2] != FRAME_MAGIC:
                    raise TraceFormatError(f"{self.name}: corrupt frame at byte {at} (bad magic)")
                self.truncated_at = at
                self.cut_declared = 0
                return
            magic, kind, frame_flags, n_events, meta_len, blob_len, payload_crc = _FRAME.unpack_from(head)
            if magic != FRAME_MAGIC:
                raise TraceFormatError(f"{self.name}: corrupt frame at byte {at} (bad magic)")
            if _CRC.unpack_from(head, _FRAME.size)[0] != zlib.crc32(head[: _FRAME.size]):
                raise TraceFormatError(f"{self.name}: corrupt frame header at byte {at} (checksum mismatch)")
            if self.complete:
                raise TraceFormatError(f"{self.name}: data after the end record at byte {at}")
            if meta_len > MAX_FRAME_META or blob_len > MAX_FRAME_BYTES:
                raise TraceFormatError(
                    f"{self.name}: corrupt frame at byte {at}: it declares {meta_len:,} bytes of metadata and "
                    f"{blob_len:,} of values, more than a chunk can hold ({MAX_FRAME_META:,} bytes of metadata)"
                )
            left = _bytes_left(f)
            if left is not None and meta_len + blob_len > left:
                # the frame was being written when the file was cut (or is still being written)
                self.truncated_at = at
                self.cut_declared = FRAME_HEADER_SIZE + meta_len + blob_len
                return
            payload = _read_exact(f, meta_len + blob_len)
            if len(payload) < meta_len + blob_len:
                self.truncated_at = at
                self.cut_declared = FRAME_HEADER_SIZE + meta_len + blob_len
                return
            if zlib.crc32(payload) != payload_crc:
                raise TraceFormatError(
                    f"{self.name}: corrupt chunk at byte {at} (payload bytes {at + FRAME_HEADER_SIZE}.."
                    f"{at + FRAME_HEADER_SIZE + len(payload)} fail their checksum)"
                )
            self.offset = at + FRAME_HEADER_SIZE + len(payload)
            if kind == FRAME_END:
                if n_events != self.n_events or payload:
                    raise TraceFormatError(
                        f"{self.name}: end record at byte {at} counts {n_events} events, the file holds {self.n_events}"
                    )
                self.complete = True
                continue
            if kind != FRAME_CHUNK:
                raise TraceFormatError(f"{self.name}: unknown frame type {kind} at byte {at}")
            if frame_flags & ~FRAME_STORED:
                raise TraceFormatError(f"{self.name}: unknown frame flags {frame_flags:#x} at byte {at + 3}")
            self._meta_read += meta_len
            try:
                decoded = self._decoder.decode(
                    payload[:meta_len], payload[meta_len:], n_events, at, stored=bool(frame_flags & FRAME_STORED),
                    max_decoded_bytes=INFLATE_ALLOWANCE + MAX_INFLATE_RATIO * self._meta_read)
            except (ValueError, IndexError, KeyError, struct.error, zlib.error, UnicodeDecodeError) as exc:
                raise TraceFormatError(f"{self.name}: undecodable chunk at byte {at}: {exc}") from exc
            self.n_events += n_events
            self.n_frames += 1
            yield decoded

    def batches(self, max_events: int = BATCH_EVENTS, *, slice_events: int | None = None
                ) -> Iterator[list[ev.Event]]:
        """Events in lists of about ``max_events`` (whole chunks), in order; memory stays bounded.

        ``slice_events``: build events at most this many at a time, releasing the GIL in
        between (for a reader in a worker thread next to a UI; see ``ChunkDecoder.assemble``).
        """
        if slice_events is not None and slice_events < 1:
            raise UsageError(f"slice_events must be a positive number of events, got {slice_events}")
        parts: list[ChunkParts] = []
        pending = 0
        for part in self.chunks():
            parts.append(part)
            pending += len(part.kinds)
            if pending >= max_events:
                yield self._assemble(parts, slice_events)
                parts, pending = [], 0
        if parts:
            yield self._assemble(parts, slice_events)

    def _assemble(self, parts: list[ChunkParts], slice_events: int | None = None) -> list[ev.Event]:
        try:
            return self._decoder.assemble(parts, slice_events)
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            raise TraceFormatError(
                f"{self.name}: undecodable chunks at bytes {parts[0].offset}..{self.offset}: {exc}"
            ) from exc

    def poll(self) -> list[ev.Event]:
        """The events of the frames appended since the last call (a live trace); [] if none."""
        parts = list(self.chunks())
        return self._assemble(parts) if parts else []

    def truncation(self) -> TraceTruncatedWarning | None:
        """What to say when reading stopped before the end record (None: the file is complete)."""
        if self.complete:
            return None
        at = self.truncated_at if self.truncated_at is not None else self.offset
        size = _file_size(self._file)
        if size is None or size <= at:
            where = f"trace cut at byte {at:,}, after its last complete frame"
        else:
            where = f"trace cut at byte {size:,}, {size - at:,} bytes into the frame at byte {at:,}"
            if self.cut_declared:
                where += f" (which declares {self.cut_declared:,} bytes)"
        if self.n_frames == 0:
            read = "no complete frame, so no events"
        else:
            read = f"read {self.n_events:,} events in {self.n_frames:,} complete frame{'s' * (self.n_frames != 1)}"
        message = (f"{self.name}: {where}, without its end record (the writing process was killed or is still "
                   f"running); {read}")
        return TraceTruncatedWarning(message, path=self.name, cut_at=at, file_size=size, n_events=self.n_events,
                                     n_frames=self.n_frames)

    def warn_if_incomplete(self, stacklevel: int = 3) -> None:
        """Warn (``TraceTruncatedWarning``) when reading stopped before the end record;
        ``stacklevel`` as ``warnings.warn`` counts it from here (3: the caller's caller)."""
        warning = self.truncation()
        if warning is not None:
            warnings.warn(warning, stacklevel=stacklevel)


def read_trace(file: BinaryIO, name: str = "trace", *, stacklevel: int = 2) -> Trace:
    """The whole trace in ``file``; warns ``TraceTruncatedWarning`` if it ends early (at the
    line ``stacklevel`` frames up: 2, the caller of ``read_trace``)."""
    reader = TraceFileReader(file, name)
    events: list[ev.Event] = []
    with gc_paused():
        for batch in reader.batches():
            events += batch
    reader.warn_if_incomplete(stacklevel + 1)
    return Trace(reader.header, tuple(events))
