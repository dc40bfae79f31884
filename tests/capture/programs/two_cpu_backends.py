"""Two CPU backends in one scheduler (as ggml's test-backend-ops pairs a backend with the
CPU): the graph allocator gets one buffer slot per backend, both of the CPU buffer type, and
only the first one's holds tensors. Prints the result and exits with the code given as its
first argument (default 0)."""

import ctypes
import sys

import ggml
import numpy as np

cpu1 = ggml.ggml_backend_cpu_init()
cpu2 = ggml.ggml_backend_cpu_init()
backends = (ggml.ggml_backend_t_ctypes * 2)(cpu1, cpu2)
sched = ggml.ggml_backend_sched_new(backends, None, 2, 256, False, True)

ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 64 + ggml.ggml_graph_overhead(),
                                           mem_buffer=None, no_alloc=True))
a = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 32)
ggml.ggml_set_name(a, b"a")
ggml.ggml_set_input(a)
out = ggml.ggml_scale(ctx, ggml.ggml_add(ctx, a, a), 0.5)
ggml.ggml_set_name(out, b"out")
ggml.ggml_set_output(out)
gf = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(gf, out)
assert ggml.ggml_backend_sched_alloc_graph(sched, gf)
x = np.arange(32, dtype=np.float32)
ggml.ggml_backend_tensor_set(a, x.ctypes.data, 0, x.nbytes)
assert ggml.ggml_backend_sched_graph_compute(sched, gf) == 0
y = np.empty(32, dtype=np.float32)
ggml.ggml_backend_tensor_get(out, y.ctypes.data, 0, y.nbytes)
print("out", y[:3].tolist())
ggml.ggml_backend_sched_free(sched)
ggml.ggml_free(ctx)
ggml.ggml_backend_free(cpu2)
ggml.ggml_backend_free(cpu1)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
