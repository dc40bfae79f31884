"""vizalloc explain: why a compute buffer is as big as it is.

    vizalloc explain run.vztrace                         # any trace: every compute buffer at its peak
    vizalloc explain run.vztrace --json                  # the same as JSON (docs/explain-schema.md)
    vizalloc explain run.vztrace -o explain.svg          # a bar per group of tensors live at the peak
    vizalloc explain model.gguf --ctx 8192 --ubatch 512 --flash-attn off
    vizalloc explain model.gguf --metadata-only          # from the header alone: no weights read
    vizalloc explain model.gguf --sweep ctx=2048,8192,32768 ubatch=512,2048 fa=on,off -o sweep.svg

For every buffer a graph allocator sized, the plan that needed the most bytes is looked
at where the most bytes are live: the tensors live there, grouped by name with the
layer index folded (``kq-*``), with op, shape, bytes and share of the peak, and a
sentence naming the one or two groups that decide the size. Beside the buffer's size:
the lower bound (the most bytes live at once: no packing can need less) and what
greedy-by-size packing would need.

Given a GGUF model, llama.cpp itself (xllamacpp, ``pip install 'vizalloc[llama]'``) loads
it and creates a context (its worst-case reserve) under vizalloc's capture, in a
process of its own, without generating; the buffer sizes are then what llama.cpp
allocated, and llama.cpp's own log line is shown beside them. ``--metadata-only`` reads
only the model's header (a file cut after its header is enough) and lets llama.cpp
measure as its ``--fit`` does, allocating nothing, so a 70B model needs neither its
download nor its memory. ``--sweep`` runs every combination of the settings, each in a
fresh process, and prints a table of buffer sizes (``-o FILE.svg``: a chart of the compute
buffer against the setting that varies). ``--device cuda`` predicts the GPU and host
compute buffers llama.cpp would log as CUDA0 and CUDA_Host (``--device rocm``: ROCm0 and
ROCm_Host; ``--device rpc``: RPC0 and CPU, ggml-rpc in front of an rpc-server with a CPU
backend: 32-byte aligned, nothing padded, no offload rule), by replaying the captured
graph through vizalloc's scheduler with a simulated CUDA backend: the weights and KV cache
of offloaded layers in device memory (as llama.cpp counts --n-gpu-layers: the output layer
first, then layer il when il >= n_layer + 1 - N), the token embeddings and graph inputs on
the host, ggml-cuda's alignment (128), offload rule (a batch of 32 or more: host weights
are copied into the device's buffer) and alloc sizes (quantized rows padded, f16 K and V
for flash attention over a quantized cache), llama.cpp's assignment of norm-<il> to its
layer's device. ``--llama-build b10687`` leaves out the mixed token/embedding input branch
newer llama.cpp builds add; so predicted, gguf-parser-go's measured ROCm sweep is
reproduced (benchmarks/device_validation.py). Not modelled: CPU_REPACK weights of CPU
layers, --split-mode row. ``--tensor-split 1,1`` shares the layers between that many
devices of the kind as llama.cpp does (pipeline parallelism when every layer is
offloaded); checked against real llama.cpp on RPC devices (benchmarks/rpc_validation.py).
``--program`` and ``--outputs`` choose whose worst-case graph (llama-server -np 1 and
llama-cli: 1 output; llama-completion: --ubatch outputs). ``--fit 24GiB`` answers what
fits on one GPU: the largest context, or with --ctx the most layers, counting weights, KV
cache, compute buffer and llama.cpp's --fit margin (1024 MiB), with what -ub, -fa and the
KV type would change.

Exit codes: 0 explained; 2 bad input (not a trace or a GGUF, a GGUF cut inside its
header, or cut anywhere without --metadata-only, an architecture or setting llama.cpp
refuses, xllamacpp missing, a buffer that did not fit in memory: the message says which
buffer and why).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vizalloc.errors import UsageError

#: rows of groups shown per buffer (the rest are summed into one row)
DEFAULT_TOP = 10
SWEEP_KEYS = {"ctx": "n_ctx", "ubatch": "n_ubatch", "batch": "n_batch", "fa": "flash_attn"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="TRACE|MODEL.gguf", help="a trace file (.vztrace) or a GGUF model")
    parser.add_argument("--json", action="store_true", help="print the explanation as JSON (docs/explain-schema.md)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write a picture (.svg: a bar per group; with --sweep a chart) or the JSON (.json)")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite the output file if it exists")
    parser.add_argument("--top", type=int, default=DEFAULT_TOP, metavar="N",
                        help=f"groups listed per buffer; the rest are summed (default {DEFAULT_TOP})")
    model = parser.add_argument_group("a GGUF model (through llama.cpp)")
    # defaults are None so that a flag given to a trace can be refused (settings_of fills them in)
    model.add_argument("--ctx", type=int, default=None, metavar="N",
                       help="context size, llama.cpp's -c (default 4096; 0: the model's training context)")
    model.add_argument("--batch", type=int, default=None, metavar="N",
                       help="logical batch, llama.cpp's -b (default 2048, or --ubatch if larger)")
    model.add_argument("--ubatch", type=int, default=None, metavar="N",
                       help="micro-batch, llama.cpp's -ub (default 512)")
    model.add_argument("--flash-attn", choices=("on", "off", "auto"), default=None,
                       help="llama.cpp's -fa (default auto)")
    model.add_argument("--program", choices=("server", "cli", "completion"), default=None,
                       help="whose worst-case graph: llama-server -np 1 and llama-cli reserve it with 1 output "
                            "(default), llama-completion with --ubatch outputs")
    model.add_argument("--outputs", type=int, default=None, metavar="N",
                       help="the worst-case graph's outputs (logits rows), 1 to --ubatch, instead of --program's")
    model.add_argument("--kv-type", choices=("f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"),
                       default=None, help="the KV cache's type, llama.cpp's -ctk and -ctv (default f16)")
    model.add_argument("--metadata-only", action="store_true",
                       help="use only the model's header (no weights read, nothing allocated); a file cut after "
                            "its header is accepted")
    model.add_argument("--sweep", nargs="+", metavar="KEY=V,V", default=None,
                       help="run every combination: ctx=..., ubatch=..., batch=..., fa=on,off")
    model.add_argument("--device", choices=("cpu", "cuda", "rocm", "rpc"), default=None,
                       help="cuda: predict CUDA0 and CUDA_Host compute buffers with a simulated CUDA backend; rocm: "
                            "the same for a HIP build (ROCm0, ROCm_Host); rpc: an rpc-server's CPU (RPC0, CPU)")
    model.add_argument("--llama-build", choices=("captured", "b10687"), default=None,
                       help="with --device: the graph as the installed llama.cpp builds it (captured, default) or as "
                            "llama.cpp b10687 (c841aeeb8) did, without the mixed token/embedding input branch")
    model.add_argument("--n-gpu-layers", type=int, default=None, metavar="N",
                       help="with --device: layers offloaded, llama.cpp's -ngl (default: all)")
    model.add_argument("--tensor-split", default=None, metavar="S,S,...",
                       help="with --device: that many devices sharing the layers, llama.cpp's -ts with "
                            "--split-mode layer (3,1: three quarters on the first)")
    model.add_argument("--fit", metavar="SIZE", default=None,
                       help="with --device: what fits in SIZE of GPU memory (24GiB, 8000MiB): the largest context, "
                            "or with --ctx the most layers (weights + KV cache + compute buffer + --fit-margin)")
    model.add_argument("--fit-margin", type=int, default=None, metavar="MiB",
                       help="memory --fit leaves free, as llama.cpp's --fit-target (default 1024)")
    model.add_argument("--trace", metavar="FILE", help="keep the captured trace of llama.cpp in FILE")
    model.add_argument("--threads", type=int, default=None, metavar="N",
                       help="llama.cpp's CPU threads (default: its own)")


def execute(args: argparse.Namespace) -> int:
    from vizalloc.capture.gguf_header import is_gguf

    if args.top < 1:
        raise UsageError(f"--top must be 1 or more, not {args.top}")
    out_kind = _output_kind(args.output)
    if args.output and args.output != "-":
        from vizalloc.files import check_new

        check_new(args.output, overwrite=args.force, flag="-f", other="use -o to choose another name")
    path = args.input
    if not os.path.exists(path):
        raise UsageError(f"no file at {path}: give a trace (.vztrace) or a GGUF model")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory: give a trace (.vztrace) or a GGUF model")
    if is_gguf(path):
        from vizalloc.cli import explain_model

        args.ctx_given = args.ctx is not None
        model_defaults(args)
        if args.fit is not None or args.fit_margin is not None:
            return explain_model.execute_fit(args)
        return explain_model.execute_model(args, out_kind)
    if path.lower().endswith(".gguf"):
        raise UsageError(f"{path} is not a GGUF model file (it does not start with 'GGUF'): is it a complete "
                         "download?")
    model_only = [flag for flag in MODEL_FLAGS if _given(args, flag)]
    if model_only:
        raise UsageError(f"{', '.join(model_only)}: settings that apply to a GGUF model; {path} is read as a trace, "
                         "which holds the settings it was captured with: give the model instead, or leave them out")
    if not _starts_like_a_trace(path):
        raise UsageError(f"{path} is neither a vizalloc trace nor a GGUF model (it starts with neither 'VZTRACE' "
                         "nor 'GGUF'): give a trace (.vztrace) or a GGUF model")
    return explain_trace(args, out_kind)


#: the flags that set up llama.cpp's run of a model, meaningless for a trace
MODEL_FLAGS = ("--ctx", "--batch", "--ubatch", "--flash-attn", "--program", "--outputs", "--kv-type", "--metadata-only",
               "--sweep",
               "--device", "--llama-build", "--n-gpu-layers", "--tensor-split", "--fit", "--fit-margin", "--trace",
               "--threads")


def _given(args: argparse.Namespace, flag: str) -> bool:
    value = getattr(args, flag[2:].replace("-", "_"), None)
    return value is not None and value is not False


def model_defaults(args: argparse.Namespace) -> None:
    """The defaults of the model flags (None in the parser, so a trace can refuse them)."""
    for name, default in (("ctx", 4096), ("ubatch", 512), ("flash_attn", "auto"), ("program", "server"),
                          ("device", "cpu"), ("threads", 0), ("kv_type", "f16"),
                          ("llama_build", "captured")):
        if getattr(args, name, None) is None:
            setattr(args, name, default)


def _starts_like_a_trace(path: str) -> bool:
    """Whether the file begins with a trace's magic (what is after it, ``load`` checks)."""
    from vizalloc.trace.fileformat import MAGIC

    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return True  # let load_trace say what is wrong with reading it


def _output_kind(output: str | None) -> str:
    if output is None:
        return ""
    if output == "-":
        return "json"
    suffix = Path(output).suffix.lower()
    if suffix not in (".svg", ".json"):
        raise UsageError(f"-o {output}: the name must end in .svg (a picture) or .json")
    return suffix[1:]


def explain_trace(args: argparse.Namespace, out_kind: str) -> int:
    from vizalloc.analysis.explain import explain
    from vizalloc.analysis.model import build_model
    from vizalloc.analysis.static import incomplete_notice
    from vizalloc.cli.inputs import load_trace

    trace = load_trace(args.input, "explain")
    model = build_model(trace)
    expl = explain(model, hints=captured_hints(model))
    source = {"kind": "trace", "path": args.input}
    incomplete = incomplete_notice(model)
    emit(args, out_kind, expl, source=source, title=os.path.basename(args.input),
         notes=[incomplete] if incomplete else (), extra={"incomplete": incomplete} if incomplete else None)
    return 0


def captured_hints(model: Any) -> dict[str, int]:
    """Settings to name dimensions by (``n_ctx``, ``n_ubatch``), read from the command line
    of a captured ``python -m vizalloc.capture.llama`` process (none for other traces)."""
    for cap in model.captured:
        words = cap.program.split()
        if "vizalloc.capture.llama" not in words:
            continue
        hints: dict[str, int] = {}
        for flag, key in (("--ctx", "n_ctx"), ("--ubatch", "n_ubatch")):
            if flag in words[:-1]:
                try:
                    hints[key] = int(words[words.index(flag) + 1])
                except ValueError:
                    pass
        return hints
    return {}


def emit(args: argparse.Namespace, out_kind: str, expl: Any, *, source: dict[str, Any], title: str,
         notes: Sequence[str] = (), extra: dict[str, Any] | None = None, rows_extra: Any = None) -> None:
    """Print the explanation (tables, or JSON with --json) and write -o's file."""
    from vizalloc.export.explain import explain_svg, explanation_dict

    doc = explanation_dict(expl, source=source, extra=extra)
    if args.json or args.output == "-":
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        print_tables(expl, top=args.top, notes=notes, rows_extra=rows_extra)
    if args.output and args.output != "-":
        text = explain_svg(expl, title=title, notes=notes) if out_kind == "svg" else json.dumps(doc, indent=1) + "\n"
        write_output(args.output, text, args.force)


def write_output(path: str, text: str, force: bool) -> None:
    from vizalloc.files import create_new

    with create_new(path, overwrite=force, text=True, flag="-f", other="use -o to choose another name") as f:
        f.write(text)
    print(f"wrote {path}", file=sys.stderr)


def _inert(text: str, limit: int | None = 120) -> str:
    from rich.markup import escape

    from vizalloc.text import inert

    return escape(inert(text, limit))


def print_tables(expl: Any, *, top: int, notes: Sequence[str] = (), rows_extra: Any = None) -> None:
    """A header, a table of groups and the sentence per buffer (rich, on stdout); the
    formula column is shown when the terminal is wide enough (it is in the sentence,
    the JSON and the picture anyway)."""
    from rich.table import Table

    from vizalloc.cli.console import stdout_console
    from vizalloc.export.explain import size_text

    console = stdout_console()
    for note in notes:
        console.print(_inert(note, None), style="bold red" if note.startswith("INCOMPLETE") else "dim")
    if not expl.buffers:
        console.print("no graph allocator planned anything in this trace: there is no compute buffer to explain")
        return
    wide = console.width >= 130
    for b in expl.buffers:
        console.print()
        plans = f"plan #{b.plan_id} of allocator {b.galloc_id}"
        if len(b.same_plans) > 1:
            plans += f"; plans {', '.join(map(str, b.same_plans))} need as much"
        console.print(f"[bold]{_inert(b.title)}[/bold]: {b.size:,} B = {size_text(b.size)}  [dim]({plans})[/dim]")
        figures = Table.grid(padding=(0, 2))
        figures.add_column(style="dim")
        figures.add_column(justify="right")
        figures.add_column(justify="right")
        figures.add_column(style="dim")

        def pct(n: int) -> str:
            return f"{n / b.size * 100:.1f}%" if b.size else ""

        figures.add_row("  lower bound", f"{b.lower_bound:,} B", pct(b.lower_bound), "the most bytes live at once")
        figures.add_row("  greedy by size", f"{b.greedy:,} B", pct(b.greedy), "packing the same lifetimes")
        figures.add_row("  above the bound", f"{b.size - b.lower_bound:,} B", pct(b.size - b.lower_bound),
                        "fragmentation of ggml's plan")
        if b.allocated is not None and b.allocated != b.size:
            figures.add_row("  allocated", f"{b.allocated:,} B", pct(b.allocated), "in the trace: not the plan's size")
        if rows_extra is not None:
            for row in rows_extra(b):
                figures.add_row(*row)
        console.print(figures)
        table = Table(title=f"live at the peak, while {_inert(b.peak_tensor)} ({_inert(b.peak_op)}) is allocated: "
                            f"{b.n_live} blocks", title_justify="left", show_edge=False, pad_edge=False)
        table.add_column("group", overflow="fold")
        table.add_column("op")
        table.add_column("shape", overflow="fold")
        table.add_column("bytes", justify="right")
        table.add_column("share", justify="right")
        if wide:
            table.add_column("one of them is", overflow="fold")
        shown = b.groups[:top] if len(b.groups) <= top else b.groups[:top - 1]
        for g in shown:
            shape = "×".join(map(str, g.shape)) + f" {g.dtype}" + ("" if g.same_shape else " (largest)")
            row = [_inert(g.label), g.op, shape, f"{g.nbytes:,}", f"{g.share * 100:.1f}%"]
            if wide:
                row.append(_inert(g.formula + (f"; then {', '.join(g.then_in_place)} in place"
                                               if g.then_in_place else "")))
            table.add_row(*row)
        rest = b.groups[len(shown):]
        if rest:
            nbytes = sum(g.nbytes for g in rest)
            row = [f"{len(rest)} more groups", "", "", f"{nbytes:,}", f"{nbytes / max(b.lower_bound, 1) * 100:.1f}%"]
            table.add_row(*(row + [""] if wide else row))
        console.print(table)
        console.print(_inert(b.sentence, None))


def parse_sweep(words: Sequence[str]) -> list[dict[str, Any]]:
    """``["ctx=2048,8192", "fa=on,off"]`` -> every combination, as dicts of llama settings."""
    axes: list[tuple[str, list[Any]]] = []
    for word in words:
        key, sep, values = word.partition("=")
        key = key.strip().lower()
        if not sep or key not in SWEEP_KEYS:
            raise UsageError(f"--sweep {word!r}: give KEY=V,V,... with KEY one of {', '.join(SWEEP_KEYS)} "
                             "(e.g. ctx=2048,8192 fa=on,off)")
        if any(k == SWEEP_KEYS[key] for k, _ in axes):
            raise UsageError(f"--sweep names {key} twice")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not items:
            raise UsageError(f"--sweep {word!r}: no values after '='")
        parsed: list[Any] = []
        for v in items:
            if key == "fa":
                if v not in ("on", "off", "auto"):
                    raise UsageError(f"--sweep fa={v}: give on, off or auto")
                parsed.append(v)
            else:
                try:
                    n = int(v)
                except ValueError:
                    raise UsageError(f"--sweep {key}={v}: not a whole number") from None
                if n <= 0:
                    raise UsageError(f"--sweep {key}={v}: give a positive number of tokens")
                parsed.append(n)
        axes.append((SWEEP_KEYS[key], parsed))
    return [dict(zip((k for k, _ in axes), combo)) for combo in itertools.product(*(v for _, v in axes))]
