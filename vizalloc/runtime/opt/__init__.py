"""The optimizer (port of ggml-opt: ``src/ggml-opt.cpp``, ``include/ggml-opt.h``):
datasets, parameters, the optimizer context with its three graphs and the stale-tensor
``fix`` strategies, results, ``epoch`` and ``fit``.

    >>> from vizalloc.runtime.opt import Fix, LossType
    >>> [f.value for f in Fix]
    ['none', 'invalidate', 'clear', 'dup', 'static']
"""

from __future__ import annotations

from vizalloc.runtime.opt.context import OptContext
from vizalloc.runtime.opt.dataset import OptDataset
from vizalloc.runtime.opt.fit import EpochCallback, callback_progress_bar, epoch, fit
from vizalloc.runtime.opt.params import (
    AdamWParams, BuildType, Fix, LossType, OptimizerParams, OptimizerType, OptParams, SGDParams,
    constant_optimizer_params, default_optimizer_params, default_params,
)
from vizalloc.runtime.opt.result import OptResult
from vizalloc.runtime.opt.rng import MT19937

__all__ = [
    "MT19937", "AdamWParams", "BuildType", "EpochCallback", "Fix", "LossType", "OptContext", "OptDataset",
    "OptParams", "OptResult", "OptimizerParams", "OptimizerType", "SGDParams", "callback_progress_bar",
    "constant_optimizer_params", "default_optimizer_params", "default_params", "epoch", "fit",
]
