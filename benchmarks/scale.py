"""How do ``vizalloc check``, ``summary`` and ``export --format json`` scale to traces of real runs?

The trace is the analysis benchmark's decode mix (``benchmarks/analysis.py``: a decode
loop recorded with the real runtime; the events of one token repeated with fresh ids),
written straight to a file batch by batch, so a 20M-event trace is made without holding
its events in memory. Each command runs as a subprocess under ``/usr/bin/time -v``:
wall seconds and peak resident memory (max RSS) are what a user sees.

    python benchmarks/scale.py make DIR --events 2000000 [--mix rebuild|reuse] [--chunk N]
    python benchmarks/scale.py make DIR --events 20000000 --from CAPTURED.vztrace [--chunk token]
    python benchmarks/scale.py run TRACE [--commands check,summary,export] [--repeat 2]

``make`` writes ``DIR/<mix>-<events>.vztrace`` (chunks of ``--chunk`` events, default
65,536 as ``vizalloc.save`` writes them; ``--chunk token`` cuts one chunk per graph
compute, as a live trace is flushed). ``--from`` takes a trace of a real process
(``vizalloc run -- python -m vizalloc.capture.llama MODEL --generate N``) instead and
repeats its last token (from the compute before the last to the last compute and the reads
after it; its compute ids moving as they moved from the token before) until the trace has
``--events`` events, then the events after the last token (the buffers freed at exit). ``run`` prints one line per command: wall seconds
(best of ``--repeat``), CPU seconds (user + system) of that run, max RSS in MB, bytes of
output. On a shared machine the CPU seconds are the steadier figure. Never run two 20M-event jobs at
once on a shared machine: each can take gigabytes.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vizalloc.trace import events as ev
from vizalloc.trace.fileformat import TraceFileWriter
from vizalloc.trace.value import TraceHeader


def _analysis_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_analysis", ROOT / "benchmarks" / "analysis.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_TENSOR_FIELDS = ("tensor_id", "view_src", "copy_of", "src_id", "dst_id", "parent_id")
_TUPLE_FIELDS = ("srcs", "nodes", "leafs", "reads")


def token_stream(prefix: list[ev.Event], token: list[ev.Event], n_events: int, mix: str) -> Iterator[ev.Event]:
    """The events of ``analysis.repeat`` (rebuild) or ``analysis.repeat_compute`` (reuse), one at a time."""
    names = {cls: [f.name for f in fields(cls)] for cls in ev.KINDS.values()}
    if mix == "reuse":
        begin = next(i for i, e in enumerate(token) if isinstance(e, ev.TensorSet))
        end = max(i for i, e in enumerate(token) if isinstance(e, ev.TensorGet)) + 1
        head = list(prefix) + list(token)
        body = token[begin:end]
        fresh: set[int] = set()
        graphs: set[int] = set()
        t_span = g_span = 0
    else:
        head = list(prefix)
        body = token
        fresh = {e.tensor_id for e in token if isinstance(e, ev.TensorCreated)}
        graphs = {e.graph_id for e in token if isinstance(e, ev.GraphCreated)}
        t_span = max(fresh) - min(fresh) + 1 if fresh else 0
        g_span = max(graphs) - min(graphs) + 1 if graphs else 0
    n = 0
    for e in head:
        if n >= n_events:
            return
        yield e
        n += 1
    seq = head[-1].seq
    t_base = head[-1].t_ns
    t_first = body[0].t_ns
    k = 0
    while n < n_events:
        k += 1
        dt, dg = k * t_span, k * g_span
        t_shift = t_base - t_first + 1000
        for e in body:
            values = []
            for name in names[type(e)]:
                v = getattr(e, name)
                if name == "seq":
                    seq += 1
                    v = seq
                elif name == "t_ns":
                    v = v + t_shift
                elif name in _TENSOR_FIELDS:
                    v = v + dt if v in fresh else v
                elif name in _TUPLE_FIELDS:
                    v = tuple(x + dt if x in fresh else x for x in v)
                elif name in ("graph_id", "source_graph") and v in graphs:
                    v = v + dg
                elif name in ("binding_id", "compute_id"):
                    v = v + k * 1_000_000
                values.append(v)
            yield type(e)(*values)
            n += 1
            if n >= n_events:
                return
        t_base = values[1]  # type: ignore[possibly-undefined]


def captured_stream(events: list[ev.Event], n_events: int) -> Iterator[ev.Event]:
    """A captured trace with its last token repeated up to ``n_events`` events (see the module's doc)."""
    cuts = []
    for i, e in enumerate(events):
        if type(e) is ev.ComputeEnd:
            j = i + 1
            while j < len(events) and type(events[j]) is ev.TensorGet:
                j += 1
            cuts.append(j)
    if len(cuts) < 3:
        raise SystemExit("--from: the trace needs at least three graph computes")
    a, b, c = cuts[-3:]
    before, token, tail = events[a:b], events[b:c], events[c:]
    if [type(e) for e in before] != [type(e) for e in token]:
        raise SystemExit("--from: the last two tokens differ in their events; nothing to repeat")
    moves: dict[str, int] = {}
    for p, e in zip(before, token):
        for name in ev.payload_fields(type(e)):
            if name in ev.ID_FIELDS and getattr(p, name) != getattr(e, name):
                if isinstance(getattr(e, name), tuple) or moves.get(name, getattr(e, name) - getattr(p, name)) \
                        != getattr(e, name) - getattr(p, name):
                    raise SystemExit(f"--from: the last two tokens' {name} do not move by one amount")
                moves[name] = getattr(e, name) - getattr(p, name)
    head_n = min(c, n_events - len(tail))
    yield from events[:head_n]
    seq = events[head_n - 1].seq
    span = token[-1].t_ns - before[-1].t_ns
    k = 0
    n = head_n
    while n + len(token) <= n_events - len(tail):
        k += 1
        for e in token:
            seq += 1
            changes: dict[str, Any] = {"seq": seq, "t_ns": e.t_ns + k * span}
            changes.update({name: getattr(e, name) + k * d for name, d in moves.items() if hasattr(e, name)})
            yield replace(e, **changes)
        n += len(token)
    for e in tail:
        seq += 1
        yield replace(e, seq=seq, t_ns=e.t_ns + k * span)


def make(out_dir: Path, n_events: int, mix: str, chunk: str, source: Path | None = None) -> Path:
    if source is not None:
        from vizalloc.trace.api import load

        stream = captured_stream(list(load(source).events), n_events)
        path = out_dir / f"{source.stem}-{n_events}{'-tok' if chunk == 'token' else ''}.vztrace"
    else:
        mod = _analysis_module()
        prefix, token = mod.record_template()
        stream = token_stream(prefix, token, n_events, mix)
        path = out_dir / f"{mix}-{n_events}{'-tok' if chunk == 'token' else ''}.vztrace"
    per_chunk = None if chunk == "token" else int(chunk)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        writer = TraceFileWriter(f, TraceHeader.new())
        pending: list[ev.Event] = []
        n = 0
        for e in stream:
            n += 1
            pending.append(e)
            if (per_chunk is None and type(e) is ev.ComputeEnd) or (per_chunk is not None and len(pending) >= per_chunk):
                writer.write_events(pending)
                pending = []
        if pending:
            writer.write_events(pending)
        writer.close()
    print(f"wrote {path}: {n:,} events, {path.stat().st_size:,} bytes "
          f"({path.stat().st_size / n:.1f} B/event) in {time.perf_counter() - t0:.0f} s")
    return path


_COMMANDS = {
    "check": ["check", "--json", "--fail-on", "none"],
    "summary": ["summary", "--json"],
    "export": ["export", "--format", "json", "-o", "-"],
}


def run(trace: Path, commands: list[str], repeat: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in commands:
        best_wall, best_cpu, best_rss, out_bytes = 1e9, 0.0, 0, 0
        for _ in range(repeat):
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                t0 = time.perf_counter()
                done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "vizalloc", *_COMMANDS[name],
                                       str(trace)], stdout=out, stderr=err, env=env, cwd=ROOT, check=False)
                wall = time.perf_counter() - t0
                err.seek(0)
                text = err.read().decode(errors="replace")
                out_bytes = out.tell()
            m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
            rss = int(m.group(1)) if m else -1
            cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", text))
            if done.returncode not in (0, 1):
                raise SystemExit(f"{name} failed ({done.returncode}): {text[-2000:]}")
            if wall < best_wall:
                best_wall, best_cpu, best_rss = wall, cpu, rss
        print(f"{name:8s} {trace.name}: {best_wall:6.2f} s wall, {best_cpu:6.2f} s CPU, max RSS {best_rss / 1024:7.0f} MB, "
              f"output {out_bytes:,} bytes", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("make")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--mix", choices=("rebuild", "reuse"), default="rebuild")
    p.add_argument("--chunk", default="65536", help="events per chunk, or 'token' (one chunk per compute)")
    p.add_argument("--from", dest="source", type=Path, help="a captured trace whose last token is repeated")
    p = sub.add_parser("run")
    p.add_argument("trace", type=Path)
    p.add_argument("--commands", default="check,summary,export")
    p.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if args.what == "make":
        make(args.out_dir, args.events, args.mix, args.chunk, args.source)
    else:
        run(args.trace, args.commands.split(","), args.repeat)


if __name__ == "__main__":
    main()
