"""Scenarios: the programs vizalloc exists to show, as library code the CLI, the samples
and the tests share.

    >>> from vizalloc.scenarios import shared_tensors
    >>> r = shared_tensors.run("dup", steps=2, seed=0)
    >>> r.max_abs_loss_diff < 1e-6
    True

* ``shared_tensors``: the ggml-style training loop whose forward and backward graphs share
  tensor objects, run with each fix strategy beside a reference run.
"""

from __future__ import annotations

__all__ = ["shared_tensors"]
