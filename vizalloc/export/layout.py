"""Layout diagrams: where every tensor of a graph sits, as offset x step rectangles, in SVG.

One panel per buffer the graph uses. The x axis is the graph's node index (``in``:
before the first node, for leafs, inputs, weights and stale tensors; ``out``: kept to
the end, outputs); the y axis is the byte offset in the buffer, 0 at the bottom. Each
memory root is one rectangle over its live range (``vizalloc.analysis.liveness``: from
its first write to its last read) and its byte range, labelled when the rectangle has
room (labels never run into each other), with a ``<title>`` tooltip giving the details.

Stale tensors (a placement left from an earlier binding) and dangling ones (in a freed
buffer; the panel's title says it was freed) are grey and hatched: their bytes are not
theirs any more, which alone harms nothing. A *collision* -- a finding says two tensors
share those bytes while both are live -- is hatched red and outlined over exactly the
bytes and steps they share.

The figures of each panel come from :func:`vizalloc.analysis.placed.buffer_figures`,
the one definition the summary and the TUI use too: a dashed line at the highest byte
used ("peak"), a yellow band at the step where the most bytes are live ("max live"), and
a green line at the lower bound of the binding's plan for that buffer (only on a buffer
the plan placed tensors in). Each is at most the buffer's size.

The SVG is written as text (no dependency), every name escaped
(:func:`vizalloc.export.escape.xml_escape`).

    from vizalloc.analysis.model import build_model
    from vizalloc.export.layout import layout_svg
    svg = layout_svg(build_model(events), binding_id=1)   # str
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.placed import BufferFigures, buffer_figures, placed_roots, plan_roots
from vizalloc.export.escape import xml_escape
from vizalloc.export.findings import Highlight
from vizalloc.export.selection import Selection, select
from vizalloc.export.units import buffer_title, fmt_bytes, fmt_range, fmt_shape, step_label, trimmed_shape
from vizalloc.trace.events import enum_text

PANEL_WIDTH = 1000
PANEL_HEIGHT = 360
MARGIN_LEFT = 90
MARGIN_RIGHT = 120   # the peak and lower-bound labels sit right of the plot
PANEL_GAP = 84
TITLE_HEIGHT = 76
CHAR_WIDTH = 6.2   # Helvetica 10px, roughly
LINE_HEIGHT = 11
COLLISION = "#d00000"
STALE_STROKE = "#6e6e6e"
STALE_TEXT = "#444444"
FILL_NODE = "#80b1d3"
FILL_LEAF = "#b3de69"
BOUND = "#1a9850"
BAND = "#ffe066"
BAND_MIN = 5   # the max-live band's least width in pixels


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
    planned: bool      # allocated by this binding's plan
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
    blocks: tuple[Block, ...]
    collisions: tuple[tuple[Block, Block, str], ...]
    figures: BufferFigures

    @property
    def nbytes(self) -> int:
        return self.figures.size

    @property
    def freed_note(self) -> str:
        """"" unless the buffer was freed by the time drawn: then when and why."""
        f = self.figures
        if not f.freed:
            return ""
        return f"freed at event {f.freed_seq}" + (f" ({f.free_cause})" if f.free_cause else "") \
            + ": every tensor here dangles"


@dataclass(frozen=True)
class Layout:
    selection: Selection
    n_steps: int
    panels: tuple[Panel, ...]
    plan_graph_id: int = -1   # the graph the binding's plan was made for (-1: no plan)


def build_layout(model: TraceModel, *, graph_id: int | None = None, binding_id: int | None = None,
                 plan_id: int | None = None, highlights: Sequence[Highlight] = (),
                 prefer_bindings: Sequence[int] = ()) -> Layout:
    """Collect the rectangles of one graph as bound, or as planned (a worst-case reserve,
    chosen by default when it set a compute buffer's size: see the module docstring)."""
    sel = select(model, graph_id=graph_id, binding_id=binding_id, plan_id=plan_id, prefer=prefer_bindings,
                 worst_case=True)
    cut = sel.cut_seq
    binding = model.bindings.get(sel.binding_id)
    plan = model.plans.get(sel.plan_id)
    if sel.planned and plan is not None and plan.graph is not None:
        snap = plan.graph
        by_buffer, _ = plan_roots(model, sel.plan_id)
        placed_by = f"plan #{sel.plan_id} (never bound)"
    else:
        snap = binding.graph if binding is not None and binding.graph is not None \
            else model.graphs[sel.graph_id].snapshot()
        by_buffer = placed_roots(model, snap, sel.plan_id, cut)
        placed_by = ""
    n = snap.n_nodes
    shown = [h for h in highlights if h.tensor_id >= 0 and h.other_id >= 0
             and (h.binding_id < 0 or sel.binding_id < 0 or h.binding_id == sel.binding_id)]
    panels = []
    # a planned graph: the buffers its plan sized first (what the picture is about), then
    # those holding what it read (weights, KV cache)
    order = sorted(by_buffer, key=lambda k: (not any(r.planned for r in by_buffer[k]), k)) if sel.planned \
        else sorted(by_buffer)
    for buffer_id in order:
        roots = by_buffer[buffer_id]
        blocks = sorted((Block(r.tensor_id, r.info.label, r.info.op, r.info.dtype, trimmed_shape(r.info.ne),
                               r.placement.offset, r.placement.nbytes, r.first, r.last, r.planned, r.stale_note(),
                               placed_by if r.planned and placed_by else enum_text(r.placement.by),
                               r.placement.binding_id) for r in roots),
                        key=lambda b: (b.offset, b.first, b.tensor_id))
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
        buf = model.buffers.get(buffer_id)
        title = buffer_title(buffer_id, buf.backend, buf.buft, buf.usage, buf.nbytes) if buf is not None \
            else buffer_title(buffer_id, None, None, None, None)
        panels.append(Panel(buffer_id, title, tuple(blocks), tuple(collisions),
                            buffer_figures(model, buffer_id, roots, sel.plan_id, cut)))
    return Layout(sel, n, tuple(panels), plan.graph_id if plan is not None else -1)


# -- rendering ----------------------------------------------------------------------

def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _offset_label(offset: int, scale_top: int) -> str:
    """An offset on the y axis: exact bytes in a small buffer (they match the byte ranges
    the text reports print), binary units in a large one (``24.7 MiB``, not ``25902080``)."""
    return fmt_bytes(offset) if scale_top >= 1 << 20 else str(offset)


def step_labels(n: int, step_w: float) -> list[int]:
    """The steps named under a panel of ``n`` nodes whose columns are ``step_w`` pixels wide:
    ``in`` (-1), ``out`` (n) and, between them, every step, or every multiple of the least
    round stride (2, 5, 10, 20, 50, ...) whose labels do not run into each other; none so
    close to ``out`` that the two would overlap.

        >>> step_labels(23, 31.6) == [-1, *range(23), 23]
        True
        >>> step_labels(820, 0.96)[:3], step_labels(820, 0.96)[-3:]
        ([-1, 50, 100], [700, 750, 820])
    """
    # a label is ~CHAR_WIDTH per character wide, centred on its column; 10 px apart at least
    stride = _round_stride((len(str(n)) * CHAR_WIDTH + 10) / max(step_w, 1e-9))
    inner = list(range(0, n)) if stride == 1 else list(range(stride, n, stride))
    out_room = (len("out") * CHAR_WIDTH) / 2 + 4
    inner = [s for s in inner if (n - s) * step_w >= out_room + len(str(s)) * CHAR_WIDTH / 2]
    return [-1, *inner, n]


def _round_stride(target: float) -> int:
    """The least of 1, 2, 5, 10, 20, 50, ... that is at least ``target``."""
    power = 1
    while True:
        for m in (1, 2, 5):
            if m * power >= target:
                return m * power
        power *= 10


def _no_bound_note(panel: Panel, sel: Selection, plan_graph_id: int) -> str:
    """Why a panel has no lower bound: the binding's plan placed nothing in this buffer, or
    the binding applied (by node position, as ggml does) a plan made for another graph,
    whose lower bound is not this graph's."""
    if plan_graph_id >= 0 and plan_graph_id != sel.graph_id \
            and any(b.binding_id == sel.binding_id and not b.stale for b in panel.blocks):
        return f"no lower bound: this binding reused plan #{sel.plan_id}, made for graph #{plan_graph_id}"
    return f"no lower bound: plan #{sel.plan_id} placed no tensor here"


class _Labels:
    """One-line labels placed inside their rectangles so that no two run into each other:
    each takes the first line of its rectangle where the whole name fits before the next
    label on that line, else the line with the most room (the name cut with an ellipsis),
    else none."""

    def __init__(self) -> None:
        self._rows: dict[int, list[tuple[float, float, float]]] = {}  # row -> (x0, x1, baseline)

    def _limit(self, x: float, baseline: float, right: float) -> float:
        """How far right a label starting at ``x`` on ``baseline`` may reach."""
        limit = right
        for row in (int(baseline // LINE_HEIGHT) - 1, int(baseline // LINE_HEIGHT), int(baseline // LINE_HEIGHT) + 1):
            for x0, x1, y in self._rows.get(row, ()):
                if abs(y - baseline) >= LINE_HEIGHT or x1 <= x:
                    continue
                limit = min(limit, x0 if x0 >= x else x)
        return limit

    def place(self, x0: float, x1: float, y0: float, y1: float, text_len: int) -> tuple[float, int] | None:
        """``(baseline, chars)`` for a label of ``text_len`` characters inside the rectangle
        ``x0..x1`` x ``y0..y1`` (chars < text_len: cut), or None when there is no room."""
        best: tuple[float, int] | None = None
        baseline = y0 + LINE_HEIGHT
        while baseline <= y1 - 1:
            room = int((self._limit(x0, baseline, x1) - x0 - 5) // CHAR_WIDTH)
            if room >= text_len:
                best = (baseline, text_len)
                break
            if room >= 3 and (best is None or room > best[1]):
                best = (baseline, room)
            baseline += LINE_HEIGHT
        if best is not None:
            chars = best[1]
            width = 3 + chars * CHAR_WIDTH
            self._rows.setdefault(int(best[0] // LINE_HEIGHT), []).append((x0, x0 + width, best[0]))
        return best


def write_layout_svg(layout: Layout, out: TextIO) -> None:
    """Write the SVG document of ``layout`` to a text stream."""
    n = layout.n_steps
    plot_w = PANEL_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    step_w = plot_w / (n + 2)  # columns: in, 0 .. n-1, out
    height = TITLE_HEIGHT + len(layout.panels) * (PANEL_HEIGHT + PANEL_GAP) + 60
    sel = layout.selection
    w = out.write
    w('<?xml version="1.0" encoding="UTF-8"?>\n')
    w(f'<svg xmlns="http://www.w3.org/2000/svg" width="{PANEL_WIDTH}" height="{height}" '
      f'viewBox="0 0 {PANEL_WIDTH} {height}" font-family="Helvetica,Arial,sans-serif" font-size="10">\n')
    w(f"<title>{xml_escape('vizalloc layout: ' + sel.title)}</title>\n")
    w('<defs><pattern id="hatch" patternUnits="userSpaceOnUse" width="6" height="6" '
      'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffd0d0"/>'
      f'<line x1="0" y1="0" x2="0" y2="6" stroke="{COLLISION}" stroke-width="2.5"/></pattern>'
      '<pattern id="stale" patternUnits="userSpaceOnUse" width="8" height="8" '
      'patternTransform="rotate(45)"><rect width="8" height="8" fill="#ececec"/>'
      '<line x1="0" y1="0" x2="0" y2="8" stroke="#b5b5b5" stroke-width="1.5"/></pattern></defs>\n')
    w(f'<rect x="0" y="0" width="{PANEL_WIDTH}" height="{height}" fill="white"/>\n')
    w(f'<text x="{MARGIN_LEFT}" y="20" font-size="14" font-weight="bold">'
      f"{xml_escape('layout of ' + sel.title)}</text>\n")
    w(f'<text x="{MARGIN_LEFT}" y="36" fill="#555">x: node index (in = before the first node, out = kept to '
      "the end); y: byte offset; hover a block for details</text>\n")
    if sel.note:
        w(f'<text x="{MARGIN_LEFT}" y="50" fill="#555">{xml_escape(sel.note)}'
          "; another with --binding N, --graph N or --plan N</text>\n")

    def x_of(step: int) -> float:
        return MARGIN_LEFT + (step + 1) * step_w

    for k, panel in enumerate(layout.panels):
        fig = panel.figures
        top = TITLE_HEIGHT + 30 + k * (PANEL_HEIGHT + PANEL_GAP)
        bottom = top + PANEL_HEIGHT
        scale_top = max(fig.size, fig.highest, 1)

        def y_of(offset: int) -> float:
            return bottom - min(offset, scale_top) / scale_top * PANEL_HEIGHT

        w(f'<g class="buffer" id="buffer{panel.buffer_id}">\n')
        w(f'<text class="panel-title" x="{MARGIN_LEFT}" y="{_num(top - 24)}" font-size="12" font-weight="bold">'
          f"{xml_escape(panel.title)}")
        if panel.freed_note:
            w(f'<tspan dx="8" fill="{COLLISION}" font-weight="bold">FREED</tspan>'
              f'<tspan dx="6" fill="{COLLISION}" font-weight="normal" font-size="10">'
              f"{xml_escape(panel.freed_note, 110)}</tspan>")
        w("</text>\n")
        parts = [f"peak (highest byte used) {fmt_bytes(fig.highest)}"]
        if fig.max_live_step >= -1:
            parts.append(f"max live {fmt_bytes(fig.max_live)} at step {step_label(fig.max_live_step, n)} "
                         "(yellow band)")
        if fig.lower_bound is not None:
            parts.append(f"lower bound of plan #{sel.plan_id} here {fmt_bytes(fig.lower_bound)} (green)")
        elif sel.plan_id >= 0:
            parts.append(_no_bound_note(panel, sel, layout.plan_graph_id))
        w(f'<text class="figures" x="{MARGIN_LEFT}" y="{_num(top - 9)}" fill="#555">'
          f"{xml_escape(' · '.join(parts))}</text>\n")
        w(f'<rect x="{MARGIN_LEFT}" y="{_num(top)}" width="{_num(plot_w)}" height="{PANEL_HEIGHT}" '
          'fill="#fafafa" stroke="#999"/>\n')
        # axes: offsets every quarter, steps (at most ~20 labels)
        for q in range(5):
            off = scale_top * q // 4
            y = y_of(off)
            w(f'<line x1="{MARGIN_LEFT - 4}" y1="{_num(y)}" x2="{MARGIN_LEFT}" y2="{_num(y)}" stroke="#999"/>')
            w(f'<text class="offset" x="{MARGIN_LEFT - 6}" y="{_num(y + 3)}" text-anchor="end">'
              f'{_offset_label(off, scale_top)}</text>\n')
        for s in step_labels(n, step_w):
            w(f'<text class="step" x="{_num(x_of(s) + step_w / 2)}" y="{_num(bottom + 14)}" text-anchor="middle" '
              f'fill="#555">{step_label(s, n)}</text>')
        w("\n")
        # the step where the most bytes are live (behind the blocks, named below the axis)
        if fig.max_live_step >= -1:
            # never thinner than BAND_MIN pixels (a graph of 800 nodes has 1-pixel columns),
            # widened around its column and kept inside the plot
            band_w = max(step_w, BAND_MIN)
            xb = min(max(x_of(fig.max_live_step) + step_w / 2 - band_w / 2, MARGIN_LEFT), MARGIN_LEFT + plot_w - band_w)
            tip = f"max live: {fmt_bytes(fig.max_live)} held at step {step_label(fig.max_live_step, n)}"
            w(f'<rect class="max-live" x="{_num(xb)}" y="{_num(top)}" width="{_num(band_w)}" '
              f'height="{PANEL_HEIGHT}" fill="{BAND}" opacity="0.5"><title>{xml_escape(tip)}</title></rect>'
              f'<text x="{_num(min(max(xb + band_w / 2, MARGIN_LEFT + 50), MARGIN_LEFT + plot_w + 40))}" '
              f'y="{_num(bottom + 27)}" text-anchor="middle" fill="#8a6d00">'
              f"{xml_escape('max live ' + fmt_bytes(fig.max_live))}</text>\n")
        labels: list[str] = []
        placer = _Labels()
        for b in panel.blocks:
            x0, x1 = x_of(b.first), x_of(b.last) + step_w
            y0, y1 = y_of(b.end), y_of(b.offset)
            fill = "url(#stale)" if b.stale else (FILL_LEAF if b.first < 0 else FILL_NODE)
            stroke = f'stroke="{STALE_STROKE}" stroke-dasharray="4,2"' if b.stale else 'stroke="#333"'
            tip_lines = [f"{b.name} (tensor #{b.tensor_id})", f"{b.op} {b.dtype} {fmt_shape(b.shape)}",
                         f"bytes {fmt_range(b.offset, b.end)} ({fmt_bytes(b.nbytes)})",
                         f"live over steps {step_label(b.first, n)}..{step_label(b.last, n)}",
                         f"placed by {b.placed_by}" + (f" in binding #{b.binding_id}" if b.binding_id >= 0 else "")]
            if b.stale:
                tip_lines.append(b.stale.upper())
            w(f'<g class="block{" stale" if b.stale else ""}"><title>{xml_escape(chr(10).join(tip_lines))}</title>'
              f'<rect x="{_num(x0)}" y="{_num(y0)}" width="{_num(max(x1 - x0, 1))}" '
              f'height="{_num(max(y1 - y0, 2))}" fill="{fill}" fill-opacity="0.85" {stroke} '
              'stroke-width="0.8"/></g>\n')
            if y1 - y0 < LINE_HEIGHT + 1:
                continue
            spot = placer.place(x0, x1, y0, y1, len(b.name))
            label_x = x0 + 3
            if spot is None and y1 - y0 >= 3 * LINE_HEIGHT and x1 < MARGIN_LEFT + plot_w - 30:
                # a tall block too narrow for its name (a 64 MiB K·Q tensor live for two of 800
                # nodes): the name goes beside it, on the right
                spot = placer.place(x1 + 1, MARGIN_LEFT + plot_w, y0, y1, len(b.name))
                label_x = x1 + 4
            if spot is not None:
                baseline, chars = spot
                colour = f' fill="{STALE_TEXT}" font-style="italic"' if b.stale else ""
                labels.append(f'<text x="{_num(label_x)}" y="{_num(baseline - 2)}" pointer-events="none"{colour} '
                              'stroke="white" stroke-width="2.5" stroke-opacity="0.8" paint-order="stroke">'
                              f"{xml_escape(b.name, chars)}</text>")
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
              f'height="{_num(max(y_of(lo) - y_of(hi), 2))}" fill="url(#hatch)" fill-opacity="0.75" '
              f'stroke="{COLLISION}" stroke-width="2.5"/></g>\n')
        if fig.max_live_step >= -1:
            # the band's edges over the blocks too, so that it shows where they cover it
            w(f'<rect class="max-live-edge" x="{_num(xb)}" y="{_num(top)}" width="{_num(band_w)}" '
              f'height="{PANEL_HEIGHT}" fill="none" stroke="#b8860b" stroke-width="1" stroke-dasharray="3,2" '
              'pointer-events="none"/>\n')
        for text in labels:
            w(text + "\n")
        # the peak and lower-bound lines, named in the right margin (never in another panel:
        # every figure is at most the buffer, the top of the scale)
        marks = [(fig.highest, "#000", "6,3", f"peak {fmt_bytes(fig.highest)}", "peak")]
        if fig.lower_bound is not None:
            marks.append((fig.lower_bound, BOUND, "2,2", f"lower bound {fmt_bytes(fig.lower_bound)}", "lower-bound"))
        last_y: float | None = None
        for value, colour, dash, text, cls in marks:
            y = y_of(value)
            w(f'<line class="{cls}" x1="{MARGIN_LEFT}" y1="{_num(y)}" x2="{MARGIN_LEFT + plot_w}" y2="{_num(y)}" '
              f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="{dash}"/>')
            y_text = max(y + 3, top + 8)
            if last_y is not None and abs(y_text - last_y) < LINE_HEIGHT:
                y_text = last_y + LINE_HEIGHT
            last_y = y_text
            w(f'<text class="{cls}" x="{_num(MARGIN_LEFT + plot_w + 5)}" y="{_num(y_text)}" fill="{colour}" '
              f'font-weight="bold">{xml_escape(text)}</text>\n')
        w("</g>\n")
    # legend
    y = TITLE_HEIGHT + len(layout.panels) * (PANEL_HEIGHT + PANEL_GAP) + 20
    x = MARGIN_LEFT
    for fill, stroke, text in ((FILL_LEAF, "#333", "live from the start (leaf, input, weight)"),
                               (FILL_NODE, "#333", "computed by a node"),
                               ("url(#stale)", STALE_STROKE, "stale or dangling (bytes no longer its own)"),
                               ("url(#hatch)", COLLISION, "collision (a finding: two live tensors, same bytes)")):
        w(f'<rect x="{x}" y="{y}" width="14" height="10" fill="{fill}" stroke="{stroke}"/>'
          f'<text x="{x + 18}" y="{y + 9}">{xml_escape(text)}</text>\n')
        x += 30 + int(len(text) * CHAR_WIDTH * 0.85)
    if not layout.panels:
        w(f'<text x="{MARGIN_LEFT}" y="{TITLE_HEIGHT + 30}">no tensor of this graph has memory</text>\n')
    w("</svg>\n")


def layout_svg(model: TraceModel, *, graph_id: int | None = None, binding_id: int | None = None,
               plan_id: int | None = None, highlights: Sequence[Highlight] = (),
               prefer_bindings: Sequence[int] = ()) -> str:
    """Trace model in, SVG text out."""
    buf = io.StringIO()
    write_layout_svg(build_layout(model, graph_id=graph_id, binding_id=binding_id, plan_id=plan_id,
                                  highlights=highlights, prefer_bindings=prefer_bindings), buf)
    return buf.getvalue()
