"""The vizalloc TUI: a Textual app over one trace, handed in (a ``Trace``, events, or a
path the CLI checked); nothing is read from ``sys.argv``.

    from vizalloc.tui.app import VizallocApp
    VizallocApp("run.vztrace").run()          # or VizallocApp(trace)

Loading runs in a thread worker: the file is read in batches and pre-scanned for the
timeline, which shows at once; the model, the hazards and the tensor rows follow, with
a progress bar, and the other panes fill in when they are ready.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widget import AwaitMount
from textual.widgets import Static

from vizalloc.analysis.placed import sizing_reserve
from vizalloc.errors import VizallocError
from vizalloc.tui.data import Analysis, analyse, analyse_streamed, read_events, streams
from vizalloc.tui.inert import inert, inert_text
from vizalloc.tui.messages import BindingPrepared, LoadFailed, LoadProgress, TraceAnalysed
from vizalloc.tui.screens.base import set_static
from vizalloc.tui.screens.graph import GraphScreen
from vizalloc.tui.screens.hazards import HazardsScreen
from vizalloc.tui.screens.help import HelpScreen
from vizalloc.tui.screens.memory_map import MapScreen
from vizalloc.tui.screens.tensors import TensorsScreen
from vizalloc.tui.screens.timeline import TimelineScreen
from vizalloc.tui.steps import Prescan, count_hazards

#: ``writer(suffix, text) -> where it went``; supplied by the CLI (the only code that writes files).
ExportWriter = Callable[[str, str], str]

#: GIL switch interval while the worker loads (the default is 5 ms).
LOAD_SWITCH_INTERVAL_S = 0.0005
#: How long a pane switch holds back frames (Textual's ``switch_mode`` asks for 50 ms).
SWITCH_MASK_S = 0.01
#: How long the selected binding must stay before a worker makes its views.
PREPARE_SETTLE_S = 0.03

_PHASES = {"read": "reading", "reread": "reading again, every step analysed", "model": "building the model",
           "hazards": "finding hazards", "tensors": "indexing tensors"}


@dataclass(frozen=True)
class MapTarget:
    """Where the memory map should open: a binding (or, ``binding_id`` -1, a plan never
    bound: ``plan_id``), a buffer, a byte and a step, tensors to mark."""

    binding_id: int
    buffer_id: int = -1
    offset: int | None = None
    step: int | None = None
    selected: frozenset[int] = frozenset()
    plan_id: int = -1


class VizallocApp(App[None]):
    """Browse a trace: timeline, memory map, tensors, hazards, graph."""

    CSS_PATH = "vizalloc.tcss"
    TITLE = "vizalloc"

    MODES: ClassVar[dict[str, Any]] = {
        "timeline": TimelineScreen, "map": MapScreen, "tensors": TensorsScreen,
        "hazards": HazardsScreen, "graph": GraphScreen,
    }
    DEFAULT_MODE = "timeline"
    PANES: ClassVar[list[tuple[str, str]]] = [
        ("timeline", "Timeline"), ("map", "Memory map"), ("tensors", "Tensors"), ("hazards", "Hazards"),
        ("graph", "Graph"),
    ]
    """The panes in tab order, with the labels of the title line."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        # Ctrl-C quits, as in any terminal program (Textual's default only says "press ctrl+q")
        Binding("ctrl+c,ctrl+q", "quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("e", "export", "Export"),
        Binding("1", "pane_to('timeline')", "Timeline", show=False),
        Binding("2", "pane_to('map')", "Memory map", show=False),
        Binding("3", "pane_to('tensors')", "Tensors", show=False),
        Binding("4", "pane_to('hazards')", "Hazards", show=False),
        Binding("5", "pane_to('graph')", "Graph", show=False),
    ]

    def __init__(self, source: Any, *, label: str | None = None, export: ExportWriter | None = None) -> None:
        """
        Args:
            source: a ``Trace``, a sequence of events, or the path of a trace file.
            label: how to name the trace in the title line (default: the path or "trace").
            export: writes an exported view; without it ``e`` says export is unavailable.
        """
        super().__init__()
        self.source = source
        is_path = isinstance(source, (str, os.PathLike))
        self.source_label = inert_text(label if label is not None else (os.fspath(source) if is_path else "trace"),
                                       "bold", 60)
        self.export_writer = export
        self.scan = Prescan()
        self.analysis: Analysis | None = None
        self.version = 0
        self._selected_binding = -1
        # the binding whose views a worker should prepare next, and whether one is at it
        self._prepare_lock = threading.Lock()
        self._prepare_next: int | None = None
        self._prepare_settle = True
        self._preparing = False
        self.map_target: MapTarget | None = None
        #: ``(binding, plan)``: the memory map shows the plan, a reserve, while the binding is selected
        self.default_reserve: tuple[int, int] | None = None
        self.load_phase = "read"
        self.load_fraction = 0.0
        self.loaded = False
        self.load_error = ""
        #: the mounted panes by class (``PaneScreen.on_mount``), brought up to date before a switch
        self.panes: dict[type[Screen[Any]], Any] = {}

    # -- loading --------------------------------------------------------------------
    def on_mount(self) -> None:
        self.load()
        self.prepare_panes()

    def prepare_panes(self) -> None:
        """Compose and mount every pane now, behind the first one.

        A pane's first visit would otherwise build its widgets and make Textual re-parse the
        whole stylesheet (the new widgets bring their CSS), a large part of a first visit.
        Switching to each mode once, before the first frame, does both while the file is
        still being read.
        """
        first = self.current_mode
        for mode, _label in self.PANES:
            if mode != first:
                self.switch_mode(mode)
        self.switch_mode(first)

    @work(thread=True, exclusive=True, group="load")
    def load(self) -> None:
        """Read, pre-scan and analyse the trace off the UI thread."""
        # The UI thread needs the GIL for every turn of its event loop; with the default 5 ms
        # switch interval a busy worker makes each key wait up to that long per turn, and a
        # key takes many turns. Hand the GIL over more often while loading.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, LOAD_SWITCH_INTERVAL_S))
        try:
            self._load()
        finally:
            sys.setswitchinterval(interval)

    def _load(self) -> None:
        try:
            src = self.source
            header = None
            if isinstance(src, (str, os.PathLike)) and streams(src):
                # too big to hold as events: analysed as a stream, the timeline growing as it reads
                phase = ["read"]

                def rescan(scan: Prescan) -> None:
                    # a repetition's proof failed: the file is read again, its steps found anew
                    self.scan = scan
                    phase[0] = "reread"

                analysis = analyse_streamed(src, self.scan, lambda d, t: self._progress(phase[0], d, t),
                                            on_cut=self._cut_short, progress=self._progress, on_rescan=rescan)
                count_hazards(self.scan.steps, analysis.hazards)
                self.post_message(TraceAnalysed(analysis))
                return
            if isinstance(src, (str, os.PathLike)):
                events, header = read_events(src, self.scan, lambda d, t: self._progress("read", d, t),
                                             on_cut=self._cut_short)
            else:
                events = list(getattr(src, "events", src))
                header = getattr(src, "header", None)
                chunk = 1 << 16
                for lo in range(0, len(events), chunk):
                    self.scan.feed(events[lo:lo + chunk])
                    self._progress("read", min(lo + chunk, len(events)), len(events))
            self._progress("model", 0, max(len(events), 1))
            analysis = analyse(events, header, self._progress)
            count_hazards(self.scan.steps, analysis.hazards)
            self.post_message(TraceAnalysed(analysis))
        except VizallocError as exc:
            self.post_message(LoadFailed(inert(str(exc), 300)))
        except Exception as exc:  # noqa: BLE001 - shown in the app instead of a traceback on a raw terminal
            self.post_message(LoadFailed(inert(f"{type(exc).__name__}: {exc}", 300)))

    def _progress(self, phase: str, done: int, total: int) -> None:
        self.post_message(LoadProgress(phase, done, total))

    def _cut_short(self, sentence: str) -> None:
        """The trace ends early (its writer was killed, or still runs): say so, keep going."""
        self.call_from_thread(self.notify, inert(sentence, 400), title="the trace is cut short", severity="warning",
                              timeout=30, markup=False)

    def on_load_progress(self, message: LoadProgress) -> None:
        self.load_phase = message.phase
        self.load_fraction = message.done / message.total if message.total else 0.0
        screen = self.screen
        if message.phase in ("read", "reread") and isinstance(screen, TimelineScreen):
            screen.steps_grew()
        self.refresh_loadbar(screen)

    def on_trace_analysed(self, message: TraceAnalysed) -> None:
        self.analysis = message.analysis
        self.loaded = True
        self.version += 1
        if self.selected_binding < 0 and self.analysis.model.bindings:
            self.selected_binding = self.first_interesting_binding()
            if not any(h.tensor_id >= 0 for h in self.analysis.hazards):
                # no finding to show: the memory map opens on the worst-case reserve that set the
                # compute buffer's size (a llama.cpp context's), while that binding stays selected
                reserve = sizing_reserve(self.analysis.model)
                if reserve is not None:
                    self.default_reserve = (self.selected_binding, reserve[0])
        elif self.selected_binding >= 0:
            self.prepare_binding(self.selected_binding)
        screen = self.screen
        self.refresh_loadbars()
        if hasattr(screen, "data_changed"):
            screen._seen_version = self.version  # type: ignore[attr-defined]
            screen.data_changed()

    def on_load_failed(self, message: LoadFailed) -> None:
        self.load_error = message.text
        self.loaded = True
        self.refresh_loadbars()
        self.notify(message.text, title="cannot load the trace", severity="error", timeout=30,
                    markup=False)

    def first_interesting_binding(self) -> int:
        """The binding of the first hazard with one, else the last binding."""
        a = self.analysis
        assert a is not None, "no analysis yet"
        for h in a.hazards:
            if h.tensor_id >= 0:
                return a.hazard_binding(h)
        return max(a.model.bindings) if a.model.bindings else -1

    def refresh_loadbars(self) -> None:
        """The loading bar of every pane and of the screen on top: when loading ends, each pane
        hides its bar now, not on its next visit (that would lay the pane out anew once more)."""
        for screen in {*self.panes.values(), self.screen}:
            self.refresh_loadbar(screen)

    def refresh_loadbar(self, screen: Screen[Any]) -> None:
        bars = screen.query("#loadbar")
        if not bars:
            return
        bar = bars.first(Static)
        bar.set_class(self.loaded and not self.load_error, "-done")
        if self.load_error:
            set_static(bar, Text("error: " + self.load_error, style="bold red"), layout=False)
            return
        set_static(bar, load_line(_PHASES.get(self.load_phase, self.load_phase), self.load_fraction,
                             self.scan.n_events, len(self.scan.steps)), layout=False)  # one line

    # -- the selected binding, its views made in a worker ------------------------------------
    @property
    def selected_binding(self) -> int:
        """The binding the memory map and the graph pane show (the timeline's cursor sets it)."""
        return self._selected_binding

    @selected_binding.setter
    def selected_binding(self, binding_id: int) -> None:
        changed = binding_id != self._selected_binding
        self._selected_binding = binding_id
        if changed and self.analysis is not None and binding_id >= 0:
            self.prepare_binding(binding_id)

    def prepare_binding(self, binding_id: int, *, settle: bool = True) -> None:
        """Have the panes' views of a binding (its memory map, its node list) made in a worker, so
        a visit to the pane finds them made; the latest binding asked for wins. ``settle``: wait
        a moment first, the selection may move on (the timeline's cursor, a key held down); a
        pane that waits for the views asks without."""
        with self._prepare_lock:
            self._prepare_next = binding_id
            self._prepare_settle = settle
            if self._preparing:
                return
            self._preparing = True
        self._prepare_views()

    @work(thread=True, group="prepare")
    def _prepare_views(self) -> None:
        try:
            self._prepare_loop()
        except BaseException:
            with self._prepare_lock:  # the next request starts a worker anew
                self._preparing = False
            raise

    def _prepare_loop(self) -> None:
        while True:
            with self._prepare_lock:
                settle = self._prepare_settle
            if settle:
                time.sleep(PREPARE_SETTLE_S)
            with self._prepare_lock:
                binding_id = self._prepare_next
                self._prepare_next = None
                if binding_id is None:
                    # in the same hold of the lock as the check: a request made after it
                    # finds no worker and starts one
                    self._preparing = False
                    return
            self._prepare_panes(binding_id)
            self.post_message(BindingPrepared(binding_id))
            # then the bindings before and after it (``n`` / ``p`` in the memory map), unless
            # another one was asked for meanwhile
            a = self.analysis
            for other in ((a.next_binding(binding_id, 1), a.next_binding(binding_id, -1)) if a is not None else ()):
                with self._prepare_lock:
                    if self._prepare_next is not None:
                        break
                self._prepare_panes(other)

    def _prepare_panes(self, binding_id: int) -> None:
        for pane in list(self.panes.values()):
            try:
                pane.prepare(binding_id)
            except Exception:  # noqa: BLE001, S112 - the pane makes it itself when shown, and says what failed
                continue

    def on_binding_prepared(self, message: BindingPrepared) -> None:
        if not self.is_running:  # the app is closing: its panes' widgets may be gone already
            return
        for pane in self.panes.values():
            if pane.is_attached:
                pane.binding_prepared(message.binding_id)

    # -- navigation -------------------------------------------------------------------
    def delay_update(self, delay: float = 0.05) -> None:
        """Hold frames back for at most :data:`SWITCH_MASK_S`.

        ``switch_mode`` calls this to hide the moment between two screens, asking for 50 ms:
        more than the rest of a pane switch. The panes are mounted at startup and brought up
        to date before the switch (:meth:`switch_mode`), so the next frame already shows the
        new pane whole. Holding none back at all made the new pane's first frame come later
        while the trace still loads (``benchmarks/tui.py``).
        """
        super().delay_update(min(delay, SWITCH_MASK_S))

    def switch_mode(self, mode: str) -> AwaitMount:
        """Switch to a pane, brought up to date first: the switch draws the pane as it is at
        once, with what it shows now (updated on resume, it would be drawn twice, first as it
        was)."""
        pane = self.panes.get(self.MODES[mode]) if mode in self.MODES else None
        if pane is not None and mode != self.current_mode:
            pane.catch_up()
        return super().switch_mode(mode)

    def action_pane(self, delta: int) -> None:
        names = [m for m, _ in self.PANES]
        current = self.current_mode if self.current_mode in names else names[0]
        self.switch_mode(names[(names.index(current) + delta) % len(names)])

    def action_pane_to(self, mode: str) -> None:
        self.switch_mode(mode)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.screen))

    def show_map(self, target: MapTarget) -> None:
        """Open the memory map at a binding (or a plan never bound), byte and step."""
        if target.binding_id >= 0:
            self.selected_binding = target.binding_id
        self.map_target = target
        if self.current_mode == "map":
            screen = self.screen
            if isinstance(screen, MapScreen):
                screen.apply_target()
                return
        self.switch_mode("map")

    def show_tensor(self, tensor_id: int) -> None:
        from vizalloc.tui.screens.detail import DetailScreen

        if self.analysis is not None and tensor_id in self.analysis.model.tensors:
            self.push_screen(DetailScreen(tensor_id))

    # -- export ---------------------------------------------------------------------------
    def action_export(self) -> None:
        screen = self.screen
        request = screen.export_request() if hasattr(screen, "export_request") else None
        if self.analysis is None:
            self.notify("the trace is still being analysed; try again when the progress bar is gone",
                        markup=False)
            return
        if request is None:
            self.notify("nothing to export here: no bound graph is selected", markup=False)
            return
        if self.export_writer is None:
            self.notify("export is not available in this session (no output directory)", severity="warning",
                        markup=False)
            return
        self.export_view(*request)

    @work(thread=True, group="export")
    def export_view(self, fmt: str, binding_id: int, plan_id: int = -1) -> str:
        """Export through ``vizalloc.export`` and write with the injected writer (``binding_id``
        -1: the plan ``plan_id``, never bound, at its offsets)."""
        from vizalloc.export.api import Analysed, Format, Options, export_text
        from vizalloc.export.findings import highlights

        a = self.analysis
        assert a is not None and self.export_writer is not None, "export without analysis or writer"
        try:
            analysed = Analysed(a.model, a.hazards, highlights(a.hazards), a.header)
            if binding_id < 0 <= plan_id:
                text = export_text(analysed, fmt, Options(plan_id=plan_id))
                where = self.export_writer(f".plan{plan_id}{Format(fmt).suffix}", text)
            else:
                text = export_text(analysed, fmt, Options(binding_id=binding_id))
                where = self.export_writer(f".b{binding_id}{Format(fmt).suffix}", text)
        except (VizallocError, OSError) as exc:
            self.call_from_thread(self.notify, inert(str(exc), 300), title="export failed", severity="error",
                                  markup=False)
            return ""
        self.call_from_thread(self.notify, inert(f"wrote {where}", 300), title=f"exported {fmt}",
                              markup=False)
        return where


def load_line(phase: str, fraction: float, n_events: int, n_steps: int, width: int = 30) -> Text:
    """The loading indicator: phase, a bar, the percentage, and what was found so far."""
    done = min(max(int(fraction * width), 0), width)
    line = Text(f" {phase}\u2026 ", style="bold")
    line.append("\u2588" * done, style="#5f87d7")
    line.append("\u2591" * (width - done), style="#444444")
    line.append(f" {fraction * 100:3.0f}%  {n_events:,} events, {n_steps:,} steps read")
    return line


def run_app(source: Any, *, label: str | None = None, export: ExportWriter | None = None,
            events: Sequence[Any] | None = None) -> None:
    """Run the app in the terminal until the user quits."""
    VizallocApp(events if events is not None else source, label=label, export=export).run()
