"""Shared test fixtures. Tests mirror the packages: tests/runtime, tests/trace, ..."""

from __future__ import annotations

import pytest

from vizalloc.trace.recorder import StrictRecorder


@pytest.fixture
def recorded():
    """Record every event the runtime emits inside the test into ``recorded.events``."""
    with StrictRecorder() as rec:
        yield rec
