"""``vizalloc explain MODEL.gguf``: llama.cpp creates a context for the model under the
capture (in a process of its own, through the driver ``python -m vizalloc.capture.llama``),
and the trace it leaves is explained like any other.

Each setting runs in a fresh process: llama.cpp loads the model, creates the context
(its scheduler reserves the worst-case graph: ``n_ubatch`` tokens over the whole KV
cache) and stops, generating nothing. The driver reports what llama.cpp logged ("CPU
compute buffer size = 34.27 MiB"); the table shows it beside the size the trace holds.

With ``--metadata-only`` the model's header is copied into a sparse file (the weights a
hole, :mod:`vizalloc.capture.gguf_header`) and the driver asks llama.cpp to measure as
its ``--fit`` does (``no_alloc``: no weights read, no KV cache or compute buffer
allocated), so the model's size on disk and in memory does not matter.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vizalloc.errors import UsageError, VizallocError

DRIVER = "vizalloc.capture.llama"

# llama.cpp: "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 1414660096"
_FAILED_ALLOC = re.compile(r"failed to allocate (?:\S+ )?buffer of size (\d+)")
_DRIVER_ERROR = re.compile(r"^vizalloc\.capture\.llama: (.*)$", re.M)


class ExplainModelError(VizallocError):
    """llama.cpp could not create the context (the message says why, in one line)."""


@dataclass
class ModelRun:
    """One setting explained: what it was, what llama.cpp logged, what the trace says."""

    setting: dict[str, Any]
    explanation: Any
    report: dict[str, Any]                   # the driver's JSON report ({} when it measured without memory)
    logged: dict[str, str] = field(default_factory=dict)        # buffer type -> "34.27" (MiB, as logged)
    logged_exact: dict[str, str] = field(default_factory=dict)  # buffer type -> "34.2700" (when freed)
    allocated: dict[str, int] = field(default_factory=dict)     # buffer type -> bytes the process allocated
    seconds: float = 0.0
    trace: str = ""
    #: with --device cuda: the CPU capture's own explanation, and the simulated split
    cpu_explanation: Any = None
    prediction: Any = None


def settings_of(args: argparse.Namespace) -> list[dict[str, Any]]:
    from vizalloc.cli.explain import parse_sweep

    base = {"n_ctx": args.ctx, "n_ubatch": args.ubatch, "n_batch": args.batch, "flash_attn": args.flash_attn}
    if not args.sweep:
        return [base]
    return [{**base, **combo} for combo in parse_sweep(args.sweep)]


def driver_argv(model: str, setting: dict[str, Any], *, no_alloc: bool, threads: int) -> list[str]:
    ubatch = int(setting["n_ubatch"])
    batch = setting.get("n_batch") or max(2048, ubatch)
    argv = [sys.executable, "-m", DRIVER, model, "--ctx", str(setting["n_ctx"]), "--batch", str(batch),
            "--ubatch", str(ubatch), "--flash-attn", str(setting["flash_attn"]), "--json"]
    if no_alloc:
        argv.append("--no-alloc")
    if threads:
        argv += ["--threads", str(threads)]
    return argv


def _check_settings(setting: dict[str, Any]) -> None:
    for key, flag in (("n_ctx", "--ctx"), ("n_ubatch", "--ubatch"), ("n_batch", "--batch")):
        v = setting.get(key)
        if v is None:
            continue
        if v < 0 or (v == 0 and key != "n_ctx"):
            raise UsageError(f"{flag} {v}: give a positive number of tokens"
                             + (" (--ctx 0: the model's training context)" if key == "n_ctx" else ""))
    batch = setting.get("n_batch")
    if batch is not None and setting["n_ubatch"] > batch:
        raise UsageError(f"--ubatch {setting['n_ubatch']} is larger than --batch {batch}: llama.cpp would cut the "
                         f"micro-batch to {batch}; give --batch {setting['n_ubatch']} or more")


def run_setting(model_path: str, setting: dict[str, Any], workdir: str, *, no_alloc: bool, threads: int,
                keep_trace: str | None, force: bool, display: str = "", device: str = "cpu",
                n_layer: int = 0, n_gpu_layers: int | None = None) -> ModelRun:
    """Create llama.cpp's context for one setting (checked by ``execute_model``, with every
    other setting, before the first run) under the capture and explain the trace."""
    import json

    from vizalloc.analysis.explain import explain
    from vizalloc.analysis.model import build_model
    from vizalloc.capture import trace_program
    from vizalloc.trace.api import load

    trace_path = keep_trace or os.path.join(workdir, "llama.vztrace")
    out_path, err_path = os.path.join(workdir, "driver.out"), os.path.join(workdir, "driver.err")
    argv = driver_argv(model_path, setting, no_alloc=no_alloc, threads=threads)
    t0 = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        traced = trace_program(argv, trace_path, force=True if keep_trace is None else force, stdout=out, stderr=err)
    seconds = time.perf_counter() - t0
    stdout = Path(out_path).read_text(encoding="utf-8", errors="replace")
    stderr = Path(err_path).read_text(encoding="utf-8", errors="replace")
    finished = traced.finished
    hints = {k: int(setting[k]) for k in ("n_ctx", "n_ubatch") if setting.get(k)}
    trace_file = str(traced.traces[0][0]) if traced.traces else ""
    imported = traced.traces[0][1] if traced.traces else None
    if finished.exit_code != 0:
        raise _failure(finished.exit_code, stderr, trace_file, hints, imported,
                       display or os.path.basename(model_path), setting)
    report: dict[str, Any] = {}
    if not no_alloc:  # a measurement without memory ends in the capture, before any report
        try:
            report = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ExplainModelError(f"the llama.cpp driver printed no report (exit code 0); its output ends: "
                                    f"{_tail(stdout + stderr)}") from None
    buffers = list(imported.compute_buffers) if imported is not None else []
    if not buffers:
        raise ExplainModelError(f"llama.cpp planned no compute buffer under the capture (n_ctx {setting['n_ctx']}, "
                                f"n_ubatch {setting['n_ubatch']}); its output ends: {_tail(stderr)}")
    model = build_model(load(trace_file))
    expl = _name_buffers(explain(model, hints=hints), [b.buft for b in buffers])
    cpu_expl, prediction = None, None
    if device == "cuda":
        from vizalloc.replay.cuda_split import predict_cuda

        prediction = predict_cuda(model, n_layer=n_layer, n_gpu_layers=n_gpu_layers)
        cpu_expl, expl = expl, explain(build_model(prediction.events), hints=hints)
    return ModelRun(setting, expl, report, cpu_explanation=cpu_expl, prediction=prediction,
                    logged={str(n): str(v) for n, v in report.get("compute_buffers", [])},
                    logged_exact={str(n): str(v) for n, v in report.get("compute_buffers_exact", [])},
                    allocated={b.buft: b.allocated for b in buffers if b.allocated is not None},
                    seconds=seconds, trace=trace_file if keep_trace else "")


def _name_buffers(expl: Any, names: Sequence[str]) -> Any:
    """Buffers the trace never allocated (llama.cpp measured without allocating) take the
    names llama.cpp logged, which come in the scheduler's backend order (= slot order)."""
    buffers = []
    for b in expl.buffers:
        if not b.buft and b.slot < len(names):
            b = dataclasses.replace(b, buft=names[b.slot], backend=names[b.slot])
        buffers.append(b)
    return dataclasses.replace(expl, buffers=tuple(buffers))


def _tail(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text[-n:] if text else "(nothing)"


# llama.cpp's own words for why it stopped, most specific first
_LLAMA_ERRORS = (
    re.compile(r"error loading model(?: architecture| hyperparameters| vocabulary)?: (.+)"),
    re.compile(r"failed to initialize the context: (.+)"),
    re.compile(r"llama_init_from_model: (.+)"),
)
_LOG_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [DIWE] (?:\S+\s+)?")


def _failure(code: int, stderr: str, trace_file: str, hints: dict[str, int], imported: Any,
             model_name: str, setting: dict[str, Any]) -> VizallocError:
    """One line saying why llama.cpp failed; for a buffer that did not fit, what it holds."""
    at = f"n_ctx {setting['n_ctx']}, n_ubatch {setting['n_ubatch']}, flash attention {setting['flash_attn']}"
    failed = _FAILED_ALLOC.findall(stderr)
    if failed:
        nbytes = int(failed[-1])
        return ExplainModelError(_explain_failed(trace_file, nbytes, hints, imported, model_name, at))
    messages = [_LOG_PREFIX.sub("", line).strip() for line in stderr.splitlines()]
    for pattern in _LLAMA_ERRORS:
        for msg in messages:
            m = pattern.search(msg)
            if m:
                return ExplainModelError(f"llama.cpp cannot use {model_name} at {at}: {m.group(1).strip()}")
    found = _DRIVER_ERROR.findall(stderr)
    if found:
        return ExplainModelError(found[-1].strip())
    return ExplainModelError(f"llama.cpp ended with exit code {code} for {model_name} at {at}: {_tail(stderr)}")


def _explain_failed(trace_file: str, nbytes: int, hints: dict[str, int], imported: Any, model_name: str,
                    at: str) -> str:
    """What the buffer of ``nbytes`` that could not be allocated would have held at its peak."""
    from vizalloc.analysis.explain import deciding_text, explain
    from vizalloc.analysis.model import build_model
    from vizalloc.export.explain import mib
    from vizalloc.trace.api import load

    what = f"{nbytes:,} B ({mib(nbytes)})"
    names = {cb.planned: cb.buft for cb in getattr(imported, "compute_buffers", ())}
    try:
        expl = explain(build_model(load(trace_file)), hints=hints) if trace_file and os.path.exists(trace_file) \
            else None
    except VizallocError:
        expl = None
    for b in expl.buffers if expl is not None else ():
        if b.size == nbytes:
            title = f"{names.get(nbytes) or b.buft or 'a'} compute buffer"
            return (f"llama.cpp could not allocate the {title} of {what} for {model_name} at {at}; at its peak, "
                    f"{deciding_text(b.groups, b.deciding)}; a smaller --ubatch or --ctx, or --flash-attn on, "
                    "makes it smaller")
    return f"llama.cpp could not allocate a buffer of {what} for {model_name} at {at} (not a compute buffer it planned)"


def execute_model(args: argparse.Namespace, out_kind: str) -> int:
    from vizalloc.capture.gguf_header import check_complete, read_header, write_metadata_only
    from vizalloc.cli.explain import emit

    if args.n_gpu_layers is not None and args.device != "cuda":
        raise UsageError("--n-gpu-layers applies to --device cuda")
    if args.n_gpu_layers is not None and args.n_gpu_layers < 0:
        raise UsageError(f"--n-gpu-layers {args.n_gpu_layers}: give 0 or more (default: every layer)")
    settings = settings_of(args)
    for s in settings:
        _check_settings(s)
    header = read_header(args.input)
    n_layer = 0
    if args.device == "cuda":
        blocks = header.hparam("block_count")
        if not isinstance(blocks, int) or blocks <= 0:
            raise UsageError(f"--device cuda needs the model's layer count, {header.architecture}.block_count, which "
                             f"{args.input}'s header does not give")
        n_layer = blocks
    if not args.metadata_only:
        check_complete(header)
    if args.trace and len(settings) > 1:
        raise UsageError("--trace keeps one trace: give it without --sweep")
    if args.trace:
        from vizalloc.files import check_new

        check_new(args.trace, overwrite=args.force, flag="-f", other="use --trace to choose another name")
    _require_llama()
    name = os.path.basename(args.input)
    runs: list[ModelRun] = []
    with tempfile.TemporaryDirectory(prefix="vizalloc-explain-") as tmp:
        model_path = args.input
        if args.metadata_only:
            model_path = os.path.join(tmp, "model.metadata-only.gguf")
            write_metadata_only(header, model_path)
        progress = _Progress(len(settings)) if len(settings) > 1 else None
        try:
            for i, setting in enumerate(settings):
                if progress is not None:
                    progress.start(i, _setting_text(setting))
                runs.append(run_setting(model_path, setting, tmp, no_alloc=args.metadata_only,
                                        threads=args.threads, keep_trace=args.trace, force=args.force, display=name,
                                        device=args.device, n_layer=n_layer, n_gpu_layers=args.n_gpu_layers))
        finally:
            if progress is not None:
                progress.stop(done=len(runs) == len(settings))
    source = {"kind": "model", "path": args.input, "architecture": header.architecture,
              "metadata_only": bool(args.metadata_only), "device": args.device}
    if len(runs) == 1:
        run = runs[0]
        notes = [_note(name, header, run, args.metadata_only)]
        source["setting"] = run.setting
        extra = {"llama": _llama_dict(run)}
        if run.prediction is not None:
            notes.append(_cuda_note(run))
            extra["predicted"] = _predicted_dict(run)
        emit(args, out_kind, run.explanation, source=source, title=name, notes=notes, extra=extra,
             rows_extra=lambda b: _logged_rows(b, run))
        return 0
    return _sweep_output(args, out_kind, runs, source, name, header)


def _require_llama() -> None:
    import importlib.util

    def present(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a module set to None
            return False

    if not present(DRIVER):
        raise UsageError(f"this vizalloc has no llama.cpp driver ({DRIVER}); upgrade vizalloc")
    if not present("xllamacpp"):
        raise UsageError("explaining a GGUF model runs llama.cpp through xllamacpp, which is not installed: "
                         "pip install 'vizalloc[llama]'")


def _setting_text(s: dict[str, Any]) -> str:
    return f"ctx {s['n_ctx']}, ubatch {s['n_ubatch']}, flash attention {s['flash_attn']}"


def _note(name: str, header: Any, run: ModelRun, metadata_only: bool) -> str:
    fa = run.setting["flash_attn"]
    resolved = run.report.get("flash_attn") or ""
    if fa == "auto" and resolved:
        fa = f"auto -> {resolved}"
    how = ("from its header alone (llama.cpp measured without allocating)" if metadata_only
           else "llama.cpp created the context")
    return (f"{name} ({header.architecture}): n_ctx {run.setting['n_ctx']}, n_ubatch {run.setting['n_ubatch']}, "
            f"flash attention {fa}; {how} in {run.seconds:.1f} s")


def _same(nbytes: int, logged: str | None, decimals: int) -> bool | None:
    """Whether ``nbytes`` prints as llama.cpp's MiB figure (None: nothing logged)."""
    if logged is None:
        return None
    return f"{nbytes / 1048576:.{decimals}f}" == logged


def _cuda_note(run: ModelRun) -> str:
    p = run.prediction
    ngl = p.placement.n_gpu_layers
    layers = "every layer and the output" if p.placement.output_on_gpu else \
        f"{max(0, min(ngl, p.placement.n_layer))} of {p.placement.n_layer} layers"
    cpu = ", ".join(f"{b.buft} {b.size:,} B" for b in run.cpu_explanation.buffers) if run.cpu_explanation else ""
    return (f"predicted for one CUDA GPU with {layers} offloaded ({p.n_splits} graph splits): llama.cpp's CPU "
            f"graph replayed through vizalloc's scheduler with a simulated CUDA0 + CUDA_Host; the CPU-only run "
            f"itself: {cpu} (see `vizalloc explain --help` for what the simulation assumes)")


def _predicted_dict(run: ModelRun) -> dict[str, Any]:
    p = run.prediction
    return {"device": "cuda", "n_layer": p.placement.n_layer, "n_gpu_layers": p.placement.n_gpu_layers,
            "output_on_gpu": p.placement.output_on_gpu, "sizes": dict(p.sizes), "n_splits": p.n_splits,
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
        same = _same(b.size, logged, 2) and (exact is None or _same(b.size, exact, 4))
        rows.append(("  llama.cpp logged", f"{logged} MiB", "same" if same else "DIFFERS",
                     f"'{b.buft} compute buffer size = {logged} MiB'" + (f" ({exact} MiB when freed)" if exact else "")))
    return rows


def _llama_dict(run: ModelRun) -> dict[str, Any]:
    sizes = {b.buft: b.size for b in run.explanation.buffers if b.buft}
    return {
        "setting": run.setting,
        "flash_attn": run.report.get("flash_attn", ""),
        "measured_without_memory": not run.report,
        "compute_buffers": [
            {"buft": k, "explained_nbytes": v, "allocated_nbytes": run.allocated.get(k),
             "logged_mib": run.logged.get(k), "logged_mib_exact": run.logged_exact.get(k),
             "same": (run.allocated.get(k) in (None, v)) and _same(v, run.logged.get(k), 2) is not False
             and _same(v, run.logged_exact.get(k), 4) is not False}
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
                  name: str, header: Any) -> int:
    import json

    from rich.table import Table
    from rich.text import Text

    from vizalloc.cli.console import stdout_console
    from vizalloc.cli.explain import write_output
    from vizalloc.export.explain import SweepPoint, explanation_dict, mib, sweep_dict, sweep_svg
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
            fa = str(p.setting["flash_attn"])
            if fa == "auto" and run.report.get("flash_attn"):
                fa = f"auto→{run.report['flash_attn']}"
            row: list[str | Text] = [str(p.setting["n_ctx"]), str(p.setting["n_ubatch"]), fa]
            for t in titles:
                size = p.sizes.get(t)
                row += [f"{size:,}", f"{size / 1048576:.2f}"] if size is not None else ["-", "-"]
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
            series = [k for k in ("n_ubatch", "flash_attn", "n_batch") if len({str(p.setting.get(k)) for p in points}) > 1]
            text = sweep_svg(points, x_key="n_ctx", series_keys=series or ["n_ubatch"], title=name,
                             buffer_title=titles[0] if titles else "compute buffer", x_label="n_ctx",
                             notes=[f"{header.architecture}; each point: llama.cpp's context created under vizalloc's "
                                    "capture; labels in MiB"])
        else:
            text = json.dumps(sweep_dict(points, docs), indent=1) + "\n"
        write_output(args.output, text, args.force)
    return 0
