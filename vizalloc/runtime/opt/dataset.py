"""Datasets for the optimizer (``ggml_opt_dataset``): a data and a labels tensor in host
memory, cut into shards that are shuffled and copied into batch tensors.

    >>> import numpy as np
    >>> from vizalloc.runtime import F32
    >>> from vizalloc.runtime.opt.dataset import OptDataset
    >>> ds = OptDataset(F32, F32, ne_datapoint=2, ne_label=1, ndata=4, ndata_shard=1)
    >>> ds.data_array()[...] = np.arange(8, dtype=np.float32).reshape(4, 2)
    >>> ds.ndata, ds.nbs_data
    (4, 8)

Fidelity: shard sizes, the permutation and its shuffling (``std::shuffle`` on the
optimizer context's ``std::mt19937``, checked against ggml-python) and the batch copies
(one ``tensor_set`` of a byte range per shard) are ggml's. The dataset lives in one
CPU buffer as ggml's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vizalloc.errors import ShapeError, UsageError
from vizalloc.runtime import memory
from vizalloc.runtime.alloc import alloc_ctx_tensors
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.opt.rng import MT19937, shuffle
from vizalloc.runtime.tensor import Tensor

if TYPE_CHECKING:
    from vizalloc.runtime.buffer import Buffer


def _cpu_buffer_type() -> Any:
    from vizalloc.runtime.backends.cpu import CPU_BUFFER_TYPE

    return CPU_BUFFER_TYPE


def _is_contiguous(t: Tensor) -> bool:
    from vizalloc.runtime.ops._common import is_contiguous

    return is_contiguous(t)


class OptDataset:
    """``ggml_opt_dataset_init``: ``ndata`` datapoints of ``ne_datapoint`` values (and
    ``ne_label`` label values; 0 for none), grouped into shards of ``ndata_shard``.

    Attributes:
        data: the ``[ne_datapoint, ndata]`` tensor; ``labels``: ``[ne_label, ndata]`` or None.
        nbs_data / nbs_labels: bytes per shard.
        permutation: shard order used by ``get_batch``.
    """

    def __init__(
        self, type_data: DType, type_label: DType, ne_datapoint: int, ne_label: int, ndata: int, ndata_shard: int,
    ) -> None:
        if ne_datapoint <= 0 or ne_label < 0 or ndata <= 0 or ndata_shard <= 0:
            raise UsageError(
                f"OptDataset: need ne_datapoint > 0, ne_label >= 0, ndata > 0, ndata_shard > 0; got "
                f"{ne_datapoint}, {ne_label}, {ndata}, {ndata_shard}"
            )
        self.ndata = ndata
        self.ndata_shard = ndata_shard
        self.ctx = Context(name="opt_dataset", max_tensors=2)
        self.data = self.ctx.new_tensor_2d(type_data, ne_datapoint, ndata, name="data")
        self.nbs_data = self.data.nbytes * ndata_shard // ndata
        self.labels: Tensor | None = None
        self.nbs_labels = 0
        if ne_label > 0:
            self.labels = self.ctx.new_tensor_2d(type_label, ne_label, ndata, name="labels")
            self.nbs_labels = self.labels.nbytes * ndata_shard // ndata
        self.buf: Buffer | list[Buffer] | None = alloc_ctx_tensors(self.ctx, _cpu_buffer_type())
        self.permutation: list[int] = list(range(ndata // ndata_shard))

    # -- host access (ggml_get_data_f32 on the dataset's tensors) ---------------------
    def data_array(self) -> np.ndarray:
        """A writable ``(ndata, ne_datapoint)`` view of the data bytes."""
        return memory.tensor_array(self.data).reshape(self.ndata, -1)

    def labels_array(self) -> np.ndarray:
        """A writable ``(ndata, ne_label)`` view of the label bytes."""
        if self.labels is None:
            raise UsageError("this dataset has no labels (ne_label = 0)")
        return memory.tensor_array(self.labels).reshape(self.ndata, -1)

    # -- ggml_opt_dataset_shuffle ----------------------------------------------------------
    def shuffle(self, rng: MT19937 | Any, idata: int = -1) -> None:
        """Shuffle all shards (``idata < 0``) or the first ``idata`` datapoints' shards.

        ``rng`` is an ``OptContext`` (its generator is used, as in ggml) or an ``MT19937``.
        """
        gen: MT19937 = getattr(rng, "rng", rng)
        if idata > self.ndata:
            raise UsageError(f"shuffle: idata {idata} exceeds the dataset's {self.ndata} datapoints")
        if idata < 0:
            shuffle(self.permutation, gen)
            return
        if idata % self.ndata_shard:
            raise UsageError(f"shuffle: idata {idata} is not a multiple of the shard size {self.ndata_shard}")
        n = idata // self.ndata_shard
        head = self.permutation[:n]
        shuffle(head, gen)
        self.permutation[:n] = head

    # -- ggml_opt_dataset_get_batch --------------------------------------------------------
    def _shards_per_batch(self, nb_data_batch: int, nb_labels_batch: int | None) -> int:
        if nb_data_batch % self.nbs_data:
            raise ShapeError(
                f"get_batch: the batch holds {nb_data_batch} bytes, not a multiple of the shard's {self.nbs_data}"
            )
        shards = nb_data_batch // self.nbs_data
        if nb_labels_batch is not None and nb_labels_batch != shards * self.nbs_labels:
            raise ShapeError(
                f"get_batch: the labels batch holds {nb_labels_batch} bytes, expected {shards * self.nbs_labels}"
            )
        return shards

    def get_batch(self, data_batch: Tensor, labels_batch: Tensor | None, ibatch: int) -> None:
        """Copy batch ``ibatch`` (in permutation order) into ``data_batch`` / ``labels_batch``."""
        if not _is_contiguous(data_batch) or (labels_batch is not None and not _is_contiguous(labels_batch)):
            raise ShapeError("get_batch: batch tensors must be contiguous")
        if (labels_batch is None) != (self.labels is None):
            raise UsageError("get_batch: pass a labels batch exactly when the dataset has labels")
        if data_batch.type is not self.data.type or (
            labels_batch is not None and self.labels is not None and labels_batch.type is not self.labels.type
        ):
            raise ShapeError("get_batch: batch tensor types must match the dataset's")
        shards = self._shards_per_batch(data_batch.nbytes, None if labels_batch is None else labels_batch.nbytes)
        if (ibatch + 1) * shards > len(self.permutation):
            raise UsageError(
                f"get_batch: batch {ibatch} of {shards} shards is past the dataset's {len(self.permutation)} shards"
            )
        # tensor_set takes values of the tensor's type: slice the typed arrays by elements
        data_flat = memory.tensor_array(self.data).reshape(-1)
        ne_data = self.nbs_data // self.data.type.type_size
        labels_flat = None if self.labels is None else memory.tensor_array(self.labels).reshape(-1)
        ne_labels = 0 if self.labels is None else self.nbs_labels // self.labels.type.type_size
        for k in range(shards):
            ishard = self.permutation[ibatch * shards + k]
            memory.tensor_set(data_batch, data_flat[ishard * ne_data:(ishard + 1) * ne_data], k * self.nbs_data,
                              self.nbs_data)
            if labels_batch is None or labels_flat is None:
                continue
            memory.tensor_set(labels_batch, labels_flat[ishard * ne_labels:(ishard + 1) * ne_labels],
                              k * self.nbs_labels, self.nbs_labels)

    def get_batch_host(self, data_batch: np.ndarray, labels_batch: np.ndarray | None, ibatch: int) -> None:
        """``ggml_opt_dataset_get_batch_host``: the same copy into host arrays."""
        if (labels_batch is None) != (self.labels is None):
            raise UsageError("get_batch_host: pass a labels array exactly when the dataset has labels")
        dst = data_batch.reshape(-1).view(np.uint8)
        shards = self._shards_per_batch(dst.size, None)
        if (ibatch + 1) * shards > len(self.permutation):
            raise UsageError(f"get_batch_host: batch {ibatch} is past the end of the dataset")
        data_raw = memory.tensor_array(self.data).reshape(-1).view(np.uint8)
        ldst = None if labels_batch is None else labels_batch.reshape(-1).view(np.uint8)
        labels_raw = None if self.labels is None else memory.tensor_array(self.labels).reshape(-1).view(np.uint8)
        for k in range(shards):
            ishard = self.permutation[ibatch * shards + k]
            nbd = self.nbs_data
            dst[k * nbd:(k + 1) * nbd] = data_raw[ishard * nbd:(ishard + 1) * nbd]
            if ldst is not None and labels_raw is not None:
                nbl = self.nbs_labels
                ldst[k * nbl:(k + 1) * nbl] = labels_raw[ishard * nbl:(ishard + 1) * nbl]

    def free(self) -> None:
        """``ggml_opt_dataset_free``."""
        bufs = self.buf if isinstance(self.buf, list) else [self.buf]
        for b in bufs:
            if b is not None:
                b.free(cause="opt dataset freed")
        self.ctx.free()

    def __repr__(self) -> str:
        return f"<OptDataset ndata={self.ndata} shard={self.ndata_shard} data={list(self.data.ne[:2])}>"
