"""Giving tensors bytes and reaching them (ggml-backend.c): tensor_alloc, view_init,
clear_tensor_pointers, and tensor_set / tensor_get; observe_placement for the bytes a real
process gave a tensor (the capture's one way to place). The allocators that decide where
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

from vizalloc.errors import AllocationError, BoundsError, NoMemoryError, ShapeError
from vizalloc.runtime.buffer import VIRTUAL, Buffer, Storage
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


def observe_placement(t: Tensor, storage: Storage, offset: int, *, names_buffer: bool,
                      by: ev.PlacedBy = ev.PlacedBy.OBSERVED) -> bool:
    """A placement seen in a real process (``vizalloc.capture``): ``t`` gets the bytes at
    ``offset`` of ``storage``, whoever chose them. ``names_buffer``: whether the real tensor
    names a buffer. Its ``buffer`` follows ggml: a root's is the buffer holding it; a view's is
    its root's as ``view_init`` set it, the buffer its bytes lie in, even if the root moved
    since (a stale view); none when the real tensor names none (memory a context allocated
    itself, a view not initialised yet). The graph allocator reads nothing else of it: it
    re-initialises a view without a buffer from its root and leaves one with a buffer alone.
    Returns False when ``t`` already had those bytes (only its buffer may change then, which
    no event records)."""
    buffer = storage if names_buffer and isinstance(storage, Buffer) else None
    if t.data is not None and t.storage is storage and t.data - storage.base == offset:
        t.buffer = buffer
        return False
    clear_tensor_pointers(t, by="program")
    t.buffer = buffer
    t.data = storage.base + offset
    t.storage = storage
    if recorder.active():
        recorder.emit(ev.TensorPlaced, t.id, storage.id, offset, t.nbytes, by, -1)
    return True


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


def tensor_array(t: Tensor) -> Any:
    """A strided array over ``t``'s bytes (numpy or cupy), shape ``(ne3, ne2, ne1, ne0)``.

    Writing into it writes the buffer: aliasing between tensors is real.
    """
    storage = placed_storage(t)
    return array_view(storage, t.data - storage.base, t)  # type: ignore[operator]


def placed_storage(t: Tensor) -> Storage:
    """The memory ``t`` points into; ``NoMemoryError`` when it has none (strict mode:
    ``DanglingPointerError`` when that memory was freed)."""
    storage = t.storage
    if t.data is None or storage is None:
        raise NoMemoryError(
            f"tensor {label(t)} ({t.op.name}, {t.type.label}{list(t.ne)}) has no memory; "
            "allocate its graph or context before computing or reading it"
        )
    if storage.xp is VIRTUAL:
        raise NoMemoryError(
            f"tensor {label(t)} lives in buffer #{storage.id}, which has addresses but no bytes (the plan of a "
            "recorded process); its values cannot be read or written"
        )
    storage.check_usable(t)
    return storage


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


#: numpy kinds tensor_set takes: booleans, integers, unsigned integers, floats
_NUMERIC_KINDS = frozenset("biuf")


def _byte_count(t: Tensor, what: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise BoundsError(f"{what}: tensor {label(t)}: {name} must be an integer number of bytes, "
                          f"got {type(v).__name__} {v!r:.40}")
    return int(v)


def _check_range(t: Tensor, what: str, offset: int, nbytes: int) -> None:
    """Bytes ``[offset, offset + nbytes)`` must lie inside ``t``'s own bytes (ggml asserts
    ``offset + size <= ggml_nbytes(tensor)``, with size_t arguments that cannot be negative)."""
    if offset < 0 or nbytes < 0 or offset + nbytes > t.nbytes:
        raise BoundsError(f"{what}: bytes [{offset}, {offset + nbytes}) are outside tensor {label(t)} "
                          f"({t.type.label}{list(t.ne)}, bytes [0, {t.nbytes})); a tensor's own bytes are the bound")


def host_values(t: Tensor, values: Any, what: str = "tensor_set") -> np.ndarray:
    """``values`` as a numpy array of ``t``'s element type, converted as documented in
    :func:`tensor_set`; anything else is a ``ShapeError`` naming the tensor."""
    if isinstance(values, np.ndarray):
        src = values
    else:
        if isinstance(values, (str, bytes)):
            raise ShapeError(f"{what}: tensor {label(t)} takes numbers, got {type(values).__name__} {values!r:.40}")
        try:
            src = np.asarray(values)
        except (ValueError, TypeError) as exc:  # ragged nested lists, odd objects
            raise ShapeError(f"{what}: tensor {label(t)} takes a rectangular array of numbers; "
                             f"numpy cannot make one of the {type(values).__name__} given ({exc})") from None
    kind = src.dtype.kind
    if t.type.numpy is None:
        # a block type (q4_0, ...) has no numpy equivalent: only its raw bytes can be given
        if src.dtype != np.uint8:
            raise ShapeError(f"{what}: tensor {label(t)} is {t.type.label} (blocks of {t.type.blck_size} elements "
                             f"in {t.type.type_size} bytes), which numpy has no type for; pass its raw bytes as a "
                             f"uint8 array, got {src.dtype}")
        return src
    if kind not in _NUMERIC_KINDS:
        raise ShapeError(f"{what}: tensor {label(t)} ({t.type.label}) takes numbers, got an array of "
                         f"{src.dtype} (kind {kind!r}); convert it first")
    want = t.type.numpy
    if src.dtype == want:
        return src
    if want.kind in "iu" and kind == "f":
        # a float that is not a whole number has no i32 value (numpy would give INT_MIN for NaN)
        bad = ~np.isfinite(src) | (src != np.round(src)) if src.size else np.zeros(0, dtype=bool)
        if bad.any():
            first = src.reshape(-1)[int(np.argmax(bad.reshape(-1)))].item()
            raise ShapeError(f"{what}: tensor {label(t)} is {t.type.label}, and {first!r} has no integer value; "
                             "round the data (or use a float tensor)")
    if want.kind in "iu" and kind in "fiu" and src.size:
        info = np.iinfo(want)
        lo, hi = src.min().item(), src.max().item()
        if lo < info.min or hi > info.max:
            raise ShapeError(f"{what}: tensor {label(t)} is {t.type.label}, and the data holds "
                             f"{lo if lo < info.min else hi!r}, outside [{info.min}, {info.max}]")
    with np.errstate(over="ignore"):  # a float beyond f16/f32 becomes inf, as a C cast
        return src.astype(want)


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for n in shape if n != 1)


def tensor_set(t: Tensor, values: Any, offset: int = 0, nbytes: int | None = None) -> None:
    """``ggml_backend_tensor_set``: copy ``values`` into ``t``'s bytes (whole tensor, or a byte range).

    ``values`` is anything numpy turns into a rectangular array of numbers. It is
    converted to the tensor's element type explicitly: floats of any width are rounded to
    f32/f16 as numpy does (beyond their range: inf, as a C cast), integers and booleans become their value; a float into an i32
    tensor must be a whole number and an integer must fit i32 (else ``ShapeError``, never
    numpy's silent INT_MIN or wrap-around). Strings, objects and ragged lists are refused.

    The whole tensor takes an array of its numpy shape (``ne`` reversed, see
    :func:`tensor_get`), of any shape that differs from it only by dimensions of 1, or a
    flat array of all its elements in memory order. An array of another shape with the
    same number of elements is refused (a transposed array would silently scramble the
    tensor): pass ``a.T``, ``a.reshape(...)`` or ``a.ravel()`` to say what you mean.

    With ``offset`` or ``nbytes``, the bytes of the converted values go to bytes
    ``[offset, offset + nbytes)`` of the tensor (``nbytes`` defaults to all of them). The
    range must lie inside the tensor's own bytes and ``nbytes`` may not exceed the data
    (``BoundsError``). A block type (q4_0, q8_0, ...) takes its raw bytes as ``uint8``,
    always written as a byte range.
    """
    t.check_alive()
    storage = placed_storage(t)
    assert t.data is not None
    xp = storage.xp
    src = host_values(t, values)
    if offset == 0 and nbytes is None and t.type.numpy is not None:
        arr = array_view(storage, t.data - storage.base, t)
        if src.shape != arr.shape:
            if src.size != t.nelements:
                raise ShapeError(f"tensor_set: tensor {label(t)} has {t.nelements} elements "
                                 f"(numpy shape {numpy_shape(t)}), got {src.size} (shape {src.shape})")
            if src.ndim != 1 and _squeezed(src.shape) != _squeezed(arr.shape):
                hint = " (it looks transposed)" if _squeezed(src.shape)[::-1] == _squeezed(arr.shape) else ""
                raise ShapeError(f"tensor_set: tensor {label(t)} has numpy shape {numpy_shape(t)} "
                                 f"(ne {list(t.ne)}), got an array of shape {src.shape}{hint}; pass a.T, "
                                 "a.reshape(...) or a.ravel() to say which element goes where")
            src = src.reshape(arr.shape)
        arr[...] = src if xp is np else xp.asarray(src)
        nbytes = t.nbytes
    else:
        raw = src.reshape(-1).view(np.uint8)
        offset = _byte_count(t, "tensor_set", "offset", offset)
        nbytes = raw.size if nbytes is None else _byte_count(t, "tensor_set", "nbytes", nbytes)
        _check_range(t, "tensor_set", offset, nbytes)
        if nbytes > raw.size:
            raise BoundsError(f"tensor_set: {nbytes} bytes asked for tensor {label(t)}, the data has {raw.size}")
        start = t.data - storage.base + offset
        storage.mem[start:start + nbytes] = raw[:nbytes] if xp is np else xp.asarray(raw[:nbytes])
    if recorder.active():
        recorder.emit(ev.TensorSet, t.id, offset, nbytes)


def tensor_get(t: Tensor, offset: int = 0, nbytes: int | None = None) -> np.ndarray:
    """``ggml_backend_tensor_get``: a host copy of ``t``.

    The whole tensor comes back in numpy order: ``ne`` reversed, with ggml's unused
    outer dimensions of 1 dropped (``ne = (4, 3, 1, 1)`` gives shape ``(3, 4)``). A byte
    range (inside the tensor's own bytes, else ``BoundsError``), or any part of a block
    type (q4_0, ...), comes back as raw ``uint8``.
    """
    t.check_alive()
    storage = placed_storage(t)
    assert t.data is not None
    if offset == 0 and nbytes is None and t.type.numpy is not None:
        arr = array_view(storage, t.data - storage.base, t)
        out = arr.copy() if storage.xp is np else storage.xp.asnumpy(arr)
        out = out.reshape(numpy_shape(t))
        nbytes = t.nbytes
    else:
        offset = _byte_count(t, "tensor_get", "offset", offset)
        nbytes = t.nbytes - offset if nbytes is None else _byte_count(t, "tensor_get", "nbytes", nbytes)
        _check_range(t, "tensor_get", offset, nbytes)
        start = t.data - storage.base + offset
        raw = storage.mem[start:start + nbytes]
        out = raw.copy() if storage.xp is np else storage.xp.asnumpy(raw)
    if recorder.active():
        recorder.emit(ev.TensorGet, t.id, offset, nbytes)
    return out


def tensor_memset(t: Tensor, value: int = 0) -> None:
    """``ggml_backend_tensor_memset`` over the whole tensor."""
    t.check_alive()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= 255:
        raise ShapeError(f"tensor_memset: tensor {label(t)}: the byte value must be an integer in 0..255, "
                         f"got {value!r:.40}")
    arr = tensor_array(t)
    arr.view(np.uint8 if t.storage.xp is np else t.storage.xp.uint8)[...] = value  # type: ignore[union-attr]
    if recorder.active():
        recorder.emit(ev.TensorSet, t.id, 0, t.nbytes)
