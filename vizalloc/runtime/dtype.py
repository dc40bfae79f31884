"""Element types with ggml's sizes (``src/ggml.c`` type_traits).

    >>> from vizalloc.runtime.dtype import DType
    >>> DType.F16.type_size, DType.F16.numpy
    (2, dtype('float16'))
"""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """A tensor element type. Block size is 1 for every type vizalloc computes with."""

    F32 = ("f32", 4, np.dtype(np.float32))
    F16 = ("f16", 2, np.dtype(np.float16))
    I32 = ("i32", 4, np.dtype(np.int32))

    def __init__(self, label: str, type_size: int, np_dtype: np.dtype) -> None:
        self.label = label
        self.type_size = type_size
        self.blck_size = 1
        self.numpy = np_dtype

    @classmethod
    def from_label(cls, label: str) -> DType:
        """The type named ``label`` (``"f32"``, ``"f16"``, ``"i32"``), as ggml_type_name prints it."""
        for t in cls:
            if t.label == label.lower():
                return t
        raise ValueError(f"unknown tensor type {label!r} (vizalloc knows f32, f16, i32)")

    def __repr__(self) -> str:
        return f"DType.{self.name}"


F32 = DType.F32
F16 = DType.F16
I32 = DType.I32
