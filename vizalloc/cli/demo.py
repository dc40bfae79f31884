"""vizalloc demo: the shared-tensor training loop, broken and fixed, side by side.

    vizalloc demo                                   # none vs dup, 6 steps, traces in .
    vizalloc demo --strategies none,clear,dup,static --steps 10
    vizalloc demo --json                            # numbers only
    vizalloc demo --out-dir /tmp/traces -f          # overwrite earlier traces
    vizalloc demo --no-trace
    vizalloc demo --driver opt --presize            # through ggml-opt's OptContext
    vizalloc demo --capture-values -f               # traces that `vizalloc check --shadow` can replay

The forward and backward graphs of a small MLP share tensor objects. After each scheduler
reset those tensors keep stale data pointers, the graph allocator treats them as external
memory, and the next plan puts new tensors on their bytes. Each strategy trains from the
same parameters on the same batches; beside it a reference run computes every step on a
brand-new scheduler, so the divergence printed is measured, not assumed.

With tracing available, each strategy's loop is written to demo-<strategy>.vztrace in
--out-dir (existing files are kept unless -f); open one with `vizalloc tui` or check it
with `vizalloc check` (with --capture-values, `vizalloc check --shadow` replays it).

Exit codes: 0 when the strategies ran (a CORRUPTED verdict is the demo's result, not an
error); 2 for bad options, or when a trace file already exists without -f.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
from typing import Any

from vizalloc.errors import UsageError

_DEFAULT_STRATEGIES = "none,dup"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vizalloc.scenarios.shared_tensors import CONFIGS, STRATEGIES

    parser.add_argument("--strategies", default=_DEFAULT_STRATEGIES, metavar="LIST",
                        help=f"comma-separated strategies out of {', '.join(STRATEGIES)}, or 'all' "
                             f"(default: {_DEFAULT_STRATEGIES})")
    parser.add_argument("--steps", type=int, default=6, help="training steps per strategy (default: 6)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the parameters and the data (default: 0)")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="A",
                        help="A: the backward graph reallocates the compute buffer; B: it does not (default: A)")
    parser.add_argument("--reserve-between", action="store_true",
                        help="reserve another graph between the graph switches (defeats 'invalidate')")
    parser.add_argument("--driver", choices=("graphs", "opt"), default="graphs",
                        help="graphs: the golden seed loop built by hand; opt: the same MLP through "
                             "ggml-opt's OptContext (default: graphs)")
    parser.add_argument("--presize", action="store_true",
                        help="reserve the backward graph once before training, so no switch reallocates")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out-dir", default=".", metavar="DIR",
                        help="where the traces demo-<strategy>.vztrace go (default: the current directory)")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite existing trace files")
    parser.add_argument("--no-trace", action="store_true", help="do not write traces")
    parser.add_argument("--capture-values", action="store_true",
                        help="also record graph inputs and outputs at every compute, so that "
                             "`vizalloc check TRACE --shadow` can replay the computes and show the first wrong node")
    # --tui: browse a trace after the run
    parser.add_argument("--tui", action="store_true",
                        help="open the first strategy's trace in `vizalloc tui` after the run")


def _strategies(text: str) -> list[str]:
    from vizalloc.scenarios.shared_tensors import STRATEGIES

    if text.strip() == "all":
        return list(STRATEGIES)
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise UsageError("--strategies is empty; give e.g. none,dup")
    for n in names:
        if n not in STRATEGIES:
            raise UsageError(f"unknown strategy {n!r} in --strategies; choose from {', '.join(STRATEGIES)} or 'all'")
    return list(dict.fromkeys(names))


def _trace_api() -> Any | None:
    if importlib.util.find_spec("vizalloc.trace.api") is None:
        return None
    import vizalloc.trace.api as api

    return api


def _trace_paths(args: argparse.Namespace, names: list[str]) -> dict[str, str]:
    from vizalloc.files import check_new

    out_dir = args.out_dir
    if not os.path.isdir(out_dir):
        raise UsageError(f"--out-dir {out_dir!r} is not a directory; create it first")
    paths = {n: os.path.join(out_dir, f"demo-{n}.vztrace") for n in names}
    existing = [p for p in paths.values() if os.path.lexists(p)]
    if existing and not args.force:
        raise UsageError(f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; "
                         "pass -f to overwrite or choose another --out-dir")
    for p in paths.values():  # a directory or a special file in the way
        check_new(p, overwrite=args.force, flag="-f", other="choose another --out-dir")
    return paths


def _hazard_counts(api: Any, path: str) -> dict[str, int] | None:
    """Hazards the analysis finds in a trace, by kind (None when analysis is not available)."""
    if importlib.util.find_spec("vizalloc.analysis.hazards") is None:
        return None
    try:
        from vizalloc.analysis.hazards import find_hazards
        from vizalloc.analysis.model import build_model

        hazards = find_hazards(build_model(api.load(path)))
    except ImportError:
        return None
    counts: dict[str, int] = {}
    for h in hazards:
        kind = getattr(h.kind, "value", str(h.kind))
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def execute(args: argparse.Namespace) -> int:
    from vizalloc.scenarios import shared_tensors

    if args.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {args.steps}")
    names = _strategies(args.strategies)
    api = None if args.no_trace else _trace_api()
    paths = _trace_paths(args, names) if api is not None else {}
    trace_note = None
    if args.no_trace:
        trace_note = "tracing off (--no-trace)"
    elif api is None:
        trace_note = "tracing is not available in this build (vizalloc.trace.api missing); no traces written"

    results = {}
    hazards: dict[str, dict[str, int] | None] = {}
    for name in names:
        around = None
        if name in paths and api is not None:
            around = functools.partial(api.trace, paths[name], capture_values=args.capture_values,
                                       overwrite=args.force)
        results[name] = shared_tensors.run(name, args.steps, args.seed, args.config,
                                           reserve_between=args.reserve_between, driver=args.driver,
                                           presize=args.presize, around_loop=around)
        if name in paths:
            hazards[name] = _hazard_counts(api, paths[name])

    if args.json:
        out: dict[str, Any] = {
            "steps": args.steps, "seed": args.seed, "config": args.config,
            "reserve_between": args.reserve_between, "driver": args.driver, "presize": args.presize,
            "strategies": {},
            "traces": paths,
        }
        if trace_note:
            out["trace_note"] = trace_note
        for name, r in results.items():
            d = r.to_dict()
            d["safe"] = not r.diverged()
            if hazards.get(name) is not None:
                d["hazards"] = hazards[name]
            out["strategies"][name] = d
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return _open_tui(args, paths)
    _print_rich(args, results, paths, hazards, trace_note)
    return _open_tui(args, paths)


def _open_tui(args: argparse.Namespace, paths: dict[str, str]) -> int:
    """--tui: browse the first strategy's trace, then exit 0."""
    if not getattr(args, "tui", False):
        return 0
    if not paths:
        raise UsageError("--tui needs the traces; drop --no-trace")
    from vizalloc.cli.tui import open_tui

    return open_tui(next(iter(paths.values())))


def _print_rich(args: argparse.Namespace, results: dict[str, Any], paths: dict[str, str],
                hazards: dict[str, dict[str, int] | None], trace_note: str | None) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from vizalloc.scenarios.shared_tensors import SAFE_STRATEGIES

    console = Console(highlight=False)
    first = next(iter(results.values()))
    cfg = first.config
    console.print(
        Text.assemble(
            ("vizalloc demo", "bold"),
            f": MLP {cfg.n_in}->{cfg.n_hidden}->{cfg.n_out}, batch {cfg.batch}, SGD lr {cfg.lr}, "
            f"{args.steps} steps, seed {args.seed}, config {args.config}, driver {args.driver}"
            + (", buffer presized" if args.presize else "")
            + (", another graph reserved between switches" if args.reserve_between else ""),
        )
    )
    console.print("Each step: reset, alloc forward graph, compute, reset, alloc backward graph (shares the "
                  "forward tensors), compute. Reference: the same step on a brand-new scheduler.\n")

    # loss and its distance to the reference side by side; with many strategies only the
    # losses (red where they differ), so the table fits a terminal
    with_delta = len(results) <= 2
    steps = Table(title="loss per step (forward graph)", title_justify="left")
    steps.add_column("step", justify="right")
    steps.add_column("reference", justify="right", no_wrap=True)
    for name in results:
        steps.add_column(name, justify="right", no_wrap=True)
        if with_delta:
            steps.add_column(f"Δ {name}", justify="right", no_wrap=True)
    for i in range(args.steps):
        row: list[Any] = [str(i), f"{first.records[i].reference_loss:.6f}"]
        for r in results.values():
            rec = r.records[i]
            d = abs(rec.loss - rec.reference_loss)
            style = "red" if d > 1e-6 else "green"
            row.append(Text(f"{rec.loss:.6f}", style=style))
            if with_delta:
                row.append(Text(f"{d:.2e}", style=style))
        steps.add_row(*row)
    console.print(steps)

    summary = Table(title="summary", title_justify="left")
    for col in ("strategy", "final", "ref", "max Δloss", "max Δupd", "bytes", "verdict"):
        summary.add_column(col, justify="left" if col in ("strategy", "verdict") else "right", no_wrap=True,
                           min_width={"strategy": 10, "verdict": 9}.get(col))
    for name, r in results.items():
        bad = r.diverged()
        verdict = Text("CORRUPTED", style="bold red") if bad else Text("safe", style="bold green")
        nbytes = str(r.compute_nbytes) + (f"+{r.static_nbytes}" if r.static_nbytes else "")
        row = [name, f"{r.final_loss:.4f}", f"{r.reference_loss:.4f}", f"{r.max_abs_loss_diff:.1e}",
               f"{r.max_update_diff:.1e}", nbytes, verdict]
        summary.add_row(*row)
    console.print(summary)
    console.print("final/ref: last loss of the strategy / of the reference; max Δupd: largest parameter "
                  "difference after one step vs the same step on a fresh scheduler; bytes: compute buffer "
                  "(+ static buffer)")

    notes = {
        "none": "stale forward tensors are planned over",
        "invalidate": "the allocator reclaims its last binding (rejected ggml PR #999)",
        "clear": "compute tensors' pointers cleared after each reset",
        "dup": "a deep copy allocated at each switch (ggml-opt)",
        "static": "shared tensors in their own static buffer",
    }
    for name in results:
        expect = "safe" if name in SAFE_STRATEGIES and not (name == "invalidate" and args.reserve_between) else "unsafe"
        console.print(f"  {name:<10} {notes[name]}; expected {expect}")
    if "none" in results and not results["none"].diverged():
        console.print("  note: 'none' computed the right numbers this time: the switch reallocated the compute "
                      "buffer and the stale tensors kept working in the freed one (a use-after-free; see the "
                      "trace's dangling hazards). Try --presize.")
    if paths:
        console.print("\ntraces (hazards the analysis finds in each):")
        for name, p in paths.items():
            h = hazards.get(name)
            found = "" if h is None else "  " + (", ".join(f"{k} {v}" for k, v in sorted(h.items())) or "no hazards")
            # a path is data: no markup, and never wrapped (people copy it)
            console.print(f"  {name:<10} {p}{found}", soft_wrap=True, markup=False)
        console.print("open one with: vizalloc tui <trace>   or check it with: vizalloc check <trace>")
    elif trace_note:
        console.print(f"\nnote: {trace_note}")
