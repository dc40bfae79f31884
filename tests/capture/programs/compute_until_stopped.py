"""A real ggml program (ggml-python) that plans one graph and computes it again and again
until a signal ends it, printing ``computed N`` after each of the first computes and
``ready`` once the first has been written out, so a test knows when to send the signal.
With ``handle`` as its first argument it catches SIGTERM, SIGINT and SIGHUP itself,
prints ``caught N`` and exits with code 7 (the program's own code must come back). It
gives up after 120 s (exit 3), so that a vizalloc that dies first leaves no orphan running."""

import ctypes
import signal
import sys
import time

import ggml
import numpy as np

if sys.argv[1:] == ["handle"]:
    def caught(number, frame):
        print("caught", number, flush=True)
        sys.exit(7)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, caught)

lib = ggml.lib
lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p  # ggml-python declares an int: a truncated pointer

params = ggml.ggml_init_params(mem_size=ggml.ggml_tensor_overhead() * 16 + ggml.ggml_graph_overhead(),
                               mem_buffer=None, no_alloc=True)
ctx = ggml.ggml_init(params)
a = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, 64)
ggml.ggml_set_name(a, b"a")
ggml.ggml_set_input(a)
out = ggml.ggml_scale(ctx, ggml.ggml_add(ctx, a, a), 3.0)
ggml.ggml_set_name(out, b"out")
ggml.ggml_set_output(out)
gf = ggml.ggml_new_graph(ctx)
ggml.ggml_build_forward_expand(gf, out)

galloc = ggml.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
assert ggml.ggml_gallocr_alloc_graph(galloc, gf)
backend = ggml.ggml_backend_cpu_init()
x = np.arange(64, dtype=np.float32)
ggml.ggml_backend_tensor_set(a, x.ctypes.data, 0, x.nbytes)
n = 0
give_up = time.monotonic() + 120
while time.monotonic() < give_up:
    assert ggml.ggml_backend_graph_compute(backend, gf) == 0
    n += 1
    if n <= 3:
        print("computed", n, flush=True)
    if n == 3:
        time.sleep(0.3)  # the capture writes out at the end of every compute, and every 100 ms
        print("ready", flush=True)
    time.sleep(0.01)
sys.exit(3)
