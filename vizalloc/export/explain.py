"""``vizalloc explain`` as data and pictures: the JSON document, the bar chart of what is
live at a buffer's peak, and the line chart of a settings sweep.

The JSON schema is ``docs/explain-schema.md`` (``"schema": "vizalloc.explain/1"``, a sweep
``"vizalloc.explain-sweep/1"``). Pictures are plain SVG; every name in them goes through
:mod:`vizalloc.export.escape` (names are data).

    from vizalloc.analysis.explain import explain
    svg = explain_svg(explain(model), title="gemma.vztrace")
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vizalloc.analysis.explain import SCHEMA, BufferExplanation, Explanation, Group
from vizalloc.export.escape import xml_escape
from vizalloc.export.units import fmt_bytes, mib

SWEEP_SCHEMA = "vizalloc.explain-sweep/1"

WIDTH = 960
MARGIN = 24
LABEL_W = 300
BAR_H = 16
ROW_H = 34
#: groups drawn as bars; the rest are summed into one "others" bar
MAX_BARS = 12
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#86bcb6", "#d37295")
OTHERS = "#c8c8c8"
HOLES = "#ffffff"


def _group_dict(g: Group) -> dict[str, Any]:
    return {"name": g.name, "words": g.words, "op": g.op, "dtype": g.dtype, "count": g.count,
            "layers": list(g.layers), "names": list(g.names), "shape": list(g.shape), "same_shape": g.same_shape,
            "dims": list(g.dims), "formula": g.formula, "nbytes": g.nbytes, "share": round(g.share, 6),
            "then_in_place": list(g.then_in_place)}


def buffer_dict(b: BufferExplanation) -> dict[str, Any]:
    """One buffer's explanation as JSON-ready data (``buffers[]`` of the schema)."""
    return {
        "title": b.title, "backend": b.backend, "buft": b.buft, "galloc_id": b.galloc_id, "slot": b.slot,
        "plan_id": b.plan_id, "same_plans": list(b.same_plans), "buffer_ids": list(b.buffer_ids),
        "nbytes": b.size, "mib": mib(b.size), "allocated_nbytes": b.allocated,
        "lower_bound_nbytes": b.lower_bound, "greedy_nbytes": b.greedy, "holes_nbytes": b.size - b.lower_bound,
        "peak_step": b.peak_step, "peak_tensor": b.peak_tensor, "peak_op": b.peak_op, "n_live": b.n_live,
        "groups": [_group_dict(g) for g in b.groups], "deciding": list(b.deciding), "sentence": b.sentence,
    }


def explanation_dict(expl: Explanation, *, source: Mapping[str, Any] | None = None,
                     extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole document: ``schema``, ``source`` (what was explained), ``hints`` and
    ``buffers``, plus ``extra`` keys (``llama``, ``predicted``) when given."""
    doc: dict[str, Any] = {"schema": SCHEMA, "source": dict(source or {}), "hints": dict(expl.hints),
                           "buffers": [buffer_dict(b) for b in expl.buffers]}
    for k, v in (extra or {}).items():
        doc[k] = v
    return doc


# -- the bar chart ---------------------------------------------------------------------

def _wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap at ``width`` characters."""
    lines: list[str] = []
    cur = ""
    for word in text.split():
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    if cur:
        lines.append(cur)
    return lines


def size_text(nbytes: int) -> str:
    """MiB as llama.cpp prints them, or smaller units below 0.01 MiB (a 4,768 B buffer is
    ``4.7 KiB``, not ``0.00 MiB``).

        >>> size_text(35934240), size_text(4768)
        ('34.27 MiB', '4.7 KiB')
    """
    return mib(nbytes) if nbytes >= 10486 else fmt_bytes(nbytes)


def _fmt(nbytes: int) -> str:
    return f"{nbytes:,} B ({size_text(nbytes)})"


def explain_svg(expl: Explanation, *, title: str, notes: Sequence[str] = ()) -> str:
    """A panel per buffer: one bar of its bytes (each group's share at the peak, the
    others, the holes), then a bar per group, largest first, with its formula; the
    sentence under it. ``notes`` are extra lines under the title (settings, sources)."""
    out: list[str] = []
    w = out.append
    plot_w = WIDTH - 2 * MARGIN - LABEL_W - 170
    y = MARGIN + 8
    body: list[str] = []
    b_ = body.append
    b_(f'<text x="{MARGIN}" y="{y + 8}" font-size="15" font-weight="bold">{xml_escape("vizalloc explain: " + title, 120)}</text>\n')
    y += 22
    for note in notes:
        for line in _wrap(note, 150):
            b_(f'<text x="{MARGIN}" y="{y + 8}" fill="#555">{xml_escape(line)}</text>\n')
            y += 15
    if not expl.buffers:
        b_(f'<text x="{MARGIN}" y="{y + 20}">no graph allocator planned anything in this trace: no compute buffer '
           "to explain</text>\n")
        y += 40
    for b in expl.buffers:
        y += 18
        b_(f'<g class="buffer" id="galloc{b.galloc_id}-slot{b.slot}">\n')
        b_(f'<text x="{MARGIN}" y="{y + 8}" font-size="13" font-weight="bold">'
           f'{xml_escape(b.title)}: {_fmt(b.size)}</text>\n')
        y += 16
        figures = (f"lower bound (most bytes live at once) {b.lower_bound:,} B; greedy by size {b.greedy:,} B; "
                   f"plan #{b.plan_id} of allocator {b.galloc_id}; peak while {b.peak_tensor} is allocated")
        b_(f'<text x="{MARGIN}" y="{y + 8}" fill="#555">{xml_escape(figures, 200)}</text>\n')
        y += 16
        groups = list(b.groups)
        shown = groups[:MAX_BARS] if len(groups) <= MAX_BARS else groups[:MAX_BARS - 1]
        rest = groups[len(shown):]
        colour = {id(g): PALETTE[i % len(PALETTE)] for i, g in enumerate(shown)}
        # the buffer as one bar: groups at the peak, then the holes
        scale = (WIDTH - 2 * MARGIN) / max(b.size, 1)
        x = float(MARGIN)
        y += 4
        for g in shown:
            wdt = g.nbytes * scale
            b_(f'<rect x="{x:.2f}" y="{y}" width="{wdt:.2f}" height="{BAR_H + 4}" fill="{colour[id(g)]}">'
               f"<title>{xml_escape(g.label)}: {g.nbytes:,} B</title></rect>\n")
            x += wdt
        rest_bytes = sum(g.nbytes for g in rest)
        if rest_bytes:
            wdt = rest_bytes * scale
            b_(f'<rect x="{x:.2f}" y="{y}" width="{wdt:.2f}" height="{BAR_H + 4}" fill="{OTHERS}">'
               f"<title>{len(rest)} other groups: {rest_bytes:,} B</title></rect>\n")
            x += wdt
        holes = b.size - b.lower_bound
        if holes > 0:
            b_(f'<rect x="{x:.2f}" y="{y}" width="{holes * scale:.2f}" height="{BAR_H + 4}" fill="url(#holes)" '
               f'stroke="#999" stroke-width="0.5"><title>holes: {holes:,} B</title></rect>\n')
        b_(f'<rect x="{MARGIN}" y="{y}" width="{WIDTH - 2 * MARGIN}" height="{BAR_H + 4}" fill="none" '
           'stroke="#333" stroke-width="0.8"/>\n')
        y += BAR_H + 4 + 14
        b_(f'<text x="{MARGIN}" y="{y}" fill="#555" font-size="10">the whole buffer: live at the peak '
           f'({b.lower_bound:,} B, coloured by group) then holes the plan left ({holes:,} B, hatched)</text>\n')
        y += 14
        # a bar per group
        largest = max((g.nbytes for g in groups), default=1) or 1
        rows: list[tuple[str, str, int, float, str, str]] = [
            (g.label, g.op, g.nbytes, g.share, (f"{g.words}: " if g.words else "") + g.formula, colour[id(g)])
            for g in shown]
        if rest:
            rows.append((f"{len(rest)} other groups", "", rest_bytes, rest_bytes / max(b.lower_bound, 1), "", OTHERS))
        for label, op, nbytes, share, form, fill in rows:
            y += 4
            b_(f'<text x="{MARGIN}" y="{y + 12}" font-weight="bold">{xml_escape(label, 44)}</text>\n')
            if op:
                b_(f'<text x="{MARGIN + LABEL_W - 6}" y="{y + 12}" text-anchor="end" fill="#555">'
                   f"{xml_escape(op, 16)}</text>\n")
            wdt = max(nbytes / largest * plot_w, 1.0)
            bx = MARGIN + LABEL_W
            b_(f'<rect x="{bx}" y="{y}" width="{wdt:.2f}" height="{BAR_H}" fill="{fill}"/>\n')
            b_(f'<text x="{bx + wdt + 6:.2f}" y="{y + 12}">{size_text(nbytes)} · {share * 100:.1f}% of the peak</text>\n')
            if form:
                b_(f'<text x="{bx}" y="{y + BAR_H + 11}" fill="#555" font-size="10">{xml_escape(form, 140)}</text>\n')
            y += ROW_H - 4
        y += 6
        for line in _wrap(b.sentence, 150):
            b_(f'<text x="{MARGIN}" y="{y + 10}" font-style="italic">{xml_escape(line)}</text>\n')
            y += 15
        b_("</g>\n")
    height = int(y + MARGIN)
    w('<?xml version="1.0" encoding="UTF-8"?>\n')
    w(f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
      'font-family="Helvetica,Arial,sans-serif" font-size="11">\n')
    w(f"<title>{xml_escape('vizalloc explain: ' + title, 200)}</title>\n")
    w('<defs><pattern id="holes" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)">'
      '<rect width="6" height="6" fill="#fafafa"/><line x1="0" y1="0" x2="0" y2="6" stroke="#bbb" '
      'stroke-width="1.5"/></pattern></defs>\n')
    w(f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>\n')
    out.extend(body)
    w("</svg>\n")
    return "".join(out)


# -- a sweep ------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepPoint:
    """One setting of a sweep and the compute buffers it needed (title -> bytes)."""

    setting: dict[str, Any]
    sizes: dict[str, int]
    logged: dict[str, str] = field(default_factory=dict)  # title -> what the program logged ("34.27 MiB")
    sentence: str = ""


#: how the chart's legend names the settings
_SERIES_NAMES = {"n_ubatch": "ubatch", "flash_attn": "fa", "n_batch": "batch", "n_ctx": "ctx", "n_outputs": "outputs"}


#: the settings a sweep can put on the x axis, in the order preferred when several vary
_X_KEYS = ("n_ctx", "n_ubatch", "n_batch")


def sweep_axes(points: Sequence[SweepPoint]) -> tuple[str, list[str]]:
    """The x axis of a sweep's chart and the settings its lines stand for: the first of
    n_ctx, n_ubatch, n_batch that varies (n_ctx when none does), and every other setting
    that varies (``ubatch=64,512`` alone: n_ubatch on the x axis, one line).

        >>> sweep_axes([SweepPoint({"n_ctx": 4096, "n_ubatch": u, "flash_attn": "on"}, {}) for u in (64, 512)])
        ('n_ubatch', [])
    """
    def varies(k: str) -> bool:
        return len({str(p.setting.get(k)) for p in points}) > 1

    x_key = next((k for k in _X_KEYS if varies(k)), "n_ctx")
    series = [k for k in ("n_ctx", "n_ubatch", "flash_attn", "n_batch", "n_outputs") if k != x_key and varies(k)]
    return x_key, series


def _natural(values: Sequence[Any]) -> tuple[tuple[int, Any], ...]:
    """A legend's order: numbers as numbers (64 before 512), other values as text."""
    return tuple((0, v) if isinstance(v, (int, float)) else (1, str(v)) for v in values)


def _nice_ticks(top: float, n: int = 5) -> list[float]:
    if top <= 0:
        return [0.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(top / step) + 2)]


def sweep_svg(points: Sequence[SweepPoint], *, x_key: str, series_keys: Sequence[str], title: str,
              buffer_title: str, x_label: str, notes: Sequence[str] = ()) -> str:
    """A line chart of one buffer's bytes (``buffer_title``) against ``x_key`` (log2 axis),
    one line per combination of ``series_keys``; every point is labelled with its MiB."""
    series: dict[tuple[Any, ...], list[tuple[float, int]]] = {}
    for p in points:
        if buffer_title not in p.sizes or not isinstance(p.setting.get(x_key), int) or p.setting[x_key] <= 0:
            continue
        key = tuple(p.setting.get(k) for k in series_keys)
        series.setdefault(key, []).append((float(p.setting[x_key]), p.sizes[buffer_title]))
    xs = sorted({x for pts in series.values() for x, _ in pts}) or [1.0]
    top_bytes = max((v for pts in series.values() for _, v in pts), default=1)
    left, right, top_m, bottom_m = 90, 200, 70 + 15 * len(notes), 60
    height = 460 + 15 * len(notes)
    plot_w, plot_h = WIDTH - left - right, height - top_m - bottom_m
    lx0, lx1 = math.log2(xs[0]), math.log2(xs[-1])
    top_mib = top_bytes / 1048576 * 1.08

    def px(x: float) -> float:
        return left + (plot_w / 2 if lx1 == lx0 else (math.log2(x) - lx0) / (lx1 - lx0) * plot_w)

    def py(v: float) -> float:
        return top_m + plot_h - (v / 1048576) / top_mib * plot_h

    out: list[str] = []
    w = out.append
    w('<?xml version="1.0" encoding="UTF-8"?>\n')
    w(f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
      'font-family="Helvetica,Arial,sans-serif" font-size="11">\n')
    w(f"<title>{xml_escape('vizalloc explain --sweep: ' + title, 200)}</title>\n")
    w(f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>\n')
    w(f'<text x="{MARGIN}" y="28" font-size="15" font-weight="bold">'
      f"{xml_escape(buffer_title + ' against ' + x_label + ': ' + title, 120)}</text>\n")
    for i, note in enumerate(notes):
        w(f'<text x="{MARGIN}" y="{46 + 15 * i}" fill="#555">{xml_escape(note, 150)}</text>\n')
    for t in _nice_ticks(top_mib):
        if t > top_mib:
            break
        yy = top_m + plot_h - t / top_mib * plot_h
        w(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + plot_w}" y2="{yy:.1f}" stroke="#e5e5e5"/>\n')
        w(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="#555">{t:g}</text>\n')
    w(f'<text x="{20}" y="{top_m + plot_h / 2:.1f}" transform="rotate(-90 20 {top_m + plot_h / 2:.1f})" '
      'text-anchor="middle" fill="#333">MiB</text>\n')
    for x in xs:
        xx = px(x)
        w(f'<line x1="{xx:.1f}" y1="{top_m}" x2="{xx:.1f}" y2="{top_m + plot_h}" stroke="#eeeeee"/>\n')
        w(f'<text x="{xx:.1f}" y="{top_m + plot_h + 16}" text-anchor="middle" fill="#555">{int(x)}</text>\n')
    w(f'<text x="{left + plot_w / 2:.1f}" y="{top_m + plot_h + 36}" text-anchor="middle" fill="#333">'
      f"{xml_escape(x_label)} (log scale)</text>\n")
    w(f'<rect x="{left}" y="{top_m}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333" '
      'stroke-width="0.8"/>\n')
    labels: dict[float, list[tuple[float, str, str]]] = {}  # x -> (y, text, colour): placed apart below
    for i, (key, pts) in enumerate(sorted(series.items(), key=lambda kv: _natural(kv[0]))):
        pts.sort()
        colour = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(v):.1f}" for j, (x, v) in enumerate(pts))
        w(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>\n')
        for x, v in pts:
            w(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3.5" fill="{colour}"><title>'
              f"{xml_escape(f'{x_label} {int(x)}: {v:,} B')}</title></circle>\n")
            labels.setdefault(x, []).append((py(v), f"{v / 1048576:.2f}", colour))
        name = ", ".join(f"{_SERIES_NAMES.get(k, k)} {v}" for k, v in zip(series_keys, key)) or buffer_title
        ly = top_m + 10 + 18 * i
        w(f'<line x1="{left + plot_w + 16}" y1="{ly}" x2="{left + plot_w + 40}" y2="{ly}" stroke="{colour}" '
          'stroke-width="2"/>\n')
        w(f'<text x="{left + plot_w + 46}" y="{ly + 4}">{xml_escape(name, 40)}</text>\n')
    for x, items in labels.items():
        # right of the point, left of it at the right edge; pushed apart so none covers another
        anchor, dx = ("end", -7) if x == xs[-1] and len(xs) > 1 else ("start", 7)
        items.sort()
        placed = _apart([y + 4 for y, _, _ in items], 11, top_m + 11, top_m + plot_h - 2)
        for (y, text, colour), yy in zip(items, placed):
            tw = 5.8 * len(text)  # a white patch under the label, so a line crossing it does not hide it
            tx = px(x) + dx - (tw if anchor == "end" else 0)
            w(f'<rect x="{tx - 1:.1f}" y="{yy - 9:.1f}" width="{tw + 2:.1f}" height="11" fill="white" '
              'fill-opacity="0.85"/>\n')
            w(f'<text x="{px(x) + dx:.1f}" y="{yy:.1f}" text-anchor="{anchor}" font-size="10" fill="{colour}">'
              f"{text}</text>\n")
    w("</svg>\n")
    return "".join(out)


def _apart(ys: Sequence[float], gap: float, lo: float, hi: float) -> list[float]:
    """Baselines near ``ys`` (sorted) at least ``gap`` apart and within ``[lo, hi]`` when
    they fit: pushed down where they crowd, then up from ``hi`` where the push ran past it
    (labels at the bottom of the plot went below its axis, over the tick labels).

        >>> _apart([10, 12, 50], 11, 0, 100)
        [10, 21, 50]
        >>> _apart([95, 96, 97], 11, 0, 100)
        [78, 89, 100]
    """
    out: list[float] = []
    for y in ys:
        y = max(y, lo)
        out.append(y if not out or y - out[-1] >= gap else out[-1] + gap)
    for i in range(len(out) - 1, -1, -1):
        limit = hi if i == len(out) - 1 else out[i + 1] - gap
        out[i] = max(min(out[i], limit), lo)
    return out


def sweep_dict(points: Sequence[SweepPoint], runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A sweep as JSON: every point's setting and sizes, and each run's whole explain document."""
    return {"schema": SWEEP_SCHEMA,
            "points": [{"setting": p.setting, "sizes": p.sizes, "logged": p.logged, "sentence": p.sentence}
                       for p in points],
            "runs": list(runs)}
