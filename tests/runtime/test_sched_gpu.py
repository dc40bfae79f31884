"""The scheduler with the CUDA backend on a real device (``gpu`` mark; skipped without
cupy and a CUDA device). Kept apart from the emulated-cupy tests so the fake never leaks in."""

from __future__ import annotations

import pytest

from vizalloc.scenarios import transformer_block as tb


@pytest.mark.gpu
@pytest.mark.usefixtures("real_cupy")
def test_layer_on_a_real_gpu():
    r = tb.run(device="cuda")
    assert [s.backend for s in r.splits] == ["CUDA0"]
    assert [c.name for c in r.copies] == ["CUDA0#x#0", "CUDA0#kq_mask#0"]
    assert r.max_abs_diff_cpu <= 1e-5 and r.max_abs_diff_numpy <= 1e-4
    r = tb.run(device="cuda", parallel=True)
    assert r.max_abs_diff_cpu <= 1e-5
