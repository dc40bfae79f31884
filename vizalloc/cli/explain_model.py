"""``vizalloc explain MODEL.gguf``: arguments in, tables out; the pipeline (llama.cpp's
context created under the capture, the trace explained, the GPU split) is
:mod:`vizalloc.predict`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from vizalloc.predict import ModelRun, Setting, explain_model
from vizalloc.predict.model import DEVICE_NAMES


def settings_of(args: argparse.Namespace) -> list[Setting]:
    from vizalloc.cli.explain import parse_sweep

    base = {"n_ctx": args.ctx, "n_ubatch": args.ubatch, "n_batch": args.batch, "flash_attn": args.flash_attn,
            "program": args.program, "n_outputs": args.outputs, "kv_type": args.kv_type}
    combos = parse_sweep(args.sweep) if args.sweep else [{}]
    return [Setting.of({**base, **combo}) for combo in combos]


def parse_shares(text: str) -> tuple[float, ...]:
    """``--tensor-split 3,1``: the shares, checked as ``cuda_split.checked_split`` does."""
    from vizalloc.errors import UsageError
    from vizalloc.replay.cuda_split import SPLIT_HINT, checked_split

    try:
        shares = [float(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"--tensor-split {text!r}: {SPLIT_HINT}") from None
    return checked_split(shares)


def execute_model(args: argparse.Namespace, out_kind: str) -> int:
    import os

    from vizalloc.cli.explain import emit

    settings = settings_of(args)
    name = os.path.basename(args.input)
    progress = _Progress(len(settings)) if len(settings) > 1 else None
    finished = False
    try:
        runs = explain_model(args.input, settings, metadata_only=args.metadata_only, device=args.device,
                             n_gpu_layers=args.n_gpu_layers,
                             tensor_split=None if args.tensor_split is None else parse_shares(args.tensor_split),
                             threads=args.threads, keep_trace=args.trace,
                             force=args.force, build=args.llama_build,
                             on_start=(lambda i, s: progress.start(i, _setting_text(s))) if progress else None)
        finished = True
    finally:
        if progress is not None:
            progress.stop(done=finished)  # an interrupted sweep keeps the count it reached
    source = {"kind": "model", "path": args.input, "architecture": runs[0].architecture,
              "metadata_only": bool(args.metadata_only), "device": args.device}
    if len(runs) == 1:
        run = runs[0]
        notes = [_note(name, run, args.metadata_only)]
        source["setting"] = run.setting
        extra = {"llama": _llama_dict(run)}
        if run.prediction is not None:
            notes.append(_cuda_note(run))
            extra["predicted"] = _predicted_dict(run)
        emit(args, out_kind, run.explanation, source=source, title=name, notes=notes, extra=extra,
             rows_extra=lambda b: _logged_rows(b, run))
        return 0
    return _sweep_output(args, out_kind, runs, source, name)


def _setting_text(s: Setting) -> str:
    return f"ctx {s.n_ctx}, ubatch {s.n_ubatch}, flash attention {s.flash_attn}"


def _ctx_text(run: ModelRun) -> str:
    if run.spec.n_ctx == 0 and run.n_ctx:
        return f"{run.n_ctx} (--ctx 0: the training context)"
    return str(run.spec.n_ctx)


def _note(name: str, run: ModelRun, metadata_only: bool) -> str:
    how = ("from its header alone (llama.cpp measured without allocating)" if metadata_only
           else "llama.cpp created the context")
    return (f"{name} ({run.architecture}): n_ctx {_ctx_text(run)}, n_ubatch {run.spec.n_ubatch}, "
            f"flash attention {run.flash_attn}; the worst-case graph as {run.spec.whose} reserves it; {how} in "
            f"{run.seconds:.1f} s")


def _cuda_note(run: ModelRun) -> str:
    p = run.prediction
    layers = _offloaded(p.placement.n_gpu_layers, p.placement.n_layer)
    cpu = ", ".join(f"{b.buft} {b.size:,} B" for b in run.cpu_explanation.buffers) if run.cpu_explanation else ""
    *gpus, host = list(p.sizes)
    kind = DEVICE_NAMES[run.device]
    notes = "; ".join(p.notes)
    n = p.placement.n_devices
    devices = f"one {kind} device" if n == 1 else \
        f"{n} {kind} devices (--tensor-split {','.join(f'{x:g}' for x in p.placement.split)}" + \
        (", pipeline parallel: 4 copies of every split input)" if p.parallel else ")")
    return (f"predicted for {devices} with {layers} offloaded ({p.n_nodes} graph nodes, {p.n_splits} "
            "graph splits): llama.cpp's CPU "
            f"graph replayed through vizalloc's scheduler with a simulated {' + '.join(gpus)} + {host}"
            + (f" ({notes})" if notes else "") + f"; the CPU-only run itself: {cpu} (see `vizalloc explain --help` "
            "for what the simulation assumes)")


def _predicted_dict(run: ModelRun) -> dict[str, Any]:
    p = run.prediction
    return {"device": run.device, "llama_build": run.build, "n_layer": p.placement.n_layer, "n_gpu_layers": p.placement.n_gpu_layers,
            "output_on_gpu": p.placement.output_on_gpu, "tensor_split": list(p.placement.split),
            "pipeline_parallel": p.parallel, "sizes": dict(p.sizes), "n_nodes": p.n_nodes,
            "n_splits": p.n_splits,
            "cpu_only": {b.buft: b.size for b in run.cpu_explanation.buffers} if run.cpu_explanation else {},
            "notes": list(p.notes)}


def _logged_rows(b: Any, run: ModelRun) -> list[tuple[str, str, str, str]]:
    rows = []
    allocated = run.allocated.get(b.buft)
    if allocated is not None:
        rows.append(("  llama.cpp allocated", f"{allocated:,} B", "same" if allocated == b.size else "DIFFERS",
                     "the buffer the process held"))
    logged = run.logged.get(b.buft)
    if logged is not None:
        exact = run.logged_exact.get(b.buft)
        same = run.matches_log(b.buft, b.size)
        rows.append(("  llama.cpp logged", f"{logged} MiB", "same" if same else "DIFFERS",
                     f"'{b.buft} compute buffer size = {logged} MiB'" + (f" ({exact} MiB when freed)" if exact else "")))
    return rows


def _llama_dict(run: ModelRun) -> dict[str, Any]:
    sizes = {b.buft: b.size for b in run.explanation.buffers if b.buft}
    return {
        "setting": run.setting,
        "flash_attn": run.report.get("flash_attn", ""),
        "n_ctx": run.n_ctx,
        "n_outputs": run.spec.outputs,
        "graph_of": run.spec.whose,
        "measured_without_memory": not run.report,
        "compute_buffers": [
            {"buft": k, "explained_nbytes": v, "allocated_nbytes": run.allocated.get(k),
             "logged_mib": run.logged.get(k), "logged_mib_exact": run.logged_exact.get(k),
             "same": (run.allocated.get(k) in (None, v)) and run.matches_log(k, v) is not False}
            for k, v in sizes.items()],
        "seconds": round(run.seconds, 3),
    }


class _Progress:
    """A progress bar on stderr: one step per setting, each in a process of its own."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("explain"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.description}"), console=Console(stderr=True), transient=False)
        self.task = self.progress.add_task("", total=total)
        self.progress.start()

    def start(self, i: int, text: str) -> None:
        self.progress.update(self.task, completed=i, description=text)

    def stop(self, done: bool = True) -> None:
        if done:  # an interrupted sweep keeps the count it reached
            self.progress.update(self.task, completed=self.progress.tasks[0].total, description="done")
        self.progress.stop()


def _sweep_output(args: argparse.Namespace, out_kind: str, runs: list[ModelRun], source: dict[str, Any],
                  name: str) -> int:
    import json

    from rich.table import Table
    from rich.text import Text

    from vizalloc.cli.console import stdout_console
    from vizalloc.cli.explain import write_output
    from vizalloc.export.explain import SweepPoint, explanation_dict, sweep_axes, sweep_dict, sweep_svg
    from vizalloc.export.units import mib
    from vizalloc.text import inert

    points = []
    docs = []
    for run in runs:
        sizes = {b.title: b.size for b in run.explanation.buffers}
        logged = {f"{k} compute buffer": f"{v} MiB" for k, v in run.logged.items()}
        top = run.explanation.buffers[0] if run.explanation.buffers else None
        points.append(SweepPoint(dict(run.setting), sizes, logged, top.sentence if top else ""))
        extra = {"llama": _llama_dict(run)}
        if run.prediction is not None:
            extra["predicted"] = _predicted_dict(run)
        docs.append(explanation_dict(run.explanation, source={**source, "setting": run.setting}, extra=extra))
    titles = list(dict.fromkeys(t for p in points for t in p.sizes))
    if args.json or args.output == "-":
        sys.stdout.write(json.dumps(sweep_dict(points, docs), indent=1) + "\n")
    else:
        console = stdout_console()
        # the file's name and the buffer types' are data: inert, and Text (not rich markup)
        table = Table(title=Text(f"{inert(name, 200)}: compute buffers per setting (each in a fresh llama.cpp "
                                 "process)"), title_justify="left", show_edge=False, pad_edge=False)
        for col in ("n_ctx", "ubatch", "fa"):
            table.add_column(col, justify="right")
        for t in titles:
            table.add_column(Text(inert(t.replace(" compute buffer", " compute, B"), 80)), justify="right")
            table.add_column("MiB", justify="right")
            table.add_column("llama.cpp", justify="right")
        table.add_column("largest at the peak", overflow="fold")
        for p, run in zip(points, runs):
            fa = run.flash_attn.replace(" -> ", "→")
            row: list[str | Text] = [str(run.n_ctx), str(p.setting["n_ubatch"]), fa]
            for t in titles:
                size = p.sizes.get(t)
                row += [f"{size:,}", mib(size).removesuffix(" MiB")] if size is not None else ["-", "-"]
                lg = p.logged.get(t, "")
                row.append(lg.replace(" MiB", "") + ("" if not lg or size is None else
                                                     (" ✓" if lg == mib(size) else " ✗")))
            top = run.explanation.buffers[0].groups[0] if run.explanation.buffers and \
                run.explanation.buffers[0].groups else None
            row.append(Text(f"{inert(top.label, 40)} {top.share * 100:.0f}%") if top else "")
            table.add_row(*row)
        console.print(table)
        if any(not r.report for r in runs):
            console.print("(measured without memory: llama.cpp logs no size then)", style="dim")
    if args.output and args.output != "-":
        if out_kind == "svg":
            x_key, series = sweep_axes(points)
            text = sweep_svg(points, x_key=x_key, series_keys=series, title=name,
                             buffer_title=titles[0] if titles else "compute buffer", x_label=x_key,
                             notes=[f"{runs[0].architecture}; each point: llama.cpp's context created under vizalloc's "
                                    "capture; labels in MiB"])
        else:
            text = json.dumps(sweep_dict(points, docs), indent=1) + "\n"
        write_output(args.output, text, args.force)
    return 0


def execute_fit(args: argparse.Namespace) -> int:
    """``--fit SIZE``: the largest context (or with --ctx the most layers) that fits."""
    import json

    from vizalloc.errors import UsageError
    from vizalloc.predict.fit import DEFAULT_MARGIN, fit, parse_size

    if args.fit is None:
        raise UsageError("--fit-margin applies to --fit SIZE")
    if args.device == "cpu":
        raise UsageError("--fit answers for a GPU: give --device cuda, rocm or rpc")
    if args.sweep or args.trace or args.output:
        raise UsageError("--fit prints its own table (or --json): give it without --sweep, --trace or -o")
    if args.tensor_split is not None:
        raise UsageError("--fit answers for one GPU, as llama.cpp's --fit does without -ts: give it without "
                         "--tensor-split")
    if args.ctx_given and args.n_gpu_layers is not None:
        raise UsageError("--fit answers one question: give --ctx (the most layers that fit) or --n-gpu-layers "
                         "(the largest context), not both")
    budget = parse_size(args.fit)
    margin = DEFAULT_MARGIN if args.fit_margin is None else args.fit_margin << 20
    if args.fit_margin is not None and args.fit_margin < 0:
        raise UsageError(f"--fit-margin {args.fit_margin}: give 0 or more MiB")
    (setting,) = settings_of(args)
    question = "n_gpu_layers" if args.ctx_given else "n_ctx"
    answer = fit(args.input, budget=budget, setting=setting, question=question, n_gpu_layers=args.n_gpu_layers,
                 device=args.device, build=args.llama_build, margin=margin, threads=args.threads)
    if args.json:
        sys.stdout.write(json.dumps(_fit_dict(args, answer), indent=1) + "\n")
    else:
        _fit_print(args, answer)
    return 0


def _need_dict(n: Any) -> dict[str, Any] | None:
    if n is None:
        return None
    return {"n_ctx": n.n_ctx, "n_gpu_layers": n.n_gpu_layers, "weights_bytes": n.weights, "kv_cache_bytes": n.kv_cache,
            "compute_bytes": n.compute, "host_compute_bytes": n.host_compute, "total_bytes": n.total}


def _fit_dict(args: argparse.Namespace, a: Any) -> dict[str, Any]:
    return {"schema": "vizalloc.fit/1", "model": args.input, "device": args.device, "llama_build": args.llama_build,
            "question": a.question, "budget_bytes": a.budget, "margin_bytes": a.margin, "usable_bytes": a.usable,
            "n_layer": a.n_layer, "answer": _need_dict(a.answer), "beyond": _need_dict(a.beyond),
            "alternatives": [{"change": label, **(_need_dict(n) or {})} for label, n in a.alternatives],
            "refused": [{"change": label, "reason": why} for label, why in a.refused],
            "predictions": a.predictions, "captures": a.captures, "seconds": round(a.seconds, 2)}


def _fit_print(args: argparse.Namespace, a: Any) -> None:
    import os

    from rich.table import Table

    from vizalloc.cli.console import stdout_console
    from vizalloc.export.units import fmt_bytes, mib

    console = stdout_console()
    name = os.path.basename(args.input)
    what = "the largest context" if a.question == "n_ctx" else "the most layers offloaded"
    console.print(f"{name}: {what} that fits in {fmt_bytes(a.budget)} ({a.budget:,} B) less llama.cpp's --fit margin "
                  f"of {fmt_bytes(a.margin)}: {a.usable:,} B usable ({a.captures} contexts created, "
                  f"{a.predictions} predictions, {a.seconds:.1f} s)")
    if a.answer is None:
        console.print(f"nothing fits: even {_setting_words(a.beyond, a.n_layer)} needs {a.beyond.total:,} B")
    else:
        console.print(f"answer: {_setting_words(a.answer, a.n_layer)}", style="bold")
    table = Table(show_edge=False, pad_edge=False)
    for col in ("", "n_ctx", "-ngl", "weights", "KV cache", "compute", "total", "fits"):
        table.add_column(col, justify="left" if not col else "right")
    rows = [("answer", a.answer), ("one step beyond", a.beyond)] + [(label, n) for label, n in a.alternatives]
    for label, n in rows:
        if n is None:
            continue
        table.add_row(label, str(n.n_ctx), str(n.n_gpu_layers), fmt_bytes(n.weights), fmt_bytes(n.kv_cache),
                      fmt_bytes(n.compute), mib(n.total), "yes" if n.total <= a.usable else "no")
    console.print(table)
    for label, why in a.refused:
        console.print(f"{label}: {_inert_text(why)}", style="dim")
    if a.answer is not None and a.beyond is None:
        console.print("(the largest setting there is: every layer, or the training context)", style="dim")
    console.print("for one GPU, as llama.cpp's --fit without -ts", style="dim")


def _inert_text(text: str) -> str:
    from rich.markup import escape

    from vizalloc.text import inert

    return escape(inert(text, 200))


def _offloaded(n_gpu_layers: int, n_layer: int) -> str:
    """What ``-ngl n_gpu_layers`` puts on the device, as llama.cpp counts it (the output first)."""
    if n_gpu_layers > n_layer:
        return "every layer and the output"
    if n_gpu_layers <= 0:
        return "no layer"
    if n_gpu_layers == 1:
        return "the output layer alone"
    return f"the output layer and {n_gpu_layers - 1} of {n_layer} layers"


def _setting_words(n: Any, n_layer: int) -> str:
    return f"-c {n.n_ctx} with {_offloaded(n.n_gpu_layers, n_layer)} on the GPU (-ngl {n.n_gpu_layers})"
