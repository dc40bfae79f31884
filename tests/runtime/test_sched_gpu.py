"""The scheduler with the CUDA backend on a real device (``gpu`` mark; skipped without
cupy and a CUDA device). Kept apart from the emulated-cupy tests so the fake never leaks in."""

from __future__ import annotations

import sys

import pytest

from vizalloc.scenarios import transformer_block as tb


def _real_cupy():
    cupy = pytest.importorskip("cupy", reason="needs cupy (pip install 'vizalloc[cuda]')")
    if not hasattr(cupy, "__file__") or type(sys.modules["cupy"]).__name__ != "module":
        pytest.skip("cupy is emulated in this process")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001
        n = 0
    if n < 1:
        pytest.skip("needs a CUDA device")
    return cupy


@pytest.mark.gpu
def test_layer_on_a_real_gpu():
    _real_cupy()
    r = tb.run(device="cuda")
    assert [s.backend for s in r.splits] == ["CUDA0"]
    assert [c.name for c in r.copies] == ["CUDA0#x#0", "CUDA0#kq_mask#0"]
    assert r.max_abs_diff_cpu <= 1e-5 and r.max_abs_diff_numpy <= 1e-4
    r = tb.run(device="cuda", parallel=True)
    assert r.max_abs_diff_cpu <= 1e-5
