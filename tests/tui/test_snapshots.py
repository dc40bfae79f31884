"""How every screen looks, on the fixed trace, at two terminal sizes (SVG snapshots).

Update the baselines with ``pytest tests/tui/test_snapshots.py --snapshot-update`` only
after looking at the differences (``snapshot_report.html``).
"""

from __future__ import annotations

import pytest

from vizalloc.tui.app import VizallocApp

from tests.tui.conftest import ready
from tests.tui.fixture_trace import fixed_trace

SIZES = [pytest.param((120, 40), id="wide"), pytest.param((80, 24), id="small")]
SCREENS = [
    pytest.param((), id="timeline"),
    pytest.param(("2",), id="map"),
    pytest.param(("4", "down", "enter"), id="map-from-hazard"),
    pytest.param(("3",), id="tensors"),
    pytest.param(("4", "down"), id="hazards"),
    pytest.param(("5",), id="graph"),
    pytest.param(("3", "enter"), id="detail"),
    pytest.param(("question_mark",), id="help"),
]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("press", SCREENS)
def test_screen(snap_compare, press: tuple[str, ...], size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(VizallocApp(fixed_trace(), label="fixed.vztrace"), press=press, terminal_size=size,
                        run_before=ready)
