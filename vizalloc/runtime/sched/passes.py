"""``ggml_backend_sched_split_graph``: backend assignment (passes 1-4), splits and input
copies (pass 5), and the graph the allocator sees (semantics §6.2-6.4).

    >>> # called by Scheduler.alloc_graph / reserve:  split_graph(sched, graph)

What it mutates, as ggml does: the scheduler's tables, its private copy context (freed
and recreated, so copies from the previous split dangle), ``src`` slots of the user's
nodes (rewritten to input copies, reported as ``TensorSrcSet``), and with ``n_copies >
1`` the INPUT/OUTPUT flags of graph inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vizalloc.errors import BackendError, SchedulerError
from vizalloc.runtime.buffer import Buffer, Usage
from vizalloc.runtime.context import Context
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.tensor import MAX_NAME, VIEW_OPS, Flag, Op, Tensor, label, set_input, set_output
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

if TYPE_CHECKING:
    from vizalloc.runtime.sched.scheduler import Scheduler, Split


#: ``Flag.INPUT`` as a plain int: ``flags & Flag.INPUT`` runs IntFlag's Python-level operator
_INPUT = int(Flag.INPUT)
#: the values of ``VIEW_OPS``: ``op._value_ in`` this hashes a str in C, while ``op in
#: VIEW_OPS`` calls Enum's Python-level ``__hash__`` (these loops ask it for every node)
_VIEW_OP_VALUES = frozenset(op._value_ for op in VIEW_OPS)


def _root_buffer(t: Tensor) -> Buffer | None:
    return t.view_src.buffer if t.view_src is not None else t.buffer


def backend_from_buffer(sched: Scheduler, t: Tensor, op: Tensor) -> int:
    """The highest-priority backend that can use ``t``'s buffer and run ``op`` (-1: none)."""
    buffer = _root_buffer(t)
    if buffer is None:
        return -1
    for i, b in enumerate(sched.backends):
        if b.supports_buft(buffer.buft) and b.supports_op(op):
            return i
    return -1


def backend_id_from_cur(sched: Scheduler, t: Tensor) -> int:
    """Pass 1 for one tensor (``ggml_backend_sched_backend_id_from_cur``)."""
    # pre-allocated tensors run where their memory is
    bid = backend_from_buffer(sched, t, t)
    if bid != -1:
        return bid
    if t.view_src is not None:
        bid = backend_from_buffer(sched, t.view_src, t)
        if bid != -1:
            return bid
    buffer = _root_buffer(t)
    if buffer is not None:
        raise BackendError(
            f"tensor {label(t)} ({t.op.name}) is pre-allocated in buffer #{buffer.id} of type {buffer.buft.name!r}, "
            f"and no backend that can use that buffer supports the op; allocate it in a buffer type of a backend "
            f"that runs {t.op.name}"
        )
    # graph inputs start on the CPU (last) backend
    if t.flags & _INPUT:
        return sched.n_backends - 1
    # ops with weights run where the weights are (ROPE, FLASH_ATTN_EXT: the small freqs/sinks
    # tensor is no good guide)
    if t.op in (Op.ROPE, Op.FLASH_ATTN_EXT):
        return -1
    for s in t.src:
        if s is None:
            continue
        if s.buffer is not None and s.buffer.usage == Usage.WEIGHTS:
            src_bid = backend_from_buffer(sched, s, t)
            if sched.op_offload and src_bid == sched.n_backends - 1 and s.buffer.buft.is_host:
                for b in range(src_bid):
                    backend = sched.backends[b]
                    offload = getattr(backend, "offload_op", None)
                    if backend.supports_op(t) and offload is not None and offload(t):
                        return b
            return src_bid
    return -1


def buffer_supported(sched: Scheduler, t: Tensor, backend_id: int) -> bool:
    """``ggml_backend_sched_buffer_supported``: can ``backend_id`` use ``t``'s (future) memory?"""
    buf = _root_buffer(t)
    buft = None
    if buf is not None:
        buft = buf.buft
    else:
        bid = sched.tensor_backend_id(t)
        if bid == -1 and t.view_src is not None:
            bid = sched.tensor_backend_id(t.view_src)
        if bid != -1:
            buft = sched.bufts[bid]
    return buft is not None and sched.backends[backend_id].supports_buft(buft)


def _set_if_supported(sched: Scheduler, node: Tensor, bid: int) -> None:
    if sched.backends[bid].supports_op(node):
        sched.set_backend_id(node, bid)


def _expand(sched: Scheduler, nodes: list[Tensor], order: range, skip_cpu: bool) -> None:
    """One sweep of pass 2: spread the last seen assignment to unassigned nodes."""
    cpu = sched.n_backends - 1
    cur = -1
    known = sched._backend_ids.get
    for i in order:
        node = nodes[i]
        if node.op._value_ in _VIEW_OP_VALUES:
            continue
        bid = known(node.id)
        if bid is None:
            bid = sched.tensor_backend_id(node)
        if bid != -1:
            cur = -1 if (skip_cpu and bid == cpu) else bid
        elif cur != -1:
            _set_if_supported(sched, node, cur)


def assign_backends(sched: Scheduler, graph: Graph) -> None:
    """Passes 1-4 of ggml_backend_sched_split_graph."""
    nodes = graph.nodes
    n = len(nodes)
    # a hit in the table is the answer; on a miss tensor_backend_id inserts -1 as ggml does
    known = sched._backend_ids.get
    lookup = sched.tensor_backend_id

    def backend_id(t: Tensor) -> int:
        bid = known(t.id)
        return lookup(t) if bid is None else bid

    # pass 1: pre-allocated tensors, inputs, ops with weights; user assignments are kept
    for leaf in graph.leafs:
        if backend_id(leaf) == -1:
            sched.set_backend_id(leaf, backend_id_from_cur(sched, leaf))
    for node in nodes:
        if backend_id(node) == -1:
            sched.set_backend_id(node, backend_id_from_cur(sched, node))

    # pass 2: expand GPU assignments down and up (ignoring the CPU), then any assignment
    _expand(sched, nodes, range(n), skip_cpu=True)
    _expand(sched, nodes, range(n - 1, -1, -1), skip_cpu=True)
    _expand(sched, nodes, range(n), skip_cpu=False)
    _expand(sched, nodes, range(n - 1, -1, -1), skip_cpu=False)

    # pass 3: upgrade to a higher-priority backend with the same buffer type; give
    # unassigned nodes the backend that can use the most of their inputs
    for node in nodes:
        if node.op._value_ in _VIEW_OP_VALUES:
            continue
        bid = backend_id(node)
        if bid == -1:
            best = -1
            for b in range(sched.n_backends):
                if not sched.backends[b].supports_op(node):
                    continue
                n_supported = 0
                for s in node.src:
                    if s is None:
                        continue
                    if (sched.tensor_backend_id(s) != -1 or sched.tensor_backend_id(s.view_src) != -1) and \
                            buffer_supported(sched, s, b):
                        n_supported += 1
                if n_supported > best:
                    best = n_supported
                    sched.set_backend_id(node, b)
        else:
            for b in range(bid):
                if sched.bufts[b] is sched.bufts[bid] and sched.backends[b].supports_op(node):
                    if all(s is None or buffer_supported(sched, s, b) for s in node.src):
                        sched.set_backend_id(node, b)
                        break

    # pass 4: views follow their root, sources follow their consumer, leftovers take the
    # first backend that supports them
    for node in nodes:
        cur = backend_id(node)
        if node.view_src is not None and cur == -1:
            cur = backend_id(node.view_src)
            sched.set_backend_id(node, cur)
        for s in node.src:
            if s is None:
                continue
            if backend_id(s) == -1:
                if s.view_src is not None:
                    sched.set_backend_id(s, backend_id(s.view_src))
                else:
                    sched.set_backend_id(s, cur)
        b = 0
        while b < sched.n_backends and backend_id(node) == -1:
            _set_if_supported(sched, node, b)
            b += 1
        if backend_id(node) == -1:
            raise SchedulerError(
                f"no backend supports node {label(node)} ({node.op.name}, {node.type.label}{list(node.ne)}); "
                "the last (CPU) backend must support every op the graph uses"
            )


def _copy_name(backend_name: str, t: Tensor, c: int) -> str:
    return f"{backend_name}#{t.name}#{c}"[: MAX_NAME - 1]


def _dup_tensor_layout(ctx: Context, t: Tensor, name: str) -> Tensor:
    """``ggml_dup_tensor_layout``: same type, shape and strides, no op, no data."""
    return ctx.new_tensor_impl(t.type, t.ne, nb=t.nb, name=name)


def _grow_capacity(sched: Scheduler, i_split: int) -> None:
    caps = sched._split_input_capacity
    while len(caps) <= i_split:
        # ggml doubles the splits array and zeroes the new entries
        caps.extend([0] * len(caps))


def make_splits(sched: Scheduler, graph: Graph) -> None:
    """Pass 5: cut the graph where the backend changes and create input copies."""
    from vizalloc.runtime.sched.scheduler import MAX_SPLIT_INPUTS, Split

    nodes = graph.nodes
    ctx = sched.ctx
    assert ctx is not None
    caps = sched._split_input_capacity
    splits: list[Split] = []
    known = sched._backend_ids.get
    lookup = sched.tensor_backend_id

    def backend_id(t: Tensor) -> int:
        bid = known(t.id)
        return lookup(t) if bid is None else bid

    i = 0
    first_bid = 0
    while i < len(nodes):
        if nodes[i].op._value_ not in _VIEW_OP_VALUES:
            first_bid = backend_id(nodes[i])
            break
        i += 1
    # a graph made only of view ops keeps ggml's uninitialised backend; 0 is as good as any
    split = Split(backend_id=first_bid, i_start=0)
    splits.append(split)
    cur = split.backend_id
    while i < len(nodes):
        node = nodes[i]
        if node.op._value_ in _VIEW_OP_VALUES:
            i += 1
            continue
        node_bid = backend_id(node)
        need_new_split = False
        if node_bid == cur and split.inputs:
            for s in node.src:
                if s is None:
                    continue
                # a weight on an incompatible backend: a new split lets its copy's memory be reused
                if s.buffer is not None and s.buffer.usage == Usage.WEIGHTS:
                    if backend_id(s) != cur and not buffer_supported(sched, s, cur):
                        need_new_split = True
                        break
                # FIXME in ggml: only checked once the split's input array is full
                if len(split.inputs) >= caps[len(splits) - 1]:
                    if backend_id(s) != cur and sched.get_copy(s, cur, 0) is None and \
                            not buffer_supported(sched, s, cur):
                        need_new_split = True
                        break
        if node_bid != cur or need_new_split:
            split.i_end = i
            _grow_capacity(sched, len(splits))
            caps = sched._split_input_capacity
            split = Split(backend_id=node_bid, i_start=i)
            splits.append(split)
            cur = node_bid
        i_split = len(splits) - 1

        for j, s in enumerate(node.src):
            if s is None:
                continue
            src_bid = backend_id(s)
            if src_bid == -1:
                raise SchedulerError(f"source {label(s)} of node {label(node)} has no backend (scheduler bug)")
            if (s.flags & _INPUT and sched.n_copies > 1 and not sched.inputs_from_leafs
                    and sched.get_copy(s, src_bid, 0) is None):
                _copy_graph_input(sched, s, src_bid, i_split)
                sched.graph_inputs.append(s)
            if src_bid != cur and not buffer_supported(sched, s, cur):
                if sched.get_copy(s, cur, 0) is None:
                    backend = sched.backends[cur]
                    for c in range(sched.n_copies):
                        tc = _dup_tensor_layout(ctx, s, _copy_name(backend.name, s, c))
                        if sched.n_copies > 1:
                            set_input(tc)
                            set_output(tc)  # keeps the allocator from reusing it
                        sched.set_copy(s, cur, c, tc)
                        if recorder.active():
                            recorder.emit(ev.SchedCopy, sched.id, i_split, s.id, tc.id, c, backend.name)
                    if len(split.inputs) >= caps[i_split]:
                        caps[i_split] = MAX_SPLIT_INPUTS if caps[i_split] == 0 else 2 * caps[i_split]
                    split.inputs.append(s)
                cpy = sched.get_copy(s, cur, sched.cur_copy)
                assert cpy is not None
                # the scheduler rewrites the user's node to read the copy
                node.src[j] = cpy
                if recorder.active():
                    recorder.emit(ev.TensorSrcSet, node.id, j, cpy.id)
        i += 1
    split.i_end = len(nodes)
    sched.splits = splits
    if sched.inputs_from_leafs and sched.n_copies > 1:
        # pass 6 (ggml 0.25+): every input leaf, so that the graph does not depend on which
        # inputs a batch uses (the embeddings input of a token batch)
        for leaf in graph.leafs:
            if leaf.flags & _INPUT:
                bid = backend_id(leaf)
                if sched.get_copy(leaf, bid, 0) is None:
                    _copy_graph_input(sched, leaf, bid, len(splits) - 1)
                sched.graph_inputs.append(leaf)


def _copy_graph_input(sched: Scheduler, s: Tensor, bid: int, i_split: int) -> None:
    """Pipeline parallelism: a graph input gets ``n_copies`` slots on its backend; the current
    one is the user's tensor itself, now flagged INPUT and OUTPUT."""
    ctx = sched.ctx
    assert ctx is not None
    backend = sched.backends[bid]
    for c in range(sched.n_copies):
        tc = s if c == sched.cur_copy else _dup_tensor_layout(ctx, s, _copy_name(backend.name, s, c))
        set_input(tc)
        set_output(tc)
        sched.set_copy(s, bid, c, tc)
        if recorder.active():
            recorder.emit(ev.SchedCopy, sched.id, i_split, s.id, tc.id, c, backend.name)


def _write_ids(ids: list[int], k: int, value: int) -> None:
    if k < len(ids):
        ids[k] = value
    else:
        ids.append(value)


def build_sched_graph(sched: Scheduler, graph: Graph) -> None:
    """The graph the allocator sees: per split, (dependency view, copy) per input, then the
    split's nodes; leafs: the input copies (``n_copies > 1``), then the user's leafs."""
    ctx = sched.ctx
    assert ctx is not None
    # ggml swaps the current and previous id arrays; the comparison in alloc_splits
    # reads what the previous split wrote
    sched.node_backend_ids, sched.prev_node_backend_ids = sched.prev_node_backend_ids, sched.node_backend_ids
    sched.leaf_backend_ids, sched.prev_leaf_backend_ids = sched.prev_leaf_backend_ids, sched.leaf_backend_ids

    total_inputs = len(sched.graph_inputs) + sum(len(s.inputs) for s in sched.splits)
    size = max(graph.n_nodes, graph.n_leafs) + total_inputs * 2 * sched.n_copies
    if sched.graph is not None:
        size = max(size, sched.graph.size)  # ggml only ever grows sched->graph
    g_nodes: list[Tensor] = []
    g_leafs: list[Tensor] = []
    node_ids = sched.node_backend_ids
    leaf_ids = sched.leaf_backend_ids
    for split in sched.splits:
        split.graph = graph.view(split.i_start, split.i_end)
        optimize = getattr(sched.backends[split.backend_id], "graph_optimize", None)
        if optimize is not None:
            optimize(split.graph)
            # ggml's split graph is a window into the user's node array: reorders land there
            graph.nodes[split.i_start:split.i_end] = split.graph.nodes
        for inp in split.inputs:
            cpy = sched.get_copy(inp, split.backend_id, sched.cur_copy)
            assert cpy is not None
            # an op-NONE view of the input keeps it alive until the copy is made
            dep = ctx.new_tensor_impl(inp.type, inp.ne, inp, 0, nb=inp.nb, src=[inp],
                                      name=f"{inp.name} (view)"[: MAX_NAME - 1])
            _write_ids(node_ids, len(g_nodes), sched.tensor_backend_id(inp))
            g_nodes.append(dep)
            # the copy itself, allocated at the start of the split
            _write_ids(node_ids, len(g_nodes), split.backend_id)
            g_nodes.append(cpy)
        for j in range(split.i_start, split.i_end):
            _write_ids(node_ids, len(g_nodes), sched.tensor_backend_id(graph.nodes[j]))
            g_nodes.append(graph.nodes[j])
    if sched.n_copies > 1:
        # input copies are leafs, so they are allocated first
        for inp in sched.graph_inputs:
            bid = sched.tensor_backend_id(inp)
            for c in range(sched.n_copies):
                tc = sched.get_copy(inp, bid, c)
                assert tc is not None
                _write_ids(leaf_ids, len(g_leafs), bid)
                g_leafs.append(tc)
        for split in sched.splits:
            for inp in split.inputs:
                for c in range(sched.n_copies):
                    tc = sched.get_copy(inp, split.backend_id, c)
                    assert tc is not None
                    _write_ids(leaf_ids, len(g_leafs), split.backend_id)
                    g_leafs.append(tc)
    for leaf in graph.leafs:
        bid = sched.tensor_backend_id(leaf)
        if bid == -1:
            # ggml indexes bufts[-1] here (undefined behaviour); say what is wrong instead
            raise SchedulerError(
                f"leaf {label(leaf)} of graph #{graph.id} has no backend: no node reads it and it is neither "
                "pre-allocated nor an input; assign one with set_tensor_backend or leave it out of the graph"
            )
        _write_ids(leaf_ids, len(g_leafs), bid)
        g_leafs.append(leaf)
    sg = Graph(size, False, _kind="sched", _source=graph)
    sg._extend(g_nodes, g_leafs)
    sched.graph = sg


def _refuse_old_copies(sched: Scheduler, graph: Graph) -> None:
    """A graph split before by this scheduler reads input copies from a freed context.

    ggml reuses that context's memory for the next split's tensors, so the rewritten
    source pointers alias whatever tensor lands in their slot (undefined behaviour, wrong
    numbers in practice). vizalloc cannot reproduce that aliasing and refuses instead.
    """
    old = set(sched._old_ctx_ids)
    if sched.ctx is not None:
        old.add(sched.ctx.id)  # freed right below
    if not old:
        return
    for node in graph.nodes:
        for s in node.src:
            if s is not None and s.ctx.id in old:
                raise SchedulerError(
                    f"node {label(node)} of graph #{graph.id} reads {label(s)}, an input copy made when this "
                    "scheduler split the graph before (the scheduler rewrites sources that cross backends, and "
                    "those copies died with the next split); build a fresh graph for every alloc_graph, as ggml "
                    "expects"
                )


def split_graph(sched: Scheduler, graph: Graph) -> None:
    """``ggml_backend_sched_split_graph`` (all passes), with SchedSplit events."""
    _refuse_old_copies(sched, graph)
    sched.splits = []
    sched.graph_inputs = []
    sched.is_reset = False
    # the private context of input copies is recreated: last split's copies now dangle
    if sched.ctx is not None:
        sched.ctx.free()
        sched._old_ctx_ids.add(sched.ctx.id)
    sched.ctx = Context(name=f"sched{sched.id}", no_alloc=True)
    assign_backends(sched, graph)
    make_splits(sched, graph)
    build_sched_graph(sched, graph)
    if recorder.active():
        for k, split in enumerate(sched.splits):
            recorder.emit(
                ev.SchedSplit, sched.id, graph.id, k, sched.backends[split.backend_id].name,
                tuple(t.id for t in graph.nodes[split.i_start:split.i_end]), tuple(t.id for t in split.inputs),
            )
