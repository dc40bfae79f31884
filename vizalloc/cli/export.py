"""vizalloc export TRACE: write a graph diagram, a layout, a Perfetto trace, a JSON report
or MiniMalloc CSV from a trace file.

    vizalloc export run.vztrace                              # run.svg (graph diagram, needs Graphviz)
    vizalloc export run.vztrace --format layout --binding 3  # run.layout.svg
    vizalloc export run.vztrace --format perfetto            # run.perfetto.json: open in ui.perfetto.dev
    vizalloc export run.vztrace --format json -o -           # the report on stdout
    vizalloc export run.vztrace --format dot --fold 'layer\\.\\d+' --max-nodes 150

The output goes next to the trace as ``<trace stem><ending>`` (``.dot``, ``.svg``,
``.layout.svg``, ``.perfetto.json``, ``.report.json``, ``.minimalloc.csv``) unless ``-o``
names it; an existing file is only replaced with ``-f``. Diagrams show the first
binding with a finding, else the most informative one (the most scheduler splits, then
the most bytes placed), unless ``--binding``/``--graph``/``--plan`` say otherwise; a layout
or MiniMalloc file of a trace whose largest compute buffer was sized by a worst-case
reserve (llama.cpp's ``sched_reserve``) shows that plan, at its offsets. The picture and
stderr say which was drawn and why. ``--offsets`` adds the recorded offsets to the
MiniMalloc CSV (a solution file). Without Graphviz's ``dot`` program, ``--format svg`` writes the ``.dot`` file
instead, says how to install Graphviz, and exits 0. MiniMalloc writes one file per
slot/chunk of the plan when there are several (``.s0c1.minimalloc.csv``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vizalloc.errors import UsageError

FORMATS = ("dot", "svg", "layout", "perfetto", "json", "minimalloc")


#: Reads files only: the console script may end the process without freeing objects one by one.
FAST_EXIT = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="a trace file (.vztrace)")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, default="svg",
                        help="what to write (default: svg, the graph diagram)")
    parser.add_argument("--binding", type=int, metavar="N", help="draw the graph as bound by binding N")
    parser.add_argument("--graph", type=int, metavar="N",
                        help="draw graph N (as of its latest binding; a graph never bound at its plan's offsets)")
    parser.add_argument("--plan", type=int, metavar="N",
                        help="draw the graph plan N was made for, at the plan's offsets (a worst-case reserve)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="the file to write ('-' for stdout); default: next to the trace, named after it")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")
    parser.add_argument("--max-nodes", type=int, default=300, metavar="N",
                        help="most boxes in a graph diagram; the rest is summarised (0: no limit; default 300)")
    parser.add_argument("--fold", metavar="REGEX",
                        help="fold tensors whose names match REGEX into one box per match (default: 'blk.N' "
                             "layers when the graph is over --max-nodes; 'none' never folds)")
    parser.add_argument("--offsets", action="store_true",
                        help="minimalloc: add the recorded offset as a fifth column (a solution file)")


def default_output(trace_path: str, suffix: str) -> Path:
    """``<dir of the trace>/<trace stem><suffix>`` (``run.vztrace`` -> ``run.svg``)."""
    p = Path(trace_path)
    return p.with_name(p.stem + suffix)


def _with_part(path: Path, part: str) -> Path:
    """``run.minimalloc.csv`` + ``s0c1`` -> ``run.s0c1.minimalloc.csv``."""
    name = path.name
    stem = name.split(".", 1)[0]
    rest = name[len(stem):]
    return path.with_name(f"{stem}.{part}{rest}")


def _check_free(path: Path, force: bool) -> None:
    from vizalloc.files import check_new

    check_new(path, overwrite=force, flag="-f", other="use -o to write somewhere else")


def _write(path: Path, text: str, force: bool) -> None:
    from vizalloc.files import create_new

    with create_new(path, overwrite=force, text=True, flag="-f", other="use -o to write somewhere else") as f:
        try:
            f.write(text)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def execute(args: argparse.Namespace) -> int:
    from vizalloc.cli.inputs import load_trace
    from vizalloc.export.api import Analysed, Format, Options, chosen, export_texts
    from vizalloc.export.dot import INSTALL_HINT, find_dot

    if args.max_nodes < 0:
        raise UsageError(f"--max-nodes must be 0 (no limit) or more, not {args.max_nodes}")
    fmt = Format(args.fmt)
    fold = "" if args.fold is not None and args.fold.lower() == "none" else args.fold
    to_stdout = args.output == "-"
    target = Path(args.output) if args.output and not to_stdout else default_output(args.trace, fmt.suffix)

    svg_fallback = fmt is Format.SVG and find_dot() is None
    if svg_fallback:
        fmt = Format.DOT
        if not args.output:
            target = default_output(args.trace, Format.DOT.suffix)
        elif not to_stdout:
            target = target.with_suffix(".dot")
    # refuse before doing the work when the (single) output is taken
    if not to_stdout and fmt is not Format.MINIMALLOC:
        _check_free(target, args.force)

    if fmt is Format.JSON:
        # the report needs the model and the hazards, not the events: analysed as a stream
        from vizalloc.cli.check import analyse_file
        from vizalloc.export.findings import highlights

        model, hazards, header = analyse_file(args.trace, command="export")
        analysed = Analysed(model, hazards, highlights(hazards), header)
    else:
        trace = load_trace(args.trace, "export")
        analysed = Analysed.of(trace)
        header = getattr(trace, "header", None)
    options = Options(graph_id=args.graph, binding_id=args.binding, plan_id=args.plan, max_nodes=args.max_nodes,
                      fold=fold, offsets=args.offsets, header=header)
    texts = export_texts(analysed, fmt, options)
    sel = chosen(analysed, fmt, options)
    if sel is not None:
        hint = "" if args.binding is not None or args.graph is not None or args.plan is not None else \
            "; draw another with --binding N, --graph N or --plan N (see `vizalloc summary`)"
        # the title already names the plan ("graph #1 binding #1, plan #1")
        verb = "wrote the plan of" if fmt is Format.MINIMALLOC else "drew"
        hint = hint.replace("draw another", "another") if fmt is Format.MINIMALLOC else hint
        print(f"vizalloc export: {verb} {sel.title}: {sel.reason}{hint}", file=sys.stderr)

    if to_stdout:
        sys.stdout.write("\n".join(texts.values()))
    else:
        paths = {part: (target if not part else _with_part(target, part)) for part in texts}
        for path in paths.values():
            _check_free(path, args.force)
        for part, text in texts.items():
            _write(paths[part], text, args.force)
            print(f"wrote {paths[part]}", file=sys.stderr)
    if svg_fallback:
        print(f"vizalloc export: warning: the Graphviz `dot` program was not found, so the diagram was written "
              f"as DOT source instead of SVG; {INSTALL_HINT}, then run `dot -Tsvg {target} -o "
              f"{target.with_suffix('.svg')}`", file=sys.stderr)
    return 0
