"""How fast is the TUI on a big trace? First screen and key responses, measured with Pilot.

A 2M-event trace is made from the runtime's own event mix (``benchmarks/analysis.py``:
a decode loop whose token events are repeated with fresh ids) and saved to a file, or
``--trace`` names one (``--reuse`` makes it once and keeps it). The app then opens it
headless (``App.run_test``), as ``vizalloc tui`` would, twice:

* session 1, keys while the analysis runs: from the first screen on, keys are pressed
  (the first visit to every pane and to the help screen among them, then rounds of pane
  switches and moves) until the model, hazards and tensor rows are ready; a key counts
  from sending it until the first frame after the app's state shows it was handled
  (the progress bar draws frames of its own, so "the last frame" would not be the key's);
* session 2, keys after the analysis: nothing is pressed until the analysis is ready,
  then the keys of ``KEYS`` (the first visit to every pane and the help screen among
  them); a key counts from sending it until the last frame it caused was rendered.

Figures: the first screen (the timeline shows its first steps; the file is read in
batches and pre-scanned, the model is not ready yet), the first visit to every pane in
both sessions, the median and the maximum key latency in both, and when the full
analysis was ready (session 2: no keys pressed meanwhile). ``Pilot.press`` itself is
not used for timing: it waits for the process to look idle in 20 ms sleeps.

    python benchmarks/tui.py                          # 2M events, made in a temporary file
    python benchmarks/tui.py --reuse /tmp/2m.vztrace  # made once, then reused
    python benchmarks/tui.py --events 200000          # quicker
    python benchmarks/tui.py --trace big.vztrace      # an existing trace

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
from vizalloc.tui.screens.help import HelpScreen  # noqa: E402

#: panes by key, as the benchmark names them
PANES = {"2": "memory map", "3": "tensors", "4": "hazards", "5": "graph", "1": "timeline"}
#: keys pressed once the analysis is done: (label, keys); "to <pane>" / "help" the first time are first visits
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

Handled = Callable[[VizallocApp, int], bool]


def _in_mode(mode: str) -> Handled:
    return lambda app, before: app.current_mode == mode and not isinstance(app.screen, HelpScreen)


def _moved(delta: int | None) -> Handled:
    """The timeline's cursor moved by ``delta`` rows (None: forward by any; 0: to the top)."""
    if delta == 0:
        return lambda app, before: _cursor(app) == 0
    if delta is None:
        return lambda app, before: _cursor(app) > before
    return lambda app, before: _cursor(app) == before + delta


#: keys pressed while the analysis still runs, with what shows they were handled: the first
#: visits first, then ROUND again and again until the analysis is done
EARLY_KEYS: list[tuple[str, tuple[str, ...], Handled]] = [
    ("timeline down", ("down",), _moved(1)),
    ("timeline pagedown", ("pagedown",), _moved(None)),
    ("to memory map", ("2",), _in_mode("map")),
    ("to tensors", ("3",), _in_mode("tensors")),
    ("to hazards", ("4",), _in_mode("hazards")),
    ("to graph", ("5",), _in_mode("graph")),
    ("to timeline", ("1",), _in_mode("timeline")),
    ("help", ("question_mark",), lambda app, before: isinstance(app.screen, HelpScreen)),
    ("close help", ("escape",), _in_mode("timeline")),
    ("timeline home", ("home",), _moved(0)),
]
ROUND: list[tuple[str, tuple[str, ...], Handled]] = [
    ("timeline down", ("down",), _moved(1)),
    ("to memory map", ("2",), _in_mode("map")),
    ("to tensors", ("3",), _in_mode("tensors")),
    ("to hazards", ("4",), _in_mode("hazards")),
    ("to graph", ("5",), _in_mode("graph")),
    ("to timeline", ("1",), _in_mode("timeline")),
    ("timeline pagedown", ("pagedown",), _moved(None)),
    ("timeline home", ("home",), _moved(0)),
]
#: the first-visit keys, as labelled in KEYS / EARLY_KEYS
FIRST_VISITS = [("memory map", "to memory map"), ("tensors", "to tensors"), ("hazards", "to hazards"),
                ("graph", "to graph"), ("help screen", "help")]


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
    save(Trace(TraceHeader.new(), tuple(events)), path, overwrite=True)


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
    # a pane that waits for a worker (a big graph's memory map) counts until it shows the result
    while ((time.perf_counter() - last_change < quiet_s or getattr(app.screen, "waiting", False))
           and time.perf_counter() - t0 < 10):
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


async def _first_screen(app: VizallocApp, frames: Frames, t0: float) -> float:
    while frames.first_screen is None and not app.load_error:
        await asyncio.sleep(0.005)
    if app.load_error:
        raise SystemExit(f"the trace did not load: {app.load_error}")
    return (frames.first_screen or 0.0) - t0


async def during(path: Path, size: tuple[int, int]) -> dict[str, object]:
    """Session 1: keys while the analysis runs."""
    app = VizallocApp(str(path))
    frames = Frames(app)
    t0 = time.perf_counter()
    async with app.run_test(size=size):
        t_first = await _first_screen(app, frames, t0)
        first_events = app.scan.n_events
        early: list[tuple[str, float]] = []
        keys = iter(EARLY_KEYS)
        while app.analysis is None and not app.load_error:
            step = next(keys, None)
            if step is None:
                keys = iter(ROUND)
                continue
            label, pressed, handled = step
            early.append((label, await latency_until(app, frames, pressed, handled)))
        t_full = time.perf_counter() - t0
    return {"first": t_first, "first_events": first_events, "full": t_full, "keys": early}


async def after(path: Path, size: tuple[int, int]) -> dict[str, object]:
    """Session 2: no key until the analysis is ready, then ``KEYS``."""
    app = VizallocApp(str(path))
    frames = Frames(app)
    t0 = time.perf_counter()
    async with app.run_test(size=size) as pilot:
        t_first = await _first_screen(app, frames, t0)
        while app.analysis is None and not app.load_error:
            await asyncio.sleep(0.005)
        t_full = time.perf_counter() - t0
        await pilot.pause()
        if app.load_error:
            raise SystemExit(f"the trace did not load: {app.load_error}")
        late = []
        for label, keys in KEYS:
            late.append((label, await key_latency(app, frames, keys)))
            if os.environ.get("VZ_BENCH_DEBUG"):
                print(f"  after {label}: {type(app.screen).__name__}, focus {app.focused}", file=sys.stderr)
        n_tensors = len(app.analysis.tensors) if app.analysis else 0
        n_steps = len(app.scan.steps)
    return {"first": t_first, "full": t_full, "keys": late, "tensors": n_tensors, "steps": n_steps,
            "events": app.scan.n_events}


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:.0f} ms"


def summary(title: str, rows: list[tuple[str, float]]) -> None:
    times = [s for _, s in rows]
    if not times:
        print(f"{title}: none (the analysis finished first)")
        return
    worst = max(rows, key=lambda x: x[1])
    over = [f"{label} {s * 1000:.0f} ms" for label, s in rows if s > 0.1]
    print(f"{title}: {len(times)} presses, median {statistics.median(times) * 1000:.0f} ms, "
          f"max {worst[1] * 1000:.0f} ms ({worst[0]}); over 100 ms: {', '.join(over) or 'none'}")


def first_visit(rows: list[tuple[str, float]], label: str) -> float | None:
    return next((s for lab, s in rows if lab == label), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000, help="events in the generated trace")
    parser.add_argument("--trace", type=Path, help="use this trace file instead of generating one")
    parser.add_argument("--keep", type=Path, help="write the generated trace here (and keep it)")
    parser.add_argument("--reuse", type=Path, help="use this trace file if it exists, else generate it there and keep it")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every key's latency")
    args = parser.parse_args()
    tmp = None
    if args.trace is not None or (args.reuse is not None and args.reuse.exists()):
        path = args.trace if args.trace is not None else args.reuse
    else:
        keep = args.keep if args.keep is not None else args.reuse
        path = keep if keep is not None else Path(tempfile.mkdtemp()) / "bench.vztrace"
        tmp = None if keep is not None else path
        t = time.perf_counter()
        make_trace(args.events, path)
        print(f"generated {args.events:,} events in {time.perf_counter() - t:.1f} s "
              f"({os.path.getsize(path) / 2**20:.1f} MiB)")
    try:
        early = asyncio.run(during(path, (160, 50)))
        late = asyncio.run(after(path, (160, 50)))
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    early_keys: list[tuple[str, float]] = early["keys"]  # type: ignore[assignment]
    late_keys: list[tuple[str, float]] = late["keys"]  # type: ignore[assignment]
    print(f"trace: {late['events']:,} events, {late['steps']:,} steps, {late['tensors']:,} tensors")
    firsts = [float(early["first"]), float(late["first"])]  # type: ignore[arg-type]
    print(f"first screen (timeline of the first {early['first_events']:,} events): "
          f"{' / '.join(f'{t:.2f} s' for t in firsts)} (two sessions; target 2 s: "
          f"{'met' if max(firsts) <= 2 else 'MISSED'})")
    print(f"full analysis ready (model, hazards, tensor rows): {late['full']:.2f} s with no key pressed, "
          f"{early['full']:.2f} s while keys were pressed")
    print("first visit to each pane:        during the analysis   after it")
    for pane, label in FIRST_VISITS:
        print(f"    {pane:<28} {_ms(first_visit(early_keys, label)):>12} {_ms(first_visit(late_keys, label)):>12}")
    summary("keys while the analysis runs", early_keys)
    summary("keys after the analysis", late_keys)
    if args.verbose:
        for title, rows in (("while the analysis runs", early_keys), ("after the analysis", late_keys)):
            print(f"every key {title}:")
            for label, s in rows:
                print(f"    {label:<24} {s * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
