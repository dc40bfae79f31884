"""ggml_cast in a real graph, as whisper.cpp builds its KQ mask: the cast's result is its own
second source (``result->src[1] = result`` in ggml.c). ``out = cast(cast(a, f16), f32) * 2``
is planned by ggml's graph allocator and computed on the CPU backend; the program prints the
first values and exits with the code given as its first argument (default 0)."""

import ctypes
import sys

import ggml
import numpy as np

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python declares an int: a truncated pointer

params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 64 + ggml.ggml_graph_overhead(),
                               mem_buffer=None, no_alloc=True)
ctx = ggml.ggml_init(params)
a = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 64)
ggml.ggml_set_name(a, b"KQ_mask")
ggml.ggml_set_input(a)
half = ggml.ggml_cast(ctx, a, ggml.GGML_TYPE_F16)
f = ggml.ggml_scale(ctx, ggml.ggml_cast(ctx, half, ggml.GGML_TYPE_F32), 2.0)
ggml.ggml_set_name(f, b"out")
ggml.ggml_set_output(f)
gf = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(gf, f)

galloc = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
assert ggml.ggml_gallocr_alloc_graph(galloc, gf)
backend = ggml.ggml_backend_cpu_init()
x = np.arange(64, dtype=np.float32)
ggml.ggml_backend_tensor_set(a, x.ctypes.data, 0, x.nbytes)
assert ggml.ggml_backend_graph_compute(backend, gf) == 0
out = np.empty(64, dtype=np.float32)
ggml.ggml_backend_tensor_get(f, out.ctypes.data, 0, out.nbytes)
print("out", out[:4].tolist())
ggml.ggml_gallocr_free(galloc)
ggml.ggml_backend_free(backend)
ggml.ggml_free(ctx)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
