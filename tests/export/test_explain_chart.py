"""The sweep chart of `vizalloc explain --sweep -o`: every point labelled, the labels apart
from each other and inside the plot (none below its x axis, over the tick labels)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from vizalloc.export.explain import SweepPoint, sweep_svg

SVG = "{http://www.w3.org/2000/svg}"

#: the Gemma 3 270M sweep's compute buffers (bytes, as llama.cpp allocated them), where the
#: two smallest labels at n_ctx 2048 once went below the axis
GEMMA = {(2048, 512, "on"): 22310944, (2048, 512, "off"): 35934240, (2048, 2048, "on"): 93437984,
         (2048, 2048, "off"): 152125472, (8192, 512, "on"): 28602400, (8192, 512, "off"): 98848800,
         (8192, 2048, "on"): 120700960, (8192, 2048, "off"): 407978016, (32768, 512, "on"): 53768224,
         (32768, 512, "off"): 350507040, (32768, 2048, "on"): 221364256, (32768, 2048, "off"): 1414610976}


def test_sweep_labels_stay_apart_and_inside_the_plot() -> None:
    points = [SweepPoint({"n_ctx": c, "n_ubatch": u, "flash_attn": fa}, {"CPU compute buffer": size})
              for (c, u, fa), size in GEMMA.items()]
    svg = sweep_svg(points, x_key="n_ctx", series_keys=("n_ubatch", "flash_attn"), title="gemma",
                    buffer_title="CPU compute buffer", x_label="n_ctx")
    root = ET.fromstring(svg.encode("utf-8"))
    frame = next(r for r in root.iter(f"{SVG}rect") if r.get("fill") == "none")
    top, bottom = float(frame.get("y")), float(frame.get("y")) + float(frame.get("height"))
    labels = [(float(t.get("x")), float(t.get("y")), t.get("text-anchor"), t.text)
              for t in root.iter(f"{SVG}text") if t.get("font-size") == "10"]
    assert sorted(text for *_, text in labels) == sorted(f"{v / 1048576:.2f}" for v in GEMMA.values())
    for _, y, _, text in labels:
        assert top + 9 <= y <= bottom, (text, y, top, bottom)   # a 10 px label whose baseline is y
    by_x: dict[tuple[float, str | None], list[float]] = {}
    for x, y, anchor, _ in labels:
        by_x.setdefault((x, anchor), []).append(y)
    for ys in by_x.values():
        ys.sort()
        assert all(b - a >= 11 for a, b in zip(ys, ys[1:])), ys


def _circles_x(svg: str) -> list[float]:
    root = ET.fromstring(svg)
    return [float(c.get("cx", "0")) for c in root.iter("{http://www.w3.org/2000/svg}circle")]


def _legend(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")
            if (t.text or "").startswith(("ubatch ", "ctx "))]


def test_an_ubatch_sweep_has_n_ubatch_on_the_x_axis() -> None:
    """``--sweep ubatch=64,512,2048`` at one context stacked its three dots at one x (the chart
    always used n_ctx); the axis is now the setting that varies."""
    from vizalloc.export.explain import sweep_axes

    points = [SweepPoint({"n_ctx": 4096, "n_ubatch": u, "flash_attn": "on"}, {"CPU compute buffer": u << 16})
              for u in (64, 512, 2048)]
    x_key, series = sweep_axes(points)
    assert (x_key, series) == ("n_ubatch", [])
    svg = sweep_svg(points, x_key=x_key, series_keys=series, title="m", buffer_title="CPU compute buffer",
                    x_label=x_key)
    xs = _circles_x(svg)
    assert len(xs) == 3 and len(set(xs)) == 3 and xs == sorted(xs)
    assert "n_ubatch (log scale)" in svg


def test_the_legend_sorts_numbers_as_numbers() -> None:
    from vizalloc.export.explain import sweep_axes

    points = [SweepPoint({"n_ctx": c, "n_ubatch": u, "flash_attn": "on"}, {"CPU compute buffer": c * u})
              for c in (2048, 8192) for u in (2048, 512, 64)]
    x_key, series = sweep_axes(points)
    assert (x_key, series) == ("n_ctx", ["n_ubatch"])
    svg = sweep_svg(points, x_key=x_key, series_keys=series, title="m", buffer_title="CPU compute buffer",
                    x_label=x_key)
    assert _legend(svg) == ["ubatch 64", "ubatch 512", "ubatch 2048"]  # was 2048, 512, 64 (as text)
