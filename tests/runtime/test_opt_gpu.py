"""The optimizer context on a real CUDA device (``gpu`` mark; skipped without cupy and a
device): ggml's deep-copy strategy trains the MLP on the GPU as it does on the CPU."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.runtime.test_opt_training import Setup, train_vizalloc


def _real_cupy():  # type: ignore[no-untyped-def]
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
def test_training_on_the_gpu_matches_the_cpu() -> None:
    _real_cupy()
    from vizalloc.runtime.backends import CPUBackend, CudaBackend

    s = Setup()
    ref, _ = train_vizalloc(s, "dup")
    got, opt = train_vizalloc(s, "dup", backends=[CudaBackend(0), CPUBackend()])
    assert opt.sched.get_backend(0).name.startswith("CUDA")
    # cuBLAS sums in another order than numpy
    np.testing.assert_allclose(np.array(got.losses), np.array(ref.losses), rtol=1e-4, atol=1e-6)
    for mine, theirs in zip(got.weights, ref.weights):
        np.testing.assert_allclose(mine, theirs, rtol=1e-3, atol=1e-5)
