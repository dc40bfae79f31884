"""How fast is the TUI on a big trace? First screen and key responses, measured with Pilot.

A 2M-event trace is made from the runtime's own event mix (``benchmarks/analysis.py``:
a decode loop whose token events are repeated with fresh ids) and saved to a file, or
``--trace`` names one. The app then opens it headless (``App.run_test``), as
``vizalloc tui`` would:

* first screen: from starting the app until the timeline shows its first steps (the file
  is read in batches and pre-scanned; the model is not ready yet);
* full analysis: until the model, the hazards and the tensor rows are ready;
* keys: from sending a key event (as ``Pilot.press`` does) until the last frame it caused
  was rendered, once the analysis is done, and a few while it still runs (the worker
  thread holds the GIL much of the time). ``Pilot.press`` itself is not timed: it waits
  for the process to look idle in 20 ms sleeps, which would add ~80 ms to every key.

    python benchmarks/tui.py                      # 2M events
    python benchmarks/tui.py --events 200000      # quicker
    python benchmarks/tui.py --trace big.vztrace  # an existing trace

Targets (issue 8): first screen <= 2 s, every key <= 100 ms, on this 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

from textual import events
from textual._wait import wait_for_idle
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vizalloc.trace.api import save  # noqa: E402
from vizalloc.trace.value import Trace, TraceHeader  # noqa: E402
from vizalloc.tui.app import VizallocApp  # noqa: E402

#: keys pressed once the analysis is done: (label, keys)
KEYS: list[tuple[str, tuple[str, ...]]] = [
    ("timeline down", ("down",)), ("timeline pagedown", ("pagedown",)), ("timeline end", ("end",)),
    ("timeline home", ("home",)), ("timeline only hazards", ("x",)), ("timeline all", ("x",)),
    ("to memory map", ("2",)), ("map step right", ("l",)), ("map offset down", ("j",)), ("map zoom out", ("minus",)),
    ("map zoom in", ("plus",)), ("map wider steps", ("greater_than_sign",)), ("map next binding", ("n",)),
    ("map next buffer", ("b",)), ("to tensors", ("3",)), ("tensors down", ("down",)),
    ("tensors pagedown", ("pagedown",)), ("sort by bytes", ("b",)), ("sort by name", ("n",)),
    ("reverse", ("r",)), ("sort by first use", ("u",)),
    ("open search", ("slash",)), ("type 'b'", ("b",)), ("type 'l'", ("l",)), ("type 'k'", ("k",)),
    ("apply search 'blk'", ("enter",)), ("open tensor", ("enter",)), ("history pagedown", ("pagedown",)),
    ("back", ("escape",)), ("state filter", ("f",)), ("state filter again", ("f",)), ("to hazards", ("4",)),
    ("hazards down", ("down",)), ("to graph", ("5",)),
    ("graph down", ("down",)), ("unfold all", ("z",)), ("graph end", ("end",)), ("tab to timeline", ("tab",)),
    ("help", ("question_mark",)), ("close help", ("escape",)),
]
#: keys pressed while the analysis still runs, with what shows they were handled
EARLY_KEYS: list[tuple[str, tuple[str, ...], Callable[[VizallocApp, int], bool]]] = [
    ("timeline down", ("down",), lambda app, before: _cursor(app) == before + 1),
    ("timeline pagedown", ("pagedown",), lambda app, before: _cursor(app) > before),
    ("to tensors", ("3",), lambda app, before: app.current_mode == "tensors"),
    ("back to timeline", ("1",), lambda app, before: app.current_mode == "timeline"),
    ("timeline home", ("home",), lambda app, before: _cursor(app) == 0),
    ("timeline down", ("down",), lambda app, before: _cursor(app) == before + 1),
]


def _cursor(app: VizallocApp) -> int:
    tables = app.screen.query("#steps")
    return tables.first().cursor if tables else -1  # type: ignore[attr-defined]


def make_trace(n_events: int, path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_analysis", ROOT / "benchmarks" / "analysis.py")
    assert spec is not None and spec.loader is not None, "benchmarks/analysis.py is missing"
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    prefix, token = mod.record_template()
    events = mod.repeat(prefix, token, n_events)
    save(Trace(TraceHeader.new(), tuple(events)), path)


def _key_event(key: str) -> events.Key:
    """The event ``Pilot.press`` would send for ``key`` (same name and character rules)."""
    if len(key) == 1 and not key.isalnum():
        key = _character_to_key(key)
    try:
        char: str | None = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
    except KeyError:
        char = key if len(key) == 1 else None
    return events.Key(key, char)


class Frames:
    """Times of the frames the app hands to its (headless) driver: ``App._display`` runs after the
    screen's changed lines were rendered, so a frame's time is when the new screen was ready."""

    def __init__(self, app: VizallocApp) -> None:
        self.times: list[float] = []
        self.first_screen: float | None = None
        original = app._display

        def display(screen, renderable):  # type: ignore[no-untyped-def]
            if renderable is not None:
                now = time.perf_counter()
                self.times.append(now)
                if self.first_screen is None and app.scan.steps and screen.query("#steps"):
                    self.first_screen = now
            return original(screen, renderable)

        app._display = display  # type: ignore[method-assign]


async def key_latency(app: VizallocApp, frames: Frames, keys: tuple[str, ...], quiet_s: float = 0.05) -> float:
    """Seconds from sending the keys until the last frame they caused (0 when none was needed).

    The app is left alone until no frame came for ``quiet_s`` (the event loop cannot run this
    coroutine while the app is busy handling the key, so a slow handler is never mistaken
    for quiet).
    """
    driver = app._driver
    assert driver is not None, "the app is not running"
    n0 = len(frames.times)
    t0 = time.perf_counter()
    for k in keys:
        ev = _key_event(k)
        ev.set_sender(app)
        driver.send_message(ev)
    # let the app handle the key (as Pilot does), then wait for the frames to stop
    await wait_for_idle(0)
    await wait_for_idle(0)
    seen, last_change = len(frames.times), time.perf_counter()
    while time.perf_counter() - last_change < quiet_s and time.perf_counter() - t0 < 10:
        await asyncio.sleep(0.002)
        if len(frames.times) != seen:
            seen, last_change = len(frames.times), time.perf_counter()
    return frames.times[-1] - t0 if len(frames.times) > n0 else 0.0


async def latency_until(app: VizallocApp, frames: Frames, keys: tuple[str, ...],
                        handled: Callable[[VizallocApp, int], bool]) -> float:
    """Seconds from sending the keys until the first frame after ``handled`` became true.

    Used while the analysis still runs: its progress updates draw frames of their own, so
    "the last frame" would not belong to the key.
    """
    driver = app._driver
    assert driver is not None, "the app is not running"
    before = _cursor(app)
    t0 = time.perf_counter()
    for k in keys:
        ev = _key_event(k)
        ev.set_sender(app)
        driver.send_message(ev)
    while not handled(app, before):
        await asyncio.sleep(0.001)
        if time.perf_counter() - t0 > 30:
            return float("inf")
    t_state = time.perf_counter()
    while not frames.times or frames.times[-1] < t_state:
        await asyncio.sleep(0.001)
    return next(t for t in frames.times if t >= t_state) - t0


async def run(path: Path, size: tuple[int, int]) -> dict[str, object]:
    app = VizallocApp(str(path))
    frames = Frames(app)
    t0 = time.perf_counter()
    async with app.run_test(size=size) as pilot:
        while frames.first_screen is None and not app.load_error:
            await asyncio.sleep(0.005)
        if app.load_error:
            raise SystemExit(f"the trace did not load: {app.load_error}")
        t_first = (frames.first_screen or 0.0) - t0
        first_events = app.scan.n_events
        early = []
        for label, keys, handled in EARLY_KEYS:
            if app.analysis is not None:
                break
            early.append((label, await latency_until(app, frames, keys, handled)))
        while app.analysis is None and not app.load_error:
            await asyncio.sleep(0.02)
        t_full = time.perf_counter() - t0
        await pilot.pause()
        if app.load_error:
            raise SystemExit(f"the trace did not load: {app.load_error}")
        await key_latency(app, frames, ("1",))
        late = []
        for label, keys in KEYS:
            late.append((label, await key_latency(app, frames, keys)))
            if os.environ.get("VZ_BENCH_DEBUG"):
                print(f"  after {label}: {type(app.screen).__name__}, focus {app.focused}", file=sys.stderr)
        n_tensors = len(app.analysis.tensors) if app.analysis else 0
        n_steps = len(app.scan.steps)
    return {"first": t_first, "first_events": first_events, "full": t_full, "early": early, "late": late,
            "tensors": n_tensors, "steps": n_steps, "events": app.scan.n_events}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000, help="events in the generated trace")
    parser.add_argument("--trace", type=Path, help="use this trace file instead of generating one")
    parser.add_argument("--keep", type=Path, help="write the generated trace here (and keep it)")
    args = parser.parse_args()
    tmp = None
    if args.trace is not None:
        path = args.trace
    else:
        path = args.keep if args.keep is not None else Path(tempfile.mkdtemp()) / "bench.vztrace"
        tmp = None if args.keep is not None else path
        t = time.perf_counter()
        make_trace(args.events, path)
        print(f"generated {args.events:,} events in {time.perf_counter() - t:.1f} s "
              f"({os.path.getsize(path) / 2**20:.1f} MiB)")
    try:
        r = asyncio.run(run(path, (160, 50)))
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    print(f"trace: {r['events']:,} events, {r['steps']:,} steps, {r['tensors']:,} tensors")
    print(f"first screen (timeline of the first {r['first_events']:,} events): {r['first']:.2f} s  (target 2 s: "
          f"{'met' if r['first'] <= 2 else 'MISSED'})")
    print(f"full analysis ready (model, hazards, tensor rows): {r['full']:.2f} s")
    for title, rows in (("keys while the analysis runs", r["early"]), ("keys after the analysis", r["late"])):
        times = [s for _, s in rows]  # type: ignore[union-attr]
        if not times:
            print(f"{title}: none (the analysis finished first)")
            continue
        worst = max(rows, key=lambda x: x[1])  # type: ignore[arg-type,index]
        over = [f"{label} {s * 1000:.0f} ms" for label, s in rows if s > 0.1]  # type: ignore[union-attr]
        print(f"{title}: {len(times)} presses, median {statistics.median(times) * 1000:.0f} ms, "
              f"max {worst[1] * 1000:.0f} ms ({worst[0]}); over 100 ms: {', '.join(over) or 'none'}")
        for label, s in rows:  # type: ignore[union-attr]
            print(f"    {label:<24} {s * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
