"""Drawing math for the TUI, as pure functions over plain data (no App needed).

The memory map is a grid: row ``r`` holds bytes ``[r * bytes_per_row, (r + 1) *
bytes_per_row)`` of a buffer (offset grows downwards), and columns walk the graph's
node steps (``in`` = before the first node, then ``0 .. n-1``, then ``out``), each
step ``step_width`` characters wide, or ``steps_per_col`` steps folded into one
character when zoomed out. :func:`map_row` returns one row as ``(text, style)`` runs;
widgets turn those into strips.

    >>> g = MapGeometry(n_steps=3, bytes_per_row=64)
    >>> g.n_cols, g.steps_of(0), g.steps_of(4)
    (5, (-1, -1), (3, 3))
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.style import Style

from vizalloc.export.units import fmt_bytes, step_label
from vizalloc.tui.inert import inert
from vizalloc.tui.mapdata import Block, Panel

#: Background colours of blocks (dark enough for white labels), chosen by tensor id.
PALETTE = ("#1f5f8b", "#2e7d32", "#6a1b9a", "#8d6e00", "#00695c", "#4e342e", "#283593", "#558b2f",
           "#ad1457", "#37474f", "#00838f", "#5d4037")
STYLE_FREE = "#4a4a4a"
STYLE_STALE = "bold #ff5f5f on #3a0000"
STYLE_COLLISION = "bold white on #c00000"
STYLE_SELECTED = "bold black on #ffd700"
STYLE_HEADER = "bold #a0a0a0"
STALE_CHAR = "\u2571"      # ╱
COLLISION_CHAR = "X"
FREE_CHAR = "\u00b7"       # ·
GUTTER = 11                # width of the offset column (10 digits and a rule)

Run = tuple[str, str]


#: The fewest cells a cut label is drawn in (its first letters and an ellipsis).
MIN_LABEL = 4


@functools.cache
def parsed_style(style: str) -> Style:
    """A style string of a run, parsed once (the widgets ask for every segment they draw)."""
    return Style.parse(style) if style else Style()


def block_style(b: Block) -> str:
    return STYLE_STALE if b.stale else f"white on {PALETTE[b.tensor_id % len(PALETTE)]}"


@dataclass(frozen=True, slots=True)
class MapGeometry:
    """How the map's grid maps onto bytes and steps (see the module docstring)."""

    n_steps: int
    bytes_per_row: int
    step_width: int = 1
    steps_per_col: int = 1

    @property
    def n_positions(self) -> int:
        """Step positions: ``in``, ``0 .. n-1``, ``out``."""
        return self.n_steps + 2

    @property
    def n_cols(self) -> int:
        if self.steps_per_col > 1:
            return math.ceil(self.n_positions / self.steps_per_col)
        return self.n_positions * self.step_width

    def n_rows(self, top: int) -> int:
        return max(1, math.ceil(top / self.bytes_per_row))

    def steps_of(self, col: int) -> tuple[int, int]:
        """The steps (first, last; -1 = in, n = out) that column ``col`` shows."""
        if self.steps_per_col > 1:
            lo = col * self.steps_per_col
            return lo - 1, min(lo + self.steps_per_col, self.n_positions) - 2
        pos = col // self.step_width
        return pos - 1, pos - 1

    def col_of(self, step: int) -> int:
        """The first column showing ``step``."""
        pos = step + 1
        return pos // self.steps_per_col if self.steps_per_col > 1 else pos * self.step_width

    def row_of(self, offset: int) -> int:
        return offset // self.bytes_per_row

    def zoom_bytes(self, factor: float) -> MapGeometry:
        return replace(self, bytes_per_row=max(1, int(self.bytes_per_row * factor)))

    def zoom_steps(self, zoom_in: bool) -> MapGeometry:
        """One step wider (in) or narrower (out); past one character per step, steps fold."""
        if zoom_in:
            if self.steps_per_col > 1:
                return replace(self, steps_per_col=self.steps_per_col // 2)
            return replace(self, step_width=min(self.step_width * 2, 32))
        if self.step_width > 1:
            return replace(self, step_width=self.step_width // 2)
        return replace(self, steps_per_col=min(self.steps_per_col * 2, 1 << 20))


def fit_bytes_per_row(top: int, rows: int) -> int:
    """The smallest power of two that fits ``top`` bytes in ``rows`` rows."""
    need = max(1, math.ceil(max(top, 1) / max(rows, 1)))
    return 1 << (need - 1).bit_length()


def fit_step_width(n_steps: int, cols: int) -> MapGeometry:
    """Step width (or folding) so all ``n_steps + 2`` positions fit ``cols`` columns."""
    positions = n_steps + 2
    width = max(1, cols // positions)
    width = 1 << (width.bit_length() - 1)
    if positions <= cols:
        return MapGeometry(n_steps, 1, step_width=min(width, 8))
    spc = 1
    while math.ceil(positions / spc) > cols:
        spc *= 2
    return MapGeometry(n_steps, 1, steps_per_col=spc)


def header_row(geom: MapGeometry, col0: int, ncols: int) -> str:
    """Step labels above the grid: each at the column where its step starts, when there is room."""
    chars = [" "] * ncols
    free_from = 0
    for c in range(col0, min(col0 + ncols, geom.n_cols)):
        s0, _ = geom.steps_of(c)
        if geom.col_of(s0) != c or c - col0 < free_from:
            continue
        label = step_label(s0, geom.n_steps)
        at = c - col0
        if at + len(label) > ncols:
            break
        chars[at:at + len(label)] = label
        free_from = at + len(label) + 1
    return "".join(chars)


@dataclass(frozen=True, slots=True)
class Collision:
    """Where two blocks share bytes while both live: bytes ``[lo, hi)``, steps ``first..last``."""

    a: Block
    b: Block
    lo: int
    hi: int
    first: int
    last: int


def collisions(panel: Panel) -> list[Collision]:
    out = []
    for i, j in panel.overlaps:
        a, b = panel.blocks[i], panel.blocks[j]
        out.append(Collision(a, b, max(a.offset, b.offset), min(a.end, b.end), max(a.first, b.first),
                             min(a.last, b.last)))
    return out


def cell_blocks(panel: Panel, geom: MapGeometry, row: int, col: int) -> list[Block]:
    """The blocks drawn in one cell (sharing its bytes while live at one of its steps)."""
    lo = row * geom.bytes_per_row
    s0, s1 = geom.steps_of(col)
    return [b for b in panel.blocks_in(lo, lo + geom.bytes_per_row) if b.first <= s1 and b.last >= s0]


def map_row(panel: Panel, geom: MapGeometry, row: int, col0: int, ncols: int, *,
            cursor: tuple[int, int] | None = None, selected: frozenset[int] = frozenset(),
            collision_list: Sequence[Collision] | None = None) -> list[Run]:
    """One grid row of the map as ``(text, style)`` runs, ``ncols`` cells from ``col0``.

    A cell shows the block with the most bytes in it (its label on the block's first row),
    ``╱`` for a stale or dangling block, a red ``X`` where two blocks collide, ``·`` for
    unused bytes of the buffer; the selected tensors are yellow, the cursor reversed.
    """
    cells = map_cells(panel, geom, row, col0, ncols, selected=selected, collision_list=collision_list)
    return merge_runs(with_cursor(cells, row, col0, cursor))


def with_cursor(cells: list[Run], row: int, col0: int, cursor: tuple[int, int] | None) -> list[Run]:
    """``cells`` (of grid row ``row`` from column ``col0``) with the cursor drawn, if it is there."""
    if cursor is None or cursor[0] != row or not col0 <= cursor[1] < col0 + len(cells):
        return cells
    cells = list(cells)
    text, style = cells[cursor[1] - col0]
    cells[cursor[1] - col0] = (text if text.strip() else "+", (style + " reverse").strip())
    return cells


def map_cells(panel: Panel, geom: MapGeometry, row: int, col0: int, ncols: int, *,
              selected: frozenset[int] = frozenset(), collision_list: Sequence[Collision] | None = None) -> list[Run]:
    """The cells of :func:`map_row`, one ``(text, style)`` per column, without the cursor."""
    lo = row * geom.bytes_per_row
    hi = lo + geom.bytes_per_row
    cands = panel.blocks_in(lo, hi)
    inside = lo < panel.top
    hits = [c for c in (collisions(panel) if collision_list is None else collision_list) if c.lo < hi and c.hi > lo]
    cells: list[Run] = []
    chosen: list[Block | None] = []
    for c in range(col0, col0 + ncols):
        s0, s1 = geom.steps_of(c)
        if s0 > geom.n_steps:
            chosen.append(None)
            cells.append((" ", ""))
            continue
        best: Block | None = None
        best_share = -1
        for b in cands:
            if b.first <= s1 and b.last >= s0:
                share = min(b.end, hi) - max(b.offset, lo)
                if share > best_share:
                    best, best_share = b, share
        chosen.append(best)
        if any(h.first <= s1 and h.last >= s0 for h in hits):
            cells.append((COLLISION_CHAR, STYLE_COLLISION))
        elif best is None:
            cells.append((FREE_CHAR if inside else " ", STYLE_FREE))
        elif best.tensor_id in selected:
            cells.append((STALE_CHAR if best.stale else " ", STYLE_SELECTED))
        elif best.stale:
            cells.append((STALE_CHAR, STYLE_STALE))
        else:
            cells.append((" ", block_style(best)))
    # labels: on the row holding a block's first byte, from its first visible column; the
    # whole name where it fits, cut with an ellipsis where at least MIN_LABEL cells are free,
    # else none (a few letters of many narrow neighbours would read as one word)
    for i, owner in enumerate(chosen):
        if owner is None or geom.row_of(owner.offset) != row or (i > 0 and chosen[i - 1] is owner):
            continue
        if cells[i][0] == COLLISION_CHAR:
            continue
        room = 0
        while i + room < len(chosen) and chosen[i + room] is owner and cells[i + room][0] != COLLISION_CHAR:
            room += 1
        # one character per cell: wide characters would shift the grid
        label = "".join(ch if cell_len(ch) == 1 else "?" for ch in inert(owner.name))
        if len(label) > room:
            if room < MIN_LABEL:
                continue
            label = label[:room - 1] + "\u2026"
        for k, ch in enumerate(label):
            cells[i + k] = (ch, cells[i + k][1])
    return cells


def merge_runs(cells: list[Run]) -> list[Run]:
    """Adjacent cells with one style become one run."""
    out: list[Run] = []
    for text, style in cells:
        if out and out[-1][1] == style:
            out[-1] = (out[-1][0] + text, style)
        else:
            out.append((text, style))
    return out


def gutter(geom: MapGeometry, row: int, top: int) -> str:
    """The offset column: the row's first byte, right-aligned; in binary units when rows are
    1 MiB or more (``20.0 MiB``, not ``20971520``; the status line gives exact bytes)."""
    lo = row * geom.bytes_per_row
    if lo >= max(top, 1):
        return " " * (GUTTER - 1) + "\u2502"
    text = fmt_bytes(lo) if geom.bytes_per_row >= 1 << 20 else str(lo)
    return f"{text:>{GUTTER - 1}}\u2502"


def describe_block(b: Block, n_steps: int) -> str:
    """One line about a block: name, op, type, shape, bytes, live range, placement."""
    state = f"  {b.stale.upper()}" if b.stale else ""
    return (f"{inert(b.name, 60)} (#{b.tensor_id}) {b.op} {b.dtype}{b.shape}  bytes [{b.offset}, {b.end}) "
            f"{fmt_bytes(b.nbytes)}  live {step_label(b.first, n_steps)}..{step_label(b.last, n_steps)}  "
            f"placed by {b.placed_by}" + (f" binding #{b.binding_id}" if b.binding_id >= 0 else "") + state)


def fit_cell(text: str, width: int, right: bool = False) -> str:
    """``text`` cut (with an ellipsis) or padded to exactly ``width`` terminal cells
    (wide characters count twice)."""
    if width <= 0:
        return ""
    size = cell_len(text)
    if size > width:
        return set_cell_size(text, width - 1) + "\u2026"
    pad = " " * (width - size)
    return pad + text if right else text + pad


def loc_text(loc: Any) -> str:
    """A source location as inert text (``file:line in function``), or ``-``."""
    return inert(f"{loc.file}:{loc.line} in {loc.function}") if loc is not None else "-"
