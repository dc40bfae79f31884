"""The picture of what fills a llama.cpp compute buffer: Gemma 3 270M at ``--ctx 8192
--flash-attn off`` (94.27 MiB, most of it one layer's 64 MiB K·Q scores), traced with two
generated tokens. The buffer's size was set when the context reserved its worst case (a
graph planned and never bound); the prompt's and the tokens' graphs fill a third of it.
``export --format layout`` draws that reserve by default, at its offsets, the compute buffer
first; ``--graph N`` of the reserve graph draws the same, weights and KV cache live; the TUI
opens its memory map on it and lists the K·Q tensors at their buffer and offset."""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.capture.conftest import VIZALLOC
from tests.capture.test_llama import Traced, compute_buffers, model, trace_llama  # noqa: F401 - model: a fixture
from vizalloc.trace import events as ev

#: real llama.cpp (xllamacpp) with the Gemma model: minutes, not seconds;
#: `python -m pytest -m "not slow"` leaves them out
pytestmark = pytest.mark.slow

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def worst(tmp_path_factory: pytest.TempPathFactory, model: str) -> Iterator[Traced]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("llama_worst")
    yield trace_llama(tmp, model, "--ctx", "8192", "--ubatch", "512", "--flash-attn", "off", "--generate", "2")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sizing_plan(t: Traced) -> ev.PlanBegin:
    """The latest of the largest plans: the worst case that set the buffer's size."""
    ends = {e.plan_id: sum(map(sum, e.chunk_sizes)) for e in t.events if isinstance(e, ev.PlanEnd)}
    begins = [e for e in t.events if isinstance(e, ev.PlanBegin)]
    size = max(ends.values())
    return [b for b in begins if ends[b.plan_id] == size][-1]


def _export(t: Traced, out: Path, *args: str) -> tuple[str, ET.Element]:
    done = subprocess.run([*VIZALLOC, "export", str(t.trace), "--format", "layout", "-o", str(out), *args],
                          capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    return done.stderr, ET.fromstring(out.read_bytes())


def test_the_default_layout_is_the_worst_case_that_sized_the_buffer(worst: Traced, tmp_path: Path) -> None:
    plan = _sizing_plan(worst)
    (buffer,) = compute_buffers(worst.events)
    assert f"{buffer.nbytes / 2**20:.2f}" == "94.27"
    said, root = _export(worst, tmp_path / "default.svg")
    assert f"drew graph #{plan.graph_id} plan #{plan.plan_id} (never bound" in said and "worst-case reserve" in said
    panels = [g for g in root.iter(f"{SVG}g") if g.get("class") == "buffer"]
    titles = [next(t for t in p.iter(f"{SVG}text") if t.get("class") == "panel-title").text or "" for p in panels]
    assert titles[0].startswith(f"buffer #{buffer.buffer_id} CPU compute 94.3 MiB"), titles
    figures = next(t for t in panels[0].iter(f"{SVG}text") if t.get("class") == "figures").text or ""
    # the plan reaches the top of the buffer it sized (the decode step's binding reached 34.3 MiB)
    assert figures.startswith("peak (highest byte used) 94.3 MiB"), figures
    # the most bytes live at once are the plan's lower bound, as explain gives it (89.76 MiB)
    live = re.search(r"max live (\S+ \S+) at step", figures)
    bound = re.search(r"lower bound of plan #\d+ here (\S+ \S+) \(green\)", figures)
    assert live and bound and live.group(1) == bound.group(1) == "89.8 MiB", figures
    # the K·Q scores of a full-context layer, at the offsets the replay planned
    offsets = {e.tensor_id: e.offset for e in worst.events if isinstance(e, ev.PlanAlloc) and e.plan_id == plan.plan_id}
    tips = [g.find(f"{SVG}title").text or "" for g in panels[0].iter(f"{SVG}g")  # type: ignore[union-attr]
            if g.get("class", "").startswith("block")]
    kq = [t for t in tips if t.startswith("kq_soft_max-5 (tensor #") or t.startswith("kq-5 (tensor #")]
    assert kq and all("(64.0 MiB)" in t and f"plan #{plan.plan_id} (never bound)" in t for t in kq), kq
    for tip in kq:
        tid = int(re.search(r"tensor #(\d+)", tip).group(1))  # type: ignore[union-attr]
        if tid in offsets:
            assert f"bytes [{offsets[tid]:,}, " in tip or f"[{offsets[tid]}, " in tip, tip
    assert "FREED" not in (tmp_path / "default.svg").read_text()
    band = [r for r in panels[0].iter(f"{SVG}rect") if r.get("class") == "max-live"]
    assert band and float(band[0].get("width", "0")) >= 5


def test_the_reserve_graph_asked_for_has_its_compute_panel_and_live_weights(worst: Traced, tmp_path: Path) -> None:
    plan = _sizing_plan(worst)
    (buffer,) = compute_buffers(worst.events)
    said, root = _export(worst, tmp_path / "graph.svg", "--graph", str(plan.graph_id))
    assert f"drew graph #{plan.graph_id} plan #{plan.plan_id}" in said
    text = (tmp_path / "graph.svg").read_text()
    assert f"buffer #{buffer.buffer_id} CPU compute" in text and "cache_k_l" in text
    assert "FREED" not in text and "DANGLING" not in text


@pytest.mark.anyio
async def test_the_tui_browses_the_worst_case(worst: Traced) -> None:
    from vizalloc.tui.app import VizallocApp
    from vizalloc.tui.screens.memory_map import MapScreen

    from tests.tui.conftest import ready

    plan = _sizing_plan(worst)
    (buffer,) = compute_buffers(worst.events)
    app = VizallocApp(str(worst.trace))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        a = app.analysis
        assert a is not None
        # kq_soft_max-5 of the reserve: its buffer, its planned offset, "planned"
        rows = a.tensors
        named = [k for k in range(len(rows)) if rows.names[k] == "kq_soft_max-5" and rows.states[k].value == "planned"]
        # (the two worst cases' at 64 MiB, the one-token reserve's at 128 KiB)
        assert sorted(rows.nbytes[k] for k in named) == [128 << 10, 64 << 20, 64 << 20], named
        assert all(rows.buffers[k] == buffer.buffer_id and rows.offsets[k] >= 0 for k in named)
        await pilot.press("2")
        await pilot.pause()
        assert isinstance(app.screen, MapScreen)
        head = str(app.screen.query_one("#maphead").render())
        assert f"plan #{plan.plan_id} of graph #{plan.graph_id} (a reserve" in head, head
        assert f"buffer #{buffer.buffer_id} CPU compute 94.3 MiB" in head and "peak 94.3 MiB" in head, head
