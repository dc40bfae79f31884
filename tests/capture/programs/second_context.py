"""Two contexts one after another, as llama-bench makes them: each has a "KV cache" in a
buffer of its own (ggml_backend_alloc_ctx_tensors) and a graph that reads views of it,
planned by a graph allocator and computed; the first context, its buffer and its graph are
freed before the second is made, so the second's buffer, tensors and views reuse the first
one's addresses (the program prints whether they did). Exits with the code given as its first
argument (default 0); the second chooses the KV memory: "ptr" (default: the program's own
memory, wrapped by ggml_backend_cpu_buffer_from_ptr, the same both times) or "alloc"
(ggml_backend_alloc_ctx_tensors)."""

import ctypes
import sys

import ggml
import numpy as np

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python declares an int: a truncated pointer
lib.ggml_backend_alloc_ctx_tensors.restype = ctypes.c_void_p
lib.ggml_backend_buffer_get_base.restype = ctypes.c_void_p
lib.ggml_backend_buffer_get_base.argtypes = [ctypes.c_void_p]
lib.ggml_backend_buffer_free.argtypes = [ctypes.c_void_p]
lib.ggml_backend_cpu_buffer_from_ptr.restype = ctypes.c_void_p
lib.ggml_backend_cpu_buffer_from_ptr.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
lib.ggml_backend_tensor_alloc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]

N = 1 << 20  # 4 MiB: memory the C library maps, and maps at the same place again once freed
# the contexts' own memory (their tensor structs) is the program's, the same both times
meta_kv = np.zeros(4 * ggml.ggml_tensor_overhead(), dtype=np.uint8)
_raw = np.zeros(4 * N + 64, dtype=np.uint8)
kv_memory = _raw[-_raw.ctypes.data % 64:][:4 * N]  # aligned as ggml wants it
memory = sys.argv[2] if len(sys.argv) > 2 else "ptr"  # "alloc": ggml_backend_alloc_ctx_tensors
meta = np.zeros(64 * ggml.ggml_tensor_overhead() + ggml.ggml_graph_overhead(), dtype=np.uint8)
backend = ggml.ggml_backend_cpu_init()
seen = []
for run in range(2):
    ctx_kv = ggml.ggml_init(ggml.ggml_init_params(mem_size=meta_kv.nbytes, mem_buffer=meta_kv.ctypes.data,
                                                  no_alloc=True))
    k = ggml.ggml_new_tensor_1d(ctx_kv, ggml.GGML_TYPE_F32, N)
    ggml.ggml_set_name(k, b"cache_k_l0")
    if memory == "alloc":
        buf = lib.ggml_backend_alloc_ctx_tensors(ctx_kv, backend)
    else:  # the program's own memory, the same both times: a new buffer where the freed one was
        buf = lib.ggml_backend_cpu_buffer_from_ptr(kv_memory.ctypes.data, kv_memory.nbytes)
        assert lib.ggml_backend_tensor_alloc(ctypes.c_void_p(buf), k, ctypes.c_void_p(kv_memory.ctypes.data)) == 0
    x = np.full(N, run + 1, dtype=np.float32)
    ggml.ggml_backend_tensor_set(k, x.ctypes.data, 0, x.nbytes)

    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=meta.nbytes, mem_buffer=meta.ctypes.data, no_alloc=True))
    v = ggml.ggml_view_1d(ctx, k, N // 2, 4 * (N // 4))
    ggml.ggml_set_name(v, b"cache_k_l0 (view)")
    out = ggml.ggml_scale(ctx, v, 2.0)
    ggml.ggml_set_name(out, b"out")
    ggml.ggml_set_output(out)
    gf = ggml.ggml_new_graph(ctx)
    ggml.ggml_build_forward_expand(gf, out)
    galloc = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
    assert ggml.ggml_gallocr_alloc_graph(galloc, gf)
    assert ggml.ggml_backend_graph_compute(backend, gf) == 0
    y = np.empty(N // 2, dtype=np.float32)
    ggml.ggml_backend_tensor_get(out, y.ctypes.data, 0, y.nbytes)
    print("run", run, "out", y[:2].tolist())
    seen.append((buf, lib.ggml_backend_buffer_get_base(buf), ctypes.addressof(k.contents),
                 ctypes.addressof(v.contents)))
    ggml.ggml_gallocr_free(galloc)
    ggml.ggml_free(ctx)
    lib.ggml_backend_buffer_free(buf)
    ggml.ggml_free(ctx_kv)
print("same buffer handle", seen[0][0] == seen[1][0], "same base", seen[0][1] == seen[1][1],
      "same tensor", seen[0][2] == seen[1][2], "same view", seen[0][3] == seen[1][3])
ggml.ggml_backend_free(backend)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
