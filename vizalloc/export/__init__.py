"""Exporters: a trace (through its analysis model) in, text out. Collect a model first,
render text second; nothing here opens a file (``vizalloc/cli/export.py`` does).

* :mod:`vizalloc.export.api` — one entry point for every format: ``export_text``,
  ``export_texts``, ``write_export``.
* :mod:`vizalloc.export.dot` — graph diagrams as DOT, SVG through Graphviz's ``dot``
  (collected by :mod:`.graph_model`, made readable by :mod:`.graph_fold`).
* :mod:`vizalloc.export.layout` — offset x step layout diagrams as SVG.
* :mod:`vizalloc.export.perfetto` — Chrome Trace Event Format JSON for ui.perfetto.dev.
* :mod:`vizalloc.export.report` — the JSON report (``docs/report-schema.md``).
* :mod:`vizalloc.export.minimalloc` — a recorded plan as MiniMalloc CSV.
* :mod:`vizalloc.export.escape` — how tensor names are kept inert in every format.

    import vizalloc
    from vizalloc.export.api import export_text
    svg = export_text(vizalloc.load("run.vztrace"), "layout")
"""
