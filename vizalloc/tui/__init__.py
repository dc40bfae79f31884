"""The Textual TUI: browse a trace's steps, memory maps, tensors, hazards and graphs.

    from vizalloc.tui.app import VizallocApp
    VizallocApp("run.vztrace").run()      # what `vizalloc tui run.vztrace` does

Layout: ``app.py`` (the small App: modes, global keys, the loading worker), one module
per pane in ``screens/``, one per custom widget in ``widgets/`` (a virtual table and the
memory map, both drawing only visible lines; a one-line key bar), and the data and
drawing math as plain functions testable without an App: ``steps.py`` (the timeline's
pre-scan), ``data.py`` (the analysis bundle), ``tensors.py``, ``mapdata.py``,
``graphrows.py``, ``history.py``, ``render.py``, ``inert.py`` (every trace string passes
through it before reaching the screen).
"""
