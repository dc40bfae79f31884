"""``gc_paused``: the collector is off inside the block and as it was after; ``freeze``
hands what is alive to ``gc.freeze`` until the block ends, or for good with ``keep``."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from vizalloc.gcpause import gc_paused


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_off_inside_and_as_before_after(enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled


def test_restored_after_an_exception() -> None:
    gc.enable()
    with pytest.raises(KeyError), gc_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_freeze_resumes_collection_and_unfreezes_at_the_end() -> None:
    gc.enable()
    gc.unfreeze()
    keep = [object() for _ in range(10)]
    with gc_paused() as pause:
        pause.freeze()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        pause.freeze()  # a second call changes nothing
    assert gc.isenabled() and gc.get_freeze_count() == 0 and keep


def test_freeze_keep_leaves_the_objects_frozen() -> None:
    gc.enable()
    gc.unfreeze()
    with gc_paused() as pause:
        pause.freeze(keep=True)
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_freeze_does_nothing_when_the_collector_was_off() -> None:
    gc.disable()
    gc.unfreeze()
    with gc_paused() as pause:
        pause.freeze(keep=True)
        assert not gc.isenabled()
    assert not gc.isenabled() and gc.get_freeze_count() == 0
