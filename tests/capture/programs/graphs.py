"""Small real ggml work for the process tests' programs (imported from the program's own
folder): weights in a backend buffer, and a graph over them planned by a graph allocator
and computed on the CPU backend."""

import ctypes

import ggml
import numpy as np

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python declares an int: a truncated pointer
lib.ggml_backend_alloc_ctx_tensors.restype = ctypes.c_void_p
N = 64


def cpu_backend():
    """The CPU backend on one thread: OpenMP's thread pool does not survive a fork (a forked
    child that computes on a parent's pool hangs, with or without the capture)."""
    backend = ggml.ggml_backend_cpu_init()
    ggml.ggml_backend_cpu_set_n_threads(backend, 1)
    return backend


class Weights:
    """A context of one weight tensor ``w`` (all 1.0) in its own backend buffer."""

    def __init__(self, backend):
        params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 4, mem_buffer=None, no_alloc=True)
        self.ctx = ggml.ggml_init(params)
        self.w = ggml.ggml_new_tensor_1d(self.ctx, ggml.GGML_TYPE_F32, N)
        ggml.ggml_set_name(self.w, b"w")
        self.buffer = lib.ggml_backend_alloc_ctx_tensors(self.ctx, backend)
        assert self.buffer
        ones = np.ones(N, dtype=np.float32)
        ggml.ggml_backend_tensor_set(self.w, ones.ctypes.data, 0, ones.nbytes)


def custom_copy(meet):
    """A ggml custom op (ggml_map_custom1) that copies its source and calls ``meet()`` while
    it runs inside the graph compute (keep the result alive as long as graphs use it)."""

    @ggml.ggml_custom1_op_t
    def op(dst, a, ith, nth, userdata):
        ctypes.memmove(ggml.ggml_get_data(dst), ggml.ggml_get_data(a), ggml.ggml_nbytes(a))
        meet()

    return op


def compute(backend, weights=None, scale=2.0, galloc=None, custom=None):
    """relu(x + w) * scale for x = 0..N-1 (w = 0 without weights); the first 4 values.
    ``custom`` (from ``custom_copy``) runs between the add and the relu."""
    params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 16 + ggml.ggml_graph_overhead(),
                                   mem_buffer=None, no_alloc=True)
    ctx = ggml.ggml_init(params)
    x = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, N)
    ggml.ggml_set_name(x, b"x")
    ggml.ggml_set_input(x)
    y = ggml.ggml_add(ctx, x, weights.w) if weights is not None else ggml.ggml_scale(ctx, x, 1.0)
    if custom is not None:
        y = ggml.ggml_map_custom1(ctx, y, custom, 1, None)
    out = ggml.ggml_scale(ctx, ggml.ggml_relu(ctx, y), scale)
    ggml.ggml_set_name(out, b"out")
    ggml.ggml_set_output(out)
    gf = ggml.ggml_new_graph(ctx)
    ggml.ggml_build_forward_expand(gf, out)
    own = galloc is None
    if own:
        galloc = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
    assert ggml.ggml_gallocr_alloc_graph(galloc, gf)
    data = np.arange(N, dtype=np.float32)
    ggml.ggml_backend_tensor_set(x, data.ctypes.data, 0, data.nbytes)
    assert ggml.ggml_backend_graph_compute(backend, gf) == 0
    result = np.empty(N, dtype=np.float32)
    ggml.ggml_backend_tensor_get(out, result.ctypes.data, 0, result.nbytes)
    if own:
        ggml.ggml_gallocr_free(galloc)
    ggml.ggml_free(ctx)
    return result[:4].tolist()
