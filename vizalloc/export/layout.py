"""Layout diagrams: where every tensor of a graph sits, as offset x step rectangles, in SVG.

One panel per buffer the graph uses. The x axis is the graph's node index (``in``:
before the first node, for leafs, inputs, weights and stale tensors; ``out``: kept to
the end, outputs); the y axis is the byte offset in the buffer, 0 at the bottom. Each
memory root is one rectangle over its live range (``vizalloc.analysis.liveness``: from
its first write to its last read) and its byte range, labelled when the rectangle has
room, with a ``<title>`` tooltip giving the details. Stale tensors are hatched red;
the bytes and steps where a finding says two tensors collide are hatched red and
outlined. A dashed line marks the peak (the highest byte used), a vertical band the
step where the most bytes are live, and a green line the lower bound of the binding's
plan for that buffer from ``vizalloc.analysis.quality`` (the most bytes the plan's own
tensors need at once; no packing can use less). Buffers that quality does not cover
(several chunks, not the plan's) get the same bound computed here from the drawn live
ranges (:func:`lower_bound`).

The SVG is written as text (no dependency), every name escaped
(:func:`vizalloc.export.escape.xml_escape`).

    from vizalloc.analysis.model import build_model
    from vizalloc.export.layout import layout_svg
    svg = layout_svg(build_model(events), binding_id=1)   # str
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TextIO

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.placed import placed_roots
from vizalloc.analysis.quality import peak_live, plan_quality
from vizalloc.export.escape import xml_escape
from vizalloc.export.findings import Highlight
from vizalloc.export.selection import Selection, select
from vizalloc.export.units import fmt_bytes, fmt_range, fmt_shape, trimmed_shape

PANEL_WIDTH = 1000
PANEL_HEIGHT = 360
MARGIN_LEFT = 90
MARGIN_RIGHT = 30
PANEL_GAP = 70
TITLE_HEIGHT = 60
CHAR_WIDTH = 6.2   # Helvetica 10px, roughly
STALE = "#d00000"
FILL_NODE = "#80b1d3"
FILL_LEAF = "#b3de69"
FILL_OTHER = "#d9d9d9"


@dataclass(frozen=True)
class Block:
    """One root in one buffer: bytes ``[offset, end)`` live over steps ``[first, last]``."""

    tensor_id: int
    name: str
    op: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    first: int
    last: int
    planned: bool      # allocated by this binding's plan (counts toward the lower bound)
    stale: str         # why it is stale or dangling ("" when live)
    placed_by: str
    binding_id: int

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


@dataclass(frozen=True)
class Panel:
    buffer_id: int
    title: str
    nbytes: int
    blocks: tuple[Block, ...]
    collisions: tuple[tuple[Block, Block, str], ...]
    peak_nbytes: int
    peak_step: int
    peak_live_nbytes: int
    lower_bound: int


@dataclass(frozen=True)
class Layout:
    selection: Selection
    n_steps: int
    panels: tuple[Panel, ...]


def _pad(x: int, alignment: int) -> int:
    return x if alignment <= 1 else (x + alignment - 1) // alignment * alignment


def _peak(blocks: Iterable[Block], n_steps: int, alignment: int = 1) -> tuple[int, int]:
    """``(bytes, step)``: the most bytes of ``blocks`` (sizes padded to ``alignment``) live in
    one gap between steps ``-1 .. n_steps``, and the first gap where (-1 when none)."""
    best, at = peak_live((max(b.first, -1), min(b.last, n_steps + 1), _pad(b.nbytes, alignment)) for b in blocks)
    return (best, at) if best > 0 and at is not None else (0, -1)


def lower_bound(blocks: Sequence[Block], n_steps: int, alignment: int = 1) -> tuple[int, int]:
    """``(bytes, step)``: the most bytes planned blocks need at once, and the first step where.

    Two blocks are live together when ``max(first) < min(last)`` (ggml's both_live), so a
    block occupies the gaps between steps ``first .. last``; the bound is the largest sum
    of padded sizes over any gap (:func:`vizalloc.analysis.quality.peak_live`). A block
    never read (``last <= first``) needs no bytes.
    """
    return _peak((b for b in blocks if b.planned), n_steps, alignment)


def build_layout(model: TraceModel, *, graph_id: int | None = None, binding_id: int | None = None,
                 highlights: Sequence[Highlight] = (), prefer_bindings: Sequence[int] = ()) -> Layout:
    """Collect the rectangles of one graph as bound (see the module docstring)."""
    sel = select(model, graph_id=graph_id, binding_id=binding_id, prefer=prefer_bindings)
    cut = sel.cut_seq
    binding = model.bindings.get(sel.binding_id)
    snap = binding.graph if binding is not None and binding.graph is not None else model.graphs[sel.graph_id].snapshot()
    n = snap.n_nodes
    by_buffer: dict[int, list[Block]] = {}
    for buffer_id, roots in placed_roots(model, snap, sel.plan_id, cut).items():
        by_buffer[buffer_id] = [
            Block(r.tensor_id, r.info.label, r.info.op, r.info.dtype, trimmed_shape(r.info.ne), r.placement.offset,
                  r.placement.nbytes, r.first, r.last, r.planned, r.stale_note(), r.placement.by.value,
                  r.placement.binding_id)
            for r in roots]

    shown = [h for h in highlights if h.tensor_id >= 0 and h.other_id >= 0
             and (h.binding_id < 0 or sel.binding_id < 0 or h.binding_id == sel.binding_id)]
    panels = []
    for buffer_id in sorted(by_buffer):
        blocks = sorted(by_buffer[buffer_id], key=lambda b: (b.offset, b.first, b.tensor_id))
        buf = model.buffers.get(buffer_id)
        alignment = buf.alignment if buf is not None else 1
        by_id = {b.tensor_id: b for b in blocks}
        collisions = []
        seen: set[tuple[int, int]] = set()
        for h in shown:
            a, b = by_id.get(model.root(h.tensor_id)), by_id.get(model.root(h.other_id))
            if a is None or b is None or a is b:
                continue
            key = (min(a.tensor_id, b.tensor_id), max(a.tensor_id, b.tensor_id))
            if key not in seen:
                seen.add(key)
                collisions.append((a, b, h.kind))
        # most bytes live at once (every block, stale ones included: they hold bytes too)
        live_total, live_step = _peak(blocks, n)
        bound = _analysis_bound(model, sel, buffer_id)
        if bound is None:
            bound, _ = lower_bound(blocks, n, alignment)
        nbytes = buf.nbytes if buf is not None else max(b.end for b in blocks)
        title = (f"buffer #{buffer_id} {buf.backend} {buf.buft} {buf.usage} {fmt_bytes(buf.nbytes)}"
                 if buf is not None else f"buffer #{buffer_id}")
        panels.append(Panel(buffer_id, title, nbytes, tuple(blocks), tuple(collisions),
                            max(b.end for b in blocks), live_step, live_total, bound))
    return Layout(sel, n, tuple(panels))


def _analysis_bound(model: TraceModel, sel: Selection, buffer_id: int) -> int | None:
    """The lower bound ``vizalloc.analysis.quality`` gives the binding's plan for this buffer's
    slot, when the buffer is that slot's only chunk (None otherwise: the caller computes one)."""
    buf = model.buffers.get(buffer_id)
    plan = model.plans.get(sel.plan_id)
    if buf is None or plan is None or buf.pool_id != plan.galloc_id or buf.slot < 0:
        return None
    chunks = plan.chunk_sizes[buf.slot] if buf.slot < len(plan.chunk_sizes) else ()
    if len(chunks) != 1:
        return None
    for pq in plan_quality(model, plan.plan_id):
        for sq in pq.slots:
            if sq.slot == buf.slot:
                return sq.lower_bound_bytes
    return None


# -- rendering ----------------------------------------------------------------------

def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def write_layout_svg(layout: Layout, out: TextIO) -> None:
    """Write the SVG document of ``layout`` to a text stream."""
    n = layout.n_steps
    plot_w = PANEL_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    step_w = plot_w / (n + 2)  # columns: in, 0 .. n-1, out
    height = TITLE_HEIGHT + len(layout.panels) * (PANEL_HEIGHT + PANEL_GAP) + 60
    w = out.write
    w('<?xml version="1.0" encoding="UTF-8"?>\n')
    w(f'<svg xmlns="http://www.w3.org/2000/svg" width="{PANEL_WIDTH}" height="{height}" '
      f'viewBox="0 0 {PANEL_WIDTH} {height}" font-family="Helvetica,Arial,sans-serif" font-size="10">\n')
    w(f"<title>{xml_escape('vizalloc layout: ' + layout.selection.title)}</title>\n")
    w('<defs><pattern id="hatch" patternUnits="userSpaceOnUse" width="6" height="6" '
      'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffd0d0"/>'
      f'<line x1="0" y1="0" x2="0" y2="6" stroke="{STALE}" stroke-width="2.5"/></pattern></defs>\n')
    w(f'<rect x="0" y="0" width="{PANEL_WIDTH}" height="{height}" fill="white"/>\n')
    w(f'<text x="{MARGIN_LEFT}" y="20" font-size="14" font-weight="bold">'
      f"{xml_escape('layout of ' + layout.selection.title)}</text>\n")
    w(f'<text x="{MARGIN_LEFT}" y="36" fill="#555">x: node index (in = before the first node, out = kept to '
      "the end); y: byte offset; hover a block for details</text>\n")

    def x_of(step: int) -> float:
        return MARGIN_LEFT + (step + 1) * step_w

    for k, panel in enumerate(layout.panels):
        top = TITLE_HEIGHT + 30 + k * (PANEL_HEIGHT + PANEL_GAP)
        bottom = top + PANEL_HEIGHT
        scale_top = max(panel.nbytes, panel.peak_nbytes, 1)

        def y_of(offset: int) -> float:
            return bottom - offset / scale_top * PANEL_HEIGHT

        w(f'<g class="buffer" id="buffer{panel.buffer_id}">\n')
        w(f'<text x="{MARGIN_LEFT}" y="{_num(top - 22)}" font-size="12" font-weight="bold">'
          f"{xml_escape(panel.title)}</text>\n")
        w(f'<rect x="{MARGIN_LEFT}" y="{_num(top)}" width="{_num(plot_w)}" height="{PANEL_HEIGHT}" '
          'fill="#fafafa" stroke="#999"/>\n')
        # axes: offsets every quarter, steps (at most ~20 labels)
        for q in range(5):
            off = scale_top * q // 4
            y = y_of(off)
            w(f'<line x1="{MARGIN_LEFT - 4}" y1="{_num(y)}" x2="{MARGIN_LEFT}" y2="{_num(y)}" stroke="#999"/>')
            w(f'<text x="{MARGIN_LEFT - 6}" y="{_num(y + 3)}" text-anchor="end">{off}</text>\n')
        every = max(1, (n + 2) // 20)
        for s in range(-1, n + 1):
            if (s + 1) % every and s != n:
                continue
            label = "in" if s == -1 else ("out" if s == n else str(s))
            w(f'<text x="{_num(x_of(s) + step_w / 2)}" y="{_num(bottom + 14)}" text-anchor="middle" '
              f'fill="#555">{label}</text>')
        w("\n")
        # the step where the most bytes are live (behind the blocks, named above the panel)
        if panel.peak_step >= -1:
            xb = x_of(panel.peak_step)
            tip = f"most live bytes: {fmt_bytes(panel.peak_live_nbytes)} at step {panel.peak_step}"
            w(f'<rect x="{_num(xb)}" y="{_num(top)}" width="{_num(step_w)}" height="{PANEL_HEIGHT}" '
              f'fill="#ffe066" opacity="0.5"><title>{xml_escape(tip)}</title></rect>'
              f'<text x="{_num(xb + step_w / 2)}" y="{_num(top - 8)}" text-anchor="middle" fill="#8a6d00">'
              f"{xml_escape(f'max live {fmt_bytes(panel.peak_live_nbytes)}')}</text>\n")
        labels: list[str] = []
        used: set[tuple[int, int]] = set()
        for b in panel.blocks:
            x0, x1 = x_of(b.first), x_of(b.last) + step_w
            y0, y1 = y_of(b.end), y_of(b.offset)
            fill = "url(#hatch)" if b.stale else (FILL_LEAF if b.first < 0 else FILL_NODE)
            stroke = STALE if b.stale else "#333"
            lines = [f"{b.name} (tensor #{b.tensor_id})", f"{b.op} {b.dtype} {fmt_shape(b.shape)}",
                   f"bytes {fmt_range(b.offset, b.end)} ({fmt_bytes(b.nbytes)})",
                   f"live over steps {b.first}..{b.last}", f"placed by {b.placed_by}"
                   + (f" in binding #{b.binding_id}" if b.binding_id >= 0 else "")]
            if b.stale:
                lines.append(b.stale.upper())
            w(f'<g class="block"><title>{xml_escape(chr(10).join(lines))}</title>'
              f'<rect x="{_num(x0)}" y="{_num(y0)}" width="{_num(max(x1 - x0, 1))}" '
              f'height="{_num(max(y1 - y0, 2))}" fill="{fill}" fill-opacity="0.8" stroke="{stroke}" '
              f'stroke-width="{2 if b.stale else 0.7}"/></g>\n')
            room = int((x1 - x0 - 4) / CHAR_WIDTH)
            # top-left corner, moved down a line while another label sits there (shared bytes)
            y_text = y0 + 11
            while (round(x0), round(y_text)) in used and y_text + 11 <= y1:
                y_text += 11
            if room >= 3 and y1 - y0 >= 12 and (round(x0), round(y_text)) not in used:
                used.add((round(x0), round(y_text)))
                labels.append(f'<text x="{_num(x0 + 3)}" y="{_num(y_text)}" pointer-events="none"'
                              f'{" fill=" + chr(34) + STALE + chr(34) if b.stale else ""}>'
                              f"{xml_escape(b.name, room)}</text>")
        for a, b, kind in panel.collisions:
            lo, hi = max(a.offset, b.offset), min(a.end, b.end)
            s0, s1 = max(a.first, b.first), min(a.last, b.last)
            if lo >= hi:
                continue
            if s0 > s1:
                s0, s1 = min(a.first, b.first), max(a.last, b.last)
            tip = f"{kind}: {a.name} and {b.name} share bytes {fmt_range(lo, hi)}"
            w(f'<g class="collision"><title>{xml_escape(tip)}</title><rect x="{_num(x_of(s0))}" '
              f'y="{_num(y_of(hi))}" width="{_num(x_of(s1) + step_w - x_of(s0))}" '
              f'height="{_num(max(y_of(lo) - y_of(hi), 2))}" fill="url(#hatch)" fill-opacity="0.55" '
              f'stroke="{STALE}" stroke-width="2.5"/></g>\n')
        for text in labels:
            w(text + "\n")
        # peak (label on the right) and lower bound (label on the left) lines
        for value, colour, dash, text, anchor, x_text in (
            (panel.peak_nbytes, "#000", "6,3", f"peak {fmt_bytes(panel.peak_nbytes)}", "end",
             MARGIN_LEFT + plot_w - 2),
            (panel.lower_bound, "#1a9850", "2,2", f"lower bound {fmt_bytes(panel.lower_bound)}", "start",
             MARGIN_LEFT + 2),
        ):
            y = y_of(value)
            w(f'<line x1="{MARGIN_LEFT}" y1="{_num(y)}" x2="{MARGIN_LEFT + plot_w}" y2="{_num(y)}" '
              f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="{dash}"/>')
            w(f'<text x="{_num(x_text)}" y="{_num(y - 3)}" text-anchor="{anchor}" fill="{colour}" '
              f'font-weight="bold">{xml_escape(text)}</text>\n')
        w("</g>\n")
    # legend
    y = TITLE_HEIGHT + len(layout.panels) * (PANEL_HEIGHT + PANEL_GAP) + 20
    x = MARGIN_LEFT
    for fill, stroke, text in ((FILL_LEAF, "#333", "live from the start (leaf, input, weight)"),
                               (FILL_NODE, "#333", "computed by a node"),
                               ("url(#hatch)", STALE, "stale / colliding bytes")):
        w(f'<rect x="{x}" y="{y}" width="14" height="10" fill="{fill}" stroke="{stroke}"/>'
          f'<text x="{x + 18}" y="{y + 9}">{xml_escape(text)}</text>\n')
        x += 40 + int(len(text) * CHAR_WIDTH)
    if not layout.panels:
        w(f'<text x="{MARGIN_LEFT}" y="{TITLE_HEIGHT + 30}">no tensor of this graph has memory</text>\n')
    w("</svg>\n")


def layout_svg(model: TraceModel, *, graph_id: int | None = None, binding_id: int | None = None,
               highlights: Sequence[Highlight] = (), prefer_bindings: Sequence[int] = ()) -> str:
    """Trace model in, SVG text out."""
    buf = io.StringIO()
    write_layout_svg(build_layout(model, graph_id=graph_id, binding_id=binding_id, highlights=highlights,
                                  prefer_bindings=prefer_bindings), buf)
    return buf.getvalue()
