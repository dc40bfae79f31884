"""Contexts make tensors (``ggml_context``), remember them in creation order, and can be freed.

A context is normally ``no_alloc`` (ggml's way with backends): tensors get memory
later from an allocator. With ``no_alloc=False`` the context owns a pool of
``mem_size`` bytes and places each new non-view tensor in it, as ``ggml_init`` does
(the pool's offsets are vizalloc's own; ggml interleaves object headers).

    >>> from vizalloc.runtime import Context, F32
    >>> ctx = Context(name="weights")
    >>> w = ctx.new_tensor_2d(F32, 8, 4)
    >>> [t is w for t in ctx.tensors()]
    [True]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from vizalloc.errors import BoundsError, ContextError, ShapeError
from vizalloc.runtime.buffer import BufferType, Usage, pad, whole_number
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.tensor import MAX_SRC, Op, Tensor, contiguous_strides
from vizalloc.trace import events as ev
from vizalloc.trace import recorder
from vizalloc.trace.events import ggml_nbytes

_ctx_ids = itertools.count()
_CONTEXT_ALIGNMENT = 16  # GGML_MEM_ALIGN
_POOL_TYPE = BufferType("ctx", alignment=_CONTEXT_ALIGNMENT)


class Context:
    """Makes and owns tensors.

    Args:
        name: shown in traces and errors.
        no_alloc: tensors get no memory here (ggml's ``no_alloc = true``).
        mem_size: bytes of the context's own pool when ``no_alloc`` is False.
        max_tensors: how many tensors fit (ggml sizes a no_alloc context by count); None: no limit.
    """

    def __init__(
        self, name: str = "", no_alloc: bool = True, mem_size: int = 0, max_tensors: int | None = None
    ) -> None:
        self.id = next(_ctx_ids)
        self.name = name or f"ctx{self.id}"
        self.no_alloc = no_alloc
        self.max_tensors = max_tensors
        self.freed = False
        self._tensors: list[Tensor] = []
        self._pool = None
        self._pool_offset = 0
        if recorder.active():
            recorder.emit(ev.ContextCreated, self.id, self.name, no_alloc)
        if not no_alloc:
            self._pool = _POOL_TYPE.alloc_buffer(mem_size, Usage.ANY, cause=f"context {self.name}")

    # -- creation ----------------------------------------------------------
    def new_tensor_impl(
        self,
        dtype: DType,
        ne: Sequence[int],
        view_src: Tensor | None = None,
        view_offs: int = 0,
        *,
        nb: Sequence[int] | None = None,
        op: Op = Op.NONE,
        src: Sequence[Tensor | None] = (),
        op_params: tuple[Any, ...] = (),
        name: str = "",
        copy_of: Tensor | None = None,
    ) -> Tensor:
        """``ggml_new_tensor_impl`` plus the op fields, recorded as one ``TensorCreated``.

        A view of a view is collapsed onto the root (``view_offs`` summed); a view of a
        root that already has data gets its address now, with no buffer (as in ggml).
        """
        if self.freed:
            raise ContextError(f"context {self.name!r} was freed; it cannot make tensor {name!r}")
        if self.max_tensors is not None and len(self._tensors) >= self.max_tensors:
            raise ContextError(
                f"context {self.name!r} is full ({self.max_tensors} tensors); create it with a larger max_tensors"
            )
        ne4 = _shape(ne, name)
        nb4 = contiguous_strides(dtype, ne4) if nb is None else _strides(nb, name)
        if view_src is not None:
            offs = view_offs if type(view_offs) is int else whole_number(view_offs)
            if offs is None or offs < 0:
                raise BoundsError(f"view {name!r} of {view_src.name!r}: offset {view_offs!r:.40} must be a "
                                  "whole number of bytes, 0 or more")
            view_offs = offs
            if view_src.view_src is not None:
                view_offs += view_src.view_offs
                view_src = view_src.view_src
            # ggml_new_tensor_impl checks the element count ...
            need = dtype.type_size * ne4[0] * ne4[1] * ne4[2] * ne4[3] // dtype.blck_size
            if need and view_offs + need > view_src.nbytes:
                raise ShapeError(
                    f"view {name!r} of {view_src.name!r}: bytes [{view_offs}, {view_offs + need}) exceed the "
                    f"source's {view_src.nbytes} bytes"
                )
            # ... and vizalloc also the bytes the strides reach (where ggml would read past the source)
            span = ggml_nbytes(dtype.type_size, dtype.blck_size, ne4, nb4)
            if span and view_offs + span > view_src.nbytes:
                raise BoundsError(
                    f"view {name!r} of {view_src.name!r}: shape {list(ne4)} with strides {list(nb4)} at offset "
                    f"{view_offs} reaches bytes [{view_offs}, {view_offs + span}), outside the source's "
                    f"{view_src.nbytes} bytes"
                )
        t = Tensor(self, dtype, ne4, nb4, view_src, view_offs)
        t.op = op
        t.op_params = tuple(op_params)
        srcs = list(src)
        while srcs and srcs[-1] is None:
            srcs.pop()
        if len(srcs) > MAX_SRC:
            raise ShapeError(f"op {op.name} got {len(srcs)} sources; ggml allows {MAX_SRC}")
        t.src = srcs
        t.name = name
        self._tensors.append(t)
        placed_now = False
        if view_src is not None and view_src.data is not None:
            t.data = view_src.data + view_offs
            t.storage = view_src.storage
            placed_now = True
        elif view_src is None and self._pool is not None:
            nbytes = t.nbytes
            size = pad(nbytes, _CONTEXT_ALIGNMENT)
            if self._pool_offset + size > self._pool.nbytes:
                raise ContextError(
                    f"context {self.name!r} has no room for tensor {name!r}: needs {size} bytes, "
                    f"{self._pool.nbytes - self._pool_offset} of {self._pool.nbytes} left; raise mem_size"
                )
            t.data = self._pool.base + self._pool_offset
            t.storage = self._pool
            self._pool_offset += size
            placed_now = True
        if recorder.active():
            recorder.emit(
                ev.TensorCreated, t.id, self.id, t.name, dtype.label, t.ne, t.nb, op.value,
                _params_for_trace(t.op_params),
                tuple([-1 if s is None else s.id for s in srcs]),
                -1 if view_src is None else view_src.id, view_offs, t.flags,
                -1 if copy_of is None else copy_of.id,
            )
            if placed_now:
                storage = t.storage
                assert storage is not None and t.data is not None
                by = ev.PlacedBy.VIEW_CREATE if view_src is not None else ev.PlacedBy.CONTEXT
                recorder.emit(ev.TensorPlaced, t.id, storage.id, t.data - storage.base, t.nbytes, by, -1)
        return t

    def new_tensor(self, dtype: DType, ne: Sequence[int], name: str = "") -> Tensor:
        """``ggml_new_tensor``: a fresh contiguous tensor of shape ``ne`` (ne[0] innermost)."""
        return self.new_tensor_impl(dtype, ne, name=name)

    def new_tensor_1d(self, dtype: DType, ne0: int, name: str = "") -> Tensor:
        return self.new_tensor_impl(dtype, (ne0,), name=name)

    def new_tensor_2d(self, dtype: DType, ne0: int, ne1: int, name: str = "") -> Tensor:
        return self.new_tensor_impl(dtype, (ne0, ne1), name=name)

    def new_tensor_3d(self, dtype: DType, ne0: int, ne1: int, ne2: int, name: str = "") -> Tensor:
        return self.new_tensor_impl(dtype, (ne0, ne1, ne2), name=name)

    def new_tensor_4d(self, dtype: DType, ne0: int, ne1: int, ne2: int, ne3: int, name: str = "") -> Tensor:
        return self.new_tensor_impl(dtype, (ne0, ne1, ne2, ne3), name=name)

    def dup_tensor(self, t: Tensor, name: str = "") -> Tensor:
        """``ggml_dup_tensor``: same type and shape, contiguous strides, no op."""
        return self.new_tensor_impl(t.type, t.ne, name=name)

    def view_tensor(self, t: Tensor, name: str = "") -> Tensor:
        """``ggml_view_tensor``: an op-NONE view with ``t``'s shape and strides."""
        return self.new_tensor_impl(t.type, t.ne, t, 0, nb=t.nb, name=name or f"{t.name} (view)")

    # -- iteration and lifetime ---------------------------------------------
    def tensors(self) -> Iterator[Tensor]:
        """Every tensor in creation order (``ggml_get_first_tensor`` / ``ggml_get_next_tensor``)."""
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def get_tensor(self, name: str) -> Tensor | None:
        """``ggml_get_tensor``: the first tensor called ``name``."""
        for t in self._tensors:
            if t.name == name:
                return t
        return None

    def free(self) -> None:
        """``ggml_free``: tensors of this context may no longer be used."""
        if self.freed:
            return
        self.freed = True
        # ggml_free releases the tensor structs with the context; dropping the list also
        # breaks the tensor <-> context reference cycle, so the tensors go as soon as
        # nothing else holds them instead of waiting for a cyclic collection
        self._tensors = []
        if self._pool is not None:
            self._pool.free(cause=f"context {self.name} freed")
        if recorder.active():
            recorder.emit(ev.ContextFreed, self.id)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        return f"<Context {self.name} {len(self._tensors)} tensors{' freed' if self.freed else ''}>"


#: ggml keeps dimensions in int64_t and byte sizes in size_t and multiplies them: a
#: dimension or element count this large would overflow its byte size in C.
MAX_DIM = 2**62 - 1
MAX_ELEMENTS = 2**60


def _shape(ne: Sequence[int], name: str) -> tuple[int, int, int, int]:
    """``ne`` padded to 4 dimensions; whole numbers only (numpy integers too), none negative."""
    n = len(ne)
    if n == 4:
        a, b, c, d = ne
    elif n == 2:
        a, b = ne
        c = d = 1
    elif n == 1:
        a, = ne
        b = c = d = 1
    elif n == 3:
        a, b, c = ne
        d = 1
    else:
        return _shape_checked(ne, name)
    # the usual case, checked without a loop: this runs for every tensor made
    if (type(a) is int and type(b) is int and type(c) is int and type(d) is int and 0 <= a <= MAX_DIM
            and 0 <= b <= MAX_DIM and 0 <= c <= MAX_DIM and 0 <= d <= MAX_DIM and a * b * c * d <= MAX_ELEMENTS):
        return ne if type(ne) is tuple and n == 4 else (a, b, c, d)
    return _shape_checked(ne, name)


def _shape_checked(ne: Sequence[int], name: str) -> tuple[int, int, int, int]:
    if len(ne) > 4:
        raise ShapeError(f"tensor {name!r}: shape {list(ne)!r:.80} has more than 4 dimensions")
    fixed = []
    for i, n in enumerate(ne):
        v = whole_number(n)
        if v is None or v < 0:
            raise ShapeError(f"tensor {name!r}: dimension {i} is {n!r:.40}; dimensions are whole numbers, 0 or more "
                             f"(shape {list(ne)!r:.80})")
        fixed.append(v)
    out = tuple(fixed) + (1,) * (4 - len(fixed))
    if max(out) > MAX_DIM or out[0] * out[1] * out[2] * out[3] > MAX_ELEMENTS:
        raise ShapeError(f"tensor {name!r}: shape {list(ne)} is larger than ggml's 64-bit sizes can hold "
                         f"(at most {MAX_ELEMENTS:,} elements)")
    return out  # type: ignore[return-value]


def _strides(nb: Sequence[int], name: str) -> tuple[int, int, int, int]:
    if len(nb) == 4:
        a, b, c, d = nb
        if type(a) is int and type(b) is int and type(c) is int and type(d) is int and min(a, b, c, d) >= 0:
            return nb if type(nb) is tuple else (a, b, c, d)
    if len(nb) != 4:
        raise ShapeError(f"tensor {name!r}: strides {list(nb)!r:.80} must be 4 byte counts")
    out = []
    for i, n in enumerate(nb):
        v = whole_number(n)
        if v is None or v < 0:
            raise BoundsError(f"tensor {name!r}: stride nb[{i}] is {n!r:.40}; strides are byte counts, 0 or more "
                              "(ggml's size_t)")
        out.append(v)
    return tuple(out)  # type: ignore[return-value]


def _params_for_trace(params: tuple[Any, ...]) -> tuple[int | float | str, ...]:
    """Op params as plain values (enums become their names)."""
    for p in params:  # the usual case: already plain ints, floats and strings (or none)
        cls = type(p)
        if cls is not int and cls is not float and cls is not str:
            break
    else:
        return params
    out: list[int | float | str] = []
    for p in params:
        if isinstance(p, (bool,)):
            out.append(int(p))
        elif isinstance(p, (int, float, str)):
            out.append(p)
        elif hasattr(p, "value"):
            out.append(str(p.value))
        else:
            out.append(str(p))
    return tuple(out)
