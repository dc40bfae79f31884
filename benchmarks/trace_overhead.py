"""What tracing costs: run time overhead, µs per event, bytes per event, load time.

    python benchmarks/trace_overhead.py            # full run (about a minute)
    python benchmarks/trace_overhead.py --quick    # smaller sizes

Figures, all from this one run:

1. **Overhead ratio** of a training-like loop, traced vs untraced: the demo scenario
   ``vizalloc.scenarios.shared_tensors`` (strategy ``none``, forward and backward graph
   per step through one scheduler), timing only the training loop (``around_loop``),
   traced into a file as ``vizalloc run`` does (``keep_events=False``), with the default
   ``vizalloc.trace(path)`` (events also kept in memory), with every chunk compressed
   (``compress_max_overhead=None``), and with values captured; and, to show where the
   time goes, with a recorder that drops every row (the runtime's traced code paths plus
   ``emit``, nothing stored or written). CPU time of the process (the machine is
   shared), one BLAS thread, best of several alternating repeats, so other load on the
   machine counts least.
2. **µs per event** on the recorder path: ``Tensor.set_name`` in a loop (one event each,
   source line found by walking the stack, written to a file), traced minus untraced,
   divided by the events; and the same for the demo loop (extra loop time / events).
3. **Bytes per event** of the demo trace file (with and without captured values).
4. **Load time** of a 2M-event trace written by the real writer (``TraceFileWriter``,
   one chunk per graph compute as a live trace is flushed) from the demo's event mix,
   into a ``Trace`` of event objects.
"""

from __future__ import annotations

import os

# One BLAS thread: multi-threaded BLAS spins, and its CPU time would drown the figures in noise.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import sys  # noqa: E402
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import vizalloc  # noqa: E402
from vizalloc.runtime import F32, Context  # noqa: E402
from vizalloc.scenarios import shared_tensors  # noqa: E402
from vizalloc.trace import events as ev  # noqa: E402
from vizalloc.trace import recorder  # noqa: E402
from vizalloc.trace.api import TraceHeader, TraceSession, trace  # noqa: E402
from vizalloc.trace.fileformat import TraceFileWriter  # noqa: E402
from vizalloc.trace.schema import SCHEMA  # noqa: E402


def _clock() -> float:
    # CPU time of this process: the machine is shared, and wall time mostly measures the others
    return time.process_time()


class DroppingRecorder:
    """Takes every row and keeps nothing: what the runtime's traced paths and ``emit`` cost."""

    capture_values = False

    def __init__(self) -> None:
        self.n_events = 0

    def record(self, event: ev.Event) -> None:
        self.n_events += 1

    def record_row(self, cls: type[ev.Event], row: tuple[object, ...]) -> None:
        self.n_events += 1


#: mode -> (label, trace options); "untraced" and "dropped" are special
MODES: dict[str, tuple[str, dict[str, object]]] = {
    "untraced": ("untraced", {}),
    "dropped": ("recorder drops rows", {}),
    "file": ("traced to a file", {"keep_events": False}),
    "file+keep": ("file, events kept", {}),
    "file+zlib": ("file, all compressed", {"keep_events": False, "compress_max_overhead": None}),
    "values": ("traced + values", {"keep_events": False, "capture_values": True}),
}


def demo_loop(steps: int, tmp: Path, mode: str, config: str | shared_tensors.Config = "A") -> tuple[float, int, int]:
    """Seconds of the scenario's training loop; events and file bytes when traced."""
    box: dict[str, float] = {}
    sessions: list[TraceSession] = []
    dropping = DroppingRecorder()
    path = tmp / f"demo-{mode}.vztrace"

    @contextlib.contextmanager
    def around() -> Iterator[None]:
        t0 = _clock()
        if mode == "untraced":
            yield
        elif mode == "dropped":
            recorder.push(dropping)
            try:
                yield
            finally:
                recorder.pop(dropping)
        else:
            session = trace(path, overwrite=True, **MODES[mode][1])  # type: ignore[arg-type]
            sessions.append(session)
            with session:
                yield
        box["s"] = _clock() - t0

    shared_tensors.run("none", steps=steps, seed=0, config=config, around_loop=around)
    if mode == "dropped":
        return box["s"], dropping.n_events, 0
    if not sessions:
        return box["s"], 0, 0
    return box["s"], sessions[0].n_events, path.stat().st_size


def set_name_loop(n: int, tmp: Path, traced: bool) -> float:
    ctx = Context()
    x = ctx.new_tensor_1d(F32, 4)
    set_name = x.set_name
    cm: contextlib.AbstractContextManager[object] = (
        trace(tmp / "names.vztrace", keep_events=False) if traced else contextlib.nullcontext()
    )
    t0 = _clock()
    with cm:
        for _ in range(n):
            set_name("x")
    return _clock() - t0


def best(fn: Callable[[], float], repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def synthetic_trace(path: Path, n_events: int, template: tuple[ev.Event, ...]) -> int:
    """Write ``n_events`` through the real writer: the template's events repeated with new seq/t_ns."""
    kinds = [e.__class__ for e in template]
    getters = {cls: s for cls, s in SCHEMA.items()}
    rows = [(e.seq, e.t_ns, e.loc, *(getattr(e, f) for f in getters[e.__class__].fields)) for e in template]
    span_seq = rows[-1][0] - rows[0][0] + 1
    span_t = rows[-1][1] - rows[0][1] + 1000
    with open(path, "wb", buffering=0) as f:
        writer = TraceFileWriter(f, TraceHeader.new())
        written, copy = 0, 0
        chunk_kinds: list[type[ev.Event]] = []
        chunk_rows: list[tuple[object, ...]] = []
        while written < n_events:
            ds, dt = copy * span_seq, copy * span_t
            for cls, row in zip(kinds, rows):
                chunk_kinds.append(cls)
                chunk_rows.append((row[0] + ds, row[1] + dt, *row[2:]))
                written += 1
                # a live trace flushes at the end of every graph compute
                if cls is ev.ComputeEnd or written == n_events:
                    writer.write_rows(chunk_kinds, chunk_rows, rows_only=True)
                    chunk_kinds, chunk_rows = [], []
                if written == n_events:
                    break
            copy += 1
        writer.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a few seconds)")
    parser.add_argument("--events", type=int, default=None, help="events in the synthetic load test (default 2M)")
    args = parser.parse_args()
    steps = 10 if args.quick else 40
    repeats = 3 if args.quick else 5
    n_names = 20_000 if args.quick else 200_000
    n_synth = args.events or (200_000 if args.quick else 2_000_000)

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for mode in MODES:
            demo_loop(2, tmp, mode)  # warm up imports and caches
        big = shared_tensors.Config(n_in=512, n_hidden=1024, n_out=16, batch=256)
        for config, label in (("A", "config A: 16-32-4 MLP, batch 8"), (big, "512-1024-16 MLP, batch 256")):
            n_steps = steps if config == "A" else max(2, steps // 4)
            times: dict[str, list[float]] = {mode: [] for mode in MODES}
            facts: dict[str, tuple[int, int]] = {}
            for _ in range(repeats):  # alternate, so drifting machine load hits all modes alike
                for mode in times:
                    s, n, nbytes = demo_loop(n_steps, tmp, mode, config)
                    times[mode].append(s)
                    if n:
                        facts[mode] = (n, nbytes)
            base = min(times["untraced"])
            print(f"demo loop (shared_tensors 'none', {label}, {n_steps} steps), CPU time, best of {repeats}:")
            print(f"  {'untraced':<22} {base * 1e3:8.1f} ms")
            for mode, (what, _) in MODES.items():
                if mode == "untraced":
                    continue
                t = min(times[mode])
                n, nbytes = facts[mode]
                per_event = f"{nbytes / n:7.1f} B/event" if nbytes else "(no file)"
                print(f"  {what:<22} {t * 1e3:8.1f} ms  ratio {t / base:6.3f}x   {n:,} events, "
                      f"{(t - base) / n * 1e6:5.2f} us/event, {per_event}")

        b = best(lambda: set_name_loop(n_names, tmp, False), repeats)
        t = best(lambda: set_name_loop(n_names, tmp, True), repeats)
        print(f"recorder path (Tensor.set_name x {n_names:,}, stack walk + file), CPU time, best of {repeats}:")
        print(f"  untraced {b / n_names * 1e9:6.0f} ns/call, traced {t / n_names * 1e9:6.0f} ns/call: "
              f"{(t - b) / n_names * 1e6:5.2f} us/event")

        sessions: list[TraceSession] = []
        shared_tensors.run("none", steps=10, seed=0,
                           around_loop=lambda: sessions.append(trace()) or sessions[-1])  # type: ignore[func-returns-value]
        template = sessions[0].trace.events
        path = tmp / "synthetic.vztrace"
        gc.collect()
        t0 = _clock()
        n = synthetic_trace(path, n_synth, template)
        t_write = _clock() - t0
        size = path.stat().st_size
        loads = []
        for _ in range(2 if args.quick else 3):
            gc.collect()
            w0, t0 = time.perf_counter(), _clock()
            loaded = vizalloc.load(path)
            loads.append((_clock() - t0, time.perf_counter() - w0))
            assert len(loaded) == n
            del loaded
        t_load, w_load = min(loads)
        print(f"synthetic trace ({n:,} events of the demo's mix, one chunk per compute):")
        print(f"  write {t_write:6.2f} s CPU ({t_write / n * 1e6:4.2f} us/event), {size / n:5.1f} B/event, "
              f"{size / 2**20:6.1f} MiB")
        print(f"  load into event objects {t_load:6.2f} s CPU, {w_load:6.2f} s wall "
              f"({t_load / n * 1e6:4.2f} us/event), best of {len(loads)}")
        os.remove(path)


if __name__ == "__main__":
    main()
