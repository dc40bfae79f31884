"""TUI test fixtures: the fixed trace, and a helper that waits for the analysis."""

from __future__ import annotations

import pytest

from tests.tui.fixture_trace import fixed_trace
from vizalloc.trace.value import Trace


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def trace() -> Trace:
    return fixed_trace()


async def ready(pilot) -> None:  # type: ignore[no-untyped-def]
    """Wait until the app's loading worker is done and its messages are handled."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()
    assert pilot.app.analysis is not None or pilot.app.load_error, "the trace was not analysed"
