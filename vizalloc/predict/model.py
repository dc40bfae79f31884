"""One llama.cpp context per setting, created under the capture and explained.

Each setting runs in a fresh process (the driver ``python -m vizalloc.capture.llama``):
llama.cpp loads the model, creates the context (its scheduler reserves the worst-case
graph: ``n_ubatch`` tokens over the whole KV cache) and stops, generating nothing. The
driver reports what llama.cpp logged ("CPU compute buffer size = 34.27 MiB"), which the
run keeps beside the sizes the trace holds.

With ``metadata_only`` the model's header is copied into a sparse file (the weights a
hole, :mod:`vizalloc.capture.gguf_header`) and the driver asks llama.cpp to measure as
its ``--fit`` does (``no_alloc``: no weights read, no KV cache or compute buffer
allocated), so the model's size on disk and in memory does not matter.

Whose graph: the driver is llama.cpp's server (xllamacpp) with one sequence. llama.cpp
reserves its worst case with ``min(n_ubatch, n_outputs_max)`` outputs (logits rows), and
the programs set ``n_outputs_max`` differently: llama-server to ``-np`` × (1 + draft
length), 1 with ``-np 1`` and no draft; llama-cli runs that server; llama-completion
leaves it at ``n_batch``, so it reserves ``n_ubatch`` outputs (``outputs_of_program``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vizalloc.errors import UsageError, VizallocError
from vizalloc.replay.cuda_split import DEVICES

DRIVER = "vizalloc.capture.llama"

#: the programs whose worst-case graph can be reproduced (how many outputs they reserve)
PROGRAMS = ("server", "cli", "completion")
#: the devices predicted (``--device``) -> their ``cuda_split.DEVICES`` name (their buffers' prefix)
DEVICE_NAMES = {name.lower(): name for name in DEVICES}

# llama.cpp: "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 1414660096"
_FAILED_ALLOC = re.compile(r"failed to allocate (?:\S+ )?buffer of size (\d+)")
_DRIVER_ERROR = re.compile(r"^vizalloc\.capture\.llama: (.*)$", re.M)


class ExplainModelError(VizallocError):
    """llama.cpp could not create the context (the message says why, in one line)."""


def outputs_of_program(program: str, n_ubatch: int) -> int:
    """The outputs llama.cpp's worst-case reserve has in ``program`` (one sequence, no draft):
    llama-server ``-np 1`` and llama-cli (which runs that server) 1; llama-completion, whose
    ``n_outputs_max`` stays ``n_batch``, the whole micro-batch."""
    if program not in PROGRAMS:
        raise UsageError(f"--program {program!r}: give one of {', '.join(PROGRAMS)}")
    return n_ubatch if program == "completion" else 1


@dataclass(frozen=True)
class Setting:
    """What one context is created with (llama.cpp's ``-c``, ``-ub``, ``-b``, ``-fa``) and
    whose worst-case graph it reproduces: ``program``, or an explicit ``n_outputs``."""

    n_ctx: int = 4096
    n_ubatch: int = 512
    n_batch: int | None = None  # None: llama.cpp's default (capture.llama.default_batch)
    flash_attn: str = "auto"
    program: str = "server"
    n_outputs: int | None = None  # None: the program's
    kv_type: str = "f16"          # the KV cache's type, K and V (-ctk/-ctv)

    @classmethod
    def of(cls, d: dict[str, Any]) -> Setting:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def batch(self) -> int:
        from vizalloc.capture.llama import default_batch

        return self.n_batch if self.n_batch is not None else default_batch(self.n_ubatch)

    @property
    def outputs(self) -> int:
        return self.n_outputs if self.n_outputs is not None else outputs_of_program(self.program, self.n_ubatch)

    @property
    def whose(self) -> str:
        """Whose worst-case graph this is, in words."""
        n = self.outputs
        if self.n_outputs is not None:
            return f"--outputs {n} ({n} output{'s' if n != 1 else ''})"
        name = {"server": "llama-server -np 1", "cli": "llama-cli", "completion": "llama-completion"}[self.program]
        return f"{name} ({n} output{'s' if n != 1 else ''})"

    def llama_settings(self, model: str, *, no_alloc: bool = False, threads: int = 0) -> Any:
        from vizalloc.capture.llama import LlamaSettings

        return LlamaSettings(model, n_ctx=self.n_ctx, n_batch=self.batch, n_ubatch=self.n_ubatch,
                             flash_attn=self.flash_attn, n_outputs=self.outputs, kv_type=self.kv_type,
                             threads=threads, no_alloc=no_alloc)

    def check(self, model: str) -> None:
        """A UsageError naming the setting llama.cpp would refuse or silently change."""
        outputs_of_program(self.program, self.n_ubatch)
        self.llama_settings(model).check()

    def as_dict(self) -> dict[str, Any]:
        """The setting as the JSON documents give it (the keys of ``vizalloc.explain/1``)."""
        d: dict[str, Any] = {"n_ctx": self.n_ctx, "n_ubatch": self.n_ubatch, "n_batch": self.n_batch,
                             "flash_attn": self.flash_attn}
        if self.program != "server" or self.n_outputs is not None:
            d["n_outputs"] = self.outputs
        if self.kv_type != "f16":
            d["kv_type"] = self.kv_type
        return d


@dataclass
class ModelRun:
    """One setting explained: what it was, what llama.cpp logged, what the trace says."""

    setting: dict[str, Any]
    explanation: Any
    report: dict[str, Any]                   # the driver's JSON report ({} when it measured without memory)
    logged: dict[str, str] = field(default_factory=dict)        # buffer type -> "34.27" (MiB, as logged)
    logged_exact: dict[str, str] = field(default_factory=dict)  # buffer type -> "34.2700" (when freed)
    allocated: dict[str, int] = field(default_factory=dict)     # buffer type -> bytes the process allocated
    seconds: float = 0.0
    trace: str = ""
    #: with device "cuda": the CPU capture's own explanation, and the simulated split
    cpu_explanation: Any = None
    prediction: Any = None
    #: the setting itself (``setting`` is its JSON form)
    spec: Setting = field(default_factory=Setting)
    #: the model's training context, which ``n_ctx 0`` stands for (0: not known)
    n_ctx_train: int = 0
    architecture: str = ""
    #: the captured trace's model (for predicting again: ``predict``), and the device run
    model: Any = None
    device: str = "cpu"
    build: str = "captured"
    n_layer: int = 0
    #: "on" when the captured graph computes attention with FLASH_ATTN_EXT, else "off"
    graph_flash_attn: str = ""
    #: the devices' shares (``--tensor-split``; None: one device)
    tensor_split: tuple[float, ...] | None = None

    @property
    def n_ctx(self) -> int:
        """The context llama.cpp created: ``n_ctx 0`` means the training context."""
        return self.spec.n_ctx or self.n_ctx_train

    @property
    def flash_attn(self) -> str:
        """The flash-attention setting, with what ``auto`` resolved to where llama.cpp said
        (``auto -> on``); a measurement without memory resolves it from the trace."""
        fa = self.spec.flash_attn
        resolved = self.report.get("flash_attn") or self.graph_flash_attn
        return f"auto -> {resolved}" if fa == "auto" and resolved else fa

    def predict(self, n_gpu_layers: int | None = None, *, device: str | None = None, record: bool = False,
                tensor_split: Sequence[float] | None = None) -> Any:
        """The device prediction at another ``n_gpu_layers`` (or ``tensor_split``) from the
        same capture (the CPU graph depends on neither): a ``cuda_split.Prediction``."""
        from vizalloc.replay.cuda_split import predict_cuda

        dev = device or self.device
        if dev == "cpu" or self.model is None or not self.n_layer:
            raise UsageError("predicting a device needs a run explained with device cuda, rocm or rpc")
        return predict_cuda(self.model, n_layer=self.n_layer, n_gpu_layers=n_gpu_layers, record=record,
                            build=self.build, device=DEVICE_NAMES[dev],
                            tensor_split=self.tensor_split if tensor_split is None else tensor_split)

    def matches_log(self, buft: str, nbytes: int) -> bool | None:
        """Whether ``nbytes`` prints as llama.cpp's figures for ``buft`` (None: nothing logged)."""
        from vizalloc.export.units import mib

        logged = self.logged.get(buft)
        if logged is None:
            return None
        exact = self.logged_exact.get(buft)
        return mib(nbytes) == f"{logged} MiB" and (exact is None or mib(nbytes, 4) == f"{exact} MiB")


def driver_argv(model: str, setting: Setting, *, no_alloc: bool, threads: int) -> list[str]:
    argv = [sys.executable, "-m", DRIVER, model, "--ctx", str(setting.n_ctx), "--batch", str(setting.batch),
            "--ubatch", str(setting.n_ubatch), "--flash-attn", str(setting.flash_attn), "--json"]
    if setting.outputs != 1:
        argv += ["--outputs", str(setting.outputs)]
    if setting.kv_type != "f16":
        argv += ["--kv-type", setting.kv_type]
    if no_alloc:
        argv.append("--no-alloc")
    if threads:
        argv += ["--threads", str(threads)]
    return argv


def require_llama() -> None:
    """A UsageError when llama.cpp (xllamacpp) or the driver is missing."""
    import importlib.util

    def present(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a module set to None
            return False

    if not present(DRIVER):
        raise UsageError(f"this vizalloc has no llama.cpp driver ({DRIVER}); upgrade vizalloc")
    if not present("xllamacpp"):
        raise UsageError("explaining a GGUF model runs llama.cpp through xllamacpp, which is not installed: "
                         "pip install 'vizalloc[llama]'")


def model_layers(header: Any, path: str) -> int:
    """The model's layer count (``ARCH.block_count``), which a device prediction needs."""
    blocks = header.hparam("block_count")
    if not isinstance(blocks, int) or blocks <= 0:
        raise UsageError(f"--device cuda needs the model's layer count, {header.architecture}.block_count, which "
                         f"{path}'s header does not give")
    return blocks


def explain_model(path: str, settings: Sequence[Setting], *, metadata_only: bool = False, device: str = "cpu",
                  n_gpu_layers: int | None = None, tensor_split: Sequence[float] | None = None,
                  threads: int = 0, keep_trace: str | None = None,
                  force: bool = False, on_start: Callable[[int, Setting], None] | None = None,
                  build: str = "captured") -> list[ModelRun]:
    """Explain the model at ``path`` at every setting, each in a fresh llama.cpp process.

    Every setting is checked before the first run. ``device`` "cuda" predicts one GPU's
    compute buffers (``n_gpu_layers`` None: every layer), "rocm" the same for a HIP build, "rpc"
    for ggml-rpc in front of a CPU rpc-server;
    ``build`` "b10687" predicts the graph as that llama.cpp build makes it
    (``cuda_split.predict_cuda``); ``keep_trace`` keeps the one
    setting's trace there; ``on_start(i, setting)`` is called before each run."""
    from vizalloc.capture.gguf_header import check_complete, read_header, write_metadata_only

    if device != "cpu" and device not in DEVICE_NAMES:
        raise UsageError(f"device {device!r}: give cpu or one of {', '.join(DEVICE_NAMES)}")
    if tensor_split is not None and device == "cpu":
        raise UsageError("--tensor-split shares layers between devices: give --device cuda, rocm or rpc")
    if n_gpu_layers is not None and device == "cpu":
        raise UsageError("--n-gpu-layers applies to --device cuda or rocm")
    if n_gpu_layers is not None and n_gpu_layers < 0:
        raise UsageError(f"--n-gpu-layers {n_gpu_layers}: give 0 or more (default: every layer)")
    if not settings:
        raise UsageError("no setting to explain")
    for s in settings:
        s.check(path)
    if keep_trace and len(settings) > 1:
        raise UsageError("--trace keeps one trace: give it without --sweep")
    header = read_header(path)
    n_layer = model_layers(header, path) if device != "cpu" else 0
    from vizalloc.replay.cuda_split import BUILDS

    if build not in BUILDS:
        raise UsageError(f"--llama-build {build!r}: give one of {', '.join(BUILDS)}")
    if not metadata_only:
        check_complete(header)
    if keep_trace:
        from vizalloc.files import check_new

        check_new(keep_trace, overwrite=force, flag="-f", other="use --trace to choose another name")
    require_llama()
    train = header.hparam("context_length")
    n_ctx_train = train if isinstance(train, int) and train > 0 else 0
    name = os.path.basename(path)
    runs: list[ModelRun] = []
    with tempfile.TemporaryDirectory(prefix="vizalloc-explain-") as tmp:
        model_path = path
        if metadata_only:
            model_path = os.path.join(tmp, "model.metadata-only.gguf")
            write_metadata_only(header, model_path)
        for i, setting in enumerate(settings):
            if on_start is not None:
                on_start(i, setting)
            run = _run_setting(model_path, setting, tmp, no_alloc=metadata_only, threads=threads,
                               keep_trace=keep_trace, force=force, display=name, device=device, n_layer=n_layer,
                               n_gpu_layers=n_gpu_layers, n_ctx_train=n_ctx_train, build=build,
                               tensor_split=tuple(tensor_split) if tensor_split else None)
            run.n_ctx_train, run.architecture = n_ctx_train, header.architecture
            runs.append(run)
    return runs


def _run_setting(model_path: str, setting: Setting, workdir: str, *, no_alloc: bool, threads: int,
                 keep_trace: str | None, force: bool, display: str, device: str, n_layer: int,
                 n_gpu_layers: int | None, n_ctx_train: int = 0, build: str = "captured",
                 tensor_split: tuple[float, ...] | None = None) -> ModelRun:
    """Create llama.cpp's context for one (checked) setting under the capture and explain the trace."""
    from vizalloc.analysis.explain import explain
    from vizalloc.analysis.model import build_model
    from vizalloc.capture import trace_program
    from vizalloc.trace.api import load

    trace_path = keep_trace or os.path.join(workdir, "llama.vztrace")
    out_path, err_path = os.path.join(workdir, "driver.out"), os.path.join(workdir, "driver.err")
    argv = driver_argv(model_path, setting, no_alloc=no_alloc, threads=threads)
    t0 = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        traced = trace_program(argv, trace_path, force=True if keep_trace is None else force, stdout=out, stderr=err)
    seconds = time.perf_counter() - t0
    stdout = Path(out_path).read_text(encoding="utf-8", errors="replace")
    stderr = Path(err_path).read_text(encoding="utf-8", errors="replace")
    finished = traced.finished
    # --ctx 0 is the training context: its dimension is still n_ctx
    hints = {k: int(v) for k, v in (("n_ctx", setting.n_ctx or n_ctx_train), ("n_ubatch", setting.n_ubatch)) if v}
    trace_file = str(traced.traces[0][0]) if traced.traces else ""
    imported = traced.traces[0][1] if traced.traces else None
    if finished.exit_code != 0:
        raise _failure(finished.exit_code, stderr.replace(repr(model_path), display), trace_file, hints, imported,
                       display, setting)
    report: dict[str, Any] = {}
    if not no_alloc:  # a measurement without memory ends in the capture, before any report
        try:
            report = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ExplainModelError(f"the llama.cpp driver printed no report (exit code 0); its output ends: "
                                    f"{_tail(stdout + stderr)}") from None
    buffers = list(imported.compute_buffers) if imported is not None else []
    if not buffers:
        raise ExplainModelError(f"llama.cpp planned no compute buffer under the capture (n_ctx {setting.n_ctx}, "
                                f"n_ubatch {setting.n_ubatch}); its output ends: {_tail(stderr)}")
    model = build_model(load(trace_file))
    expl = _name_buffers(explain(model, hints=hints), [b.buft for b in buffers])
    cpu_expl, prediction = None, None
    if device != "cpu":
        from vizalloc.replay.cuda_split import predict_cuda

        prediction = predict_cuda(model, n_layer=n_layer, n_gpu_layers=n_gpu_layers, build=build,
                                  device=DEVICE_NAMES[device], tensor_split=tensor_split)
        cpu_expl, expl = expl, explain(build_model(prediction.events), hints=hints)
    return ModelRun(setting.as_dict(), expl, report, cpu_explanation=cpu_expl, prediction=prediction,
                    logged={str(n): str(v) for n, v in report.get("compute_buffers", [])},
                    logged_exact={str(n): str(v) for n, v in report.get("compute_buffers_exact", [])},
                    allocated={b.buft: b.allocated for b in buffers if b.allocated is not None},
                    seconds=seconds, trace=trace_file if keep_trace else "", spec=setting,
                    graph_flash_attn=_graph_flash_attn(model), model=model, device=device, build=build,
                    n_layer=n_layer, tensor_split=tensor_split)


def _graph_flash_attn(model: Any) -> str:
    """What flash attention resolved to, read from the graph llama.cpp built: with it on,
    attention is one ``FLASH_ATTN_EXT`` node per layer (no ``kq`` scores)."""
    return "on" if any(t.op == "FLASH_ATTN_EXT" for t in model.tensors.values()) else "off"


def _name_buffers(expl: Any, names: Sequence[str]) -> Any:
    """Buffers the trace never allocated (llama.cpp measured without allocating) take the
    names llama.cpp logged, which come in the scheduler's backend order (= slot order)."""
    buffers = []
    for b in expl.buffers:
        if not b.buft and b.slot < len(names):
            b = dataclasses.replace(b, buft=names[b.slot], backend=names[b.slot])
        buffers.append(b)
    return dataclasses.replace(expl, buffers=tuple(buffers))


def _tail(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text[-n:] if text else "(nothing)"


# llama.cpp's own words for why it stopped, most specific first
_LLAMA_ERRORS = (
    re.compile(r"error loading model(?: architecture| hyperparameters| vocabulary)?: (.+)"),
    re.compile(r"failed to initialize the context: (.+)"),
    re.compile(r"llama_init_from_model: (.+)"),
)
# llama.cpp's log prefix: the time, the level, and a module tag ("cmn", "srv"), not the
# function name ending in ":" that starts the message
_LOG_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [DIWE] (?:[^\s:]+\s+)?")


def _failure(code: int, stderr: str, trace_file: str, hints: dict[str, int], imported: Any,
             model_name: str, setting: Setting) -> VizallocError:
    """One line saying why llama.cpp failed; for a buffer that did not fit, what it holds."""
    at = f"n_ctx {setting.n_ctx}, n_ubatch {setting.n_ubatch}, flash attention {setting.flash_attn}"
    failed = _FAILED_ALLOC.findall(stderr)
    if failed:
        nbytes = int(failed[-1])
        return ExplainModelError(_explain_failed(trace_file, nbytes, hints, imported, model_name, at))
    messages = [_LOG_PREFIX.sub("", line).strip() for line in stderr.splitlines()]
    for pattern in _LLAMA_ERRORS:
        for msg in messages:
            m = pattern.search(msg)
            if m:
                return ExplainModelError(f"llama.cpp cannot use {model_name} at {at}: {m.group(1).strip()}")
    found = _DRIVER_ERROR.findall(stderr)
    if found:
        return ExplainModelError(found[-1].strip())
    return ExplainModelError(f"llama.cpp ended with exit code {code} for {model_name} at {at}: {_tail(stderr)}")


def _explain_failed(trace_file: str, nbytes: int, hints: dict[str, int], imported: Any, model_name: str,
                    at: str) -> str:
    """What the buffer of ``nbytes`` that could not be allocated would have held at its peak."""
    from vizalloc.analysis.explain import deciding_text, explain
    from vizalloc.analysis.model import build_model
    from vizalloc.export.units import mib
    from vizalloc.trace.api import load

    what = f"{nbytes:,} B ({mib(nbytes)})"
    names = {cb.planned: cb.buft for cb in getattr(imported, "compute_buffers", ())}
    try:
        expl = explain(build_model(load(trace_file)), hints=hints) if trace_file and os.path.exists(trace_file) \
            else None
    except VizallocError:
        expl = None
    for b in expl.buffers if expl is not None else ():
        if b.size == nbytes:
            title = f"{names.get(nbytes) or b.buft or 'a'} compute buffer"
            return (f"llama.cpp could not allocate the {title} of {what} for {model_name} at {at}; at its peak, "
                    f"{deciding_text(b.groups, b.deciding)}; a smaller --ubatch or --ctx, or --flash-attn on, "
                    "makes it smaller")
    return f"llama.cpp could not allocate a buffer of {what} for {model_name} at {at} (not a compute buffer it planned)"
