"""Parameters of the optimizer context (``include/ggml-opt.h``): loss and build types,
optimizers and their hyper-parameters, and the stale-tensor ``Fix`` strategies.

    >>> from vizalloc.runtime.opt.params import LossType, default_optimizer_params
    >>> default_optimizer_params(None).adamw.alpha
    0.001
    >>> LossType.CROSS_ENTROPY.value
    'cross_entropy'
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from vizalloc.runtime.context import Context
    from vizalloc.runtime.tensor import Tensor


class LossType(str, enum.Enum):
    """``enum ggml_opt_loss_type``: how ``outputs`` become a scalar loss."""

    MEAN = "mean"
    SUM = "sum"
    CROSS_ENTROPY = "cross_entropy"
    MEAN_SQUARED_ERROR = "mean_squared_error"


class BuildType(enum.IntEnum):
    """``enum ggml_opt_build_type``: which graphs exist (ordered: each includes the previous)."""

    FORWARD = 10
    GRAD = 20
    OPT = 30


class OptimizerType(str, enum.Enum):
    """``enum ggml_opt_optimizer_type``; the value is ``ggml_opt_optimizer_name``."""

    ADAMW = "adamw"
    SGD = "sgd"


class Fix(str, enum.Enum):
    """How ``OptContext.alloc`` keeps tensors shared between its graphs from going stale.

    * ``none``: reset the scheduler and allocate the shared original graph. Forward tensors
      keep the previous graph's pointers and are planned around as external: the
      stale-pointer corruption, for real.
    * ``invalidate``: as ``none``, but the scheduler's graph allocator runs with
      ``reclaim=True`` (ggml PR #999, rejected): tensors it placed in its last binding are
      cleared before the next one. Defeated when another graph is reserved in between.
    * ``clear``: after the reset, clear data/buffer/extra of every tensor of the compute
      context, views included; static tensors are untouched (semantics §7.5).
    * ``dup``: allocate a deep copy of the graph every time (``graph_deep_copy``, ggml-opt's ``dup_graph``), as ggml-opt does.
      The original compute tensors never get memory. The default.
    * ``static``: the tensors shared between the graphs live in one static buffer
      allocated once, so the scheduler never plans them. Costs their bytes for good.

    Every strategy but ``dup`` hands the scheduler the *original* tensors, so with several
    backends the scheduler's rewrites of their sources (to its input copies, which die at
    the next split) persist on them (semantics §7.5); the next use of such a source is a
    use-after-free in ggml and an error here (the scheduler names the dead copy). They are
    single-backend cures.
    """

    NONE = "none"
    INVALIDATE = "invalidate"
    CLEAR = "clear"
    DUP = "dup"
    STATIC = "static"


@dataclasses.dataclass
class AdamWParams:
    """``ggml_opt_optimizer_params.adamw``."""

    alpha: float = 0.001  # learning rate
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8  # epsilon for numerical stability
    wd: float = 0.0  # weight decay, 0.0f to disable


@dataclasses.dataclass
class SGDParams:
    """``ggml_opt_optimizer_params.sgd``."""

    alpha: float = 1e-3  # learning rate
    wd: float = 0.0  # weight decay


@dataclasses.dataclass
class OptimizerParams:
    """``struct ggml_opt_optimizer_params``: returned by the user's callback before each step."""

    adamw: AdamWParams = dataclasses.field(default_factory=AdamWParams)
    sgd: SGDParams = dataclasses.field(default_factory=SGDParams)


GetOptimizerParams = Callable[[Any], OptimizerParams]


def default_optimizer_params(userdata: Any) -> OptimizerParams:
    """``ggml_opt_get_default_optimizer_params``: AdamW 1e-3/0.9/0.999/1e-8, SGD 1e-3, no decay."""
    return OptimizerParams()


def constant_optimizer_params(userdata: OptimizerParams) -> OptimizerParams:
    """``ggml_opt_get_constant_optimizer_params``: the userdata *is* the parameters."""
    return userdata


@dataclasses.dataclass
class OptParams:
    """``struct ggml_opt_params``.

    With ``ctx_compute``, ``inputs`` and ``outputs`` set the graphs are *static*: built once
    in ``OptContext``'s constructor (``inputs`` must already have memory). Without them the
    user hands a fresh graph to ``OptContext.prepare_alloc`` before every ``alloc``.
    """

    sched: Any  # vizalloc.runtime.sched.Scheduler (typed loosely: the runtime layer below it)
    loss_type: LossType
    ctx_compute: Context | None = None
    inputs: Tensor | None = None
    outputs: Tensor | None = None
    build_type: BuildType = BuildType.OPT
    opt_period: int = 1
    get_opt_pars: GetOptimizerParams = default_optimizer_params
    get_opt_pars_ud: Any = None
    optimizer: OptimizerType = OptimizerType.ADAMW


def default_params(sched: Any, loss_type: LossType) -> OptParams:
    """``ggml_opt_default_params``: build type OPT, period 1, default AdamW parameters."""
    return OptParams(sched=sched, loss_type=LossType(loss_type))
