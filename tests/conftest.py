"""Shared test fixtures. Tests mirror the packages: tests/runtime, tests/trace, ..."""

from __future__ import annotations

import pytest

from vizalloc.trace.recorder import StrictRecorder


@pytest.fixture
def recorded():
    """Record every event the runtime emits inside the test into ``recorded.events``."""
    with StrictRecorder() as rec:
        yield rec


def pytest_configure(config: pytest.Config) -> None:
    """``VIZALLOC_CORPUS_DIR=DIR pytest``: write every event list a model is built from during
    the run to ``DIR/<hash>.vztrace`` (once per distinct list), so the streaming analysis can
    be compared with the object path over every trace the suite builds
    (``python -m tests.analysis.corpus DIR``)."""
    import os

    target = os.environ.get("VIZALLOC_CORPUS_DIR")
    if not target:
        return
    import hashlib

    from vizalloc.analysis import build
    from vizalloc.trace.api import save
    from vizalloc.trace.value import Trace, TraceHeader

    os.makedirs(target, exist_ok=True)
    original = build.Builder.run
    seen: set[str] = set()

    def run(self: build.Builder, progress=None):  # type: ignore[no-untyped-def]
        events = self.m.events
        if events and all(type(e).__module__ == "vizalloc.trace.events" for e in events[:1]):
            key = hashlib.sha1(repr(events).encode("utf-8", "surrogatepass")).hexdigest()[:16]
            if key not in seen:
                seen.add(key)
                try:
                    save(Trace(TraceHeader.new(), tuple(events)), os.path.join(target, key + ".vztrace"))
                except Exception:  # noqa: BLE001 - a trace the file format refuses is not corpus material
                    pass
        return original(self, progress)

    build.Builder.run = run  # type: ignore[method-assign]
