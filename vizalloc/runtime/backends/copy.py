"""Copying bytes between tensors and whole graphs between backends.

``tensor_copy`` is ``ggml_backend_tensor_copy``: the two tensors must have the same
layout; the bytes ``[data, data + nbytes)`` move between any two buffers, host or
device. ``graph_copy`` is ``ggml_backend_graph_copy``: a deep copy of an allocated
graph onto another backend, made in ggml's order so the copy's offsets match ggml's.

    >>> import numpy as np
    >>> from vizalloc.runtime import Context, F32
    >>> from vizalloc.runtime.backends import CPUBackend, SimBackend, alloc_ctx_tensors, tensor_copy
    >>> from vizalloc.runtime.memory import tensor_get, tensor_set
    >>> ctx = Context(); a = ctx.new_tensor_1d(F32, 3); b = ctx.new_tensor_1d(F32, 3)
    >>> _ = alloc_ctx_tensors(ctx, CPUBackend())
    >>> tensor_set(a, np.array([1, 2, 3], dtype=np.float32)); tensor_copy(a, b)
    >>> tensor_get(b).tolist()
    [1.0, 2.0, 3.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from vizalloc.errors import AllocationError, GraphError, NoMemoryError, ShapeError
from vizalloc.runtime.buffer import Buffer, Storage
from vizalloc.runtime.context import Context
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.memory import tensor_array, view_init
from vizalloc.runtime.tensor import Tensor, label
from vizalloc.trace import events as ev
from vizalloc.trace import recorder

if TYPE_CHECKING:
    from vizalloc.runtime.backends.base import Backend


def same_layout(a: Tensor, b: Tensor) -> bool:
    """``ggml_are_same_layout``: same type, shape and strides."""
    return a.type is b.type and a.ne == b.ne and a.nb == b.nb


def tensor_copy(src: Tensor, dst: Tensor) -> None:
    """``ggml_backend_tensor_copy``: copy ``src``'s bytes into ``dst`` (any buffers, any devices).

    Raises:
        ShapeError: the layouts differ (type, ``ne`` or ``nb``).
        NoMemoryError: either tensor has no memory.
        DanglingPointerError: strict mode, and either tensor's buffer was freed.
    """
    if not same_layout(src, dst):
        raise ShapeError(
            f"tensor_copy: {label(src)} is {src.type.label}{list(src.ne)} strides {list(src.nb)} but "
            f"{label(dst)} is {dst.type.label}{list(dst.ne)} strides {list(dst.nb)}; the layouts must match"
        )
    if src is dst:
        return
    for role, t in (("source", src), ("destination", dst)):
        try:
            tensor_array(t)  # no memory: NoMemoryError; freed in strict mode: DanglingPointerError
        except NoMemoryError as exc:
            raise NoMemoryError(f"tensor_copy: the {role} {exc}") from None
    nbytes = src.nbytes
    if nbytes:
        s_st, d_st = src.storage, dst.storage
        assert s_st is not None and d_st is not None and src.data is not None and dst.data is not None
        s_off, d_off = src.data - s_st.base, dst.data - d_st.base
        copy_bytes(s_st, s_off, d_st, d_off, nbytes)
    if recorder.active():
        recorder.emit(ev.TensorCopy, src.id, dst.id, nbytes)


def copy_bytes(src: Storage, src_off: int, dst: Storage, dst_off: int, nbytes: int) -> None:
    """Move ``nbytes`` between two storages (host numpy, or a device array module).

    Device arrays are reached only through their own methods (``get``/``set``/``device``),
    so this module never imports a device library.
    """
    s = src.mem[src_off:src_off + nbytes]
    d = dst.mem[dst_off:dst_off + nbytes]
    s_host, d_host = src.xp is np, dst.xp is np
    if s_host and d_host:
        d[...] = s  # numpy handles overlapping ranges (memmove semantics)
    elif d_host:
        d[...] = s.get()
    elif s_host:
        d.set(np.ascontiguousarray(s))
    elif src.mem.device == dst.mem.device:
        with dst.mem.device:
            d[...] = s
    else:
        d.set(s.get())  # across devices through the host: slow, like ggml's fallback


@dataclass(frozen=True)
class GraphCopy:
    """``struct ggml_backend_graph_copy``: the copy and what holds it; ``free()`` releases it."""

    buffer: Buffer | list[Buffer]
    ctx_allocated: Context
    ctx_unallocated: Context
    graph: Graph

    def free(self) -> None:
        """``ggml_backend_graph_copy_free``."""
        for buf in self.buffer if isinstance(self.buffer, list) else [self.buffer]:
            buf.free(cause="graph_copy freed")
        self.ctx_allocated.free()
        self.ctx_unallocated.free()


def graph_copy(backend: Backend, graph: Graph) -> GraphCopy:
    """``ggml_backend_graph_copy``: deep-copy an allocated graph into ``backend``'s memory.

    As in ggml: the copies are made in pre-order from each node (a tensor before its
    view root and its sources); non-views go into ``ctx_allocated``, laid out by the
    linear allocator in that order, views into ``ctx_unallocated``; then every
    non-view's bytes are copied and every view is bound with ``view_init``. The copy
    graph holds the nodes only (ggml leaves its leaf list empty).

    Where vizalloc differs: ggml sets a copy's sources after creating it; here the
    copy is created without sources and each slot is then reported as a
    ``TensorSrcSet`` event. A view's copy is created once its root's copy exists
    (ggml creates it just before), which changes no offset: views take no bytes.

    Raises:
        GraphError: some tensor of the graph has no memory (the graph must be allocated).
    """
    copies: dict[int, Tensor] = {}
    ctx_alloc = Context(name=f"graph_copy{graph.id}.allocated")
    ctx_unalloc = Context(name=f"graph_copy{graph.id}.unallocated")
    for node in graph.nodes:
        _dup_preorder(node, copies, ctx_alloc, ctx_unalloc)
    buffer = alloc_ctx_tensors(ctx_alloc, backend.buffer_type)
    if buffer is None:
        ctx_alloc.free()
        ctx_unalloc.free()
        raise AllocationError(f"graph_copy: graph #{graph.id} has no bytes to copy onto {backend.name}")
    inited: set[int] = set()
    for node in graph.nodes:
        _init_preorder(node, copies, inited)
    out = Graph(graph.size, False, _kind="deep_copy", _source=graph)
    out._extend([copies[n.id] for n in graph.nodes], ())
    return GraphCopy(buffer, ctx_alloc, ctx_unalloc, out)


def _enter_next_src(srcs: Sequence[Tensor | None], k: int, enter: Callable[[Tensor], bool]) -> tuple[int, bool]:
    """One step of a frame's walk over its sources: ``enter`` the first source from slot ``k``
    on that it accepts. Returns the slot to resume from and whether one was entered (the
    recursive ggml function would descend into it now)."""
    while k < len(srcs):
        s = srcs[k]
        k += 1
        if s is not None and enter(s):
            return k, True
    return k, False


def _dup_preorder(root: Tensor, copies: dict[int, Tensor], ctx_alloc: Context, ctx_unalloc: Context) -> None:
    """``graph_copy_dup_tensor`` without recursion: frames are [src, copy, next slot]."""
    seen_or_done = copies  # a tensor is in ``copies`` once finished; ``entered`` covers the rest
    entered: set[int] = set()
    frames: list[list[Any]] = []

    def enter(src: Tensor) -> bool:
        if src.id in seen_or_done or src.id in entered:
            return False
        if src.data is None:
            raise GraphError(f"graph_copy: tensor {label(src)} ({src.op.name}) has no memory; the graph must be allocated")
        entered.add(src.id)
        dst = None
        if src.view_src is None:
            dst = ctx_alloc.new_tensor_impl(src.type, src.ne, nb=src.nb, op=src.op, op_params=src.op_params,
                                            name=src.name, copy_of=src)
        frames.append([src, dst, -1])
        return True

    enter(root)
    while frames:
        frame = frames[-1]
        src = frame[0]
        if frame[2] == -1:
            frame[2] = 0
            if src.view_src is not None and enter(src.view_src):
                continue
        if frame[1] is None:  # a view: its root's copy exists now
            frame[1] = ctx_unalloc.new_tensor_impl(
                src.type, src.ne, copies[src.view_src.id], src.view_offs, nb=src.nb,
                op=src.op, op_params=src.op_params, name=src.name, copy_of=src,
            )
        srcs = src.src
        frame[2], pushed = _enter_next_src(srcs, frame[2], enter)
        if pushed:
            continue
        frames.pop()
        dst = frame[1]
        dst.src = [None if s is None else copies[s.id] for s in srcs]
        dst.flags = int(src.flags)
        if recorder.active():
            for slot, s in enumerate(dst.src):
                if s is not None:
                    recorder.emit(ev.TensorSrcSet, dst.id, slot, s.id)
            if dst.flags:
                recorder.emit(ev.TensorFlagsSet, dst.id, dst.flags)
        copies[src.id] = dst


def _init_preorder(root: Tensor, copies: dict[int, Tensor], inited: set[int]) -> None:
    """``graph_copy_init_tensor`` without recursion: copy bytes, bind views, then the sources."""
    frames: list[list[Any]] = []

    def enter(src: Tensor) -> bool:
        if src.id in inited:
            return False
        inited.add(src.id)
        frames.append([src, -1])
        return True

    enter(root)
    while frames:
        frame = frames[-1]
        src = frame[0]
        dst = copies[src.id]
        if frame[1] == -1:
            frame[1] = -2
            if dst.view_src is not None and enter(src.view_src):
                continue
        if frame[1] == -2:
            frame[1] = 0
            if dst.view_src is not None:
                view_init(dst)
            else:
                tensor_copy(src, dst)
        frame[1], pushed = _enter_next_src(src.src, frame[1], enter)
        if not pushed:
            frames.pop()
