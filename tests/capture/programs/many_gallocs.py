"""COUNT graph allocators (default 300) in one process, each measuring a graph with
ggml_gallocr_reserve_n_size (sizes without buffers, as llama.cpp's no_alloc does)."""

import ctypes
import sys

import ggml

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p
count = int(sys.argv[1]) if len(sys.argv) > 1 else 300
params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 16 + ggml.ggml_graph_overhead(),
                               mem_buffer=None, no_alloc=True)
ctx = ggml.ggml_init(params)
a = ggml.ggml_new_tensor_2d(ctx, ggml.GGML_TYPE_F32, 64, 16)
ggml.ggml_set_input(a)
f = ggml.ggml_relu(ctx, ggml.ggml_scale(ctx, a, 2.0))
ggml.ggml_set_output(f)
gf = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(gf, f)
gallocs = []
size = (ctypes.c_size_t * 1)()
for _ in range(count):
    galloc = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
    gallocs.append(galloc)
    ggml.ggml_gallocr_reserve_n_size(galloc, gf, None, None, size)
print("measured", count, "allocators, the last needs", size[0], "bytes", flush=True)
for galloc in gallocs:
    ggml.ggml_gallocr_free(galloc)
