"""A program that keeps tensors whose buffer ggml freed and then changes one of them: the
graph is allocated, its allocator freed (the tensors keep their pointers, now stale), the
input renamed, and the same graph handed to a new allocator, which keeps the stale
pointers (they are not NULL). Nothing reads or writes the stale memory. Prints whether the
second allocation succeeded."""

import ctypes

import ggml

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python declares an int: a truncated pointer

params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 16 + ggml.ggml_graph_overhead(),
                               mem_buffer=None, no_alloc=True)
ctx = ggml.ggml_init(params)
a = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 64)
ggml.ggml_set_name(a, b"a")
ggml.ggml_set_input(a)
f = ggml.ggml_relu(ctx, a)
ggml.ggml_set_name(f, b"f")
ggml.ggml_set_output(f)
gf = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(gf, f)

first = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
assert ggml.ggml_gallocr_alloc_graph(first, gf)
ggml.ggml_gallocr_free(first)  # frees the compute buffer: a and f now point into freed memory
ggml.ggml_set_name(a, b"a_renamed")
second = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
print("second allocation", bool(ggml.ggml_gallocr_alloc_graph(second, gf)))
ggml.ggml_gallocr_free(second)
ggml.ggml_free(ctx)
