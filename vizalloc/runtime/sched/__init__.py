"""The multi-backend scheduler (ggml's ``ggml_backend_sched``, ``src/ggml-backend.cpp``).

It assigns every node of a graph to a backend (passes 1-4), cuts the graph into splits
that one backend runs in a row, gives each split copies of the inputs that live on
another backend, builds the graph the graph allocator really sees (dependency views,
input copies, split nodes; buffer id = backend index) and computes the splits.

    >>> from vizalloc.runtime.backends import CPUBackend
    >>> from vizalloc.runtime.sched import Scheduler
    >>> sched = Scheduler([CPUBackend()])
    >>> sched.n_copies, sched.n_splits
    (1, 0)

With one CPU backend there is one split and no copies, so the plans are exactly the
graph allocator's (semantics §6.4).
"""

from __future__ import annotations

from vizalloc.runtime.sched.scheduler import EvalCallback, Scheduler, Split, hash_size

__all__ = ["EvalCallback", "Scheduler", "Split", "hash_size"]
