"""Datasets, the C++ random machinery behind their shuffles, and optimizer results.

Reference values come from real C++: ggml-python's ``ggml_opt_dataset_shuffle`` (live),
and numbers printed by a g++ 12 / libstdc++ program (``std::mt19937``, ``std::shuffle``,
``std::normal_distribution<float>``) quoted below.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from vizalloc.errors import ShapeError, UsageError
from vizalloc.runtime import Context, F32
from vizalloc.runtime.backends import CPU_BUFFER_TYPE
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_get
from vizalloc.runtime.opt import OptDataset, OptResult
from vizalloc.runtime.opt.rng import MT19937, NormalF32, shuffle, uniform_int


def test_mt19937_matches_the_standard() -> None:
    rng = MT19937()
    assert rng() == 3499211612  # first output for the default seed 5489
    for _ in range(9998):
        rng()
    assert rng() == 4123659995  # the C++ standard's check value (10000th output)


# printed by g++ 12: std::mt19937 g; for n: iota; std::shuffle; h = h*31 + v[i]*(i+1) (int64)
CPP_SHUFFLES = [
    (1, 0, 0), (2, 0, 2), (3, 2, 1925), (5, 0, 244471), (8, 1, 38353963624), (13, 5, 4169928770880653323),
    (100000, 49846, -4390311410366525558),
]


def test_shuffle_matches_libstdcxx() -> None:
    rng = MT19937()
    for n, first, digest in CPP_SHUFFLES:
        v = list(range(n))
        shuffle(v, rng)
        h = 0
        for i, x in enumerate(v):
            h = ctypes.c_int64(h * 31 + x * (i + 1)).value
        assert (v[0], h) == (first, digest), n
        assert sorted(v) == list(range(n))


def test_normal_distribution_matches_libstdcxx() -> None:
    # std::mt19937 gen(12345); std::normal_distribution<float> nd{0.0f, 0.1f} (test-opt's regression data):
    # the first ten values as printed (%.9g), and the double sum of all 201 float values
    first = [-0.0785830244, -0.0390740596, 0.0528865643, -0.0478647761, 0.117944516, 0.249012262, 0.0517850295,
             0.0108430348, -0.00433090841, 0.0528388433]
    gen, nd = MT19937(12345), NormalF32(0.0, 0.1)
    values = [nd(gen) for _ in range(201)]
    assert [np.float32(v) for v in values[:10]] == [np.float32(v) for v in first]
    assert math.isclose(sum(float(v) for v in values), 0.639242546458263, rel_tol=0, abs_tol=1e-12)


def test_uniform_int_stays_in_range_and_rejects_wide_ranges() -> None:
    rng = MT19937(7)
    draws = [uniform_int(rng, 3, 9) for _ in range(2000)]
    assert set(draws) == set(range(3, 10))
    with pytest.raises(ValueError):
        uniform_int(rng, 0, 2**33)


def test_shuffle_matches_ggml_opt_dataset_shuffle() -> None:
    """Same permutations as ggml-opt's own shuffle, with one RNG shared across datasets."""
    ggml = pytest.importorskip("ggml", reason="ggml-python 0.0.45 is the oracle")
    backend = ggml.ggml_backend_cpu_init()
    arr = (ggml.ggml_backend_t_ctypes * 1)(backend)
    sched = ggml.ggml_backend_sched_new(arr, None, 1, 2048, False, True)
    ip = ggml.ggml_init_params(mem_size=1 << 20, mem_buffer=None, no_alloc=True)
    cs, cc = ggml.ggml_init(ip), ggml.ggml_init(ip)
    inputs = ggml.ggml_new_tensor_1d(cs, ggml.GGML_TYPE_F32, 1)
    w = ggml.ggml_new_tensor_1d(cs, ggml.GGML_TYPE_F32, 1)
    ggml.ggml_set_param(w)
    out = ggml.ggml_scale(cc, ggml.ggml_add(cc, inputs, w), 1.0)
    buf = ggml.ggml_backend_alloc_ctx_tensors(cs, backend)
    op = ggml.ggml_opt_default_params(sched, ggml.GGML_OPT_LOSS_TYPE_SUM)
    op.ctx_compute, op.inputs, op.outputs = cc, inputs, out
    octx = ggml.ggml_opt_init(op)
    rng = MT19937()  # a fresh OptContext's generator
    try:
        for n, shard in [(6, 1), (7, 1), (12, 3), (100, 1), (1000, 1)]:
            ds = ggml.ggml_opt_dataset_init(ggml.GGML_TYPE_F32, ggml.GGML_TYPE_F32, 1, 0, n, shard)
            d = ggml.ggml_opt_dataset_data(ds)
            data = np.ctypeslib.as_array(ctypes.cast(d.contents.data, ctypes.POINTER(ctypes.c_float)), shape=(n,))
            data[:] = np.arange(n)
            mine = OptDataset(F32, F32, 1, 0, n, shard)
            mine.data_array()[:, 0] = np.arange(n)
            for idata in (-1, -1, (n // shard // 2) * shard):
                ggml.ggml_opt_dataset_shuffle(octx, ds, idata)
                mine.shuffle(rng, idata)
                ref = np.zeros(n, dtype=np.float32)
                ggml.ggml_opt_dataset_get_batch_host(ds, ref.ctypes.data_as(ctypes.c_void_p), n * 4, None, 0)
                got = np.zeros(n, dtype=np.float32)
                mine.get_batch_host(got, None, 0)
                assert got.tolist() == ref.tolist(), (n, shard, idata)
            ggml.ggml_opt_dataset_free(ds)
    finally:
        ggml.ggml_opt_free(octx)
        ggml.ggml_backend_buffer_free(buf)
        ggml.ggml_free(cs)
        ggml.ggml_free(cc)
        ggml.ggml_backend_sched_free(sched)
        ggml.ggml_backend_free(backend)


def _batch_tensors(*sizes: int) -> list:  # type: ignore[type-arg]
    ctx = Context(name="batches")
    ts = [ctx.new_tensor_1d(F32, n) for n in sizes]
    alloc_ctx_tensors(ctx, CPU_BUFFER_TYPE)
    return ts


def test_get_batch_copies_shards_in_permutation_order() -> None:
    ds = OptDataset(F32, F32, 2, 1, 6, 2)
    ds.data_array()[...] = np.arange(12, dtype=np.float32).reshape(6, 2)
    ds.labels_array()[...] = 100 + np.arange(6, dtype=np.float32).reshape(6, 1)
    assert (ds.nbs_data, ds.nbs_labels, ds.permutation) == (16, 8, [0, 1, 2])
    ds.permutation = [2, 0, 1]
    data, labels = _batch_tensors(8, 4)
    ds.get_batch(data, labels, 0)
    assert tensor_get(data).tolist() == [8, 9, 10, 11, 0, 1, 2, 3]
    assert tensor_get(labels).tolist() == [104, 105, 100, 101]
    host = np.zeros(4, dtype=np.float32)
    host_labels = np.zeros(2, dtype=np.float32)
    ds.get_batch_host(host, host_labels, 2)
    assert host.tolist() == [4, 5, 6, 7] and host_labels.tolist() == [102, 103]


def test_dataset_errors_say_what_is_wrong() -> None:
    with pytest.raises(UsageError, match="ndata_shard > 0"):
        OptDataset(F32, F32, 2, 1, 6, 0)
    ds = OptDataset(F32, F32, 2, 1, 6, 2)
    data3, labels, data8, labels4 = _batch_tensors(6, 2, 8, 4)
    with pytest.raises(ShapeError, match="multiple of the shard"):
        ds.get_batch(data3, labels, 0)
    with pytest.raises(UsageError, match="labels"):
        ds.get_batch(data8, None, 0)
    with pytest.raises(UsageError, match="past the dataset"):
        ds.get_batch(data8, labels4, 2)
    with pytest.raises(UsageError, match="multiple of the shard size"):
        ds.shuffle(MT19937(), 3)
    with pytest.raises(UsageError, match="exceeds"):
        ds.shuffle(MT19937(), 7)
    unsupervised = OptDataset(F32, F32, 1, 0, 4, 1)
    with pytest.raises(UsageError, match="no labels"):
        unsupervised.labels_array()


def test_result_loss_and_accuracy_follow_ggml() -> None:
    r = OptResult()
    assert r.loss()[0] == 0.0 and math.isnan(r.loss()[1])
    assert all(math.isnan(x) for x in r.accuracy())  # 0/0 and fewer than two datapoints
    # per-datapoint losses were scaled by 1/opt_period: they are scaled back, then averaged
    r.add_batch(ndata=4, loss=0.5, loss_per_datapoint=True, opt_period=2, pred=[0, 1, 1, 2], ncorrect=3)
    r.add_batch(ndata=4, loss=1.0, loss_per_datapoint=True, opt_period=2, pred=[2, 2, 0, 0], ncorrect=1)
    loss, unc = r.loss()
    assert loss == pytest.approx(1.5)
    assert unc == pytest.approx(math.sqrt(((1 + 4) / 2 - 1.5**2) / 1))
    acc, acc_unc = r.accuracy()
    assert acc == 0.5 and acc_unc == pytest.approx(math.sqrt(0.25 / 7))
    assert r.pred() == [0, 1, 1, 2, 2, 2, 0, 0]
    with pytest.raises(UsageError, match="varying batch sizes"):
        r.add_batch(ndata=3, loss=1.0, loss_per_datapoint=True, opt_period=2)
    with pytest.raises(UsageError, match="different loss types"):
        r.add_batch(ndata=4, loss=1.0, loss_per_datapoint=False, opt_period=2)
    # a batch without ncorrect makes the accuracy unknown for good
    r.add_batch(ndata=4, loss=1.0, loss_per_datapoint=True, opt_period=2)
    assert r.ncorrect == -1 and math.isnan(r.accuracy()[0])
    r.reset()
    assert (r.ndata, r.losses, r.preds, r.ncorrect) == (0, [], [], 0)


def test_result_uncertainty_of_equal_losses_is_nan_when_rounding_goes_negative() -> None:
    """ggml computes the variance as E[x^2] - E[x]^2; for two equal 0.3f losses rounding makes it
    negative and C's sqrt returns NaN (ggml prints "±nan"), where Python's would raise."""
    r = OptResult()
    for _ in range(2):
        r.add_batch(ndata=1, loss=0.3, loss_per_datapoint=False, opt_period=1)
    loss, unc = r.loss()
    assert loss == pytest.approx(0.6) and math.isnan(unc)
