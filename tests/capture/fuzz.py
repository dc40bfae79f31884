"""Hostile raw captures, made from a real one, and what importing them may do.

The subject is the capture of a real ggml program (``programs/ggml_python_add.py`` under
the capture library). Every campaign builds damaged variants and imports each one as
``vizalloc run`` does (``read_records``, then the replay into a trace file). Outcomes:

* ``error``: a ``VizallocError`` (a clear, one-line message);
* ``accepted with a note``: imported, and the import says something is off (a note, a
  replay difference, a cut);
* ``accepted unchanged``: imported to the same result as the intact capture (the damage
  fell on bytes nobody reads: the reserved half-word of a record head, a time stamp);
* ``accepted, differs``: imported to another result without a note. Every record carries
  a check (``rawfile.frame``) over its sequence number, its frame and its payload, so a
  changed name, a GET become a SET or a dropped record of the right length is an error:
  silently different is a finding in every campaign (the campaigns damage the bytes after
  the capture framed them; ``sealed`` frames a test's deliberate edit again, for tests of
  what the decoder and the replay make of values that pass the check).

Any other exception, a case that runs past ``CASE_SECONDS`` (a hang) and a later import of
the intact capture that no longer gives its result (state left behind by a failed import)
are findings. ``tests/capture/test_fuzz_capture.py`` runs the campaigns small in a
subprocess under ``tests/trace/fuzz.ADDRESS_SPACE_LIMIT``; ``VIZALLOC_FUZZ_SCALE=20
python -m tests.capture.fuzz`` runs them long and prints the counts per campaign.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from vizalloc.capture.rawfile import HEADER_SIZE, frame
from vizalloc.errors import VizallocError

from tests.trace.fuzz import ABSURD, Tally, report, scale

PROGRAM = Path(__file__).parent / "programs" / "ggml_python_add.py"
CASE_SECONDS = 20.0


def real_capture() -> bytes:
    """The capture of ``ggml_python_add.py``, run now under the capture library."""
    from vizalloc.capture.launch import capture_environment

    with tempfile.TemporaryDirectory() as d:
        env = capture_environment(d)
        subprocess.run([sys.executable, str(PROGRAM)], env=env, check=True, capture_output=True, timeout=300)
        (capture,) = Path(d).glob("capture.*.vzcap")
        return capture.read_bytes()


def records_of(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, kind, payload length) of each record of an intact capture."""
    # the records start after the header and end where it says (zero fill of the map after them)
    end = int.from_bytes(data[16:24], "little") or len(data)
    out, pos = [], HEADER_SIZE
    while pos + 8 <= end:
        kind, _, length = struct.unpack_from("<HHI", data, pos)
        out.append((pos, kind, length))
        pos += 8 + length
    return out


def sealed(data: bytes) -> bytes:
    """An edited capture with every record framed again (``rawfile.frame``: its check for its
    place in the file), walked by the frames' kinds and lengths from the header to where the
    header says the records end (or past it, where an edit made a record longer), and the
    header's end moved to the records' new end."""
    said = int.from_bytes(data[16:24], "little")
    end = said or len(data)
    out, pos, seq = bytearray(data[:HEADER_SIZE]), HEADER_SIZE, 0
    while pos + 8 <= min(end, len(data)):
        kind, _, length = struct.unpack_from("<HHI", data, pos)
        out += frame(seq, kind, data[pos + 8:pos + 8 + length])
        pos, seq = pos + 8 + length, seq + 1
    if said:
        out[16:24] = len(out).to_bytes(8, "little")
    return bytes(out) + data[pos:]


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


class Finding(AssertionError):
    pass


def import_once(data: bytes, workdir: str) -> tuple[Any, tuple[Any, ...]]:
    """Import ``data`` as ``vizalloc run`` does; the result and a signature of the trace."""
    from vizalloc.capture import _import
    from vizalloc.trace import events as ev
    from vizalloc.trace.api import load

    out = os.path.join(workdir, "fuzz.vztrace")
    result = _import(data, out, program="fuzz", overwrite=True)
    events = load(out).events
    kinds = Counter(type(e).__name__ for e in events)
    names = tuple(sorted(e.name for e in events if isinstance(e, ev.TensorCreated)))
    sizes = tuple(sorted(e.nbytes for e in events if isinstance(e, ev.BufferAllocated)))
    placed = tuple(e.offset for e in events if isinstance(e, ev.TensorPlaced))
    signature = (result.replayed_calls, result.placements_checked, result.mismatches, result.computes,
                 tuple(result.compute_buffers), tuple(sorted(kinds.items())), names, sizes, placed)
    return result, signature


Campaign = Tally  # a raw-capture campaign counts as a trace campaign does


class Runner:
    def __init__(self, data: bytes, workdir: str) -> None:
        self.data, self.workdir = data, workdir
        _, self.baseline = import_once(data, workdir)
        signal.signal(signal.SIGALRM, _alarm)

    def run(self, c: Campaign, label: str, data: bytes) -> None:
        outcome = self._one(c, label, data)
        if outcome is None:
            return
        if outcome == "accepted, differs":
            c.findings.append(f"{label}: a damaged capture accepted without a note")
            return
        c.outcomes[outcome] += 1
        if outcome == "error" and c.outcomes["error"] % 25 == 1:
            self.still_clean(c, label)

    def _one(self, c: Campaign, label: str, data: bytes) -> str | None:
        signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        try:
            result, signature = import_once(data, self.workdir)
        except Hang:
            c.findings.append(f"{label}: hang (more than {CASE_SECONDS} s)")
            return None
        except VizallocError:
            return "error"
        except BaseException as exc:  # noqa: BLE001 - the point: nothing else may escape
            frames = traceback.extract_tb(exc.__traceback__)
            where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
            c.findings.append(f"{label}: {type(exc).__name__}{where}: {str(exc)[:300]}")
            return None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if result.notes or result.mismatches or result.cut_at is not None:
            return "accepted with a note"
        return "accepted unchanged" if signature == self.baseline else "accepted, differs"

    def still_clean(self, c: Campaign, label: str) -> None:
        """The intact capture still imports to its own result after a failed import."""
        try:
            _, signature = import_once(self.data, self.workdir)
        except BaseException as exc:  # noqa: BLE001
            c.findings.append(f"after {label}: the intact capture no longer imports: {type(exc).__name__}: {exc}")
            return
        if signature != self.baseline:
            c.findings.append(f"after {label}: the intact capture imports to another result")


def _put(data: bytes, pos: int, fmt: str, value: int) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, pos, value)
    return bytes(b)


def truncations(r: Runner, factor: float) -> Campaign:
    c = Campaign("truncations")
    step = max(1, round(4 / factor))
    for cut in range(0, len(r.data), step):
        r.run(c, f"cut at {cut}", r.data[:cut])
    for pos, _, _ in records_of(r.data):  # every record boundary (the file of a killed process)
        r.run(c, f"cut at record {pos}", r.data[:pos])
    return c


def flips(r: Runner, n: int, seed: int) -> Campaign:
    rng = random.Random(seed)
    c = Campaign("byte flips")
    for k in range(n):
        bad = bytearray(r.data)
        for _ in range(rng.choice((1, 1, 2, 8))):
            pos = rng.randrange(16, len(bad))
            bad[pos] ^= rng.randrange(1, 256)
        r.run(c, f"flips {k}", bytes(bad))
    return c


def lengths(r: Runner) -> Campaign:
    """Each record's length set to absurd values, and off by a little either way."""
    c = Campaign("absurd lengths")
    for pos, kind, length in records_of(r.data):
        for value in (*[v for v in ABSURD if v < 2**32], length + 8, length + 1, max(length - 1, 0),
                      max(length - 8, 0), 0):
            r.run(c, f"record {pos} (kind {kind}) length {value}", _put(r.data, pos + 4, "<I", value))
    return c


def record_kinds(r: Runner) -> Campaign:
    """Each record's kind made one no capture has."""
    c = Campaign("record kinds")
    for pos, kind, _ in records_of(r.data):
        for value in (0, 21, 999, 0xFFFF):
            r.run(c, f"record {pos} kind {kind} -> {value}", _put(r.data, pos, "<H", value))
    return c


def word_edits(r: Runner, n: int, seed: int) -> Campaign:
    """An 8-byte integer (a count, an id, a pointer, a size, a kind) of a record of vizalloc's
    format set to an extreme or a small value (the bytes of ggml's own struct ggml_tensor,
    kind 10, are the "tensor struct edits" campaign)."""
    rng = random.Random(seed)
    c = Campaign("word edits")
    framed = [x for x in records_of(r.data) if x[1] != 10 and x[2] >= 8]
    for k in range(n):
        pos, kind, length = rng.choice(framed)
        at = pos + 8 + 8 * rng.randrange(length // 8)
        value = rng.choice((2**63 - 1, 2**63, 2**64 - 1, 2**32, 2**32 - 1, 2**31, 0, 1))
        bad = _put(r.data, at, "<Q", value)
        if bad != r.data:  # a word set to the value it had is no damage
            r.run(c, f"record {pos} (kind {kind}) word at {at} = {value}", bad)
    return c


def tensor_edits(r: Runner, n: int, seed: int) -> Campaign:
    """A word of a tensor's ``struct ggml_tensor`` bytes (shape, strides, op, sources, data,
    name) set to an extreme or a neighbour's value: values, which only the replay can judge."""
    rng = random.Random(seed)
    c = Campaign("tensor struct edits")
    tensors = [x for x in records_of(r.data) if x[1] == 10]
    for k in range(n):
        pos, _, length = rng.choice(tensors)
        at = pos + 8 + 16 + 8 * rng.randrange((length - 16) // 8)
        value = rng.choice((2**63 - 1, 2**64 - 1, 2**32, 0, 1, 7))
        bad = _put(r.data, at, "<Q", value)
        if bad != r.data:
            r.run(c, f"tensor record {pos} word at {at} = {value}", bad)
    return c


def collisions(r: Runner, n: int, seed: int) -> Campaign:
    """Ids and pointers that collide: an 8-byte integer of one record copied over one of another
    (a call id, a buffer, a tensor address, a graph allocator)."""
    rng = random.Random(seed)
    c = Campaign("colliding ids")
    recs = [x for x in records_of(r.data) if x[2] >= 16]
    for k in range(n):
        (p1, k1, l1), (p2, k2, l2) = rng.sample(recs, 2)
        a = p1 + 8 + 8 * rng.randrange(min(l1 // 8, 4))
        b = p2 + 8 + 8 * rng.randrange(min(l2 // 8, 4))
        bad = bytearray(r.data)
        bad[b:b + 8] = r.data[a:a + 8]
        if bytes(bad) != r.data:
            r.run(c, f"word at {a} (kind {k1}) copied to {b} (kind {k2})", bytes(bad))
    return c


def shuffles(r: Runner, n: int, seed: int) -> Campaign:
    """Whole records dropped, repeated or swapped."""
    rng = random.Random(seed)
    c = Campaign("record shuffles")
    recs = records_of(r.data)
    for k in range(n):
        parts = [r.data[p:p + 8 + l] for p, _, l in recs]
        i, j = rng.randrange(len(parts)), rng.randrange(len(parts))
        how = rng.randrange(3)
        if how == 0:
            del parts[i]
        elif how == 1:
            parts.insert(i, parts[i])
        else:
            parts[i], parts[j] = parts[j], parts[i]
        body = b"".join(parts)
        head = bytearray(r.data[:HEADER_SIZE])
        head[16:24] = (HEADER_SIZE + len(body)).to_bytes(8, "little")  # where the records now end
        r.run(c, f"shuffle {k} ({('drop', 'repeat', 'swap')[how]} {i} {j})", bytes(head) + body)
    return c


def run_all(factor: float, seed: int = 0) -> list[Campaign]:
    data = real_capture()
    with tempfile.TemporaryDirectory() as workdir:
        r = Runner(data, workdir)
        return [
            truncations(r, factor),
            flips(r, max(1, int(150 * factor)), seed),
            lengths(r),
            record_kinds(r),
            word_edits(r, max(1, int(150 * factor)), seed),
            tensor_edits(r, max(1, int(100 * factor)), seed),
            collisions(r, max(1, int(100 * factor)), seed),
            shuffles(r, max(1, int(60 * factor)), seed),
        ]


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.capture.fuzz [--json] [--limit-as BYTES]`` (see the module docstring)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.capture.fuzz")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--limit-as", type=int, metavar="BYTES")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("VIZALLOC_FUZZ_SEED", "0")))
    args = parser.parse_args(argv)
    factor = scale()
    if args.limit_as:
        import resource

        real_capture()  # the capture library is built (a compiler run) before the limit
        resource.setrlimit(resource.RLIMIT_AS, (args.limit_as, args.limit_as))
    campaigns = run_all(factor, seed=args.seed)
    return report(campaigns, factor, args.seed, as_json=args.json, what="fuzzing raw captures")

if __name__ == "__main__":
    raise SystemExit(main())
