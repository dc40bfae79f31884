"""Compute graphs (``ggml_cgraph``): nodes and leafs in ggml's exact order.

``build_forward_expand`` walks sources depth-first in slot order (post-order); a
tensor with op NONE that is not a parameter becomes a leaf, everything else a
node. Repeated expands append to the same lists.

    >>> from vizalloc.runtime import Context, F32, Graph, ops
    >>> ctx = Context()
    >>> a = ctx.new_tensor_1d(F32, 4); b = ctx.new_tensor_1d(F32, 4)
    >>> g = Graph(); g.build_forward_expand(ops.add(ctx, a, b))
    >>> len(g.nodes), len(g.leafs)
    (1, 2)
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from vizalloc.errors import GraphError
from vizalloc.runtime.context import Context
from vizalloc.runtime.tensor import Flag, Op, Tensor
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

GRAPH_DEFAULT_SIZE = 2048

_graph_ids = itertools.count()


class Graph:
    """A computation graph.

    Args:
        size: the most nodes (and leafs) it may hold, as ``ggml_new_graph_custom``.
        grads: whether it keeps gradient slots (needed for a backward pass).
    """

    def __init__(self, size: int = GRAPH_DEFAULT_SIZE, grads: bool = False, *, _kind: str = "new",
                 _source: Graph | None = None) -> None:
        self.id = next(_graph_ids)
        self.size = size
        self.has_grads = grads
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        self._visited: set[int] = set()
        #: tensor id -> gradient tensor / gradient accumulator (ggml's grads[] / grad_accs[]).
        self.grads: dict[int, Tensor] = {}
        self.grad_accs: dict[int, Tensor] = {}
        if recorder.active():
            recorder.emit(ev.GraphCreated, self.id, size, _kind, -1 if _source is None else _source.id)

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def n_leafs(self) -> int:
        return len(self.leafs)

    def node(self, i: int) -> Tensor:
        """``ggml_graph_node``: negative indices count from the end."""
        return self.nodes[i]

    def contains(self, t: Tensor) -> bool:
        return t.id in self._visited

    def build_forward_expand(self, tensor: Tensor) -> None:
        """``ggml_build_forward_expand``: append ``tensor`` and every unvisited ancestor."""
        n0, l0 = len(self.nodes), len(self.leafs)
        self._visit(tensor)
        if recorder.active() and (len(self.nodes) > n0 or len(self.leafs) > l0):
            recorder.emit(
                ev.GraphExpanded, self.id,
                tuple(t.id for t in self.nodes[n0:]), tuple(t.id for t in self.leafs[l0:]),
            )

    def _visit(self, root: Tensor) -> None:
        # Iterative post-order so graphs of 100k nodes need no deep recursion:
        # each stack entry is (tensor, index of the next source slot to visit).
        visited = self._visited
        if root.id in visited:
            return
        root.check_alive()
        visited.add(root.id)
        for s in root.src:
            if s is not None and s.id not in visited:
                break
        else:  # every source is in the graph already (the usual case when copying a graph in order)
            self._append(root)
            return
        stack: list[tuple[Tensor, int]] = [(root, 0)]
        while stack:
            t, k = stack[-1]
            srcs = t.src
            while k < len(srcs):
                s = srcs[k]
                k += 1
                if s is not None and s.id not in visited:
                    s.check_alive()
                    visited.add(s.id)
                    stack[-1] = (t, k)
                    stack.append((s, 0))
                    break
            else:
                stack.pop()
                self._append(t)

    def _append(self, t: Tensor) -> None:
        if t.op is Op.NONE and not (t.flags & Flag.PARAM):
            if len(self.leafs) >= self.size:
                raise GraphError(f"graph #{self.id} is full: {self.size} leafs; create it with a larger size")
            if not t.name:
                t.set_name(f"leaf_{len(self.leafs)}")
            self.leafs.append(t)
        else:
            if len(self.nodes) >= self.size:
                raise GraphError(f"graph #{self.id} is full: {self.size} nodes; create it with a larger size")
            if not t.name:
                t.set_name(f"node_{len(self.nodes)}")
            # ggml marks every op it reaches as computed (not op-NONE params); the allocator ignores it
            if t.op is not Op.NONE:
                t.flags = t.flags | int(Flag.COMPUTE)
            self.nodes.append(t)

    def _extend(self, nodes: Iterable[Tensor], leafs: Iterable[Tensor]) -> None:
        """Append already-ordered nodes and leafs (copies and views of graphs)."""
        n0, l0 = len(self.nodes), len(self.leafs)
        for t in leafs:
            self.leafs.append(t)
            self._visited.add(t.id)
        for t in nodes:
            self.nodes.append(t)
            self._visited.add(t.id)
        if recorder.active():
            recorder.emit(
                ev.GraphExpanded, self.id,
                tuple(t.id for t in self.nodes[n0:]), tuple(t.id for t in self.leafs[l0:]),
            )

    @classmethod
    def of(cls, nodes: Sequence[Tensor], leafs: Sequence[Tensor], *, kind: str = "captured") -> Graph:
        """A graph of exactly these nodes and leafs in this order: a graph built elsewhere
        (captured from a real ggml process) rather than by expanding tensors here."""
        g = cls(max(len(nodes), len(leafs), 1), _kind=kind)
        g._extend(nodes, leafs)
        return g

    # -- copies ---------------------------------------------------------------
    def dup(self, size: int | None = None) -> Graph:
        """``ggml_graph_dup``: a shallow copy; the new graph holds the *same* tensor objects."""
        g = Graph(size or self.size, self.has_grads, _kind="shallow_copy", _source=self)
        g._extend(self.nodes, self.leafs)
        g.grads = dict(self.grads)
        g.grad_accs = dict(self.grad_accs)
        return g

    def cpy_into(self, dst: Graph) -> None:
        """``ggml_graph_cpy``: make ``dst`` a shallow copy of this graph."""
        if dst.size < len(self.nodes) or dst.size < len(self.leafs):
            raise GraphError(f"graph_cpy: destination of size {dst.size} cannot hold {len(self.nodes)} nodes")
        dst.clear()
        dst._extend(self.nodes, self.leafs)
        dst.grads = dict(self.grads)
        dst.grad_accs = dict(self.grad_accs)

    def view(self, i0: int, i1: int) -> Graph:
        """``ggml_graph_view``: nodes ``[i0, i1)`` and no leafs."""
        g = Graph(i1 - i0, False, _kind="view", _source=self)
        g._extend(self.nodes[i0:i1], ())
        return g

    def clear(self) -> None:
        """``ggml_graph_clear``: forget every node and leaf (traced as ``GraphCleared``)."""
        self.nodes.clear()
        self.leafs.clear()
        self._visited.clear()
        if recorder.active():
            recorder.emit(ev.GraphCleared, self.id)

    def __repr__(self) -> str:
        return f"<Graph #{self.id} {len(self.nodes)} nodes {len(self.leafs)} leafs>"


def graph_deep_copy(ctx: Context, src: Graph) -> Graph:
    """A *deep* copy of ``src`` made in ``ctx``: ggml-opt's static ``dup_graph`` (ggml-opt.cpp).

    Not ``ggml_graph_dup`` (that is :meth:`Graph.dup`, a shallow copy holding the same
    tensor objects, which keeps their stale placements). Every tensor is copied once
    (memoized by identity) with its op, strides, flags, op params, name, and also its
    ``data``, ``buffer`` and ``extra``: a copy of a static tensor points at the same
    bytes, a copy of an unallocated one has none, so the copy's compute tensors are
    planned afresh (the ``dup`` fix). Gradient slots keep pointing at the original
    gradient tensors, as in ggml.
    """
    mapping: dict[int, Tensor] = {}

    def map_tensor(t: Tensor) -> Tensor:
        got = mapping.get(t.id)
        if got is not None:
            return got
        # in a graph's own order the dependencies are usually mapped already: copy at once
        vs = t.view_src
        ready = vs is None or vs.id in mapping
        if ready:
            for d in t.src:
                if d is not None and d is not t and d.id not in mapping:
                    ready = False
                    break
        if ready:
            got = mapping[t.id] = _copy_tensor(ctx, t, mapping)
            return got
        # dependencies first (view root, then sources), without deep recursion
        stack = [t]
        while stack:
            cur = stack[-1]
            if cur.id in mapping:
                stack.pop()
                continue
            # a cast is its own src[1]; ggml-opt's map_tensor registers the copy first, so skip it here
            deps = [d for d in ([cur.view_src] + cur.src) if d is not None and d is not cur and d.id not in mapping]
            if deps:
                stack.extend(reversed(deps))
                continue
            stack.pop()
            mapping[cur.id] = _copy_tensor(ctx, cur, mapping)
        return mapping[t.id]

    dst = Graph(src.size, True, _kind="deep_copy", _source=src)
    for leaf in src.leafs:
        dst.build_forward_expand(map_tensor(leaf))
    if dst.n_leafs != src.n_leafs:
        raise GraphError(f"graph_deep_copy: copy has {dst.n_leafs} leafs, source {src.n_leafs}")
    for node in src.nodes:
        dst.build_forward_expand(map_tensor(node))
    if dst.n_nodes != src.n_nodes:
        raise GraphError(f"graph_deep_copy: copy has {dst.n_nodes} nodes, source {src.n_nodes}")
    for s_node, d_node in zip(src.nodes, dst.nodes):
        if s_node.id in src.grads:
            dst.grads[d_node.id] = src.grads[s_node.id]
        if s_node.id in src.grad_accs:
            dst.grad_accs[d_node.id] = src.grad_accs[s_node.id]
    return dst


def _copy_tensor(ctx: Context, t: Tensor, mapping: dict[int, Tensor]) -> Tensor:
    view_src = None if t.view_src is None else mapping[t.view_src.id]
    c = ctx.new_tensor_impl(
        t.type, t.ne, view_src, t.view_offs, nb=t.nb, op=t.op,
        src=[None if (s is None or s is t) else mapping[s.id] for s in t.src],
        op_params=t.op_params, name=t.name, copy_of=t,
    )
    for slot, s in enumerate(t.src):
        if s is t:  # a self-reference (ggml_cast) maps to the copy itself
            while len(c.src) <= slot:
                c.src.append(None)
            c.src[slot] = c
            if recorder.active():
                recorder.emit(ev.TensorSrcSet, c.id, slot, c.id)
    c.flags = int(t.flags)
    if recorder.active() and t.flags:
        recorder.emit(ev.TensorFlagsSet, c.id, c.flags)
    c.extra = t.extra
    if c.data is None and t.data is not None:
        # the copy of an allocated (static) tensor aliases the same bytes
        c.data, c.buffer, c.storage = t.data, t.buffer, t.storage
        if recorder.active() and t.storage is not None:
            recorder.emit(
                ev.TensorPlaced, c.id, t.storage.id, t.data - t.storage.base, c.nbytes, ev.PlacedBy.COPY, -1
            )
    elif c.data is not None:
        c.buffer = t.buffer
    return c


#: The names this module used before, now deprecated: ``dup_graph`` read like
#: ``ggml_graph_dup`` (a shallow copy) but made ggml-opt's deep copy.
_DEPRECATED = {"dup_graph": ("graph_deep_copy", "dup_graph is ggml-opt's *deep* copy and is now called "
                             "graph_deep_copy; for ggml_graph_dup (a shallow copy that keeps the same tensors) "
                             "use Graph.dup")}


def deprecated(module: str, name: str) -> Any:
    """The object a deprecated name of ``module`` stands for, with a ``DeprecationWarning``."""
    new, why = _DEPRECATED[name]
    warnings.warn(f"{module}.{name}: {why}", DeprecationWarning, stacklevel=3)
    return globals()[new]


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED:
        return deprecated(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
