"""Graph diagrams: a :class:`GraphModel` as Graphviz DOT text, and SVG through ``dot``.

Each tensor is one box: name, op, type and shape, buffer and byte range. Fill colour
says which buffer holds it, border colour which backend; views are dashed arrows,
in-place reuse bold blue arrows with a diamond, scheduler copies bold purple arrows,
hazard pairs red double arrows labelled with the hazard; stale tensors get a thick
red border and a line saying why. Scheduler splits are clusters. A legend node lists
the buffers and line styles. Every name is escaped (:mod:`vizalloc.export.escape`).

    import io
    from vizalloc.export.dot import dot_text, svg_text
    text = dot_text(model)          # str, no I/O
    svg = svg_text(text)            # runs the `dot` program (GraphvizError if absent)

Only ``vizalloc/cli`` writes these to files.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from vizalloc.analysis.model import TraceModel
from vizalloc.errors import VizallocError
from vizalloc.export.escape import LABEL_CHARS, LINE_CHARS, dot_html, dot_quoted, dot_quoted_lines
from vizalloc.export.findings import Highlight
from vizalloc.export.graph_fold import DEFAULT_FOLD, fold_groups, limit_nodes
from vizalloc.export.graph_model import (
    FLAG_INPUT, FLAG_LOSS, FLAG_OUTPUT, FLAG_PARAM, EdgeKind, GNode, GraphModel, Highlight, NodeRole,
    build_graph_model,
)
from vizalloc.export.units import buffer_title, fmt_bytes, fmt_range, fmt_shape
from vizalloc.text import inert

#: Fill colours for buffers, in legend order (ColorBrewer Set3, light enough for black text).
BUFFER_COLOURS = ("#8dd3c7", "#ffffb3", "#bebada", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
                  "#d9d9d9", "#ccebc5", "#ffed6f", "#a6cee3", "#b2df8a")
#: Border colours for backends (CPU first by convention).
BACKEND_COLOURS = ("#333333", "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e")
STALE_COLOUR = "#d00000"
DEFAULT_MAX_NODES = 300

_EDGE_ATTRS = {
    EdgeKind.DATA: 'color="#444444"',
    EdgeKind.VIEW: 'style=dashed, color="#555555", arrowhead=empty',
    EdgeKind.INPLACE: 'style=bold, color="#1f5fbf", penwidth=2.5, arrowhead=diamond',
    EdgeKind.COPY: 'style=bold, color="#8e44ad", penwidth=2, arrowhead=vee',
    EdgeKind.HAZARD: f'style=dashed, color="{STALE_COLOUR}", fontcolor="{STALE_COLOUR}", penwidth=2.5, '
                     'dir=both, constraint=false',
    EdgeKind.SUMMARY: 'style=dotted, color="#888888"',
}


class GraphvizError(VizallocError):
    """The ``dot`` program is missing, failed, or took too long."""


def _flags_text(flags: int) -> str:
    names = [n for bit, n in ((FLAG_INPUT, "input"), (FLAG_OUTPUT, "output"), (FLAG_PARAM, "param"),
                              (FLAG_LOSS, "loss")) if flags & bit]
    return f" ({', '.join(names)})" if names else ""


def _palette(model: GraphModel) -> tuple[dict[int, str], dict[str, str]]:
    fills = {b.buffer_id: BUFFER_COLOURS[i % len(BUFFER_COLOURS)] for i, b in enumerate(model.buffers)}
    backends = sorted({b.backend for b in model.buffers} | {c.backend for c in model.clusters},
                      key=lambda name: (not name.upper().startswith("CPU"), name))
    borders = {name: BACKEND_COLOURS[i % len(BACKEND_COLOURS)] for i, name in enumerate(backends)}
    return fills, borders


def _label(n: GNode) -> str:
    # the space between two runs of text ends the bold run: Graphviz puts each run in an SVG
    # <text> of its own, and SVG drops a run's leading space ("x(input)", "STALEdangling")
    flags = _flags_text(n.flags)
    lines = [f"<B>{dot_html(n.name, LABEL_CHARS)}{' ' if flags else ''}</B>{dot_html(flags.lstrip())}"]
    if n.role in (NodeRole.FOLD, NodeRole.SUMMARY):
        lines.append(f"{n.members} tensors, {fmt_bytes(n.nbytes)}")
        lines.extend(dot_html(d, 60) for d in n.details if d)
    else:
        lines.append(dot_html(f"{n.op}  {n.dtype} {fmt_shape(n.shape)}"))
        if n.buffer_id >= 0:
            lines.append(dot_html(f"buf #{n.buffer_id} {inert(n.backend, NAME_IN_LINE)} "
                                  f"{fmt_range(n.offset, n.offset + n.nbytes)} {fmt_bytes(n.nbytes)}", LINE_CHARS))
        else:
            lines.append("<I>no memory</I>")
        if n.role is NodeRole.COPY:
            lines.append("<I>scheduler copy</I>")
    if n.stale:
        lines.append(f'<FONT COLOR="{STALE_COLOUR}"><B>STALE </B>{dot_html(n.stale, 70)}</FONT>')
    for h in n.hazards[:2]:
        lines.append(f'<FONT COLOR="{STALE_COLOUR}">{dot_html(h, 70)}</FONT>')
    if len(n.hazards) > 2:
        lines.append(f'<FONT COLOR="{STALE_COLOUR}">+{len(n.hazards) - 2} more findings</FONT>')
    return "<" + "<BR/>".join(lines) + ">"


def _tooltip(n: GNode) -> str:
    if n.tensor_id < 0:
        lines = [n.name, f"{n.members} tensors, {fmt_bytes(n.nbytes)}", *n.details]
    else:
        lines = [f"{n.name} (tensor #{n.tensor_id}){_flags_text(n.flags)}",
                 f"{n.op} {n.dtype} {fmt_shape(n.shape)}"]
        if n.buffer_id >= 0:
            lines.append(f"buffer #{n.buffer_id} ({n.backend}) bytes {fmt_range(n.offset, n.offset + n.nbytes)}")
            lines.append(f"placed by {n.placed_by}"
                         + (f" in binding #{n.placed_binding}" if n.placed_binding >= 0 else ""))
        else:
            lines.append("no memory")
        if n.split >= 0:
            lines.append(f"scheduler split {n.split}")
    if n.stale:
        lines.append(f"STALE: {n.stale}")
    lines.extend(n.hazards)
    return dot_quoted_lines(lines)


def _node_attrs(n: GNode, fills: dict[int, str], borders: dict[str, str]) -> str:
    shape = {NodeRole.LEAF: "box", NodeRole.FOLD: "box3d", NodeRole.SUMMARY: "note"}.get(n.role, "box")
    style = ["filled"]
    if n.role in (NodeRole.NODE, NodeRole.COPY, NodeRole.EXTRA):
        style.append("rounded")
    if n.role is NodeRole.COPY or (n.buffer_id < 0 and n.role not in (NodeRole.FOLD, NodeRole.SUMMARY)):
        style.append("dashed")
    fill = fills.get(n.buffer_id, "#ffffff" if n.role is not NodeRole.SUMMARY else "#eeeeee")
    colour = borders.get(n.backend, "#333333")
    width = "1"
    if n.stale or n.hazards:
        colour, width = STALE_COLOUR, "3"
    return (f"{n.key} [label={_label(n)}, tooltip={_tooltip(n)}, shape={shape}, "
            f'style="{",".join(style)}", fillcolor="{fill}", color="{colour}", penwidth={width}];')


#: Longest backend or buffer-type name inside a line of a label.
NAME_IN_LINE = 24


def _buffer_line(b: Any) -> str:
    """The buffer's title with its names cut (a name can be kilobytes long)."""
    return buffer_title(b.buffer_id, inert(b.backend, NAME_IN_LINE), inert(b.buft, NAME_IN_LINE),
                        inert(b.usage, NAME_IN_LINE), b.nbytes)


def _legend(model: GraphModel, fills: dict[int, str], borders: dict[str, str]) -> str:
    rows = ['<TR><TD COLSPAN="2"><B>legend</B></TD></TR>']
    for b in model.buffers:
        freed = " (freed)" if b.freed else ""
        rows.append(f'<TR><TD BGCOLOR="{fills[b.buffer_id]}" WIDTH="18"> </TD><TD ALIGN="LEFT">'
                    f"{dot_html(_buffer_line(b) + freed, LINE_CHARS)}"
                    "</TD></TR>")
    for name, colour in borders.items():
        rows.append(f'<TR><TD><FONT COLOR="{colour}"><B>[ ]</B></FONT></TD><TD ALIGN="LEFT">border: backend '
                    f"{dot_html(name, LABEL_CHARS)}</TD></TR>")
    for sample, text in (
        ('<FONT COLOR="#444444">----&gt;</FONT>', "reads (data edge)"),
        ('<FONT COLOR="#555555">- - -&gt;</FONT>', "view of (shares bytes)"),
        ('<FONT COLOR="#1f5fbf"><B>====&lt;&gt;</B></FONT>', "in-place reuse of parent's bytes"),
        ('<FONT COLOR="#8e44ad"><B>====&gt;</B></FONT>', "scheduler input copy"),
        (f'<FONT COLOR="{STALE_COLOUR}"><B>&lt;- - -&gt;</B></FONT>', "hazard pair (bytes collide)"),
        (f'<FONT COLOR="{STALE_COLOUR}"><B>[ ]</B></FONT>', "red border: stale tensor or finding"),
        ("<I>dashed box</I>", "no memory, or a scheduler copy"),
    ):
        rows.append(f'<TR><TD>{sample}</TD><TD ALIGN="LEFT">{text}</TD></TR>')
    table = '<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="2" COLOR="#999999">' + "".join(rows) + "</TABLE>"
    return f"legend [shape=plaintext, label=<{table}>];"


def iter_dot(model: GraphModel) -> Iterator[str]:
    """The DOT text of ``model``, one line at a time."""
    fills, borders = _palette(model)
    title = dot_html(model.title, 2 * LINE_CHARS)
    if model.notes:
        title += "<BR/>" + dot_html("; ".join(model.notes), 4 * LINE_CHARS)
    yield "digraph vizalloc {"
    yield (f'  graph [label=<{title}>, labelloc=t, fontname="Helvetica", fontsize=12, '
           "rankdir=TB, nodesep=0.25, ranksep=0.35];")
    yield '  node [fontname="Helvetica", fontsize=9, margin="0.08,0.04"];'
    yield '  edge [fontname="Helvetica", fontsize=8, arrowsize=0.7];'
    for c in model.clusters:
        yield f"  subgraph {c.key} {{"
        yield (f"    label={dot_quoted(c.label, LINE_CHARS)}; style=dashed; color={dot_quoted(borders.get(c.backend, '#333333'))};"
               " fontname=\"Helvetica\";")
        for m in c.members:
            yield f"    {m};"
        yield "  }"
    for n in model.nodes:
        yield "  " + _node_attrs(n, fills, borders)
    for e in model.edges:
        label = f"label={dot_quoted(e.label, 60)}, " if e.label else ""
        yield f"  {e.src} -> {e.dst} [{label}{_EDGE_ATTRS[e.kind]}];"
    yield "  " + _legend(model, fills, borders)
    yield "}"


def dot_text(model: GraphModel) -> str:
    """The whole DOT document as one string (ends with a newline)."""
    return "\n".join(iter_dot(model)) + "\n"


def write_dot(model: GraphModel, out: TextIO) -> None:
    """Write the DOT document to a text stream."""
    for line in iter_dot(model):
        out.write(line)
        out.write("\n")


def prepare(model: GraphModel, *, fold: str | None = None, max_nodes: int = DEFAULT_MAX_NODES) -> GraphModel:
    """Apply folding and the node cap the way the CLI does.

    Args:
        model: the collected graph.
        fold: a regular expression naming repeated layers; ``None`` folds ``blk.N``
            layers only when the graph has more than ``max_nodes`` boxes; ``""`` never folds.
        max_nodes: the most boxes drawn (0: no limit).
    """
    if fold:
        model = fold_groups(model, fold)
    elif fold is None and max_nodes > 0 and len(model.nodes) > max_nodes:
        model = fold_groups(model, DEFAULT_FOLD)
    return limit_nodes(model, max_nodes)


def graph_dot(model: TraceModel, *, graph_id: int | None = None, binding_id: int | None = None,
              highlights: Sequence[Highlight] = (), fold: str | None = None,
              max_nodes: int = DEFAULT_MAX_NODES) -> str:
    """Trace model in, DOT text out: collect, fold/limit, render."""
    gm = build_graph_model(model, graph_id=graph_id, binding_id=binding_id, highlights=highlights,
                           prefer_bindings=bindings_with(model, highlights))
    return dot_text(prepare(gm, fold=fold, max_nodes=max_nodes))


def bindings_with(model: TraceModel, highlights: Sequence[Highlight]) -> list[int]:
    """For each finding, the latest binding that placed one of its tensors (where the collision
    happens); in finding order, without repeats. The default diagram shows the first."""
    out: list[int] = []
    placements = model.placements

    def placed_by(t: int) -> list[int]:
        info = model.tensors.get(t)
        if info is None:
            return []
        return [b for b in (placements[i].binding_id for i in info.placements) if b >= 0]

    for h in highlights:
        if h.binding_id >= 0:
            found = [h.binding_id]
        else:
            found = placed_by(h.tensor_id) + placed_by(h.other_id)
        if found and max(found) not in out:
            out.append(max(found))
    return out


def find_dot() -> str | None:
    """The path of Graphviz's ``dot`` program, or None when it is not installed."""
    return shutil.which("dot")


INSTALL_HINT = "install Graphviz to render it: `apt-get install graphviz` (Debian/Ubuntu) or `brew install graphviz` (macOS)"


def svg_text(dot_source: str, *, dot_program: str | None = None, timeout_s: float = 300.0) -> str:
    """Render DOT text to SVG text with the real ``dot`` program.

    Raises:
        GraphvizError: ``dot`` is missing, exits with an error, or runs past ``timeout_s``.
    """
    program = dot_program or find_dot()
    if program is None:
        raise GraphvizError(f"the Graphviz `dot` program was not found; {INSTALL_HINT}")
    try:
        done = subprocess.run([program, "-Tsvg"], input=dot_source.encode("ascii", "xmlcharrefreplace"),
                              capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise GraphvizError(f"`dot` ran longer than {timeout_s:.0f} s; draw fewer nodes with --max-nodes "
                            "or fold layers with --fold") from exc
    except OSError as exc:
        raise GraphvizError(f"cannot run `{program}`: {exc}; {INSTALL_HINT}") from exc
    if done.returncode != 0:
        msg = done.stderr.decode("utf-8", "replace").strip()[:500]
        raise GraphvizError(f"`dot` failed (exit {done.returncode}): {msg}")
    return done.stdout.decode("utf-8")
