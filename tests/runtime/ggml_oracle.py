"""Build the same graph in vizalloc and in real ggml (ggml-python 0.0.45) and compare
their structure: shapes, strides, op names, op params, flags, names, view roots and
offsets, sources, and the graph's node and leaf order.

A *program* is a function ``program(b)`` that builds tensors only through the builder
``b`` it is given, so one description runs in both runtimes:

    >>> def mlp(b):                                      # doctest: +SKIP
    ...     x = b.new("f32", (8, 2), "x"); w = b.new("f32", (8, 4), "w")
    ...     return [b.op("relu", b.op("mul_mat", w, x))]
    >>> assert_same_structure(mlp)                        # doctest: +SKIP

Builder API (both ``VizBuilder`` and ``GgmlBuilder``):

* ``b.new(type_label, ne, name="")`` — a fresh tensor (``ne`` of 1..4 dims, ne[0] first);
* ``b.op(name, *args)`` — ``ops.<name>(ctx, *args)`` / ``ggml_<name>(ctx, *args)``; arguments
  are builder tensors, ints, floats, ``UnaryOp`` members or type labels (``"f16"``);
* ``b.set_param(t)``, ``b.set_input(t)``, ``b.set_output(t)``, ``b.set_name(t, name)``;
* ``b.snapshot(roots)`` — expands a new graph with each root in turn and returns a
  ``Snapshot``: node and leaf descriptions in graph order, tensors numbered in order of
  first appearance (so identity, aliasing and self-references are compared, not addresses).

``snapshot_ggml`` / ``snapshot_viz`` run a program in one runtime; ``assert_same_structure``
runs it in both and raises ``AssertionError`` naming the first differing tensor and field.
``compute_viz`` / ``compute_ggml`` also *compute* a program (named inputs set from numpy
arrays; ggml on its CPU backend through ``ggml_graph_compute_with_ctx``) and return the
roots' values as ``(ne3, ne2, ne1, ne0)`` arrays, for numeric comparisons.

ggml-python pitfalls handled here (see /work/shared/design/ggml-python-notes.md): contexts
are ``no_alloc`` so no tensor data is ever touched; every context is freed after use.
Op params are compared as ggml stores them: int32 words (floats as their f32 bits, the
view offset as a 64-bit size_t in two words, unary ops as ggml's enum value).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vizalloc.runtime import Context, DType, Graph, UnaryOp, ops, set_input, set_output, set_param
from vizalloc.runtime.tensor import Op, Tensor

try:  # ggml-python is a test-only dependency
    import ggml as _ggml
except ImportError:  # pragma: no cover - the tests that need it skip
    _ggml = None

HAVE_GGML = _ggml is not None

# Ops whose op_params words vizalloc stores in another form, or knowingly differently.
_PARAM_WORDS_SKIP: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TensorDesc:
    """One tensor as both runtimes can describe it."""

    index: int
    name: str
    type: str
    ne: tuple[int, ...]
    nb: tuple[int, ...]
    op: str
    op_params: tuple[int, ...]
    flags: int
    src: tuple[int | None, ...]
    view_src: int | None
    view_offs: int


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[int, ...]
    leafs: tuple[int, ...]
    tensors: tuple[TensorDesc, ...]


# -- op params as int32 words ------------------------------------------------------------

def _f32_word(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def _unary_value(u: UnaryOp) -> int:
    assert _ggml is not None
    return int(getattr(_ggml, f"GGML_UNARY_OP_{u.name}"))


def viz_param_words(t: Tensor) -> tuple[int, ...]:
    """vizalloc's op params encoded as ggml's int32 words (trailing zeros dropped)."""
    words: list[int] = []
    if t.op is Op.VIEW:
        off = int(t.op_params[0])
        words = [off & 0xFFFFFFFF, off >> 32]
        words = [w - (1 << 32) if w >= 1 << 31 else w for w in words]
    else:
        for p in t.op_params:
            if isinstance(p, UnaryOp):
                words.append(_unary_value(p))
            elif isinstance(p, bool):
                words.append(int(p))
            elif isinstance(p, int):
                words.append(p)
            elif isinstance(p, float):
                words.append(_f32_word(p))
            else:
                raise TypeError(f"op param {p!r} of {t!r}")
    while words and words[-1] == 0:
        words.pop()
    return tuple(words)


# -- builders ------------------------------------------------------------------------------

class VizBuilder:
    """Runs a program against ``vizalloc.runtime`` in one no_alloc context."""

    def __init__(self) -> None:
        self.ctx = Context(name="oracle")

    def new(self, type_label: str, ne: Sequence[int], name: str = "") -> Tensor:
        return self.ctx.new_tensor_impl(DType.from_label(type_label), tuple(ne), name=name)

    def op(self, name: str, *args: Any) -> Tensor:
        conv = [DType.from_label(a) if isinstance(a, str) else a for a in args]
        return getattr(ops, name)(self.ctx, *conv)

    def set_param(self, t: Tensor) -> None:
        set_param(t)

    def set_input(self, t: Tensor) -> None:
        set_input(t)

    def set_output(self, t: Tensor) -> None:
        set_output(t)

    def set_name(self, t: Tensor, name: str) -> None:
        t.set_name(name)

    def snapshot(self, roots: Sequence[Tensor]) -> Snapshot:
        g = Graph()
        for r in roots:
            g.build_forward_expand(r)
        return _describe(
            list(g.nodes), list(g.leafs), key=id,
            fields=lambda t: (t.name, t.type.label, tuple(t.ne), tuple(t.nb), t.op.value, viz_param_words(t),
                              int(t.flags), list(t.src), t.view_src, int(t.view_offs)),
        )

    def close(self) -> None:
        self.ctx.free()


class GgmlBuilder:
    """Runs a program against real ggml through ggml-python (no memory is allocated)."""

    def __init__(self, max_tensors: int = 4096, data_bytes: int = 0) -> None:
        """``data_bytes > 0`` makes a context that holds tensor data (for computing)."""
        if _ggml is None:
            raise RuntimeError("ggml-python is not installed")
        g = _ggml
        mem = g.ggml_tensor_overhead() * max_tensors + g.ggml_graph_overhead() * 4 + data_bytes
        self.ctx = g.ggml_init(g.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=data_bytes == 0))
        self._types = {"f32": g.GGML_TYPE_F32, "f16": g.GGML_TYPE_F16, "i32": g.GGML_TYPE_I32}

    def new(self, type_label: str, ne: Sequence[int], name: str = "") -> Any:
        g = _ggml
        assert g is not None
        arr = (ctypes.c_int64 * 4)(*(list(ne) + [1] * (4 - len(ne))))
        t = g.ggml_new_tensor(self.ctx, self._types[type_label], len(ne), arr)
        if name:
            g.ggml_set_name(t, name.encode())
        return t

    def op(self, name: str, *args: Any) -> Any:
        g = _ggml
        assert g is not None
        conv: list[Any] = []
        for a in args:
            if isinstance(a, str):
                conv.append(self._types[a])
            elif isinstance(a, UnaryOp):
                conv.append(_unary_value(a))
            else:
                conv.append(a)
        return getattr(g, f"ggml_{name}")(self.ctx, *conv)

    def set_param(self, t: Any) -> None:
        _ggml.ggml_set_param(t)  # type: ignore[union-attr]

    def set_input(self, t: Any) -> None:
        _ggml.ggml_set_input(t)  # type: ignore[union-attr]

    def set_output(self, t: Any) -> None:
        _ggml.ggml_set_output(t)  # type: ignore[union-attr]

    def set_name(self, t: Any, name: str) -> None:
        _ggml.ggml_set_name(t, name.encode())  # type: ignore[union-attr]

    def snapshot(self, roots: Sequence[Any]) -> Snapshot:
        g = _ggml
        assert g is not None
        graph = g.ggml_new_graph(self.ctx)
        for r in roots:
            g.ggml_build_forward_expand(graph, r)
        cg = graph.contents
        nodes = [cg.nodes[i] for i in range(cg.n_nodes)]
        leafs = [cg.leafs[i] for i in range(cg.n_leafs)]
        assert cg.n_nodes == g.ggml_graph_n_nodes(graph)

        def fields(p: Any) -> tuple[Any, ...]:
            c = p.contents
            op = g.ggml_op_name(c.op).decode()
            words = list(c.op_params)
            while words and words[-1] == 0:
                words.pop()
            srcs = [c.src[k] if c.src[k] else None for k in range(10)]
            while srcs and srcs[-1] is None:
                srcs.pop()
            return (c.name.decode(), g.ggml_type_name(c.type).decode(), tuple(c.ne), tuple(c.nb), op,
                    tuple(words), int(c.flags), srcs, c.view_src if c.view_src else None, int(c.view_offs))

        return _describe(nodes, leafs, key=lambda p: ctypes.addressof(p.contents), fields=fields)

    def close(self) -> None:
        _ggml.ggml_free(self.ctx)  # type: ignore[union-attr]


def _describe(nodes: list[Any], leafs: list[Any], key: Callable[[Any], int],
              fields: Callable[[Any], tuple[Any, ...]]) -> Snapshot:
    """Number tensors by first appearance (nodes, then leafs, then sources/roots breadth-first)."""
    index: dict[int, int] = {}
    order: list[Any] = []

    def number(t: Any) -> int:
        k = key(t)
        if k not in index:
            index[k] = len(order)
            order.append(t)
        return index[k]

    node_ids = tuple(number(t) for t in nodes)
    leaf_ids = tuple(number(t) for t in leafs)
    descs: list[TensorDesc] = []
    i = 0
    while i < len(order):
        t = order[i]
        name, type_label, ne, nb, op, words, flags, srcs, view_src, view_offs = fields(t)
        src_ids = tuple(None if s is None else number(s) for s in srcs)
        vs = None if view_src is None else number(view_src)
        descs.append(TensorDesc(i, name, type_label, ne, nb, op, words, flags, src_ids, vs, view_offs))
        i += 1
    return Snapshot(node_ids, leaf_ids, tuple(descs))


# -- running programs ------------------------------------------------------------------------

Program = Callable[[Any], Sequence[Any]]


def snapshot_viz(program: Program) -> Snapshot:
    b = VizBuilder()
    try:
        return b.snapshot(program(b))
    finally:
        b.close()


def snapshot_ggml(program: Program) -> Snapshot:
    b = GgmlBuilder()
    try:
        return b.snapshot(program(b))
    finally:
        b.close()


_NP_TYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64}


def compute_viz(program: Program, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Build ``program`` in vizalloc, place every tensor in one CPU buffer, set the named
    inputs (numpy order: ``ne`` reversed), run the kernels node by node, and return each
    root as a ``(ne3, ne2, ne1, ne0)`` array."""
    from vizalloc.runtime.buffer import BufferType
    from vizalloc.runtime.kernels import compute_forward
    from vizalloc.runtime.alloc import alloc_ctx_tensors
    from vizalloc.runtime.memory import tensor_array, tensor_set

    b = VizBuilder()
    try:
        roots = list(program(b))
        alloc_ctx_tensors(b.ctx, BufferType("CPU"))
        for name, values in inputs.items():
            t = b.ctx.get_tensor(name)
            assert t is not None, name
            tensor_set(t, values)
        g = Graph()
        for r in roots:
            g.build_forward_expand(r)
        for node in g.nodes:
            compute_forward(node)
        return [tensor_array(r).copy() for r in roots]
    finally:
        b.close()


def compute_ggml(program: Program, inputs: dict[str, np.ndarray], n_threads: int = 1,
                 data_bytes: int = 64 << 20) -> list[np.ndarray]:
    """The same in real ggml: a context that holds data, ``ggml_graph_compute_with_ctx``."""
    g = _ggml
    assert g is not None
    b = GgmlBuilder(data_bytes=data_bytes)
    try:
        roots = list(program(b))
        for name, values in inputs.items():
            t = g.ggml_get_tensor(b.ctx, name.encode())
            assert t, name
            c = t.contents
            want = np.ascontiguousarray(values, dtype=_NP_TYPES[g.ggml_type_name(c.type).decode()])
            assert want.nbytes == g.ggml_nbytes(t), (name, want.nbytes, g.ggml_nbytes(t))
            ctypes.memmove(c.data, want.ctypes.data, want.nbytes)
        graph = g.ggml_new_graph(b.ctx)
        for r in roots:
            g.ggml_build_forward_expand(graph, r)
        g.ggml_graph_compute_with_ctx(b.ctx, graph, n_threads)
        out = []
        for r in roots:
            c = r.contents
            dtype = np.dtype(_NP_TYPES[g.ggml_type_name(c.type).decode()])
            nbytes = g.ggml_nbytes(r)
            raw = (ctypes.c_uint8 * nbytes).from_address(c.data)
            arr = np.ndarray((c.ne[3], c.ne[2], c.ne[1], c.ne[0]), dtype=dtype, buffer=raw,
                             strides=(c.nb[3], c.nb[2], c.nb[1], c.nb[0]))
            out.append(arr.copy())
        return out
    finally:
        b.close()


def diff_snapshots(ours: Snapshot, theirs: Snapshot) -> list[str]:
    """Human-readable differences (empty when the structures agree)."""
    out: list[str] = []
    if ours.nodes != theirs.nodes:
        out.append(f"node order: vizalloc {ours.nodes} vs ggml {theirs.nodes}")
    if ours.leafs != theirs.leafs:
        out.append(f"leaf order: vizalloc {ours.leafs} vs ggml {theirs.leafs}")
    if len(ours.tensors) != len(theirs.tensors):
        out.append(f"tensor count: vizalloc {len(ours.tensors)} vs ggml {len(theirs.tensors)}")
    for a, b in zip(ours.tensors, theirs.tensors):
        for field in TensorDesc.__dataclass_fields__:
            if field == "op_params" and a.op in _PARAM_WORDS_SKIP:
                continue
            va, vb = getattr(a, field), getattr(b, field)
            if va != vb:
                out.append(f"tensor #{a.index} ({b.name!r}, {b.op}): {field} vizalloc {va!r} vs ggml {vb!r}")
    return out


def assert_same_structure(program: Program) -> Snapshot:
    """Run ``program`` in both runtimes; raise AssertionError listing every difference."""
    ours = snapshot_viz(program)
    theirs = snapshot_ggml(program)
    problems = diff_snapshots(ours, theirs)
    if problems:
        raise AssertionError("vizalloc and ggml build different graphs:\n  " + "\n  ".join(problems))
    return ours
