"""A transformer layer split between the simulated device and the CPU; weight transforms."""

from __future__ import annotations

import numpy as np

from vizalloc.scenarios import transformer_block as tb
from vizalloc.scenarios import weight_transform as wt
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder


def test_layer_split_between_sim_and_cpu():
    rec = StrictRecorder()
    r = tb.run(around_run=lambda: rec)
    assert r.n_splits > 2
    assert {s.backend for s in r.splits} == {"SIM", "CPU"}
    # consecutive splits alternate backends (a split ends where the backend changes)
    assert all(a.backend != b.backend for a, b in zip(r.splits, r.splits[1:]))
    # norms and soft_max are not SIM ops: they run on the CPU
    cpu_nodes = {n for s in r.splits if s.backend == "CPU" for n in s.nodes}
    assert {"L0.attn_rms", "L0.kq_sm", "L0.ffn_rms", "L0.gate_silu"} <= cpu_nodes
    assert r.copies and all(c.name == f"{c.backend}#{c.source}#0" for c in r.copies)
    assert "SIM#x#0" in {c.name for c in r.copies}
    assert r.buffer_nbytes["SIM"] > 0 and r.buffer_nbytes["CPU"] > 0
    assert r.max_abs_diff_cpu <= 1e-6 and r.max_abs_diff_numpy <= 1e-4
    # the trace shows every split, copy and cross-backend byte copy
    assert sum(isinstance(e, ev.SchedSplit) for e in rec.events) == r.n_splits
    assert sum(isinstance(e, ev.SchedCopy) for e in rec.events) == len(r.copies)
    assert sum(isinstance(e, ev.TensorCopy) for e in rec.events) == len(r.copies)
    assert {e.backend for e in rec.events if isinstance(e, ev.ComputeBegin)} == {"SIM", "CPU"}


def test_layer_all_on_sim():
    r = tb.run(sim_ops=["MUL_MAT", "ADD", "MUL", "CONT", "SOFT_MAX", "RMS_NORM", "UNARY"])
    # every compute op can run on SIM: one split; only the two graph inputs (on the CPU) are copied in
    assert [s.backend for s in r.splits] == ["SIM"]
    assert [c.name for c in r.copies] == ["SIM#x#0", "SIM#kq_mask#0"]
    assert r.max_abs_diff_cpu <= 1e-6


def test_layer_with_pipeline_copies():
    r = tb.run(parallel=True)
    assert r.max_abs_diff_cpu <= 1e-6
    single = tb.run(parallel=False)
    # four copies of every split input cost more memory than one
    assert r.buffer_nbytes["SIM"] > single.buffer_nbytes["SIM"]


def test_weight_transform_memory():
    a = wt.run_graph_transform()
    b = wt.run_converting_buffer()
    total_f32 = sum(4 * n0 * n1 for _, n0, n1 in wt.DEFAULT_SHAPES)
    assert a.before_nbytes == total_f32
    assert a.peak_nbytes == total_f32 + total_f32 // 2   # originals + F16 results
    assert a.after_nbytes == total_f32 // 2
    assert b.before_nbytes == b.peak_nbytes == b.after_nbytes == total_f32 // 2
    assert a.max_abs_diff == 0 and b.max_abs_diff == 0
    assert all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)
    assert all(v.dtype == np.float16 for v in b.weights.values())
