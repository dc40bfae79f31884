"""Runtime test fixtures: ``real_cupy``, for the ``gpu`` tests that need a real CUDA device."""

from __future__ import annotations

import sys
from typing import Any

import pytest


@pytest.fixture
def real_cupy() -> Any:
    """The real ``cupy`` module with at least one CUDA device; skips, saying why, without one
    (or when an emulated cupy from the fake-cupy tests is what this process imported)."""
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
