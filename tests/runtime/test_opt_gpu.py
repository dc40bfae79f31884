"""The optimizer context on a real CUDA device (``gpu`` mark; skipped without cupy and a
device): ggml's deep-copy strategy trains the MLP on the GPU as it does on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.test_opt_training import Setup, train_vizalloc


@pytest.mark.gpu
@pytest.mark.usefixtures("real_cupy")
def test_training_on_the_gpu_matches_the_cpu() -> None:
    from vizalloc.runtime.backends import CPUBackend, CudaBackend

    s = Setup()
    ref, _ = train_vizalloc(s, "dup")
    got, opt = train_vizalloc(s, "dup", backends=[CudaBackend(0), CPUBackend()])
    assert opt.sched.get_backend(0).name.startswith("CUDA")
    # cuBLAS sums in another order than numpy
    np.testing.assert_allclose(np.array(got.losses), np.array(ref.losses), rtol=1e-4, atol=1e-6)
    for mine, theirs in zip(got.weights, ref.weights):
        np.testing.assert_allclose(mine, theirs, rtol=1e-3, atol=1e-5)
