"""Device predictions against real devices: gguf-parser-go's ROCm sweep (llama.cpp b10687,
MI300X), whose rows are in ``benchmarks/device_validation.json``. A few rows are recomputed
here each run (llama.cpp builds their graphs from weightless GGUFs), every committed row is
checked against the goals (full offload within 1%, one layer within 5%), and ``--fit`` is
checked on two shapes by predicting again at its answer (fits) and one step beyond (not)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "benchmarks" / "device_validation.json"


def _bench() -> Any:
    sys.path.insert(0, str(ROOT))
    import benchmarks.device_validation as bench

    return bench


def test_the_committed_table_meets_the_goals() -> None:
    doc = json.loads(TABLE.read_text(encoding="utf-8"))
    assert "gguf-parser-go@71c933de" in doc["source"]
    rows = doc["rows"]
    assert len(rows) >= 12
    kinds = {r["kind"] for r in rows}
    assert {"dense", "MoE", "dense, sliding window"} <= kinds
    bench = _bench()
    for r in rows:
        # the measurement is the one copied from the sweep, and the shape has its layer count
        repo, file, ctx, layers, full, partial = bench.MEASURED[r["architecture"]]
        assert (r["measured_full_mib"], r["measured_partial_mib"], r["context"]) == (full, partial, ctx)
        assert r["n_layer"] + 1 == layers
        assert r["ratio_full"] == round(r["predicted_full_bytes"] / 1048576 / full, 4)
        assert abs(r["ratio_full"] - 1) <= 0.01, r
        assert abs(r["ratio_partial"] - 1) <= 0.05 or r["note"], r
        # gguf-parser's own estimate of the row is the one benchmarks/programs/gguf_parser_estimate.go printed
        assert (r["gguf_parser_full_mib"], r["gguf_parser_partial_mib"]) == bench.GGUF_PARSER[r["architecture"]]
        if f"{r['predicted_partial_bytes'] / 1048576:.2f}" != f"{partial:.2f}":
            assert r["note"], r  # every row that misses the logged figure says so
        # 1, 2 and 4 layers offloaded measured alike, and predicted alike
        assert r["predicted_ngl2_bytes"] == r["predicted_ngl4_bytes"] == r["predicted_partial_bytes"], r


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("xllamacpp")
    return tmp_path_factory.mktemp("device")


@pytest.mark.parametrize("arch", ["qwen2", "olmoe", "gemma3"])
def test_recomputed_rows_equal_the_committed_and_the_measured(arch: str, workdir: Path) -> None:
    """Dense, MoE and sliding-window attention: the prediction is the device's logged MiB."""
    bench = _bench()
    row = bench.predict(arch, str(workdir))
    committed = {r["architecture"]: r for r in json.loads(TABLE.read_text(encoding="utf-8"))["rows"]}[arch]
    assert row["predicted_full_bytes"] == committed["predicted_full_bytes"]
    assert row["predicted_partial_bytes"] == committed["predicted_partial_bytes"]
    assert f"{row['predicted_full_bytes'] / 1048576:.2f}" == f"{row['measured_full_mib']:.2f}"
    assert f"{row['predicted_partial_bytes'] / 1048576:.2f}" == f"{row['measured_partial_mib']:.2f}"


def _olmoe_run(workdir: Path) -> Any:
    from tests.capture.gguf_shapes import SHAPES, write_shape_gguf
    from vizalloc.predict import Setting, explain_model

    path = workdir / "olmoe-run.gguf"
    write_shape_gguf(path, SHAPES["olmoe"])
    (run,) = explain_model(str(path), [Setting(n_ctx=4096, flash_attn="on", kv_type="q8_0")], metadata_only=True,
                           device="rocm", build="b10687", threads=2)
    return run


def test_one_layer_offloaded_needs_more_than_all_for_the_host_weights_copied(workdir: Path) -> None:
    """With one layer on the GPU, the host layers' matrix multiplications of 512 tokens run on
    the device (ggml-cuda's offload_op, llama.cpp PR #6083), their weights copied into the
    device's compute buffer: that buffer is larger than with every layer offloaded, by about
    the largest host weight (OLMoE's experts of one layer, Q6_K: 110 MiB)."""
    from vizalloc.analysis.explain import explain
    from vizalloc.analysis.model import build_model

    from vizalloc.replay.cuda_split import worst_case_plans

    run = _olmoe_run(workdir)
    full = run.prediction.sizes["ROCm0"]
    # b10687's graph is the captured one without the 3 nodes of the mixed input branch
    assert run.prediction.n_nodes == max(p.n_nodes for p in worst_case_plans(run.model)) - 3
    one = run.predict(1, record=True)
    assert one.sizes["ROCm0"] > full + (100 << 20)
    peak = {b.buft: b for b in explain(build_model(one.events)).buffers}["ROCm0"]
    copies = [g for g in peak.groups if g.name.startswith("ROCm0#blk.") and "_exps.weight" in g.name]
    assert copies and copies[0].dtype == "q6_K"
    # the copy is the layer's whole expert tensor, padded as ggml-cuda pads a quantized row
    assert copies[0].nbytes >= 64 * 2048 * 1024 // 256 * 210
    # each host weight copied starts a split of its own, so that the next copy can reuse its bytes
    assert one.n_splits > run.prediction.n_splits


def test_fit_most_layers_and_largest_context(workdir: Path) -> None:
    """--fit's answers hold when predicted again from a fresh capture, and one step beyond does not fit."""
    from tests.capture.gguf_shapes import SHAPES, write_shape_gguf
    from vizalloc.predict import Setting, explain_model
    from vizalloc.predict.fit import fit, need_of

    path = workdir / "qwen2-fit.gguf"
    write_shape_gguf(path, SHAPES["qwen2"])
    base = Setting(n_ctx=4096, flash_attn="on", kv_type="q8_0")
    ctx = fit(str(path), budget=3 << 30, setting=base, question="n_ctx", device="rocm", build="b10687", threads=2,
              alternatives=False)
    assert ctx.answer is not None and ctx.beyond is not None
    assert ctx.answer.n_ctx % 256 == 0 and ctx.beyond.n_ctx == ctx.answer.n_ctx + 256
    assert ctx.answer.total <= ctx.usable < ctx.beyond.total
    (again,) = explain_model(str(path), [Setting(n_ctx=ctx.answer.n_ctx, flash_attn="on", kv_type="q8_0")],
                             metadata_only=True, device="rocm", build="b10687", threads=2)
    assert need_of(again, ctx.answer.n_gpu_layers) == ctx.answer

    olmoe = workdir / "olmoe-fit.gguf"
    write_shape_gguf(olmoe, SHAPES["olmoe"])
    layers = fit(str(olmoe), budget=3 << 30, setting=base, question="n_gpu_layers", device="rocm", build="b10687",
                 threads=2, alternatives=False)
    assert layers.answer is not None and layers.beyond is not None
    assert 0 < layers.answer.n_gpu_layers < 16 and layers.beyond.n_gpu_layers == layers.answer.n_gpu_layers + 1
    assert layers.answer.total <= layers.usable < layers.beyond.total
    (run,) = explain_model(str(olmoe), [base], metadata_only=True, device="rocm", build="b10687", threads=2)
    assert need_of(run, layers.answer.n_gpu_layers) == layers.answer
    assert need_of(run, layers.beyond.n_gpu_layers).total > layers.usable


def test_one_gpu_layer_is_the_output_layer_and_a_tied_output_is_duplicated(workdir: Path) -> None:
    """llama.cpp offloads the output layer first (-ngl 1: the output layer alone); a tied
    output (Qwen2.5-3B's) is the token embeddings loaded again on the device, where its
    projection then runs."""
    from tests.capture.gguf_shapes import SHAPES, write_shape_gguf
    from vizalloc.analysis.model import build_model
    from vizalloc.predict import Setting, explain_model
    from vizalloc.predict.fit import static_need
    from vizalloc.replay.cuda_split import ROCM

    path = workdir / "qwen2-tied.gguf"
    write_shape_gguf(path, SHAPES["qwen2"])
    (run,) = explain_model(str(path), [Setting(n_ctx=4096, flash_attn="on", kv_type="q8_0")], metadata_only=True,
                           device="rocm", build="b10687", threads=2)
    sizes = {t.name: t.nbytes for t in run.model.tensors.values()}
    weights, kv = static_need(run.model, run.n_layer, 1, ROCM)
    assert kv == 0 and weights == sizes["output_norm.weight"] // 128 * 128 + 128 * bool(
        sizes["output_norm.weight"] % 128) + sizes["token_embd.weight"]
    one = run.predict(1, record=True)
    sim = build_model(one.events)
    (dup,) = [t for t in sim.tensors.values() if t.name == "output.weight"]
    assert dup.nbytes == sizes["token_embd.weight"]
    # the projection reads the duplicate, not the host's token embeddings
    assert any(t.name == "result_output" and dup.tensor_id in t.srcs for t in sim.tensors.values())
