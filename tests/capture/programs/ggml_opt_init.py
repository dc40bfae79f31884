"""ggml-opt's own set-up through ggml-python, as ggml's test-opt makes it: a static context
with the inputs and a trainable weight on the CPU backend (placed by
ggml_backend_alloc_ctx_tensors), ``outputs = scale(add(inputs, weights))`` in a no_alloc
compute context, then ggml_opt_init, which builds the forward, backward and optimizer graphs
over tensors it never hands to the allocator itself. One optimizer step follows
(ggml_opt_alloc + ggml_opt_eval), and the program prints the loss and exits with the code
given as its first argument (default 0). The second argument repeats it all that many times,
each round freeing everything before the next, as test-opt's subtests do (the next round's
contexts, buffers and copies then sit where the last one's were)."""

import ctypes
import sys

import ggml
import numpy as np

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python declares an int: a truncated pointer

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
for _ in range(ROUNDS):
    backend = ggml.ggml_backend_cpu_init()
    backends = (ggml.ggml_backend_t_ctypes * 1)(backend)
    sched = ggml.ggml_backend_sched_new(backends, None, 1, 2048, False, True)

    ctx_static = ggml.ggml_init(ggml.ggml_init_params(mem_size=8 * ggml.ggml_tensor_overhead(), mem_buffer=None,
                                                      no_alloc=True))
    ctx_compute = ggml.ggml_init(ggml.ggml_init_params(
        mem_size=2048 * ggml.ggml_tensor_overhead() + 3 * ggml.ggml_graph_overhead(), mem_buffer=None, no_alloc=True))
    inputs = ggml.ggml_new_tensor_1d(ctx_static, ggml.GGML_TYPE_F32, 1)
    ggml.ggml_set_name(inputs, b"inputs")
    weights = ggml.ggml_new_tensor_1d(ctx_static, ggml.GGML_TYPE_F32, 1)
    ggml.ggml_set_name(weights, b"weights")
    ggml.ggml_set_param(weights)
    outputs = ggml.ggml_scale(ctx_compute, ggml.ggml_add(ctx_compute, inputs, weights), 1.0)
    ggml.ggml_set_name(outputs, b"outputs")

    lib.ggml_backend_alloc_ctx_tensors.restype = ctypes.c_void_p
    buf = lib.ggml_backend_alloc_ctx_tensors(ctx_static, backend)
    w0 = np.array([3.0], dtype=np.float32)
    ggml.ggml_backend_tensor_set(weights, w0.ctypes.data, 0, w0.nbytes)

    params = ggml.ggml_opt_default_params(sched, ggml.GGML_OPT_LOSS_TYPE_SUM)
    params.ctx_compute = ctx_compute
    params.inputs = inputs
    params.outputs = outputs
    params.opt_period = 1
    opt_ctx = ggml.ggml_opt_init(params)

    ggml.ggml_opt_alloc(opt_ctx, True)
    x = np.array([1.0], dtype=np.float32)
    ggml.ggml_backend_tensor_set(inputs, x.ctypes.data, 0, x.nbytes)
    result = ggml.ggml_opt_result_init()
    ggml.ggml_opt_eval(opt_ctx, result)
    loss = ctypes.c_double()
    unc = ctypes.c_double()
    ggml.ggml_opt_result_loss(result, ctypes.byref(loss), ctypes.byref(unc))
    print("loss", loss.value)
    ggml.ggml_opt_result_free(result)
    ggml.ggml_opt_free(opt_ctx)
    lib.ggml_backend_buffer_free(ctypes.c_void_p(buf))
    ggml.ggml_free(ctx_static)
    ggml.ggml_free(ctx_compute)
    ggml.ggml_backend_sched_free(sched)
    ggml.ggml_backend_free(backend)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
