"""``vizalloc check`` pauses and freezes the cyclic GC around its analysis (a speed-up for
big traces); a caller in the same process must get the collector back as it was."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from vizalloc.cli import main
from vizalloc.trace import api
from vizalloc.trace.value import Trace, TraceHeader

from tests.analysis.test_hazards import stale_scenario


@pytest.fixture()
def trace_path(tmp_path: Path) -> Path:
    tb, _ = stale_scenario("clear")
    path = tmp_path / "t.vztrace"
    api.save(Trace(TraceHeader.new(), tuple(tb.events)), path)
    return path


@pytest.mark.parametrize("enabled", [True, False])
def test_check_leaves_the_collector_as_it_was(trace_path: Path, enabled: bool, capsys) -> None:
    was = gc.isenabled()
    frozen_before = gc.get_freeze_count()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        assert main(["check", "--json", str(trace_path)]) == 0  # the "clear" fix leaves only a re-plan, not failing
        assert gc.isenabled() is enabled
        assert gc.get_freeze_count() == frozen_before
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()
    assert '"hazards"' in capsys.readouterr().out


def test_check_restores_the_collector_after_an_error(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.vztrace"
    bad.write_bytes(b"not a trace at all")
    was, frozen_before = gc.isenabled(), gc.get_freeze_count()
    assert main(["check", str(bad)]) == 2
    assert gc.isenabled() is was
    assert gc.get_freeze_count() == frozen_before
