"""THREADS threads (default 8) compute graphs at once, each with its own graph allocator
and backend, ROUNDS times. In each thread's first compute a custom op waits until every
thread is inside its compute, so the computes overlap on any machine."""

import sys
import threading

import ggml
from graphs import compute, cpu_backend, custom_copy

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 8
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
inside = threading.Barrier(threads, timeout=60)
results = {}
local = threading.local()


def meet():
    if not getattr(local, "met", False):  # once per thread: all first computes open together
        local.met = True
        inside.wait()


op = custom_copy(meet)


def work(i):
    backend = cpu_backend()
    for _ in range(rounds):
        results[i] = compute(backend, scale=float(i + 1), custom=op)
    ggml.ggml_backend_free(backend)


pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
for t in pool:
    t.start()
for t in pool:
    t.join()
assert all(results[i] == [0.0, i + 1.0, 2 * (i + 1.0), 3 * (i + 1.0)] for i in range(threads)), results
print("threads", threads, "rounds", rounds, flush=True)
