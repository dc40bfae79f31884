"""One entry point for every export format: a trace in, text out (or into a stream).

    import io
    import vizalloc
    from vizalloc.export.api import export_text, write_export
    trace = vizalloc.load("run.vztrace")
    svg = export_text(trace, "svg")                       # runs `dot`
    write_export(trace, "perfetto", io.StringIO())
    csvs = export_texts(trace, "minimalloc")              # {"s0c0": "id,lower,upper,size\\n..."}

Formats: ``dot`` (Graphviz source), ``svg`` (the DOT rendered by ``dot``), ``layout``
(offset x step SVG), ``perfetto`` (Chrome trace JSON), ``json`` (the report),
``minimalloc`` (CSV, one text per slot/chunk of the selected plan). Nothing here opens
a file; ``vizalloc/cli/export.py`` does.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from vizalloc.analysis.hazards import find_hazards
from vizalloc.analysis.model import TraceModel, build_model
from vizalloc.export.dot import DEFAULT_MAX_NODES, bindings_with, graph_dot, svg_text
from vizalloc.export.findings import Highlight, highlights
from vizalloc.export.layout import layout_svg
from vizalloc.export.minimalloc import csv_text, plan_problems
from vizalloc.export.perfetto import perfetto_json
from vizalloc.export.report import report_json
from vizalloc.export.selection import select


class Format(str, enum.Enum):
    """The export formats, with the file name ending each one gets by default."""

    DOT = "dot"
    SVG = "svg"
    LAYOUT = "layout"
    PERFETTO = "perfetto"
    JSON = "json"
    MINIMALLOC = "minimalloc"

    @property
    def suffix(self) -> str:
        return _SUFFIXES[self]


_SUFFIXES = {
    Format.DOT: ".dot", Format.SVG: ".svg", Format.LAYOUT: ".layout.svg", Format.PERFETTO: ".perfetto.json",
    Format.JSON: ".report.json", Format.MINIMALLOC: ".minimalloc.csv",
}


@dataclass
class Options:
    """What to draw and how (the CLI's flags)."""

    graph_id: int | None = None
    binding_id: int | None = None
    plan_id: int | None = None   # layout and MiniMalloc: one plan, drawn at its offsets
    max_nodes: int = DEFAULT_MAX_NODES
    fold: str | None = None
    offsets: bool = False   # minimalloc: add the recorded offset column
    header: Any = None      # the trace header, for the JSON report
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Analysed:
    """A trace with its model and findings, computed once for several exports."""

    model: TraceModel
    hazards: list[Any]
    findings: list[Highlight]
    header: Any = None

    @classmethod
    def of(cls, trace: Any) -> Analysed:
        if isinstance(trace, Analysed):
            return trace
        model = trace if isinstance(trace, TraceModel) else build_model(trace)
        hazards = find_hazards(model)
        return cls(model, hazards, highlights(hazards), getattr(trace, "header", None))


def export_texts(trace: Any, fmt: Format | str, options: Options | None = None) -> dict[str, str]:
    """Every text of one export: ``{"": text}``, or one per slot/chunk (``"s0c1"``) for MiniMalloc.

    Args:
        trace: a ``Trace``, a list of events, a ``TraceModel`` or an :class:`Analysed`.
        fmt: one of :class:`Format`.
        options: graph/binding selection, node cap, folding.

    Raises:
        UsageError: the graph, binding or plan is not in the trace.
        GraphvizError: ``svg`` was asked and ``dot`` is missing or failed.
    """
    fmt = Format(fmt)
    opts = options or Options()
    a = Analysed.of(trace)
    if fmt in (Format.DOT, Format.SVG):
        text = graph_dot(a.model, graph_id=_graph_of(a, opts), binding_id=opts.binding_id, highlights=a.findings,
                         fold=opts.fold, max_nodes=opts.max_nodes)
        return {"": svg_text(text) if fmt is Format.SVG else text}
    if fmt is Format.LAYOUT:
        return {"": layout_svg(a.model, graph_id=opts.graph_id, binding_id=opts.binding_id, plan_id=opts.plan_id,
                               highlights=a.findings, prefer_bindings=_preferred(a, fmt))}
    if fmt is Format.PERFETTO:
        return {"": perfetto_json(a.model, a.findings)}
    if fmt is Format.JSON:
        return {"": report_json(a.model, a.hazards, header=opts.header or a.header)}
    sel = select(a.model, graph_id=opts.graph_id, binding_id=opts.binding_id, plan_id=opts.plan_id,
                 prefer=_preferred(a, fmt), worst_case=True)
    if sel.plan_id < 0:
        from vizalloc.errors import UsageError

        raise UsageError(f"{sel.title} was never planned by a graph allocator, so there is no plan to export; "
                         "pick a bound graph with --binding N or --graph N")
    problems = plan_problems(a.model, sel.plan_id)
    if len(problems) == 1:
        return {"": csv_text(problems[0], offsets=opts.offsets)}
    return {f"s{p.slot}c{p.chunk}": csv_text(p, offsets=opts.offsets) for p in problems}


def chosen(trace: Any, fmt: Format | str, options: Options | None = None) -> Any:
    """The :class:`~vizalloc.export.selection.Selection` a diagram or MiniMalloc export of
    ``trace`` draws (its ``reason`` says why), or None for the formats about the whole trace."""
    fmt = Format(fmt)
    if fmt in (Format.PERFETTO, Format.JSON):
        return None
    opts = options or Options()
    a = Analysed.of(trace)
    if fmt in (Format.DOT, Format.SVG):
        return select(a.model, graph_id=_graph_of(a, opts), binding_id=opts.binding_id, prefer=_preferred(a, fmt))
    return select(a.model, graph_id=opts.graph_id, binding_id=opts.binding_id, plan_id=opts.plan_id,
                  prefer=_preferred(a, fmt), worst_case=True)


def _graph_of(a: Analysed, opts: Options) -> int | None:
    """The graph a graph diagram draws: ``--plan N`` names the graph the plan was made for
    (a diagram shows a graph, not offsets)."""
    if opts.plan_id is None or opts.binding_id is not None or opts.graph_id is not None:
        return opts.graph_id
    plan = a.model.plans.get(opts.plan_id)
    if plan is None:
        from vizalloc.errors import UsageError

        known = ", ".join(str(k) for k in sorted(a.model.plans)) or "none"
        raise UsageError(f"plan #{opts.plan_id} is not in the trace (plans: {known}); see `vizalloc summary TRACE`")
    return plan.graph_id


def _preferred(a: Analysed, fmt: Format) -> list[int]:
    """The bindings a diagram of ``fmt`` draws first when none is asked for: those with a
    finding (``graph_dot`` takes every finding; the layout and MiniMalloc only findings
    about a tensor). Worked out only for the format that draws one."""
    findings = a.findings if fmt in (Format.DOT, Format.SVG) else [f for f in a.findings if f.tensor_id >= 0]
    return bindings_with(a.model, findings)


def export_text(trace: Any, fmt: Format | str, options: Options | None = None) -> str:
    """The export as one string (MiniMalloc problems joined by a blank line)."""
    return "\n".join(export_texts(trace, fmt, options).values())


def write_export(trace: Any, fmt: Format | str, out: TextIO, options: Options | None = None) -> None:
    """Write the export to a text stream."""
    out.write(export_text(trace, fmt, options))


__all__: Sequence[str] = ("Analysed", "Format", "Options", "chosen", "export_text", "export_texts", "write_export")
