"""Tensors as ggml has them: shape ``ne`` and byte strides ``nb`` (index 0 innermost),
an op with up to ten sources, flags, a view root, and a data pointer.

A tensor never owns memory. ``data`` is an address in vizalloc's simulated address
space (``buffer.base + offset``), exactly as ggml's ``data`` is a C pointer; the
bytes behind it belong to a ``Buffer`` (or to a context's own pool). Tensors are
made by a ``Context`` and by the op constructors in ``vizalloc.runtime.ops``:

    >>> from vizalloc.runtime import Context, F32
    >>> ctx = Context()
    >>> a = ctx.new_tensor_2d(F32, 4, 3)
    >>> a.ne, a.nb, a.nbytes
    ((4, 3, 1, 1), (4, 16, 48, 48), 48)
"""

from __future__ import annotations

import enum
import itertools
from typing import TYPE_CHECKING, Any

from vizalloc.errors import ContextError, GraphError
from vizalloc.runtime.dtype import DType
from vizalloc.trace import events as ev
from vizalloc.trace import recorder
from vizalloc.trace.events import ggml_nbytes

if TYPE_CHECKING:
    from vizalloc.runtime.buffer import Buffer, Storage
    from vizalloc.runtime.context import Context

MAX_DIMS = 4
MAX_SRC = 10
MAX_NAME = 64

TensorId = int


class Op(enum.Enum):
    """ggml's ops (``enum ggml_op`` of ggml 0.26.0, in its order), named as ``ggml_op_name`` prints them.

    Ops vizalloc has no constructor or kernel for are here too, so graphs captured from a
    real process can be described; their numbers differ between ggml versions, their
    names do not, which is why the capture reads names.
    """

    NONE = "NONE"
    DUP = "DUP"
    ADD = "ADD"
    ADD_ID = "ADD_ID"
    ADD1 = "ADD1"
    ACC = "ACC"
    SUB = "SUB"
    MUL = "MUL"
    DIV = "DIV"
    SQR = "SQR"
    SQRT = "SQRT"
    LOG = "LOG"
    SIN = "SIN"
    COS = "COS"
    SUM = "SUM"
    SUM_ROWS = "SUM_ROWS"
    CUMSUM = "CUMSUM"
    MEAN = "MEAN"
    ARGMAX = "ARGMAX"
    COUNT_EQUAL = "COUNT_EQUAL"
    REPEAT = "REPEAT"
    REPEAT_BACK = "REPEAT_BACK"
    CONCAT = "CONCAT"
    SILU_BACK = "SILU_BACK"
    NORM = "NORM"
    RMS_NORM = "RMS_NORM"
    RMS_NORM_BACK = "RMS_NORM_BACK"
    GROUP_NORM = "GROUP_NORM"
    L2_NORM = "L2_NORM"
    MUL_MAT = "MUL_MAT"
    MUL_MAT_ID = "MUL_MAT_ID"
    OUT_PROD = "OUT_PROD"
    SCALE = "SCALE"
    SET = "SET"
    CPY = "CPY"
    CONT = "CONT"
    RESHAPE = "RESHAPE"
    VIEW = "VIEW"
    PERMUTE = "PERMUTE"
    TRANSPOSE = "TRANSPOSE"
    GET_ROWS = "GET_ROWS"
    GET_ROWS_BACK = "GET_ROWS_BACK"
    SET_ROWS = "SET_ROWS"
    DIAG = "DIAG"
    DIAG_MASK_INF = "DIAG_MASK_INF"
    DIAG_MASK_ZERO = "DIAG_MASK_ZERO"
    SOFT_MAX = "SOFT_MAX"
    SOFT_MAX_BACK = "SOFT_MAX_BACK"
    ROPE = "ROPE"
    ROPE_BACK = "ROPE_BACK"
    CLAMP = "CLAMP"
    CONV_TRANSPOSE_1D = "CONV_TRANSPOSE_1D"
    IM2COL = "IM2COL"
    IM2COL_BACK = "IM2COL_BACK"
    IM2COL_3D = "IM2COL_3D"
    COL2IM_1D = "COL2IM_1D"
    CONV_2D = "CONV_2D"
    CONV_3D = "CONV_3D"
    CONV_2D_DW = "CONV_2D_DW"
    CONV_TRANSPOSE_2D = "CONV_TRANSPOSE_2D"
    POOL_1D = "POOL_1D"
    POOL_2D = "POOL_2D"
    POOL_2D_BACK = "POOL_2D_BACK"
    UPSCALE = "UPSCALE"
    PAD = "PAD"
    PAD_REFLECT_1D = "PAD_REFLECT_1D"
    ROLL = "ROLL"
    ARANGE = "ARANGE"
    TIMESTEP_EMBEDDING = "TIMESTEP_EMBEDDING"
    ARGSORT = "ARGSORT"
    TOP_K = "TOP_K"
    LEAKY_RELU = "LEAKY_RELU"
    TRI = "TRI"
    FILL = "FILL"
    FLASH_ATTN_EXT = "FLASH_ATTN_EXT"
    FLASH_ATTN_BACK = "FLASH_ATTN_BACK"
    SSM_CONV = "SSM_CONV"
    SSM_SCAN = "SSM_SCAN"
    WIN_PART = "WIN_PART"
    WIN_UNPART = "WIN_UNPART"
    GET_REL_POS = "GET_REL_POS"
    ADD_REL_POS = "ADD_REL_POS"
    RWKV_WKV6 = "RWKV_WKV6"
    GATED_LINEAR_ATTN = "GATED_LINEAR_ATTN"
    RWKV_WKV7 = "RWKV_WKV7"
    SOLVE_TRI = "SOLVE_TRI"
    GATED_DELTA_NET = "GATED_DELTA_NET"
    LIGHTNING_INDEXER = "LIGHTNING_INDEXER"
    DSV4_HC_COMB = "DSV4_HC_COMB"
    DSV4_HC_PRE = "DSV4_HC_PRE"
    DSV4_HC_POST = "DSV4_HC_POST"
    UNARY = "UNARY"
    MAP_CUSTOM1 = "MAP_CUSTOM1"
    MAP_CUSTOM2 = "MAP_CUSTOM2"
    MAP_CUSTOM3 = "MAP_CUSTOM3"
    CUSTOM = "CUSTOM"
    CROSS_ENTROPY_LOSS = "CROSS_ENTROPY_LOSS"
    CROSS_ENTROPY_LOSS_BACK = "CROSS_ENTROPY_LOSS_BACK"
    OPT_STEP_ADAMW = "OPT_STEP_ADAMW"
    OPT_STEP_SGD = "OPT_STEP_SGD"
    GLU = "GLU"
    #: not ggml's: an op of a traced ggml that this vizalloc does not know, imported with the
    #: sizes, type, sources and view the process gave its tensors (``vizalloc.capture``); it
    #: has no kernel and is in no in-place rule (ggml's list of in-place ops names known ones)
    OPAQUE = "OPAQUE"

    def __repr__(self) -> str:
        return f"Op.{self.name}"


class UnaryOp(enum.Enum):
    """ggml's unary functions (``enum ggml_unary_op``) used with ``Op.UNARY``."""

    ABS = "ABS"
    SGN = "SGN"
    NEG = "NEG"
    STEP = "STEP"
    TANH = "TANH"
    ELU = "ELU"
    RELU = "RELU"
    SIGMOID = "SIGMOID"
    GELU = "GELU"
    GELU_QUICK = "GELU_QUICK"
    SILU = "SILU"
    HARDSWISH = "HARDSWISH"
    HARDSIGMOID = "HARDSIGMOID"
    EXP = "EXP"

    def __repr__(self) -> str:
        return f"UnaryOp.{self.name}"


class Flag(enum.IntFlag):
    """Tensor flags (``enum ggml_tensor_flag``) with ggml's bit values."""

    INPUT = 1
    OUTPUT = 2
    PARAM = 4
    LOSS = 8
    COMPUTE = 16


#: Ops whose result is only a new way to look at the source's bytes.
VIEW_OPS = frozenset({Op.VIEW, Op.RESHAPE, Op.PERMUTE, Op.TRANSPOSE})

#: ``ggml_op_can_inplace``: ops whose result may take over a parent's memory.
INPLACE_OPS = frozenset(
    {
        Op.FILL, Op.SCALE, Op.DIAG_MASK_ZERO, Op.DIAG_MASK_INF, Op.ADD, Op.ADD_ID, Op.ADD1,
        Op.SUB, Op.MUL, Op.DIV, Op.SQR, Op.SQRT, Op.LOG, Op.UNARY, Op.ROPE, Op.ROPE_BACK,
        Op.SILU_BACK, Op.RMS_NORM, Op.RMS_NORM_BACK, Op.SOFT_MAX, Op.SOFT_MAX_BACK,
    }
)

_ids = itertools.count()


def contiguous_strides(dtype: DType, ne: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """ggml_new_tensor_impl's strides for a fresh tensor of ``ne``."""
    nb0 = dtype.type_size
    nb1 = nb0 * (ne[0] // dtype.blck_size)
    nb2 = nb1 * ne[1]
    nb3 = nb2 * ne[2]
    return (nb0, nb1, nb2, nb3)


class Tensor:
    """One ggml tensor: metadata plus a (possibly absent) data pointer.

    Fields keep ggml's names; ``type``, ``ne`` and ``nb`` never change after creation.
    ``src`` is a list of up to ten operands in slot order;
    empty slots are ``None`` and may sit between used ones. ``view_src`` is always a
    root (never another view), ``view_offs`` the byte offset inside it.
    """

    __slots__ = (
        "id", "ctx", "name", "type", "ne", "nb", "nbytes", "op", "op_params", "src", "flags",
        "view_src", "view_offs", "data", "buffer", "extra", "storage", "__weakref__",
    )

    def __init__(
        self,
        ctx: Context,
        dtype: DType,
        ne: tuple[int, int, int, int],
        nb: tuple[int, int, int, int],
        view_src: Tensor | None = None,
        view_offs: int = 0,
    ) -> None:
        self.id: TensorId = next(_ids)
        self.ctx = ctx
        self.name = ""
        self.type = dtype
        self.ne = ne
        self.nb = nb
        #: ``ggml_nbytes``: the byte span the strides touch. Type, shape and strides are
        #: fixed at creation (as in ggml, where no call changes them), so it is computed once.
        self.nbytes: int = ggml_nbytes(dtype.type_size, dtype.blck_size, ne, nb)
        self.op = Op.NONE
        self.op_params: tuple[Any, ...] = ()
        self.src: list[Tensor | None] = []
        self.flags = 0
        self.view_src = view_src
        self.view_offs = view_offs
        #: Address in the simulated address space, or None (ggml: NULL).
        self.data: int | None = None
        #: The backend buffer the data was placed in; None for views bound at creation.
        self.buffer: Buffer | None = None
        #: Backend-private pointer (ggml's ``extra``); the allocator never reads it.
        self.extra: Any = None
        #: Where the bytes behind ``data`` really live (a Buffer or a context pool).
        #: ggml has no such field; it keeps freed memory reachable so a dangling
        #: tensor reads poisoned bytes instead of crashing Python.
        self.storage: Storage | None = None

    # -- ggml predicates -------------------------------------------------
    @property
    def is_view(self) -> bool:
        """``ggml_impl_is_view``: a tensor is a view iff it has a view root."""
        return self.view_src is not None

    @property
    def nelements(self) -> int:
        ne = self.ne
        return ne[0] * ne[1] * ne[2] * ne[3]

    @property
    def nrows(self) -> int:
        ne = self.ne
        return ne[1] * ne[2] * ne[3]

    @property
    def is_contiguous(self) -> bool:
        """ggml_is_contiguous: strides are exactly those of a fresh tensor."""
        return self.nb == contiguous_strides(self.type, self.ne)

    @property
    def root(self) -> Tensor:
        """The tensor that owns the memory: ``view_src`` for a view, else itself."""
        return self.view_src if self.view_src is not None else self

    @property
    def offset(self) -> int | None:
        """``data - storage.base``: the byte offset inside the memory holding it."""
        if self.data is None or self.storage is None:
            return None
        return self.data - self.storage.base

    def has_flag(self, flag: Flag) -> bool:
        return bool(self.flags & flag)

    def set_name(self, name: str) -> Tensor:
        """``ggml_set_name`` (names longer than ggml's 63 characters are cut, as in C)."""
        self.name = name[: MAX_NAME - 1]
        if recorder.active():
            recorder.emit(ev.TensorNamed, self.id, self.name)
        return self

    def _set_flags(self, flags: int) -> None:
        self.flags = flags = int(flags)
        if recorder.active():
            recorder.emit(ev.TensorFlagsSet, self.id, flags)

    def check_alive(self) -> None:
        """Raise ContextError if the context that made this tensor was freed."""
        if self.ctx.freed:
            raise ContextError(
                f"tensor {self.name or self.id!r} belongs to context {self.ctx.name!r}, which was freed; "
                "keep the context alive while its tensors are used"
            )

    def __repr__(self) -> str:
        shape = "x".join(str(n) for n in self.ne)
        where = f" @{self.offset}" if self.data is not None else ""
        return f"<Tensor {self.name or '#' + str(self.id)} {self.op.name} {self.type.label}[{shape}]{where}>"


def label(t: Tensor) -> str:
    """How messages name a tensor: its name quoted, or ``#id`` when it has none."""
    return repr(t.name) if t.name else f"#{t.id}"


def set_input(t: Tensor) -> None:
    """``ggml_set_input``: marks ``t`` alone as a graph input."""
    t._set_flags(t.flags | Flag.INPUT)


def set_output(t: Tensor) -> None:
    """``ggml_set_output``: marks ``t`` and its view root as outputs (never freed, never reused)."""
    t._set_flags(t.flags | Flag.OUTPUT)
    if t.view_src is not None:
        t.view_src._set_flags(t.view_src.flags | Flag.OUTPUT)


def set_param(t: Tensor) -> None:
    """``ggml_set_param``: a trainable parameter (must be op NONE)."""
    if t.op is not Op.NONE:
        raise GraphError(f"set_param: tensor {t.name!r} has op {t.op.name}; only op-NONE tensors can be parameters")
    t._set_flags(t.flags | Flag.PARAM)


def set_loss(t: Tensor) -> None:
    """``ggml_set_loss``: a scalar f32 loss."""
    if t.nelements != 1 or t.type is not DType.F32:
        raise GraphError(
            f"set_loss: tensor {t.name!r} is {t.type.label}{list(t.ne)}; a loss must be a scalar f32"
        )
    t._set_flags(t.flags | Flag.LOSS)
