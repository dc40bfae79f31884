"""ggml without its allocator, as ggml's test-pool and the gpt-2-ctx example use it: a context
that allocates its tensors' memory itself (no_alloc False), a graph computed with
ggml_graph_compute_with_ctx on the CPU. Prints the result and exits with the code given as
its first argument (default 0)."""

import ctypes
import sys

import ggml
import numpy as np

ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=16 * 1024 * 1024, mem_buffer=None, no_alloc=False))
a = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 16)
ggml.ggml_set_name(a, b"a")
x = np.arange(16, dtype=np.float32)
ctypes.memmove(ggml.ggml_get_data(a), x.ctypes.data, x.nbytes)
pooled = ggml.ggml_pool_1d(ctx, ggml.ggml_reshape_2d(ctx, a, 16, 1), ggml.GGML_OP_POOL_MAX, 2, 2, 0)
ggml.ggml_set_name(pooled, b"pooled")
out = ggml.ggml_scale(ctx, pooled, 10.0)
ggml.ggml_set_name(out, b"out")
gf = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(gf, out)
assert ggml.ggml_graph_compute_with_ctx(ctx, gf, 1) == 0
y = np.ctypeslib.as_array(ctypes.cast(ggml.ggml_get_data(out), ctypes.POINTER(ctypes.c_float)), shape=(8,))
print("out", y[:3].tolist())
ggml.ggml_free(ctx)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
