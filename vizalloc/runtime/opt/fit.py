"""High-level training loops of ggml-opt: ``epoch`` (train batches, then validation
batches) and ``fit`` (shuffling, logical vs physical batches, several epochs).

    >>> from vizalloc.runtime.opt.fit import progress_bar_text
    >>> progress_bar_text(True, 4, 8)
    'train: [███▉    ]'

Fidelity: batch order, the train/validation split, the shuffles (and so the RNG draws),
``opt_period = nbatch_logical / nbatch_physical`` and the float rounding of ``val_split``
are ggml's. The progress bar prints the same fields; its timing columns use Python's clock.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import numpy as np

from vizalloc.errors import UsageError
from vizalloc.runtime.context import Context
from vizalloc.runtime.opt.context import OptContext
from vizalloc.runtime.opt.dataset import OptDataset
from vizalloc.runtime.opt.params import GetOptimizerParams, LossType, OptimizerType, default_params
from vizalloc.runtime.opt.result import OptResult
from vizalloc.runtime.tensor import Tensor

#: ``ggml_opt_epoch_callback``: (train, opt_ctx, dataset, result, ibatch, ibatch_max, t_start_us)
EpochCallback = Callable[[bool, OptContext, OptDataset, OptResult, int, int, int], None]


def _time_us() -> int:
    return time.monotonic_ns() // 1000


def epoch(
    opt_ctx: OptContext, dataset: OptDataset, result_train: OptResult | None, result_eval: OptResult | None,
    idata_split: int, callback_train: EpochCallback | None = None, callback_eval: EpochCallback | None = None,
) -> None:
    """``ggml_opt_epoch``: backward batches up to ``idata_split``, forward-only batches after it.

    ``idata_split < 0`` trains on the whole dataset.
    """
    if not opt_ctx.static_graphs:
        raise UsageError("epoch() requires static graphs (an OptContext built with ctx_compute)")
    inputs, labels, data = opt_ctx.inputs, opt_ctx.labels, dataset.data
    assert inputs is not None
    if data.ne[0] != inputs.ne[0]:
        raise UsageError(f"epoch: datapoints have {data.ne[0]} values but the inputs take {inputs.ne[0]}")
    ndata, ndata_batch = data.ne[1], inputs.ne[1]
    if ndata % ndata_batch:
        raise UsageError(f"epoch: {ndata} datapoints do not split into batches of {ndata_batch}")
    nbatches = ndata // ndata_batch
    idata_split = ndata if idata_split < 0 else idata_split
    if idata_split % ndata_batch:
        raise UsageError(f"epoch: idata_split {idata_split} is not a multiple of the batch size {ndata_batch}")
    ibatch_split = idata_split // ndata_batch

    _batches(opt_ctx, dataset, inputs, labels, result_train, callback_train, True, 0, ibatch_split)
    _batches(opt_ctx, dataset, inputs, labels, result_eval, callback_eval, False, ibatch_split, nbatches)


def _batches(opt_ctx: OptContext, dataset: OptDataset, inputs: Tensor, labels: Tensor | None, result: OptResult | None,
             callback: EpochCallback | None, train: bool, ibatch_first: int, ibatch_end: int) -> None:
    """One of ``ggml_opt_epoch``'s two loops: batches ``[ibatch_first, ibatch_end)`` with
    (``train``) or without a backward pass; the callback counts batches from 1 within the loop."""
    t_loop_start = _time_us()
    for ibatch in range(ibatch_first, ibatch_end):
        opt_ctx.alloc(backward=train)
        dataset.get_batch(inputs, labels, ibatch)
        opt_ctx.eval(result)
        if callback is not None:
            assert result is not None
            callback(train, opt_ctx, dataset, result, ibatch + 1 - ibatch_first, ibatch_end - ibatch_first,
                     t_loop_start)


_BLOCKS = ["\u2588", "\u2589", "\u258A", "\u258B", "\u258C", "\u258D", "\u258E", "\u258F"]


def progress_bar_text(train: bool, ibatch: int, ibatch_max: int) -> str:
    """The bar part of ggml's progress line: 8 cells with eighth-block resolution."""
    out = ["train: [" if train else "val:   ["]
    ibatch8 = 8 * ibatch
    for j in range(8):
        for k, block in zip(range(8, 0, -1), _BLOCKS):
            if ibatch_max * (8 * j + k) // 8 < ibatch8:
                out.append(block)
                break
        else:
            out.append(" ")
    out.append("]")
    return "".join(out)


def _hms(t_us: int) -> str:
    s = t_us // 1_000_000
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h:02d}:{m:02d}:{s:02d}"


def callback_progress_bar(
    train: bool, opt_ctx: OptContext, dataset: OptDataset, result: OptResult, ibatch: int, ibatch_max: int,
    t_start_us: int,
) -> None:
    """``ggml_opt_epoch_callback_progress_bar``: one updating line on stderr."""
    assert opt_ctx.inputs is not None
    batch_size = opt_ctx.inputs.ne[1]
    loss, loss_unc = result.loss()
    acc, acc_unc = result.accuracy()
    t_us = _time_us() - t_start_us
    eta_us = t_us * (ibatch_max - ibatch) // ibatch if ibatch else 0
    line = (
        f"{progress_bar_text(train, ibatch, ibatch_max)} data={ibatch * batch_size:07d}/{ibatch_max * batch_size:07d} "
        f"loss={loss:.5f}±{loss_unc:.5f} acc={100.0 * acc:.2f}±{100.0 * acc_unc:.2f}% "
        f"t={_hms(t_us)} ETA={_hms(eta_us)} \r"
    )
    sys.stderr.write(line)
    if ibatch == ibatch_max:
        sys.stderr.write("\n")
    sys.stderr.flush()


def fit(
    sched: Any, ctx_compute: Context, inputs: Tensor, outputs: Tensor, dataset: OptDataset, loss_type: LossType,
    optimizer: OptimizerType, get_opt_pars: GetOptimizerParams, nepoch: int, nbatch_logical: int, val_split: float,
    silent: bool, *, fix: str = "dup",
) -> None:
    """``ggml_opt_fit``: train for ``nepoch`` epochs; ``get_opt_pars`` receives a one-item list
    holding the current epoch (ggml passes a pointer to it)."""
    t_start_us = _time_us()
    ndata = dataset.data.ne[1]
    nbatch_physical = inputs.ne[1]
    if ndata % nbatch_logical or nbatch_logical % nbatch_physical:
        raise UsageError(
            f"fit: need ndata ({ndata}) % nbatch_logical ({nbatch_logical}) == 0 and "
            f"nbatch_logical % nbatch_physical ({nbatch_physical}) == 0"
        )
    opt_period = nbatch_logical // nbatch_physical
    nbatches_logical = ndata // nbatch_logical
    if not 0.0 <= val_split < 1.0:
        raise UsageError(f"fit: val_split must be in [0, 1), got {val_split}")
    # ggml: int64_t(((1.0f - val_split) * nbatches_logical)) * opt_period, in float
    ibatch_split = int(np.float32(np.float32(1.0) - np.float32(val_split)) * np.float32(nbatches_logical)) * opt_period
    idata_split = ibatch_split * nbatch_physical

    epoch_box = [1]  # the userdata: ggml hands the callback &epoch
    params = default_params(sched, loss_type)
    params.ctx_compute, params.inputs, params.outputs = ctx_compute, inputs, outputs
    params.opt_period = opt_period
    params.get_opt_pars = get_opt_pars
    params.get_opt_pars_ud = epoch_box
    params.optimizer = OptimizerType(optimizer)
    opt_ctx = OptContext(params, fix=fix)

    # shuffling only helps if not all data is used in a single batch
    if nbatch_logical < ndata:
        dataset.shuffle(opt_ctx, -1)

    result_train, result_val = OptResult(), OptResult()
    callback = None if silent else callback_progress_bar
    while epoch_box[0] <= nepoch:
        if nbatch_logical < idata_split:
            dataset.shuffle(opt_ctx, idata_split)
        result_train.reset()
        result_val.reset()
        if not silent:
            sys.stderr.write(f"fit: epoch {epoch_box[0]:04d}/{nepoch:04d}:\n")
        epoch(opt_ctx, dataset, result_train, result_val, idata_split, callback, callback)
        if not silent:
            sys.stderr.write("\n")
        epoch_box[0] += 1

    if not silent:
        sys.stderr.write(f"fit: training took {_hms(_time_us() - t_start_us)}\n")
    opt_ctx.free()
