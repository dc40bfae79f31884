"""The timeline's node counts start over when a graph is cleared."""

from __future__ import annotations

from vizalloc.trace import events as ev
from vizalloc.tui.steps import Prescan


def test_cleared_graph_counts_from_zero() -> None:
    scan = Prescan()
    scan.feed([
        ev.GraphCreated(1, 0, None, 7, 2048, "new", -1),
        ev.GraphExpanded(2, 0, None, 7, (1, 2, 3), ()),
        ev.GraphCleared(3, 0, None, 7),
        ev.GraphExpanded(4, 0, None, 7, (4, 5), ()),
    ])
    assert scan.graph_nodes[7] == 2
