"""The user-facing tracing API, in one place: ``trace()``, ``mark()``, ``load()``, ``save()``.

    import vizalloc
    with vizalloc.trace("run.vztrace") as t:     # or vizalloc.trace() for memory only
        ...                                      # use vizalloc.runtime as usual
        vizalloc.mark("epoch 1")
    print(len(t.trace), "events")
    assert vizalloc.load("run.vztrace") == t.trace

Recording lives in ``session.py`` (``TraceSession``, ``trace``, ``mark``), reading and
writing files in ``storage.py`` (``load``, ``save``, ``read_batches``, ``read_header``,
``follow``); this module names them together.
"""

from __future__ import annotations

from vizalloc.trace.session import TraceSession, mark, trace
from vizalloc.trace.storage import TraceFollower, follow, load, read_batches, read_header, save
from vizalloc.trace.value import Trace, TraceHeader

__all__ = ["Trace", "TraceFollower", "TraceHeader", "TraceSession", "follow", "load", "mark", "read_batches",
           "read_header", "save", "trace"]
