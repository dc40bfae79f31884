"""Hostile trace files, made from a small real one, and what reading them may do.

Every campaign builds damaged variants of a small trace recorded by the runtime and
reads each one the way vizalloc's commands do. The only acceptable outcomes are a load
(possibly of a prefix, with ``TraceTruncatedWarning``) and a ``VizallocError``
(``TraceFormatError`` for damage); any other exception is a finding. The campaigns are
seeded and sized by ``scale``: ``tests/trace/test_fuzz.py`` runs them small in the
suite, and ``VIZALLOC_FUZZ_SCALE=20 python -m tests.trace.fuzz`` runs them long and
prints the counts per campaign.

Campaigns:

* ``truncations``: every cut point of the trace (every byte with scale >= 1);
* ``flips``: random bytes XOR-ed with random values (the CRCs catch them);
* ``frame_edits``: bytes of a frame's payload changed and both CRCs recomputed, so the
  damage reaches the decoder (zlib, section sizes, ids, counts);
* ``content_edits``: decoded events changed (ids, sizes, enum values, order) and written
  back as a valid file, so the damage reaches the analysis and the exports;
* ``lengths``: frame and header lengths set to absurd values (2^32..2^64) with valid CRCs;
* ``bombs``: chunks whose metadata inflates far past what the file holds.
"""

from __future__ import annotations

import dataclasses
import io
import os
import random
import struct
import sys
import traceback
import warnings
import zlib
from pathlib import Path
from collections import Counter
from dataclasses import dataclass
from typing import Any

from vizalloc.errors import TraceFormatError, VizallocError
from vizalloc.trace import events as ev
from vizalloc.trace.chunks import HEAD as CHUNK_HEAD
from vizalloc.trace.fileformat import (
    _CRC, _FRAME, _HEAD, FRAME_CHUNK, FRAME_HEADER_SIZE, FRAME_STORED, TraceFileReader, TraceTruncatedWarning,
    TraceFileWriter, read_trace,
)
from vizalloc.trace.value import Trace

SCALE_ENV = "VIZALLOC_FUZZ_SCALE"


#: No hostile case may need more address space than this (Python, numpy, the analysis and
#: the exports take ~150 MiB of it before reading anything). Before the bounds, the 1 GiB
#: bomb alone took 2.1 GB.
ADDRESS_SPACE_LIMIT = 1 << 30
ROOT = Path(__file__).resolve().parents[2]


def limited_env() -> dict[str, str]:
    """The environment of a reader run under :data:`ADDRESS_SPACE_LIMIT`: this checkout
    importable, and one thread per numeric library (each thread's stack counts against it)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MALLOC_ARENA_MAX="2")


def scale() -> float:
    """``VIZALLOC_FUZZ_SCALE`` (default 1): how many cases each campaign tries, relative to the suite's."""
    try:
        return max(float(os.environ.get(SCALE_ENV, "1")), 0.01)
    except ValueError:
        return 1.0


# -- the subject ------------------------------------------------------------------------

def small_trace() -> Trace:
    """A small trace of the runtime's own events: one step of the shared-tensor loop
    (graphs, plans, bindings, computes, hazards)."""
    from vizalloc.scenarios.shared_tensors import run
    from vizalloc.trace.api import trace

    holder: list[Any] = []

    def around() -> Any:
        session = trace(keep_events=True)
        holder.append(session)
        return session

    run("none", steps=1, seed=0, around_loop=around)
    return holder[0].trace


def write(trace_: Trace, chunk_events: int = 40, stored_every: int = 3) -> bytes:
    """``trace_`` as file bytes, in chunks of ``chunk_events`` (every ``stored_every``-th
    chunk stored outside the zlib stream, as a live trace stores some)."""
    buf = io.BytesIO()
    w = TraceFileWriter(buf, trace_.header)
    events = trace_.events
    for k, i in enumerate(range(0, len(events), chunk_events)):
        part = events[i:i + chunk_events]
        w.write_rows([e.__class__ for e in part], part, compress_budget_ns=0 if k % stored_every == 1 else None)
    w.close()
    return buf.getvalue()


@dataclass
class Frame:
    """One frame of a file, as parsed (no checks) for editing."""

    offset: int
    kind: int
    flags: int
    n_events: int
    meta: bytes
    blob: bytes

    def pack(self, meta_len: int | None = None, blob_len: int | None = None) -> bytes:
        """The frame with both CRCs right (lengths may be overridden to lie)."""
        ml = len(self.meta) if meta_len is None else meta_len
        bl = len(self.blob) if blob_len is None else blob_len
        crc = zlib.crc32(self.blob, zlib.crc32(self.meta))
        head = _FRAME.pack(b"VF", self.kind, self.flags, self.n_events, ml, bl, crc)
        return head + _CRC.pack(zlib.crc32(head)) + self.meta + self.blob


def split(data: bytes) -> tuple[bytes, list[Frame]]:
    """The header bytes and the frames of a well-formed file."""
    json_len = _HEAD.unpack_from(data)[3]
    pos = _HEAD.size + json_len + _CRC.size
    header = data[:pos]
    frames = []
    while pos < len(data):
        _, kind, flags, n, ml, bl, _ = _FRAME.unpack_from(data, pos)
        body = pos + FRAME_HEADER_SIZE
        frames.append(Frame(pos, kind, flags, n, data[body:body + ml], data[body + ml:body + ml + bl]))
        pos = body + ml + bl
    return header, frames


def join(header: bytes, frames: list[Frame]) -> bytes:
    return header + b"".join(f.pack() for f in frames)


# -- reading, the way the commands do ----------------------------------------------------

def read_all_ways(data: bytes, deep: bool = False) -> str:
    """Read ``data`` as ``load`` does, and in batches as ``read_batches``/the TUI do; with
    ``deep``, also model, hazards, summary and every text export. The outcome's name;
    raises ``Finding`` on any other exception."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace_ = read_trace(io.BytesIO(data), "fuzz.vztrace")
            reader = TraceFileReader(io.BytesIO(data), "fuzz.vztrace")
            n = sum(len(b) for b in reader.batches(7, slice_events=3))
            if n != len(trace_.events):
                raise Finding(f"batches read {n} events, load {len(trace_.events)}")
        if deep:
            analyse_everything(trace_)
    except VizallocError as exc:
        return "TraceFormatError" if isinstance(exc, TraceFormatError) else type(exc).__name__
    except Finding:
        raise
    except BaseException as exc:  # noqa: BLE001 - the point: nothing else may escape
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
        raise Finding(f"{type(exc).__name__}{where}: {exc}") from exc
    truncated = any(issubclass(w.category, TraceTruncatedWarning) for w in caught)
    return "loaded a prefix" if truncated else "loaded"


def analyse_everything(trace_: Trace) -> None:
    """What check, summary and export do with a loaded trace."""
    from vizalloc.analysis.hazards import find_hazards
    from vizalloc.analysis.model import build_model
    from vizalloc.cli.summary import summarize
    from vizalloc.export.api import Analysed, Format, Options, export_texts

    model = build_model(trace_)
    hazards = find_hazards(model)
    summarize(model, hazards)
    for h in hazards:
        h.report()
        h.to_dict()
    analysed = Analysed(model, hazards, Analysed.of(model).findings, trace_.header)
    for fmt in (Format.JSON, Format.PERFETTO, Format.LAYOUT, Format.DOT, Format.MINIMALLOC):
        try:
            export_texts(analysed, fmt, Options(header=trace_.header))
        except VizallocError:
            pass


class Finding(AssertionError):
    """A hostile input made vizalloc raise something other than a ``VizallocError``."""


@dataclass
class Tally:
    """A fuzz campaign's counts: each case's outcome, and the findings (what must not happen)."""

    name: str
    outcomes: Counter[str] = dataclasses.field(default_factory=Counter)
    findings: list[str] = dataclasses.field(default_factory=list)
    #: what a finding is, in the campaign's one-line report
    FINDINGS = "findings"

    @property
    def cases(self) -> int:
        return sum(self.outcomes.values()) + len(self.findings)

    def line(self) -> str:
        got = ", ".join(f"{n} {k}" for k, n in sorted(self.outcomes.items()))
        return f"{self.name}: {self.cases} cases -> {got}; {len(self.findings)} {self.FINDINGS}"


@dataclass
class Campaign(Tally):
    FINDINGS = "other exceptions"

    def run(self, label: str, data: bytes, deep: bool = False) -> None:
        try:
            self.outcomes[read_all_ways(data, deep)] += 1
        except Finding as exc:
            self.findings.append(f"{label}: {exc}")

# -- the campaigns ------------------------------------------------------------------------

def truncations(data: bytes, factor: float) -> Campaign:
    """Every cut point (a stride over them when ``factor`` < 1)."""
    c = Campaign("truncations")
    step = max(1, round(1 / factor)) if factor < 1 else 1
    for cut in range(0, len(data), step):
        c.run(f"cut at {cut}", data[:cut])
    return c


def flips(data: bytes, n: int, seed: int) -> Campaign:
    rng = random.Random(seed)
    c = Campaign("byte flips")
    for _ in range(n):
        bad = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 8))):
            pos = rng.randrange(len(bad))
            bad[pos] ^= rng.randrange(1, 256)
        c.run("flips", bytes(bad))
    return c


def frame_edits(data: bytes, n: int, seed: int) -> Campaign:
    """Payload bytes of one chunk frame changed, CRCs recomputed. Chunks stored outside
    the zlib stream are edited as they are; compressed ones are inflated, edited and
    deflated again in the file's stream (every later chunk re-deflated after it)."""
    rng = random.Random(seed)
    header, frames = split(data)
    metas = _inflated_metas(frames)
    c = Campaign("frame edits (CRCs recomputed)")
    chunks = [i for i, f in enumerate(frames) if f.kind == FRAME_CHUNK]
    for _ in range(n):
        i = rng.choice(chunks)
        raw = [bytearray(m) for m in metas]
        target = raw[i]
        how = rng.randrange(4)
        if how == 0:    # a byte of the chunk head (section sizes, planes, flags)
            pos = rng.randrange(CHUNK_HEAD.size)
            target[pos] = rng.randrange(256)
        elif how == 1:  # a byte anywhere in the metadata
            pos = rng.randrange(len(target))
            target[pos] ^= rng.randrange(1, 256)
        elif how == 2:  # a run of bytes set to one value
            pos = rng.randrange(len(target))
            target[pos:pos + rng.randrange(1, 16)] = bytes([rng.choice((0, 0xFF, 0x7F, 0x80))]) * 16
            del target[len(metas[i]):]
        else:           # cut or grow the metadata
            if rng.random() < 0.5:
                del target[rng.randrange(len(target)):]
            else:
                target += bytes(rng.randrange(1, 64))
        edited = _repack(frames, [bytes(m) for m in raw])
        if rng.random() < 0.2:  # lie about the event count too
            edited[i].n_events = rng.choice((0, 1, edited[i].n_events + 1, 0xFFFFFFFF))
        c.run(f"frame {i} edit {how}", join(header, edited))
    return c


def _inflated_metas(frames: list[Frame]) -> list[bytes]:
    d = zlib.decompressobj()
    return [f.meta if f.flags & FRAME_STORED or f.kind != FRAME_CHUNK else d.decompress(f.meta) for f in frames]


def _repack(frames: list[Frame], metas: list[bytes]) -> list[Frame]:
    comp = zlib.compressobj(1)
    out = []
    for f, m in zip(frames, metas):
        if f.kind != FRAME_CHUNK or f.flags & FRAME_STORED:
            out.append(dataclasses.replace(f, meta=m))
        else:
            out.append(dataclasses.replace(f, meta=comp.compress(m) + comp.flush(zlib.Z_SYNC_FLUSH)))
    return out


def _edited_events(events: tuple[ev.Event, ...], rng: random.Random, did: list[str]) -> list[ev.Event]:
    """``events`` with one random edit (described in ``did``)."""
    out = list(events)
    how = rng.randrange(7)
    i = rng.randrange(len(out))
    e = out[i]
    if how == 0:    # an int field set to an extreme or a neighbour's value
        ints = [f.name for f in dataclasses.fields(e) if isinstance(getattr(e, f.name), int)
                and not isinstance(getattr(e, f.name), bool)]
        if ints:
            name = rng.choice(ints)
            value = rng.choice((-1, 0, 1, 2**31, 2**62, -(2**62), getattr(e, name) + rng.choice((-1, 1, 7)),
                                rng.randrange(-5, 500)))
            out[i] = dataclasses.replace(e, **{name: value})
            did.append(f"{type(e).__name__}.{name}={value}")
    elif how == 1:  # an enum field given a value this vizalloc does not know
        enums = [f.name for f in dataclasses.fields(e) if isinstance(getattr(e, f.name), str)
                 and hasattr(getattr(e, f.name), "value")]
        if enums:
            name = rng.choice(enums)
            out[i] = dataclasses.replace(e, **{name: "from-the-future"})
            did.append(f"{type(e).__name__}.{name} unknown")
    elif how == 2:  # an event dropped
        del out[i]
        did.append(f"{type(e).__name__} #{i} dropped")
    elif how == 3:  # an event repeated
        out.insert(i, e)
        did.append(f"{type(e).__name__} #{i} repeated")
    elif how == 4:  # two events swapped
        j = rng.randrange(len(out))
        out[i], out[j] = out[j], out[i]
        did.append(f"#{i} {type(e).__name__} and #{j} {type(out[i]).__name__} swapped")
    elif how == 5:  # a tuple field emptied, grown, or given negative items
        tuples = [f.name for f in dataclasses.fields(e) if isinstance(getattr(e, f.name), tuple)
                  and all(isinstance(x, int) for x in getattr(e, f.name))]
        if tuples:
            name = rng.choice(tuples)
            value = rng.choice(((), (-1,), getattr(e, name) * 2, tuple(rng.randrange(-3, 300) for _ in range(4))))
            out[i] = dataclasses.replace(e, **{name: value})
            did.append(f"{type(e).__name__}.{name}={value}")
    else:           # a string field made hostile
        strs = [f.name for f in dataclasses.fields(e) if type(getattr(e, f.name)) is str]
        if strs:
            name = rng.choice(strs)
            out[i] = dataclasses.replace(e, **{name: rng.choice(("", "\x1b]0;x\x07", "x" * 5000))})
            did.append(f"{type(e).__name__}.{name} hostile text")
    return out


def content_edits(trace_: Trace, n: int, seed: int) -> Campaign:
    """Events changed, the trace written back as a valid file, and read, modelled,
    analysed, summarised and exported."""
    rng = random.Random(seed)
    c = Campaign("content edits (valid frames, wrong events)")
    for k in range(n):
        events = trace_.events
        did: list[str] = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            events = tuple(_edited_events(events, rng, did))
        try:
            data = write(Trace(trace_.header, events), chunk_events=64)
        except TraceFormatError:  # the writer refuses a value its codec cannot store
            c.outcomes["refused by the writer"] += 1
            continue
        c.run(f"content edit {k} ({'; '.join(did)})", data, deep=True)
    return c


ABSURD = (2**32 - 1, 2**32, 2**36, 2**40, 2**48, 2**63 - 1, 2**63, 2**64 - 1)


def lengths(data: bytes) -> Campaign:
    """Each chunk frame's metadata and value lengths set to absurd values (valid CRCs),
    and the header's JSON length."""
    header, frames = split(data)
    c = Campaign("absurd lengths")
    for i, f in enumerate(frames):
        for value in ABSURD:
            for which in ("meta", "blob"):
                if which == "meta" and value > 0xFFFFFFFF:
                    continue
                edited = header + b"".join(
                    g.pack(**({f"{which}_len": value} if j == i else {})) for j, g in enumerate(frames))
                c.run(f"frame {i} {which}_len={value}", edited)
    for value in (2**31, 2**32 - 1):
        bad = bytearray(header)
        struct.pack_into("<I", bad, 12, value)
        struct.pack_into("<I", bad, len(bad) - 4, zlib.crc32(bytes(bad[:-4])))
        c.run(f"header json_len={value}", bytes(bad) + data[len(header):])
    return c


def bomb_frames(inflated: int, head: tuple[int, ...] | None = None, n_events: int = 1) -> bytes:
    """A trace file of one chunk whose metadata inflates to ``inflated`` zero bytes after
    a chunk head (``head``: the head's fields; default: one Marker and nothing else)."""
    from vizalloc.trace.value import TraceHeader

    buf = io.BytesIO()
    TraceFileWriter(buf, TraceHeader.new())
    fields = head if head is not None else (n_events, 0, 0, 0, 0, 0, 0, 0)
    return buf.getvalue() + Frame(0, FRAME_CHUNK, 0, fields[0], _deflated_zeros(CHUNK_HEAD.pack(*fields), inflated),
                                  b"").pack()


def _deflated_zeros(prefix: bytes, n_zeros: int) -> bytes:
    """``prefix`` and ``n_zeros`` zero bytes through a fresh zlib stream, sync-flushed.

    Once the window holds only zeros, every further MiB of zeros deflates to the same
    bytes, so those are repeated instead of compressing a GiB each time."""
    mib = 1 << 20
    comp = zlib.compressobj(9)
    parts = [comp.compress(prefix) + comp.flush(zlib.Z_SYNC_FLUSH)]
    if n_zeros >= 3 * mib:
        first = comp.compress(bytes(mib)) + comp.flush(zlib.Z_SYNC_FLUSH)
        steady = comp.compress(bytes(mib)) + comp.flush(zlib.Z_SYNC_FLUSH)
        again = comp.compress(bytes(mib)) + comp.flush(zlib.Z_SYNC_FLUSH)
        assert steady == again
        whole, rest = divmod(n_zeros, mib)
        parts += [first, steady * (whole - 1)]
        n_zeros = rest
    if n_zeros:
        parts.append(comp.compress(bytes(n_zeros)) + comp.flush(zlib.Z_SYNC_FLUSH))
    return b"".join(parts)


def bombs() -> Campaign:
    """Metadata that inflates past its declared size, heads that declare too much, and
    zero byte planes that stand for billions of integers."""
    c = Campaign("decompression bombs")
    mib = 1 << 20
    # a valid head (one event) followed by far more than it declares
    for size in (mib, 64 * mib, 1024 * mib):
        c.run(f"{size} zero bytes after a one-event head", bomb_frames(size))
    # heads that declare huge sections (the bytes are zeros, as many as declared or fewer)
    declared = [
        (1, 0, 0, 0, 2**32 - 1, 0, 1, 0),        # 4G items in one byte plane
        (1, 0, 0, 0, 2**28, 0, 1, 0),            # 256M items
        (1, 0, 0, 0, 2**24, 0, 1, 0),            # 16M items
        (1, 2**30, 0, 0, 0, 0, 0, 0),            # 1G strings
        (1, 0, 0, 0, 0, 2**31, 0, 0),            # 2 GiB of text
        (1, 0, 0, 2**32 - 1, 0, 0, 0, 0),        # 4G row ints in no plane (all zero, no bytes)
        (1, 0, 0, 0, 2**32 - 1, 0, 0, 0),        # 4G items in no plane
        (2**20, 0, 0, 0, 0, 0, 0, 0),            # a million events in a frame that says one
    ]
    for head in declared:
        for inflated in (0, 8 * mib, 200 * mib):
            c.run(f"head {head} + {inflated} zero bytes", bomb_frames(inflated, head, n_events=1))
    return c


def run_all(factor: float, seed: int = 0) -> list[Campaign]:
    """Every campaign at ``factor`` times the suite's size (a few seconds at 1)."""
    trace_ = small_trace()
    data = write(trace_)
    # the truncation subject: the first events, every cut point of it (more events at a larger factor)
    n_cut = min(len(trace_.events), max(12, int(30 * factor)))
    cut_subject = write(Trace(trace_.header, trace_.events[:n_cut]), chunk_events=10)
    return [
        truncations(cut_subject, min(factor, 1.0)),
        flips(data, max(1, int(200 * factor)), seed),
        frame_edits(data, max(1, int(200 * factor)), seed),
        content_edits(trace_, max(1, int(30 * factor)), seed),
        lengths(data),
        bombs(),
    ]


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.trace.fuzz [--json] [--limit-as BYTES]``: run every campaign at
    ``VIZALLOC_FUZZ_SCALE``, print the counts (as JSON with ``--json``); with
    ``--limit-as``, under that address-space limit (``RLIMIT_AS``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.trace.fuzz")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--limit-as", type=int, metavar="BYTES")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("VIZALLOC_FUZZ_SEED", "0")))
    args = parser.parse_args(argv)
    if args.limit_as:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (args.limit_as, args.limit_as))
    factor = scale()
    campaigns = run_all(factor, seed=args.seed)
    return report(campaigns, factor, args.seed, as_json=args.json, what="fuzzing")


def report(campaigns: list[Any], factor: float, seed: int, *, as_json: bool, what: str) -> int:
    """Print a fuzz run's campaigns (one JSON line, for the test that runs it in a limited
    process, or a line each); 1 if any campaign has findings. ``campaigns`` hold ``name``,
    ``cases``, ``outcomes``, ``findings`` and ``line()``."""
    if as_json:
        import json
        import resource

        print(json.dumps({
            "scale": factor, "seed": seed,
            "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "campaigns": [{"name": c.name, "cases": c.cases, "outcomes": dict(c.outcomes), "findings": c.findings}
                          for c in campaigns],
        }))
    else:
        print(f"{what} at scale {factor}, seed {seed} (set {SCALE_ENV} to change)")
        for c in campaigns:
            print(c.line())
            for f in c.findings[:20]:
                print("   ", f)
    return 1 if any(c.findings for c in campaigns) else 0


if __name__ == "__main__":
    raise SystemExit(main())
