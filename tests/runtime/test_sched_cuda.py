"""The scheduler with the CUDA backend, cupy emulated by numpy (no GPU needed; proves the
plumbing). ``test_sched_gpu.py`` runs the same check on a real device."""

from __future__ import annotations

from tests.runtime.test_backends_fakecupy import fake  # noqa: F401  (module-scoped fixture: cupy emulated by numpy)
from vizalloc.scenarios import transformer_block as tb
from vizalloc.trace import events as ev
from vizalloc.trace.recorder import StrictRecorder


def _check(r: tb.BlockResult, device_name: str) -> None:
    # every op runs on the device; only the graph inputs (host memory) are copied over
    assert [s.backend for s in r.splits] == [device_name]
    assert [c.name for c in r.copies] == [f"{device_name}#x#0", f"{device_name}#kq_mask#0"]
    assert r.buffer_nbytes[device_name] > 0
    assert r.max_abs_diff_cpu <= 1e-5 and r.max_abs_diff_numpy <= 1e-4


def test_layer_on_emulated_cuda(fake):  # noqa: F811
    rec = StrictRecorder()
    r = tb.run(device="cuda", around_run=lambda: rec)
    _check(r, "CUDA0")
    assert {e.backend for e in rec.events if isinstance(e, ev.NodeCompute)} == {"CUDA0"}
    assert sum(isinstance(e, ev.TensorCopy) for e in rec.events) == 2
