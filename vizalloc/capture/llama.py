"""A real llama.cpp run to trace: create a context for a GGUF model (and optionally
generate a few tokens) through ``xllamacpp``, the prebuilt CPU llama.cpp.

    vizalloc run -o gemma.vztrace -- python -m vizalloc.capture.llama MODEL.gguf --ctx 8192 --ubatch 512 --flash-attn off

llama.cpp plans its worst case when a context is created (the scheduler reserves a graph
of ``n_ubatch`` tokens over the whole KV cache), so creating one is enough to see the
compute buffer it allocates; ``--generate N`` then runs the prompt and N tokens, whose
graphs are allocated in that buffer. Nothing here models llama.cpp: the process is
llama.cpp itself, and the capture (``vizalloc run --``) sees what its allocator does.

llama.cpp writes its log to stderr; this driver shows the lines that size memory (compute,
KV cache, output and model buffers, what flash attention resolved to) and errors, and
drops the rest (``--verbose`` shows everything). Its own report goes to stdout, as text or
``--json``. ``xllamacpp`` is an optional dependency: ``pip install 'vizalloc[llama]'``.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import re
import sys
import queue
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from vizalloc.errors import UsageError, VizallocError

#: the llama.cpp build this driver was written and tested against
XLLAMACPP_VERSION = "2026.10.11549"

FLASH_ATTN = ("on", "off", "auto")
#: KV cache types (llama.cpp's -ctk/-ctv) and their ggml type numbers
KV_TYPES = {"f16": 1, "f32": 0, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7}
#: llama.cpp's ``-b`` when none is given; a larger ``-ub`` raises it (``default_batch``)
DEFAULT_BATCH = 2048


def default_batch(n_ubatch: int) -> int:
    """The logical batch when none is given: llama.cpp's 2048, or the micro-batch if larger
    (a batch smaller than the micro-batch would cut it)."""
    return max(DEFAULT_BATCH, n_ubatch)


# "0.01.830.679 I sched_reserve:        CPU compute buffer size =    21.28 MiB"
_LOG_LINE = re.compile(r"^\d+\.\d+\.\d+\.\d+ ([DIWE]) (.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_COMPUTE = re.compile(r"^sched_reserve:\s+(\S+) compute buffer size =\s+([0-9.]+) MiB")
_COMPUTE_EXACT = re.compile(r"^~llama_context:\s+(\S+) compute buffer size is\s+([0-9.]+) MiB")
_FLASH = re.compile(r"Flash Attention (enabled|disabled|was auto, set to (enabled|disabled))")
#: llama.cpp's lines worth showing without --verbose: what sizes memory, and what failed
_FAILED = re.compile(r"fail|error|assert|abort|vizalloc", re.IGNORECASE)
_SHOWN = re.compile(r"buffer size|Flash Attention|llama_kv_cache: size =|fail|error", re.IGNORECASE)


class LlamaUnavailableError(VizallocError):
    """xllamacpp (llama.cpp for Python) is not installed, or not the version this driver knows."""


class LlamaRunError(VizallocError):
    """llama.cpp could not load the model or create the context."""


@dataclass(frozen=True)
class LlamaSettings:
    """What the context is created with (llama.cpp's names: ``-c``, ``-b``, ``-ub``, ``-fa``, ``-t``)."""

    model: str
    n_ctx: int = 4096
    n_batch: int = DEFAULT_BATCH
    n_ubatch: int = 512
    flash_attn: str = "auto"
    #: outputs of the worst-case reserve (the logits rows): 1 as llama-server with -np 1 and
    #: llama-cli, n_ubatch as llama-completion; more than 1 is asked for through the server's
    #: speculative-decoding output limit (``run_llama``)
    n_outputs: int = 1
    #: the KV cache's type, K and V alike (``-ctk``/``-ctv``)
    kv_type: str = "f16"
    generate: int = 0
    prompt: str = "The capital of France is"
    threads: int = 0  # 0: llama.cpp's default (every core)
    #: measure as llama.cpp's --fit does (nothing allocated, no weights read) and stop there
    no_alloc: bool = False

    def check(self) -> None:
        """A UsageError naming the setting that llama.cpp would refuse or silently change."""
        if not os.path.isfile(self.model):
            raise UsageError(f"no model file at {self.model!r}: give the path of a .gguf file")
        for name, value in (("--ctx", self.n_ctx), ("--batch", self.n_batch), ("--ubatch", self.n_ubatch)):
            if value < 0 or (value == 0 and name != "--ctx"):
                raise UsageError(f"{name} {value}: give a positive number of tokens"
                                 + (" (--ctx 0 means the model's training context)" if name == "--ctx" else ""))
        if self.n_ubatch > self.n_batch:
            raise UsageError(f"--ubatch {self.n_ubatch} is larger than --batch {self.n_batch}: llama.cpp would cut "
                             f"the micro-batch to {self.n_batch}; give --batch {self.n_ubatch} or more")
        if not 1 <= self.n_outputs <= self.n_ubatch:
            raise UsageError(f"--outputs {self.n_outputs}: the worst-case graph has 1 to n_ubatch ({self.n_ubatch}) "
                             "outputs; give a number in that range")
        if self.kv_type not in KV_TYPES:
            raise UsageError(f"--kv-type {self.kv_type!r}: give one of {', '.join(KV_TYPES)}")
        if self.flash_attn not in FLASH_ATTN:
            raise UsageError(f"--flash-attn {self.flash_attn!r}: give one of {', '.join(FLASH_ATTN)}")
        if self.generate < 0 or self.threads < 0:
            raise UsageError("--generate and --threads take a number >= 0")
        if self.no_alloc and self.generate:
            raise UsageError("--no-alloc measures without memory and stops: it cannot --generate")


@dataclass
class LlamaRun:
    """What llama.cpp reported: its log lines about memory, as it wrote them, and the
    figures read from them."""

    settings: LlamaSettings
    #: (buffer type, MiB as llama.cpp printed it, two decimals) per "compute buffer size" line
    compute_buffers: list[tuple[str, str]] = field(default_factory=list)
    #: (buffer type, MiB with four decimals) from the line llama.cpp logs when the context is freed
    compute_buffers_exact: list[tuple[str, str]] = field(default_factory=list)
    flash_attn: str = ""  # what "auto" resolved to ("on"/"off"), or the setting itself
    lines: list[str] = field(default_factory=list)
    text: str = ""
    tokens: int = 0
    #: wall and CPU seconds (every thread of this process) of loading the model and creating
    #: the context, and of the generation
    seconds_context: float = 0.0
    seconds_generate: float = 0.0
    cpu_seconds_context: float = 0.0
    cpu_seconds_generate: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _import_xllamacpp() -> Any:
    try:
        import xllamacpp
    except ImportError as exc:
        raise LlamaUnavailableError(
            f"tracing llama.cpp needs xllamacpp (llama.cpp for Python), which is not importable here ({exc}): "
            f"pip install 'vizalloc[llama]' (xllamacpp=={XLLAMACPP_VERSION})") from None
    return xllamacpp


def filter_log(verbose: bool) -> None:
    """The log filter's process: llama.cpp's stderr on stdin; the lines to show go to
    stderr, and (without their timestamps) to stdout for the driver to read.

    A message of several lines continues on lines without the timestamp; those follow the
    message's fate, unless they say something failed (ggml's own asserts print no prefix)."""
    import signal

    # the terminal's Ctrl-C reaches this process too: it ends when the driver does (its stdin
    # closes), after passing on what llama.cpp wrote last, never with a traceback of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out, back = sys.stderr.buffer, sys.stdout.buffer
    hiding = False
    for raw in sys.stdin.buffer:
        text = _ANSI.sub("", raw.decode("utf-8", "replace").rstrip("\n"))
        m = _LOG_LINE.match(text)
        if m is None:
            if verbose or not hiding or _FAILED.search(text):
                out.write(raw)
                out.flush()
            continue
        level, message = m.groups()
        shown = level == "E" or _SHOWN.search(message) is not None
        hiding = not (shown or verbose)
        if not hiding:
            out.write(raw)
            out.flush()
        if shown:
            back.write((message + "\n").encode("utf-8", "replace"))
            back.flush()


def _read_line(run: LlamaRun, message: str) -> None:
    run.lines.append(message)
    if c := _COMPUTE.match(message):
        run.compute_buffers.append((c.group(1), c.group(2)))
    elif c := _COMPUTE_EXACT.match(message):
        run.compute_buffers_exact.append((c.group(1), c.group(2)))
    if f := _FLASH.search(message):
        run.flash_attn = "on" if f.group(0).endswith("enabled") else "off"


class _LlamaLog:
    """This process's stderr (file descriptor 2, where llama.cpp's C code writes) routed
    through ``filter_log`` in a small process of its own.

    A process, not a thread: llama.cpp logs from a thread of its own while the Python
    thread that created the context holds the GIL inside xllamacpp, so a Python reader in
    this process could not drain the pipe and llama.cpp would block writing to it."""

    def __init__(self, run: LlamaRun, verbose: bool) -> None:
        self.run, self.verbose = run, verbose
        self.saved = -1
        self.python_stderr: TextIO = sys.stderr
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def __enter__(self) -> _LlamaLog:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIZALLOC_CAPTURE")}
        env.pop("LD_PRELOAD", None)  # the filter is vizalloc's, not the program's: not traced
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        sys.stderr.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from vizalloc.capture.llama import filter_log; filter_log({self.verbose!r})"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.saved = os.dup(2)
        os.dup2(self.proc.stdin.fileno(), 2)
        self.proc.stdin.close()
        # Python's own messages (warnings, tracebacks) go straight to the real stderr
        self.python_stderr = sys.stderr
        sys.stderr = io.TextIOWrapper(io.FileIO(os.dup(self.saved), "wb"), encoding="utf-8", errors="replace",
                                      line_buffering=True)
        stdout = self.proc.stdout

        def reader() -> None:
            for raw in stdout:
                self.lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
            self.lines.put(None)

        threading.Thread(target=reader, name="llama.cpp log", daemon=True).start()
        return self

    def collect(self, until: re.Pattern[str] | None = None, timeout: float = 0.0) -> None:
        """Take in the lines the filter passed back so far; with ``until``, wait up to
        ``timeout`` s for a line it matches (llama.cpp logs from a thread of its own, a
        little later than the call that made the line)."""
        deadline = time.monotonic() + timeout
        while (line := self._next(deadline - time.monotonic() if until is not None else 0.0)) is not None:
            _read_line(self.run, line)
            if until is not None and until.match(line):
                until = None

    def drain(self, timeout: float) -> None:
        """Take in every line left, up to the filter's end (at most ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while (wait := deadline - time.monotonic()) > 0 and (line := self._next(wait)) is not None:
            _read_line(self.run, line)

    def _next(self, wait: float) -> str | None:
        """The next line (waiting up to ``wait`` s if positive, else only if one is there);
        None when none came or the filter has ended (its end stays queued for the next look)."""
        try:
            line = self.lines.get(timeout=wait) if wait > 0 else self.lines.get_nowait()
        except queue.Empty:
            return None
        if line is None:
            self.lines.put(None)
        return line

    def __exit__(self, *exc: object) -> None:
        sys.stderr.close()
        sys.stderr = self.python_stderr
        os.dup2(self.saved, 2)  # the filter's stdin loses its last writer: it ends
        os.close(self.saved)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.drain(timeout=5.0)


class _StopAtCtrlC:
    """Ctrl-C during llama.cpp's own work ends the process at once, as it ends llama-cli.

    Python's KeyboardInterrupt waits for the main thread to come back from C++ (after the
    whole generation); inside, SIGINT is given its default action instead. Under vizalloc's
    capture the capture's own handler is there already (it writes out what it holds first)
    and is kept."""

    def __enter__(self) -> None:
        import signal

        self.saved = signal.getsignal(signal.SIGINT)
        if self.saved is signal.default_int_handler:
            signal.signal(signal.SIGINT, signal.SIG_DFL)

    def __exit__(self, *exc: object) -> None:
        import signal

        if self.saved is signal.default_int_handler:
            signal.signal(signal.SIGINT, self.saved)


def run_llama(settings: LlamaSettings, *, verbose: bool = False) -> LlamaRun:
    """Load the model, create the context (llama.cpp's worst-case reserve), generate
    ``settings.generate`` tokens, free everything; what llama.cpp reported."""
    settings.check()
    x = _import_xllamacpp()
    run = LlamaRun(settings, flash_attn="" if settings.flash_attn == "auto" else settings.flash_attn)
    p = x.CommonParams()
    p.model.path = settings.model
    p.n_ctx = settings.n_ctx
    p.n_batch = settings.n_batch
    p.n_ubatch = settings.n_ubatch
    p.n_parallel = 1
    p.flash_attn_type = {
        "on": x.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": x.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        "auto": x.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_AUTO,
    }[settings.flash_attn]
    # one context, the one asked for: fitting the parameters to the device would first
    # create a trial context (and its reserve) of its own; a warm-up would decode once more
    p.fit_params = False
    p.warmup = False
    if settings.n_outputs > 1:
        _reserve_outputs(x, p, settings.n_outputs)
    if settings.kv_type != "f16":
        p.cache_type_k = p.cache_type_v = KV_TYPES[settings.kv_type]
    if settings.no_alloc:
        _stop_after_measuring(p)
    # a round trip through the server's task queue before it is freed: xllamacpp's Server
    # freed before its loop has started waits for that loop forever (seen 1 time in 6 here)
    p.endpoint_metrics = True
    p.n_threads_http = 1
    p.verbosity = 10  # the memory lines are INFO, the exact compute buffer size DEBUG
    if settings.threads:
        p.cpuparams.n_threads = settings.threads
        p.cpuparams_batch.n_threads = settings.threads
    with _LlamaLog(run, verbose) as log, _StopAtCtrlC():
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            server = x.Server(p)
        except Exception as exc:  # xllamacpp raises RuntimeError-like errors from C++
            raise LlamaRunError(f"llama.cpp could not load {settings.model!r} with n_ctx {settings.n_ctx}, "
                                f"n_ubatch {settings.n_ubatch}: {exc} (run with --verbose for llama.cpp's log)") from None
        run.seconds_context, run.cpu_seconds_context = time.perf_counter() - t0, time.process_time() - c0
        if settings.no_alloc:  # the capture ends the process when llama.cpp has measured
            raise LlamaRunError(f"llama.cpp did not measure {settings.model!r} without memory (its --fit step "
                                "failed or was skipped; run with --verbose for its log)")
        if settings.generate:
            t0, c0 = time.perf_counter(), time.process_time()
            out = server.handle_completions({"prompt": settings.prompt, "n_predict": settings.generate,
                                             "temperature": 0.0})
            run.seconds_generate, run.cpu_seconds_generate = time.perf_counter() - t0, time.process_time() - c0
            if isinstance(out, dict) and out.get("choices"):
                run.text = str(out["choices"][0].get("text", ""))
                run.tokens = int(out.get("usage", {}).get("completion_tokens", settings.generate))
            else:
                raise LlamaRunError(f"llama.cpp did not generate: {str(out)[:500]}")
        server.handle_metrics()
        del server  # frees the context now: llama.cpp logs the exact compute buffer size
        gc.collect()
        log.collect(until=_COMPUTE_EXACT, timeout=5.0)
    return run


def _reserve_outputs(x: Any, p: Any, n_outputs: int) -> None:
    """Make the server reserve its worst-case graph with ``n_outputs`` outputs, as another
    program would. llama.cpp reserves with ``min(n_ubatch, n_outputs_max)`` outputs
    (``llama_context::sched_reserve``); the server overrides ``n_outputs_max`` with
    ``n_parallel × (1 + its speculative draft length)`` (``server_output_limits``), so a
    draft of ``n_outputs - 1`` tokens from the n-gram speculator (which needs no draft
    model) gives exactly ``n_outputs``. Nothing is generated, so nothing is drafted."""
    spec = p.speculative
    spec.types = [x.common_speculative_type.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
    spec.ngram_simple.size_m = n_outputs - 1


#: the call after which the capture ends a --no-alloc run (llama.cpp's measurement)
STOP_AFTER = "ggml_backend_sched_reserve_size"


def _stop_after_measuring(p: Any) -> None:
    """Let llama.cpp measure as its ``--fit`` does before it creates the real context: the
    model is loaded and a context created with ``no_alloc`` (no weights read, no KV cache or
    compute buffer allocated; the scheduler sizes its buffers with
    ``ggml_backend_sched_reserve_size``), then the capture ends the process right after that
    call (``VIZALLOC_CAPTURE_STOP_AFTER``), before the real, allocating load. Only under
    the capture: without it, nothing would stop llama.cpp from loading the model for real."""
    import ctypes

    try:
        ctypes.CDLL(None).vizalloc_capture_finish  # noqa: B018 - present when the capture is preloaded
    except AttributeError:
        raise UsageError("--no-alloc measures under vizalloc's capture only: run it as `vizalloc run -- python -m "
                         "vizalloc.capture.llama MODEL.gguf --no-alloc ...` (or use `vizalloc explain "
                         "MODEL.gguf --metadata-only`)") from None
    p.fit_params = True
    os.environ["VIZALLOC_CAPTURE_STOP_AFTER"] = STOP_AFTER


def _report(run: LlamaRun, out: TextIO) -> None:
    s = run.settings
    fa = s.flash_attn if s.flash_attn != "auto" else f"auto -> {run.flash_attn or '?'}"
    out.write(f"llama.cpp: {os.path.basename(s.model)}, n_ctx {s.n_ctx}, n_batch {s.n_batch}, n_ubatch {s.n_ubatch}, "
              f"flash attention {fa}: context created in {run.seconds_context:.1f} s\n")
    for buft, mib in run.compute_buffers:
        exact = dict(run.compute_buffers_exact).get(buft)
        out.write(f"  {buft} compute buffer size = {mib} MiB" + (f" ({exact} MiB)" if exact else "") + "\n")
    if s.generate:
        out.write(f"  generated {run.tokens} tokens in {run.seconds_generate:.1f} s: {run.text!r}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vizalloc.capture.llama",
        description="Create a llama.cpp context for a GGUF model (the worst-case reserve happens then) and "
                    "optionally generate tokens, through xllamacpp; trace it with `vizalloc run -- python -m "
                    "vizalloc.capture.llama MODEL.gguf ...`.")
    parser.add_argument("model", metavar="MODEL.gguf", help="the model file")
    parser.add_argument("--ctx", type=int, default=LlamaSettings.n_ctx, metavar="N",
                        help="context size in tokens, llama.cpp's -c (0: the model's own; default %(default)s)")
    parser.add_argument("--batch", type=int, default=None, metavar="N",
                        help="logical batch, llama.cpp's -b (default 2048, or --ubatch if larger)")
    parser.add_argument("--ubatch", type=int, default=LlamaSettings.n_ubatch, metavar="N",
                        help="micro-batch, llama.cpp's -ub: the compute buffer grows with it (default %(default)s)")
    parser.add_argument("--flash-attn", choices=FLASH_ATTN, default="auto", help="llama.cpp's -fa (default auto)")
    parser.add_argument("--kv-type", choices=tuple(KV_TYPES), default="f16",
                        help="the KV cache's type, llama.cpp's -ctk and -ctv (default f16)")
    parser.add_argument("--outputs", type=int, default=1, metavar="N",
                        help="outputs of the worst-case reserve: 1 as llama-server -np 1 and llama-cli (default), "
                             "the micro-batch as llama-completion")
    parser.add_argument("--generate", type=int, default=0, metavar="N",
                        help="then generate N tokens (greedy) from --prompt (default: only create the context)")
    parser.add_argument("--prompt", default=LlamaSettings.prompt, metavar="TEXT",
                        help=f"what --generate continues (default: {LlamaSettings.prompt!r})")
    parser.add_argument("--threads", type=int, default=0, metavar="N", help="CPU threads (default: llama.cpp's)")
    parser.add_argument("--no-alloc", action="store_true",
                        help="measure as llama.cpp's --fit does (no weights read, nothing allocated) and stop there; "
                             "under vizalloc's capture only (the trace holds the plan, the process no report)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--verbose", action="store_true", help="show llama.cpp's whole log on stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    batch = args.batch if args.batch is not None else default_batch(args.ubatch)
    settings = LlamaSettings(args.model, n_ctx=args.ctx, n_batch=batch, n_ubatch=args.ubatch,
                             flash_attn=args.flash_attn, n_outputs=args.outputs, kv_type=args.kv_type,
                             generate=args.generate,
                             prompt=args.prompt, threads=args.threads, no_alloc=args.no_alloc)
    try:
        run = run_llama(settings, verbose=args.verbose)
    except VizallocError as exc:
        print(f"vizalloc.capture.llama: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        print(json.dumps(run.as_json()))
    else:
        _report(run, sys.stdout)
    if not run.compute_buffers:
        print("vizalloc.capture.llama: llama.cpp logged no compute buffer size", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
