"""vizalloc.replay.cuda_split: llama.cpp's CPU graph replayed on a simulated CUDA0 + CPU.

The trace comes from real llama.cpp (xllamacpp, no-alloc measurement) on a small
llama-architecture model written from scratch. Without a GPU here, what can be checked is
the simulation's own soundness: replayed on the CPU alone the graph needs exactly the bytes
llama.cpp's CPU planner gave it; on CUDA0 + CPU the host buffer holds what ggml's rules put
there (graph inputs and the token-embedding rows), the device buffer the attention scores,
and the cross-backend copies make the two together larger than the CPU's one buffer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vizalloc.analysis.explain import explain
from vizalloc.analysis.model import build_model
from vizalloc.replay.cuda_split import (
    PlanningCPUBackend, Placement, _Rebuild, _graph_of, predict_cuda, worst_case_plans,
)
from vizalloc.runtime.buffer import VIRTUAL, BufferType
from vizalloc.runtime.sched import Scheduler
from vizalloc.trace.api import load

from tests.capture.gguf_models import write_llama_gguf

#: real llama.cpp (xllamacpp) on a model written from scratch: minutes, not seconds;
#: `python -m pytest -m "not slow"` leaves them out
pytestmark = pytest.mark.slow

N_LAYER = 4


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> object:
    pytest.importorskip("xllamacpp")
    tmp = tmp_path_factory.mktemp("cuda")
    gguf = tmp / "small.gguf"
    write_llama_gguf(gguf, n_embd=256, n_layer=N_LAYER, n_head=8, n_head_kv=2, n_ff=512, n_vocab=1000)
    done = subprocess.run([sys.executable, "-m", "vizalloc", "run", "-o", "t.vztrace", "--", sys.executable, "-m",
                           "vizalloc.capture.llama", str(gguf), "--ctx", "2048", "--ubatch", "512",
                           "--flash-attn", "off", "--no-alloc", "--threads", "2"],
                          cwd=tmp, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return build_model(load(Path(tmp) / "t.vztrace"))


def test_on_the_cpu_alone_the_replay_needs_llama_cpp_s_bytes(captured: object) -> None:
    model = captured
    (plan,) = worst_case_plans(model)
    cpu_only = BufferType("CPU", alignment=32, device=VIRTUAL)
    rebuilt = _Rebuild(model, plan, Placement(N_LAYER, 0), {0: cpu_only, None: cpu_only})
    sched = Scheduler([PlanningCPUBackend()], bufts=[cpu_only], graph_size=4 * (plan.n_nodes + plan.n_leafs))
    assert sched.reserve(_graph_of(rebuilt))
    assert sched.buffer_size(0) == sum(plan.chunk_sizes[0])


def test_full_offload_puts_inputs_on_the_host_and_attention_on_the_device(captured: object) -> None:
    model = captured
    pred = predict_cuda(model, n_layer=N_LAYER)
    assert pred.placement.output_on_gpu and pred.n_splits == 2  # the inputs' split, then the GPU's
    # llama.cpp's "graph nodes" line counts the prompt graph's nodes, the captured plan's
    (plan,) = worst_case_plans(model)
    assert pred.n_nodes == plan.n_nodes
    sim = build_model(pred.events)
    expl = {b.buft: b for b in explain(sim).buffers}
    assert set(expl) == {"CUDA0", "CUDA_Host"}
    assert expl["CUDA0"].size == pred.sizes["CUDA0"] and expl["CUDA_Host"].size == pred.sizes["CUDA_Host"]
    host_names = {n for g in expl["CUDA_Host"].groups for n in g.names}
    # every host tensor is a graph input or the rows taken from the host's token embeddings
    flags = {info.label: info.flags for info in model.tensors.values()}   # groups name tensors by label
    for name in host_names:
        assert flags.get(name, 0) & 1 or name == "embd" or name.startswith("get_rows "), name
    assert "attn_inp_kq_mask" in host_names
    device = expl["CUDA0"]
    assert device.groups[device.deciding[0]].name == "kq-*"
    # the device reads copies of the host's inputs
    assert any(g.name.startswith("CUDA0#attn_inp_kq_mask#") for g in device.groups)
    cpu_only = sum(model.plans[worst_case_plans(model)[-1].plan_id].chunk_sizes[0])
    assert pred.sizes["CUDA0"] + pred.sizes["CUDA_Host"] > cpu_only


def test_fewer_layers_on_the_gpu_mean_more_splits(captured: object) -> None:
    model = captured
    full = predict_cuda(model, n_layer=N_LAYER, record=False)
    half = predict_cuda(model, n_layer=N_LAYER, n_gpu_layers=N_LAYER // 2, record=False)
    none = predict_cuda(model, n_layer=N_LAYER, n_gpu_layers=0, record=False)
    # llama.cpp offloads the output layer first: -ngl 2 is the output and the last layer
    assert half.placement.output_on_gpu and not half.placement.full_offload
    assert half.placement.gpu_start == N_LAYER + 1 - N_LAYER // 2
    assert [il for il in range(N_LAYER) if half.placement.layer_on_gpu(il)] == list(range(N_LAYER // 2 + 1, N_LAYER))
    assert full.n_splits < half.n_splits <= none.n_splits
    # the KV cache of CPU layers is copied to the device, whose buffer grows by those copies
    assert half.sizes["CUDA0"] >= full.sizes["CUDA0"]


def test_an_rpc_device_never_copies_host_weights_in(captured: object) -> None:
    """ggml-rpc has no offload_op: with layers on the host their matrix multiplications stay
    there, so the device's buffer holds no copy of a host weight, where ggml-cuda's holds one
    per large batch; its buffers are named RPC0 and CPU (no host buffer type)."""
    model = captured
    cuda = predict_cuda(model, n_layer=N_LAYER, n_gpu_layers=1, record=True)
    rpc = predict_cuda(model, n_layer=N_LAYER, n_gpu_layers=1, record=True, device="RPC")
    assert set(rpc.sizes) == {"RPC0", "CPU"}

    def weight_copies(pred: object, buft: str) -> list[str]:
        sim = build_model(pred.events)  # type: ignore[attr-defined]
        return [t.name for t in sim.tensors.values() if t.name.startswith(f"{buft}#blk.") and ".weight" in t.name]

    assert weight_copies(cuda, "CUDA0") and not weight_copies(rpc, "RPC0")
    assert rpc.sizes["RPC0"] < cuda.sizes["CUDA0"]
