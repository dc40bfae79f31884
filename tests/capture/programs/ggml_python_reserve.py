"""A real ggml program that plans one graph with ggml_gallocr_reserve_n, prints "reserved
N bytes", then does more work ("after the reserve"), so a test can end it right after the
reserve with VIZALLOC_CAPTURE_STOP_AFTER=ggml_gallocr_reserve_n."""

import ctypes
import sys

import ggml

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python declares an int: a truncated pointer

params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 64 + ggml.ggml_graph_overhead(),
                               mem_buffer=None, no_alloc=True)
ctx = ggml.ggml_init(params)
a = ggml.ggml_new_tensor_2d(ctx, ggml.GGML_TYPE_F32, 256, 64)
b = ggml.ggml_new_tensor_2d(ctx, ggml.GGML_TYPE_F32, 256, 32)
ggml.ggml_set_name(a, b"a")
ggml.ggml_set_name(b, b"b")
ggml.ggml_set_input(a)
ggml.ggml_set_input(b)
kq = ggml.ggml_mul_mat(ctx, a, b)
ggml.ggml_set_name(kq, b"kq-0")
f = ggml.ggml_soft_max(ctx, kq)
ggml.ggml_set_name(f, b"kq_soft_max-0")
ggml.ggml_set_output(f)
gf = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(gf, f)
galloc = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
assert ggml.ggml_gallocr_reserve_n(galloc, gf, None, None)
print("reserved", ggml.ggml_gallocr_get_buffer_size(galloc, 0), "bytes", flush=True)
assert ggml.ggml_gallocr_alloc_graph(galloc, gf)
print("after the reserve", flush=True)
ggml.ggml_gallocr_free(galloc)
ggml.ggml_free(ctx)
