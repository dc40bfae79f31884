"""Element types with ggml's sizes (``src/ggml.c`` type_traits).

Every type ggml 0.26.0 knows is here, so graphs captured from a real process (quantized
weights and all) can be described and planned. vizalloc computes with f32, f16 and i32
only (and copies the plain integer and float types); the others have no numpy
equivalent (``numpy`` is None) and serve sizes and placements.

    >>> from vizalloc.runtime.dtype import DType
    >>> DType.F16.type_size, DType.F16.numpy
    (2, dtype('float16'))
    >>> DType.Q4_K.blck_size, DType.Q4_K.type_size, DType.from_label("q4_K") is DType.Q4_K
    (256, 144, True)
"""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """A tensor element type: the name ``ggml_type_name`` prints, bytes per block, elements per block."""

    F32 = ("f32", 4, np.dtype(np.float32))
    F16 = ("f16", 2, np.dtype(np.float16))
    I32 = ("i32", 4, np.dtype(np.int32))
    I8 = ("i8", 1, np.dtype(np.int8))
    I16 = ("i16", 2, np.dtype(np.int16))
    I64 = ("i64", 8, np.dtype(np.int64))
    F64 = ("f64", 8, np.dtype(np.float64))
    BF16 = ("bf16", 2, None)
    Q4_0 = ("q4_0", 18, None, 32)
    Q4_1 = ("q4_1", 20, None, 32)
    Q5_0 = ("q5_0", 22, None, 32)
    Q5_1 = ("q5_1", 24, None, 32)
    Q8_0 = ("q8_0", 34, None, 32)
    Q8_1 = ("q8_1", 36, None, 32)
    Q2_K = ("q2_K", 84, None, 256)
    Q3_K = ("q3_K", 110, None, 256)
    Q4_K = ("q4_K", 144, None, 256)
    Q5_K = ("q5_K", 176, None, 256)
    Q6_K = ("q6_K", 210, None, 256)
    Q8_K = ("q8_K", 292, None, 256)
    IQ2_XXS = ("iq2_xxs", 66, None, 256)
    IQ2_XS = ("iq2_xs", 74, None, 256)
    IQ3_XXS = ("iq3_xxs", 98, None, 256)
    IQ1_S = ("iq1_s", 50, None, 256)
    IQ4_NL = ("iq4_nl", 18, None, 32)
    IQ3_S = ("iq3_s", 110, None, 256)
    IQ2_S = ("iq2_s", 82, None, 256)
    IQ4_XS = ("iq4_xs", 136, None, 256)
    IQ1_M = ("iq1_m", 56, None, 256)
    TQ1_0 = ("tq1_0", 54, None, 256)
    TQ2_0 = ("tq2_0", 66, None, 256)
    MXFP4 = ("mxfp4", 17, None, 32)
    NVFP4 = ("nvfp4", 36, None, 64)
    Q1_0 = ("q1_0", 18, None, 128)
    Q2_0 = ("q2_0", 18, None, 64)

    def __init__(self, label: str, type_size: int, np_dtype: np.dtype | None, blck_size: int = 1) -> None:
        self.label = label
        self.type_size = type_size
        self.blck_size = blck_size
        self.numpy = np_dtype

    @property
    def is_quantized(self) -> bool:
        return self.blck_size > 1

    @classmethod
    def from_label(cls, label: str) -> DType:
        """The type named ``label`` as ``ggml_type_name`` prints it (``"f32"``, ``"q4_K"``; any case)."""
        wanted = label.lower()
        for t in cls:
            if t.label.lower() == wanted:
                return t
        raise ValueError(f"unknown tensor type {label!r} (vizalloc knows {', '.join(t.label for t in cls)})")

    def __repr__(self) -> str:
        return f"DType.{self.name}"


F32 = DType.F32
F16 = DType.F16
I32 = DType.I32
