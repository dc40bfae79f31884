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

from vizalloc.trace.events import GGML_TYPE_SIZES


class DType(enum.Enum):
    """A tensor element type: the name ``ggml_type_name`` prints, bytes per block, elements per block."""

    F32 = ("f32", np.dtype(np.float32))
    F16 = ("f16", np.dtype(np.float16))
    I32 = ("i32", np.dtype(np.int32))
    I8 = ("i8", np.dtype(np.int8))
    I16 = ("i16", np.dtype(np.int16))
    I64 = ("i64", np.dtype(np.int64))
    F64 = ("f64", np.dtype(np.float64))
    BF16 = ("bf16", None)
    Q4_0 = ("q4_0", None)
    Q4_1 = ("q4_1", None)
    Q5_0 = ("q5_0", None)
    Q5_1 = ("q5_1", None)
    Q8_0 = ("q8_0", None)
    Q8_1 = ("q8_1", None)
    Q2_K = ("q2_K", None)
    Q3_K = ("q3_K", None)
    Q4_K = ("q4_K", None)
    Q5_K = ("q5_K", None)
    Q6_K = ("q6_K", None)
    Q8_K = ("q8_K", None)
    IQ2_XXS = ("iq2_xxs", None)
    IQ2_XS = ("iq2_xs", None)
    IQ3_XXS = ("iq3_xxs", None)
    IQ1_S = ("iq1_s", None)
    IQ4_NL = ("iq4_nl", None)
    IQ3_S = ("iq3_s", None)
    IQ2_S = ("iq2_s", None)
    IQ4_XS = ("iq4_xs", None)
    IQ1_M = ("iq1_m", None)
    TQ1_0 = ("tq1_0", None)
    TQ2_0 = ("tq2_0", None)
    MXFP4 = ("mxfp4", None)
    NVFP4 = ("nvfp4", None)
    Q1_0 = ("q1_0", None)
    Q2_0 = ("q2_0", None)

    def __init__(self, label: str, np_dtype: np.dtype | None) -> None:
        self.label = label
        # bytes per block and elements per block: ggml's type_traits, from the one table
        self.type_size, self.blck_size = GGML_TYPE_SIZES[label]
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
