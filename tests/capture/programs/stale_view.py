"""A stale view, as ggml treats it: ``v`` is a view of ``r`` (a node placed by the graph
allocator). The program then renames ``v`` and clears ``r``'s pointers itself (data and buffer NULL, the
"clear" cure applied to the root only) and allocates a second graph in which another node
comes first: ggml places ``r`` anew, but leaves ``v`` alone, because it still names a buffer
(ggml_gallocr_init_tensor re-initialises only views without one), so ``v`` keeps pointing
at ``r``'s old bytes. Prints whether it moved and exits with the code given as its first
argument (default 0)."""

import ctypes
import sys

import ggml

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python declares an int: a truncated pointer

ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 64 + 2 * ggml.ggml_graph_overhead(),
                                           mem_buffer=None, no_alloc=True))
a = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 256)
ggml.ggml_set_name(a, b"a")
ggml.ggml_set_input(a)
r = ggml.ggml_add(ctx, a, a)
ggml.ggml_set_name(r, b"r")
v = ggml.ggml_view_1d(ctx, r, 64, 4 * 64)
ggml.ggml_set_name(v, b"v")
out = ggml.ggml_scale(ctx, v, 2.0)
ggml.ggml_set_name(out, b"out")
ggml.ggml_set_output(out)
g1 = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(g1, out)
galloc = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
assert ggml.ggml_gallocr_alloc_graph(galloc, g1)
v_before = v.contents.data

r.contents.data = None
r.contents.buffer = None
ggml.ggml_set_name(v, b"v (kept)")  # the capture sees v anew: it must still know that v names a buffer
big = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 1024)
ggml.ggml_set_name(big, b"big")
ggml.ggml_set_input(big)
first = ggml.ggml_scale(ctx, big, 3.0)
ggml.ggml_set_name(first, b"first")
ggml.ggml_set_output(first)
out2 = ggml.ggml_add(ctx, ggml.ggml_scale(ctx, v, 2.0), ggml.ggml_sum(ctx, r))
ggml.ggml_set_name(out2, b"out2")
ggml.ggml_set_output(out2)
g2 = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(g2, first)
ggml.ggml_build_forward_expand(g2, out2)
galloc2 = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
assert ggml.ggml_gallocr_alloc_graph(galloc2, g2)
print("r moved", r.contents.data != v_before - 4 * 64, "v kept", v.contents.data == v_before)
ggml.ggml_gallocr_free(galloc2)
ggml.ggml_gallocr_free(galloc)
ggml.ggml_free(ctx)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
