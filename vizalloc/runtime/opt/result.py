"""Accumulated results of optimizer evaluations (``ggml_opt_result``).

Loss, accuracy and their uncertainties are computed exactly as ggml does, including its
float32 intermediate products (``loss * opt_period`` and the squares are float, the sums
double).

    >>> r = OptResult()
    >>> r.loss()
    (0.0, nan)
    >>> r.add_batch(ndata=1, loss=2.0, loss_per_datapoint=False, opt_period=1)
    >>> r.add_batch(ndata=1, loss=4.0, loss_per_datapoint=False, opt_period=1)
    >>> r.loss()
    (6.0, 1.4142135623730951)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vizalloc.errors import UsageError


def _c_sqrt(x: float) -> float:
    """C's ``sqrt``: NaN for a negative argument (rounding can make a zero variance negative)."""
    return math.sqrt(x) if x >= 0 else math.nan


class OptResult:
    """``struct ggml_opt_result``: what ``OptContext.eval`` adds up over physical batches."""

    def __init__(self) -> None:
        self.ndata = 0
        self.losses: list[np.float32] = []
        self.preds: list[int] = []
        self.ncorrect = 0
        self.opt_period = -1
        self.loss_per_datapoint = False

    def reset(self) -> None:
        """``ggml_opt_result_reset`` (opt_period and loss_per_datapoint survive, as in ggml)."""
        self.ndata = 0
        self.losses.clear()
        self.preds.clear()
        self.ncorrect = 0

    def add_batch(
        self, *, ndata: int, loss: float, loss_per_datapoint: bool, opt_period: int,
        pred: Sequence[int] | None = None, ncorrect: int | None = None,
    ) -> None:
        """Record one physical batch (the tail of ``ggml_opt_eval``)."""
        if self.ndata == 0:
            self.loss_per_datapoint = loss_per_datapoint
            self.opt_period = opt_period
        elif self.loss_per_datapoint != loss_per_datapoint or self.opt_period != opt_period:
            raise UsageError(
                "OptResult was filled by optimizer contexts with different loss types or periods; reset it first"
            )
        if self.ndata != ndata * len(self.losses):
            raise UsageError(
                f"OptResult holds {self.ndata} datapoints in {len(self.losses)} batches, the new batch has {ndata}: "
                "varying batch sizes are not supported (as in ggml)"
            )
        self.ndata += ndata
        self.losses.append(np.float32(loss))
        if pred is not None:
            self.preds.extend(int(p) for p in pred)
        if ncorrect is None or self.ncorrect < 0:
            self.ncorrect = -1
        else:
            self.ncorrect += int(ncorrect)

    def loss(self) -> tuple[float, float]:
        """``ggml_opt_result_loss``: (loss, uncertainty); per-datapoint losses are averaged over batches."""
        nbatches = len(self.losses)
        if nbatches == 0:
            return 0.0, math.nan
        total = 0.0
        total_sq = 0.0
        period = np.float32(self.opt_period)
        for loss in self.losses:
            # per-datapoint losses were scaled by 1/opt_period for each physical batch
            scaled = np.float32(loss * period) if self.loss_per_datapoint else np.float32(loss)
            total += float(scaled)
            total_sq += float(np.float32(scaled * scaled))
        mean = total / nbatches
        value = mean if self.loss_per_datapoint else total
        if nbatches < 2:
            return value, math.nan
        var_sum = total_sq / nbatches - mean * mean  # without Bessel's correction
        if self.loss_per_datapoint:
            unc = _c_sqrt(var_sum / (nbatches - 1))
        else:
            unc = _c_sqrt(var_sum * nbatches / (nbatches - 1))
        return value, unc

    def accuracy(self) -> tuple[float, float]:
        """``ggml_opt_result_accuracy``: (accuracy, uncertainty); NaN without ``ncorrect``."""
        acc = self.ncorrect / self.ndata if self.ncorrect >= 0 and self.ndata > 0 else math.nan
        if self.ncorrect >= 0 and self.ndata == 0:
            acc = math.nan  # C: 0.0/0.0
        unc = math.sqrt(acc * (1.0 - acc) / (self.ndata - 1)) if self.ncorrect >= 0 and self.ndata >= 2 else math.nan
        return acc, unc

    def pred(self) -> list[int]:
        """``ggml_opt_result_pred``: the predictions of every datapoint so far."""
        return list(self.preds)

    def __repr__(self) -> str:
        loss, unc = self.loss()
        return f"<OptResult ndata={self.ndata} loss={loss:.6g}±{unc:.3g}>"
