"""Forks around ggml use: ``after`` (the parent allocates a weight buffer and a graph
allocator, forks; child and parent both compute over them), ``shared`` (one graph allocator made before the
fork, used by both), ``before`` (fork before any
ggml call; both use ggml), ``nested`` (parent, child and grandchild each compute, the
child forking after its own compute). Each process prints what it computed; the parent
exits with the number of children that failed."""

import os
import sys

import ggml
from graphs import Weights, compute, cpu_backend


def wait(pid):
    _, status = os.waitpid(pid, 0)
    return 0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1


def child(work):
    try:
        work()
    except BaseException as exc:  # the child must never return into the parent's code
        print("child failed:", exc, flush=True)
        os._exit(1)
    os._exit(0)  # as a forked worker ends: no destructors (the capture keeps what it wrote)


mode = sys.argv[1]
failed = 0
if mode == "before":
    pid = os.fork()
    if pid == 0:
        child(lambda: print("child", compute(cpu_backend(), scale=3.0), flush=True))
    failed += wait(pid)
    print("parent", compute(cpu_backend()), flush=True)
elif mode == "after":
    backend = cpu_backend()
    weights = Weights(backend)
    print("parent", compute(backend, weights), flush=True)
    pid = os.fork()
    if pid == 0:
        child(lambda: print("child", compute(backend, weights, scale=3.0), flush=True))
    failed += wait(pid)
    print("parent", compute(backend, weights), flush=True)
elif mode == "shared":
    # one graph allocator made before the fork, used on both sides
    backend = cpu_backend()
    weights = Weights(backend)
    galloc = ggml.ggml_gallocr_new(ggml.lib.ggml_backend_cpu_buffer_type())
    print("parent", compute(backend, weights, galloc=galloc), flush=True)
    pid = os.fork()
    if pid == 0:
        child(lambda: print("child", compute(backend, weights, scale=3.0, galloc=galloc), flush=True))
    failed += wait(pid)
    print("parent", compute(backend, weights, galloc=galloc), flush=True)
    ggml.ggml_gallocr_free(galloc)
elif mode == "nested":
    backend = cpu_backend()
    print("parent", compute(backend), flush=True)

    def middle():
        print("child", compute(backend, scale=3.0), flush=True)
        pid = os.fork()
        if pid == 0:
            child(lambda: print("grandchild", compute(backend, scale=4.0), flush=True))
        if wait(pid):
            raise RuntimeError("the grandchild failed")

    pid = os.fork()
    if pid == 0:
        child(middle)
    failed += wait(pid)
sys.exit(failed)
