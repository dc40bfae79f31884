"""How long exports of a 5,000-node graph take (target: SVG in <= 10 s on this machine).

    python benchmarks/export.py [--nodes 5000] [--full-timeout 120]

A chain of layers (mul_mat, add, relu; names ``blk.N.*``) is recorded, planned and
bound once; then each export runs from the recorded events: model + hazards, the
graph diagram as DOT and as SVG with the default options (``--max-nodes 300``, so
``blk.N`` layers fold and the rest is summarised), the same with no cap and no
folding (every node drawn, ``dot`` given ``--full-timeout`` seconds), the layout SVG,
Perfetto JSON and the JSON report. Prints seconds per phase and the ratio to the
10 s target from one run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.export.scenarios import mlp_chain  # noqa: E402
from vizalloc.analysis.hazards import find_hazards  # noqa: E402
from vizalloc.analysis.model import build_model  # noqa: E402
from vizalloc.export.dot import find_dot, graph_dot, svg_text  # noqa: E402
from vizalloc.export.findings import highlights  # noqa: E402
from vizalloc.export.layout import layout_svg  # noqa: E402
from vizalloc.export.perfetto import perfetto_json  # noqa: E402
from vizalloc.export.report import report_json  # noqa: E402

TARGET_S = 10.0


def timed(label: str, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    dt = time.perf_counter() - t0
    print(f"{label:<44} {dt:8.3f} s")
    return result, dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--full-timeout", type=float, default=120.0)
    args = ap.parse_args()
    layers = max(1, args.nodes // 3)
    events, _ = timed(f"record {layers} layers ({3 * layers} nodes)", mlp_chain, layers)
    print(f"  {len(events)} events")

    model, t_model = timed("build_model", build_model, events)
    hazards, t_haz = timed("find_hazards", find_hazards, model)
    found = highlights(hazards)
    dot_default, t_dot = timed("graph DOT (default: --max-nodes 300)", graph_dot, model, highlights=found)
    if find_dot() is None:
        print("Graphviz `dot` not installed: SVG phases skipped")
        return 0
    _, t_svg = timed("  dot -Tsvg of it", svg_text, dot_default)
    total = t_model + t_haz + t_dot + t_svg
    print(f"{'SVG export, default options, total':<44} {total:8.3f} s   ratio to {TARGET_S:.0f} s target: "
          f"{total / TARGET_S:.2f}")

    dot_full, t_dot_full = timed("graph DOT (every node: --max-nodes 0 --fold none)", graph_dot, model,
                                 highlights=found, fold="", max_nodes=0)
    try:
        _, t_svg_full = timed("  dot -Tsvg of it", svg_text, dot_full, timeout_s=args.full_timeout)
        full = t_model + t_haz + t_dot_full + t_svg_full
        print(f"{'SVG export, every node, total':<44} {full:8.3f} s   ratio to {TARGET_S:.0f} s target: "
              f"{full / TARGET_S:.2f}")
    except Exception as exc:  # GraphvizError on timeout
        print(f"  every-node SVG did not finish: {exc}")

    timed("layout SVG", layout_svg, model, highlights=found)
    timed("Perfetto JSON", perfetto_json, model, found)
    timed("JSON report", report_json, model, hazards)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
