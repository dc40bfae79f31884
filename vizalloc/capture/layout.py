"""``struct ggml_tensor`` as bytes: the one layout vizalloc reads, and the ggml versions it
was checked against.

The layout is the same from ggml 0.15.3 (ggml-python 0.0.45) through 0.21.0 (commit
d99724f2) to 0.26.0 (the ggml inside ``xllamacpp==2026.10.11549``): 336 bytes, the fields
below at these offsets. A ggml built with another ``GGML_MAX_NAME`` has the same fields and
a name of another length: its size (``ggml_tensor_overhead``) says how long. The capture
library checks it in the running process with ggml's own accessors
(``ggml_tensor_overhead``, ``ggml_get_name``, ``ggml_nbytes``) before it writes a single
tensor, and refuses a library whose layout differs; this module decodes only what passed
that check.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

TENSOR_SIZE = 336
MAX_DIMS = 4
MAX_SRC = 10
MAX_OP_PARAMS = 16  # int32 words (GGML_MAX_OP_PARAMS = 64 bytes)

# type, buffer, ne[4], nb[4], op, op_params[16], flags, src[10], view_src, view_offs, data,
# name[64], extra (offsets 0, 8, 16, 48, 80, 84, 148, 152, 232, 240, 248, 256, 320)
_STRUCT = struct.Struct("<i4xQ4q4Qi16ii10QQQQ64sQ8x")
assert _STRUCT.size == TENSOR_SIZE


@dataclass(frozen=True, slots=True)
class TensorStruct:
    """One snapshot of a C tensor. Pointers are raw addresses in the traced process (0: NULL)."""

    address: int
    type_id: int
    buffer: int
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    op_id: int
    op_params: tuple[int, ...]  # the 16 int32 words, as ggml stores them
    flags: int
    src: tuple[int, ...]        # ten slots, 0 where empty
    view_src: int
    view_offs: int
    data: int
    name: str

    def same_tensor(self, other: TensorStruct) -> bool:
        """Whether ``other`` is still the tensor this was (only its memory or flags may differ).

        ggml keys tensors by address; when a context is reset and rebuilt (llama.cpp does
        this for every batch) a new tensor appears at an old address. Anything but the data
        pointer, the buffer and the flags changing means a new tensor.
        """
        return (self.type_id == other.type_id and self.ne == other.ne and self.nb == other.nb
                and self.op_id == other.op_id and self.op_params == other.op_params and self.src == other.src
                and self.view_src == other.view_src and self.view_offs == other.view_offs
                and self.name == other.name)


#: the fields before the name, the same in a ggml built with another ``GGML_MAX_NAME``
_FIELDS = struct.Struct("<i4xQ4q4Qi16ii10QQQQ")
NAME_OFFSET = _FIELDS.size  # 256
#: after the name: extra and 8 bytes of padding
NAME_TAIL = 16


def name_length(tensor_size: int) -> int | None:
    """The name length (``GGML_MAX_NAME``, as padded) of a ``struct ggml_tensor`` of
    ``tensor_size`` bytes whose other fields are the known ones; None if no name fits.

        >>> name_length(336), name_length(400), name_length(301)
        (64, 128, None)
    """
    n = tensor_size - NAME_OFFSET - NAME_TAIL
    return n if 8 <= n <= 4096 and n % 8 == 0 else None


def decode(address: int, raw: bytes) -> TensorStruct:
    """The tensor in ``raw`` (``TENSOR_SIZE`` bytes as the capture wrote them, or the size of
    a ggml built with another ``GGML_MAX_NAME``: see ``name_length``)."""
    if len(raw) == TENSOR_SIZE:
        f = _STRUCT.unpack(raw)
    else:
        f = (*_FIELDS.unpack_from(raw), raw[NAME_OFFSET:len(raw) - NAME_TAIL])
    name = f[41].split(b"\0", 1)[0].decode("utf-8", "replace")
    return TensorStruct(
        address=address, type_id=f[0], buffer=f[1], ne=f[2:6], nb=f[6:10], op_id=f[10],
        op_params=f[11:27], flags=f[27], src=f[28:38], view_src=f[38], view_offs=f[39], data=f[40],
        name=name,
    )
