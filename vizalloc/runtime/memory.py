"""Giving tensors bytes and reaching them (ggml-backend.c): tensor_alloc, view_init,
clear_tensor_pointers, and tensor_set / tensor_get. The allocators that decide where
tensors go are in ``vizalloc.runtime.alloc``.

    >>> import numpy as np
    >>> from vizalloc.runtime import Context, F32
    >>> from vizalloc.runtime.buffer import BufferType
    >>> from vizalloc.runtime.alloc import alloc_ctx_tensors
    >>> from vizalloc.runtime.memory import tensor_set, tensor_get
    >>> ctx = Context(); w = ctx.new_tensor_1d(F32, 4)
    >>> buf = alloc_ctx_tensors(ctx, BufferType("CPU"))
    >>> tensor_set(w, np.arange(4, dtype=np.float32)); tensor_get(w).tolist()
    [0.0, 1.0, 2.0, 3.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vizalloc.errors import AllocationError, NoMemoryError, ShapeError
from vizalloc.runtime.buffer import Buffer, Storage
from vizalloc.runtime.tensor import Tensor, label
from vizalloc.trace import events as ev
from vizalloc.trace import recorder



# -- placing ------------------------------------------------------------------

def tensor_alloc(buffer: Buffer, t: Tensor, address: int, *, by: ev.PlacedBy = ev.PlacedBy.USER,
                 binding_id: int = -1) -> None:
    """``ggml_backend_tensor_alloc``: place ``t`` at ``address`` inside ``buffer``."""
    if t.buffer is not None or t.data is not None:
        raise AllocationError(f"tensor {label(t)} already has memory; clear its pointers before placing it again")
    if t.view_src is not None:
        raise AllocationError(f"tensor {label(t)} is a view; views get their root's bytes through view_init")
    need = buffer.buft.alloc_size(t)
    if address < buffer.base or address + need > buffer.base + buffer.nbytes:
        raise AllocationError(
            f"tensor {label(t)} needs {need} bytes at offset {address - buffer.base}, "
            f"but buffer #{buffer.id} has {buffer.nbytes} bytes",
            requested=need, available=buffer.nbytes,
        )
    t.buffer = buffer
    t.data = address
    t.storage = buffer
    if recorder.active():
        recorder.emit(ev.TensorPlaced, t.id, buffer.id, address - buffer.base, t.nbytes, by, binding_id)


def view_init(t: Tensor, *, binding_id: int = -1) -> None:
    """``ggml_backend_view_init``: bind a view to its root's bytes (root + view_offs)."""
    root = t.view_src
    if root is None or t.buffer is not None:
        raise AllocationError(f"view_init: tensor {label(t)} is not an unbound view")
    if root.buffer is None or root.data is None:
        raise NoMemoryError(f"view_init: the root {label(root)} of view {label(t)} has no memory yet")
    t.buffer = root.buffer
    t.data = root.data + t.view_offs
    t.storage = root.storage
    if recorder.active():
        storage = root.storage
        assert storage is not None
        recorder.emit(ev.TensorPlaced, t.id, storage.id, t.data - storage.base, t.nbytes,
                      ev.PlacedBy.VIEW_INIT, binding_id)


def clear_tensor_pointers(t: Tensor, by: str = "user") -> None:
    """Set ``data``, ``buffer`` and ``extra`` to none (the 'clear' cure for stale tensors)."""
    if t.data is None and t.buffer is None and t.extra is None:
        return
    t.data = None
    t.buffer = None
    t.extra = None
    t.storage = None
    if recorder.active():
        recorder.emit(ev.TensorCleared, t.id, by)


# -- reaching the bytes -----------------------------------------------------------

def tensor_array(t: Tensor) -> Any:
    """A strided array over ``t``'s bytes (numpy or cupy), shape ``(ne3, ne2, ne1, ne0)``.

    Writing into it writes the buffer: aliasing between tensors is real.
    """
    storage = t.storage
    if t.data is None or storage is None:
        raise NoMemoryError(
            f"tensor {label(t)} ({t.op.name}, {t.type.label}{list(t.ne)}) has no memory; "
            "allocate its graph or context before computing or reading it"
        )
    storage.check_usable(t)
    return array_view(storage, t.data - storage.base, t)


def array_view(storage: Storage, offset: int, t: Tensor) -> Any:
    ne, nb = t.ne, t.nb
    shape = (ne[3], ne[2], ne[1], ne[0])
    strides = (nb[3], nb[2], nb[1], nb[0])
    xp = storage.xp
    if xp is np:
        if 0 in ne:
            return np.zeros(shape, dtype=t.type.numpy)
        return np.ndarray(shape, dtype=t.type.numpy, buffer=storage.mem, offset=offset, strides=strides)
    # any other array module (cupy) builds the view from a device pointer
    return xp.ndarray(shape, dtype=t.type.numpy, memptr=storage.mem.data + offset, strides=strides)


def numpy_shape(t: Tensor) -> tuple[int, ...]:
    """``t.ne`` reversed with the unused outer 1s dropped (at least one dimension)."""
    ne = list(t.ne)
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return tuple(reversed(ne))


def tensor_set(t: Tensor, values: Any, offset: int = 0, nbytes: int | None = None) -> None:
    """``ggml_backend_tensor_set``: copy ``values`` into ``t``'s bytes (whole tensor, or a byte range)."""
    arr = tensor_array(t)
    xp = t.storage.xp  # type: ignore[union-attr]
    src = np.asarray(values) if xp is np else xp.asarray(values)
    if offset == 0 and nbytes is None:
        if src.size != t.nelements:
            raise ShapeError(
                f"tensor_set: tensor {label(t)} has {t.nelements} elements {list(t.ne)}, got {src.size}"
            )
        arr[...] = src.reshape(arr.shape).astype(t.type.numpy, copy=False)
        nbytes = t.nbytes
    else:
        if not t.is_contiguous:
            raise ShapeError(f"tensor_set with a byte range needs a contiguous tensor; {label(t)} is not")
        raw = src.astype(t.type.numpy, copy=False).view(np.uint8).reshape(-1) if xp is np else \
            src.astype(t.type.numpy, copy=False).view(xp.uint8).reshape(-1)
        nbytes = raw.size if nbytes is None else nbytes
        if offset + nbytes > t.nbytes:
            raise ShapeError(f"tensor_set: bytes [{offset}, {offset + nbytes}) exceed tensor {label(t)}'s {t.nbytes}")
        start = t.data - t.storage.base + offset  # type: ignore[operator,union-attr]
        t.storage.mem[start:start + nbytes] = raw[:nbytes]  # type: ignore[union-attr]
    if recorder.active():
        recorder.emit(ev.TensorSet, t.id, offset, nbytes)


def tensor_get(t: Tensor, offset: int = 0, nbytes: int | None = None) -> np.ndarray:
    """``ggml_backend_tensor_get``: a host copy of ``t``.

    The whole tensor comes back in numpy order: ``ne`` reversed, with ggml's unused
    outer dimensions of 1 dropped (``ne = (4, 3, 1, 1)`` gives shape ``(3, 4)``). A byte
    range comes back as raw ``uint8``.
    """
    arr = tensor_array(t)
    if offset == 0 and nbytes is None:
        out = arr.copy() if t.storage.xp is np else t.storage.xp.asnumpy(arr)  # type: ignore[union-attr]
        out = out.reshape(numpy_shape(t))
        nbytes = t.nbytes
    else:
        start = t.data - t.storage.base + offset  # type: ignore[operator,union-attr]
        nbytes = t.nbytes - offset if nbytes is None else nbytes
        raw = t.storage.mem[start:start + nbytes]  # type: ignore[union-attr]
        out = raw.copy() if t.storage.xp is np else t.storage.xp.asnumpy(raw)  # type: ignore[union-attr]
    if recorder.active():
        recorder.emit(ev.TensorGet, t.id, offset, nbytes)
    return out


def tensor_memset(t: Tensor, value: int = 0) -> None:
    """``ggml_backend_tensor_memset`` over the whole tensor."""
    arr = tensor_array(t)
    arr.view(np.uint8 if t.storage.xp is np else t.storage.xp.uint8)[...] = value  # type: ignore[union-attr]
    if recorder.active():
        recorder.emit(ev.TensorSet, t.id, 0, t.nbytes)
