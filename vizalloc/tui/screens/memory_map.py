"""The memory map pane: one buffer of one bound graph, offset x step, with the tensors
under the cursor described below. ``n``/``p`` walk the bindings, ``b`` the buffers,
enter opens the tensor under the cursor, ``/`` finds a tensor by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import Static

from vizalloc.export.units import fmt_bytes, step_label
from vizalloc.tui.inert import inert
from vizalloc.tui.mapdata import BindingMap, Block, MapKey, Panel, default_panel
from vizalloc.tui.render import (
    COLLISION_CHAR, STALE_CHAR, STYLE_COLLISION, STYLE_SELECTED, STYLE_STALE, collisions, describe_block,
)
from vizalloc.tui.screens.base import PaneScreen, set_static
from vizalloc.tui.widgets.memory_map import MemoryMap


class MapScreen(PaneScreen):
    """Offsets x steps of one buffer."""

    PANE = "Memory map"
    INFO_ROWS = 4   # the cursor's place and up to three tensors, or "… and N more"
    BINDINGS: ClassVar[list[BindingType]] = [
        # a map per binding and per worst-case reserve: n/p walk both, so "binding" would say too little
        Binding("n", "binding(1)", "Next map",
                tooltip="Next binding, or worst-case reserve (a plan never bound), in trace order"),
        Binding("p", "binding(-1)", "Prev map",
                tooltip="Prev binding, or worst-case reserve (a plan never bound), in trace order"),
        Binding("b", "buffer(1)", "Next buffer"),
        Binding("enter", "open", "Tensor"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.bmap: BindingMap | None = None
        self.panel: Panel | None = None
        #: ``_open_binding``'s arguments while its binding's map is made in a worker
        self._waiting: tuple[int, int, int | None, int | None, frozenset[int]] | None = None
        #: the selected binding when a reserve's map was opened (it stays until that changes)
        self._plan_over = -1

    def compose_body(self) -> Iterable[Widget]:
        yield Static(id="maphead")
        yield MemoryMap(id="map", classes="body")

    @property
    def mmap(self) -> MemoryMap:
        return self.query_one("#map", MemoryMap)

    def on_mount(self) -> None:
        super().on_mount()
        self.mmap.focus()
        if self.vz.analysis is None:
            self.set_info("the memory map appears when the analysis is done")

    def catch_up(self) -> None:
        super().catch_up()
        selected = self.vz.selected_binding
        if self.vz.map_target is not None:
            self.apply_target()
        elif self.bmap is not None and self.bmap.planned and self._plan_over == selected:
            return   # a reserve's map, opened while this binding was selected: it stays
        elif self.vz.analysis is not None and (self.bmap is None or self.bmap.binding_id != selected) and (
                self._waiting is None or self._waiting[0] != selected):
            self._open_selected()

    def data_changed(self) -> None:
        if self.vz.map_target is not None:
            self.apply_target()
        else:
            self._open_selected()

    def _open_selected(self) -> None:
        """The selected binding's map; the worst-case reserve's instead when the app chose it
        as the first thing to show (:attr:`VizallocApp.default_reserve`) and this pane shows
        nothing yet."""
        selected = self.vz.selected_binding
        default = self.vz.default_reserve
        if self.bmap is None and default is not None and default[0] == selected:
            self._open_plan(default[1])
        else:
            self._open_binding(selected)

    # -- opening ---------------------------------------------------------------------
    def _open_binding(self, binding_id: int, buffer_id: int = -1, *, offset: int | None = None, step: int | None = None,
              selected: frozenset[int] = frozenset(), wait: bool = True) -> None:
        """Show a binding's memory map; ``wait``: a big graph's map is made in a worker
        (False: here, as when the worker made it and it was dropped or failed meanwhile)."""
        a = self.vz.analysis
        if a is None:
            return
        if binding_id not in a.model.bindings:
            self.bmap = None
            self.panel = None
            self.mmap.show(None)
            set_static(self.query_one("#maphead", Static), "no binding in this trace: nothing was placed by a "
                       "graph allocator", layout=False)
            return
        self.vz.selected_binding = binding_id
        bmap = a.cached_map(binding_id)
        if bmap is None and wait and not a.cheap(binding_id):
            # a big graph: its map is made in a worker (VizallocApp.prepare_binding, asked for
            # by selecting the binding); this pane says so and opens it when it is ready
            self._waiting = (binding_id, buffer_id, offset, step, selected)
            self.bmap = None
            self.panel = None
            self.mmap.show(None)
            set_static(self.query_one("#maphead", Static), Text(f"binding #{binding_id}: drawing its memory map\u2026",
                                                               style="bold"), layout=False)
            self.set_info("")
            self.vz.prepare_binding(binding_id, settle=False)
            return
        self._waiting = None
        self.bmap = bmap if bmap is not None else a.binding_map(binding_id)
        self._show(buffer_id, offset, step, selected)

    def _open_plan(self, plan_id: int, buffer_id: int = -1, *, offset: int | None = None, step: int | None = None,
                   selected: frozenset[int] = frozenset()) -> None:
        """Show the map of a plan never bound (a worst-case reserve) at its offsets. Made here:
        a reserve is planned once or twice per context, not once per token."""
        a = self.vz.analysis
        if a is None or plan_id not in a.model.plans or a.model.plans[plan_id].graph is None:
            return
        self._waiting = None
        self._plan_over = self.vz.selected_binding
        self.bmap = a.plan_map(plan_id)
        self._show(buffer_id, offset, step, selected)

    def _show(self, buffer_id: int, offset: int | None, step: int | None, selected: frozenset[int]) -> None:
        assert self.bmap is not None
        panel = self.bmap.panel(buffer_id) if buffer_id >= 0 else None
        if panel is None:
            panel = default_panel(self.bmap, selected)
        self.panel = panel
        if panel is not None and selected and offset is None:
            offset, step = _focus(panel, selected)
        self.mmap.show(panel, offset=offset, step=step, selected=selected)
        self._head()
        # now, not on the CursorMoved message: a pane switch then draws the info lines in its
        # first frame (the message comes after it, finds them equal, and changes nothing)
        self._describe(*self.mmap.cursor_state())

    @property
    def waiting(self) -> bool:
        return self._waiting is not None

    def prepare(self, binding_id: int) -> None:
        a = self.vz.analysis
        if a is not None and binding_id in a.model.bindings:
            a.binding_map(binding_id)

    def binding_prepared(self, binding_id: int) -> None:
        if self._waiting is not None and self._waiting[0] == binding_id:
            b, buffer_id, offset, step, selected = self._waiting
            self._open_binding(b, buffer_id, offset=offset, step=step, selected=selected, wait=False)

    def apply_target(self) -> None:
        target = self.vz.map_target
        if target is None or self.vz.analysis is None:
            return
        self.vz.map_target = None
        if target.binding_id < 0 and target.plan_id >= 0:
            self._open_plan(target.plan_id, target.buffer_id, offset=target.offset, step=target.step,
                            selected=target.selected)
            return
        self._open_binding(target.binding_id, target.buffer_id, offset=target.offset, step=target.step,
                   selected=target.selected)

    def _head(self) -> None:
        """Three lines: the binding and the buffer; its tensors and figures (as the layout
        diagram and the summary give them, ``analysis.placed.buffer_figures``); the scale
        and the legend."""
        head = Text()
        if self.bmap is None or self.panel is None:
            head.append("this binding placed nothing" if self.bmap is not None else "")
            set_static(self.query_one("#maphead", Static), head, layout=False)
            return
        p = self.panel
        fig = p.figures
        head.no_wrap, head.overflow = True, "ellipsis"   # a narrow terminal cuts a line, never wraps it
        a = self.vz.analysis
        graph = a.model.graph_name(self.bmap.graph_id) if a is not None else f"graph #{self.bmap.graph_id}"
        if self.bmap.planned:
            head.append(f"plan #{self.bmap.plan_id}", style="bold")
            head.append(f" of {graph} (a reserve, never bound: its offsets; {p.n_steps} nodes)  ")
        else:
            head.append(f"binding #{self.bmap.binding_id}", style="bold")
            head.append(f" of {graph} (plan #{self.bmap.plan_id}, {p.n_steps} nodes)  ")
        head.append(inert(p.title), style="bold")
        head.append(f" {fmt_bytes(p.nbytes)}")
        if fig is not None and fig.freed:
            head.append(f"  FREED at event {fig.freed_seq}: its tensors dangle", style="bold #ff5f5f")
        others = [q.buffer_id for q in self.bmap.panels if q is not p]
        if others:
            head.append(f"  (b: buffers {', '.join('#' + str(i) for i in others)})", style="dim")
        head.append("\n")
        n_stale = sum(1 for b in p.blocks if b.stale)
        head.append(f"{len(p.blocks)} tensors, ")
        head.append(f"{n_stale} stale", style="bold #ff8787" if n_stale else "")
        head.append(", ")
        head.append(f"{len(p.overlaps)} collisions", style="bold #ff5f5f" if p.overlaps else "")
        if fig is not None:
            head.append(f" · peak {fmt_bytes(fig.highest)}")
            if fig.max_live_step >= -1:
                head.append(f" · max live {fmt_bytes(fig.max_live)} (step {step_label(fig.max_live_step, p.n_steps)})")
            if fig.lower_bound is not None:
                head.append(f" · lower bound {fmt_bytes(fig.lower_bound)}")
        head.append("\n")
        g = self.mmap.geom
        per_col = f"{g.steps_per_col} steps" if g.steps_per_col > 1 else "1 step"
        head.append(f"rows: {fmt_bytes(g.bytes_per_row)} each; columns: {per_col}"
                    + (f" per {g.step_width} chars" if g.step_width > 1 else " per char") + "   ", style="dim")
        head.append(f" {STALE_CHAR} ", style=STYLE_STALE)
        head.append(" stale  ", style="dim")
        head.append(f" {COLLISION_CHAR} ", style=STYLE_COLLISION)
        head.append(" collision  ", style="dim")
        head.append("   ", style=STYLE_SELECTED)
        head.append(" selected", style="dim")
        set_static(self.query_one("#maphead", Static), head, layout=False)  # three lines, always

    # -- cursor -----------------------------------------------------------------------------
    @on(MemoryMap.CursorMoved, "#map")
    def _cursor(self, event: MemoryMap.CursorMoved) -> None:
        self._head()
        self._describe(event.blocks, event.offset, event.steps)

    def _describe(self, blocks: list[Block], offset: int, steps: tuple[int, int]) -> None:
        """The info lines: the cursor's place and the tensors under it."""
        p = self.panel
        if p is None:
            return
        s0, s1 = steps
        where = step_label(s0, p.n_steps) if s0 == s1 else f"{step_label(s0, p.n_steps)}..{step_label(s1, p.n_steps)}"
        info = Text(f"offset {offset}, step {where}: ", style="dim")
        if not blocks:
            info.append("no tensor here")
        for k, b in enumerate(blocks[:3]):
            if k:
                info.append("\n")
            info.append(describe_block(b, p.n_steps), style="bold #ff8787" if b.stale else "")
            hits = [o for o in p.overlapping(b) if o in blocks]
            if hits:
                info.append("  collides with " + ", ".join(inert(o.name, 30) for o in hits), style="bold #ff5f5f")
        if len(blocks) > 3:
            info.append(f"\n… and {len(blocks) - 3} more")
        self.set_info(info)

    # -- actions ------------------------------------------------------------------------------
    def action_binding(self, delta: int) -> None:
        """The next (previous) map: the bindings and the reserves never bound, in trace order."""
        a = self.vz.analysis
        if a is None:
            return
        cur = (self.bmap.key if self.bmap is not None
               else MapKey(self._waiting[0], -1) if self._waiting is not None else None)
        buffer_id = (self.panel.buffer_id if self.panel is not None
                     else self._waiting[1] if self._waiting is not None else -1)
        key = a.next_map(cur if cur is not None else MapKey(-1, -1), delta)
        if key is None:
            return
        if key.binding_id >= 0:
            self._open_binding(key.binding_id, buffer_id)
        else:
            self._open_plan(key.plan_id, buffer_id)

    def action_buffer(self, delta: int) -> None:
        if self.bmap is None or not self.bmap.panels or self.panel is None:
            return
        i = self.bmap.panels.index(self.panel)
        self.panel = self.bmap.panels[(i + delta) % len(self.bmap.panels)]
        self.mmap.show(self.panel, selected=self.mmap.selected)
        self._head()

    def action_open(self) -> None:
        blocks = self.mmap.cursor_blocks()
        if blocks:
            self.vz.show_tensor(blocks[0].tensor_id)

    def apply_search(self, text: str) -> None:
        if self.panel is None or not text:
            return
        needle = text.lower()
        for b in self.panel.blocks:
            if needle in b.name.lower():
                self.mmap.show(self.panel, offset=b.offset, step=b.first, selected=frozenset({b.tensor_id}),
                               keep_zoom=True)
                return
        self.notify(f"no tensor named like {inert(text, 40)!r} in this buffer", markup=False)

    def export_request(self) -> tuple[str, int] | tuple[str, int, int] | None:
        if self.bmap is None:
            return None
        return ("layout", -1, self.bmap.plan_id) if self.bmap.planned else ("layout", self.bmap.binding_id)


def _focus(panel: Panel, selected: frozenset[int]) -> tuple[int | None, int | None]:
    """Where to put the cursor for selected tensors: their collision, else the first one's block."""
    for c in collisions(panel):
        if {c.a.tensor_id, c.b.tensor_id} <= selected or (len(selected) == 1 and selected & {c.a.tensor_id,
                                                                                              c.b.tensor_id}):
            return c.lo, c.first
    for b in panel.blocks:
        if b.tensor_id in selected:
            return b.offset, b.first
    return None, None
