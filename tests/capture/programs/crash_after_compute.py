"""A real ggml program (ggml-python) that computes one graph, reads its result, then dies the
way its first argument says: ``abort`` (SIGABRT), ``segv`` (a read through a NULL pointer:
SIGSEGV) or ``kill`` (SIGKILL, which no handler sees). The capture must keep what happened
before: the graph's plan, its placements, the compute."""

import ctypes
import os
import signal
import sys

import ggml
import numpy as np

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python declares an int: a truncated pointer

params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 16 + ggml.ggml_graph_overhead(),
                               mem_buffer=None, no_alloc=True)
ctx = ggml.ggml_init(params)
a = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 64)
ggml.ggml_set_name(a, b"a")
ggml.ggml_set_input(a)
out = ggml.ggml_scale(ctx, ggml.ggml_add(ctx, a, a), 3.0)
ggml.ggml_set_name(out, b"out")
ggml.ggml_set_output(out)
gf = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(gf, out)

galloc = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
assert ggml.ggml_gallocr_alloc_graph(galloc, gf)
backend = ggml.ggml_backend_cpu_init()
x = np.arange(64, dtype=np.float32)
ggml.ggml_backend_tensor_set(a, x.ctypes.data, 0, x.nbytes)
assert ggml.ggml_backend_graph_compute(backend, gf) == 0
y = np.empty(64, dtype=np.float32)
ggml.ggml_backend_tensor_get(out, y.ctypes.data, 0, y.nbytes)
print("out", y[:3].tolist(), flush=True)

how = sys.argv[1] if len(sys.argv) > 1 else "abort"
if how == "abort":
    os.abort()
elif how == "segv":
    ctypes.string_at(0)
elif how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(f"unknown way to die: {how}")
