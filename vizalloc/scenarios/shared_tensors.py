"""The shared-tensor training loop (the golden ``seed_*`` scenario), with every fix strategy.

A small MLP ``h = relu(W1 x + b1)``, ``logits = W2 h + b2``, cross-entropy loss, trained
with SGD on a synthetic classification set, "ggml style": the forward graph ``gf`` and
``gb = dup(gf) + backward + opt steps`` share their forward tensor objects; every step
does ``reset, alloc gf, compute, reset, alloc gb, compute`` through one ``Scheduler``.

    >>> from vizalloc.scenarios.shared_tensors import run
    >>> broken, fixed = run("none", steps=4, seed=0), run("dup", steps=4, seed=0)
    >>> broken.max_abs_loss_diff > 1e-3, fixed.max_abs_loss_diff < 1e-6
    (True, True)

Beside each run a **reference** is computed, so divergence is measured, not assumed:

* the reference trajectory: the same initial parameters and batches, but every step on
  brand-new contexts and a brand-new scheduler (nothing can be stale);
* per step, the update check: the strategy's own parameters before the step, pushed
  through the same step on a fresh scheduler; the largest difference from the
  strategy's parameters after the step is ``update_max_abs_diff``.

Strategies (``architecture.md``, fix strategies):

* ``none``: nothing; stale forward tensors alias backward tensors -> wrong updates.
* ``invalidate``: the graph allocator reclaims what it placed in its last binding
  (``reclaim=True``, the rejected ggml PR #999). Correct in the plain loop; with
  ``reserve_between=True`` (another graph reserved between the switches, the
  maintainers' counter-example) the last binding is forgotten and corruption returns.
* ``clear``: after each reset, clear data/buffer/extra of every compute-context tensor.
* ``dup``: allocate a deep copy of the graph at each switch (ggml-opt's ``dup_graph``, here ``graph_deep_copy``).
* ``static``: the tensors ``gf`` and ``gb`` share live in a static buffer, allocated once.

``driver="opt"`` runs the same MLP through ggml-opt's ``OptContext(fix=strategy)``
instead of hand-built graphs (``shared_tensors_opt``); ``presize=True`` reserves the
backward graph once first, so no switch reallocates the compute buffer.

The reference runs happen after the loop, outside ``around_loop`` (a context manager
factory, for example a trace), so a trace holds only the strategy's own loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ContextManager, Protocol

import numpy as np

from vizalloc.errors import AllocationError, UsageError
from vizalloc.runtime import memory, ops
from vizalloc.runtime.alloc import TensorAllocator, alloc_ctx_tensors
from vizalloc.runtime.backward import build_backward_expand, graph_get_grad, graph_reset
from vizalloc.runtime.buffer import Buffer, BufferType, pad
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F32
from vizalloc.runtime.graph import Graph, graph_deep_copy
from vizalloc.runtime.tensor import Flag, Tensor, set_input, set_loss, set_output, set_param

STRATEGIES = ("none", "invalidate", "clear", "dup", "static")
#: how the loop is driven: hand-built graphs (the golden seed loop) or ggml-opt's OptContext
DRIVERS = ("graphs", "opt")
#: strategies that keep the numbers right in the plain loop
SAFE_STRATEGIES = frozenset({"invalidate", "clear", "dup", "static"})
#: strategies that stay right when another graph is reserved between the switches
ROBUST_STRATEGIES = frozenset({"clear", "dup", "static"})


@dataclass(frozen=True)
class Config:
    """Model and training sizes. ``A`` and ``B`` are the golden corpus' configurations."""

    n_in: int = 16
    n_hidden: int = 32
    n_out: int = 4
    batch: int = 8
    lr: float = 0.5

    def __post_init__(self) -> None:
        for name in ("n_in", "n_hidden", "n_out", "batch"):
            if getattr(self, name) < 1:
                raise UsageError(f"shared_tensors Config: {name} must be at least 1, got {getattr(self, name)}")


#: A: ``gb`` needs a larger buffer than ``gf`` (the compute buffer is reallocated);
#: B: ``gf``'s buffer is already large enough (backward tensors land on live forward ones).
CONFIGS = {"A": Config(16, 32, 4, 8), "B": Config(64, 8, 4, 32)}


@dataclass(frozen=True)
class StepRecord:
    """One training step of a run, beside the reference."""

    step: int
    loss: float                   # forward graph's loss
    reference_loss: float         # the reference trajectory's loss at this step
    loss_after_backward: float    # the loss tensor read after the backward graph ran
    update_max_abs_diff: float    # parameters after this step vs the same step on a fresh scheduler


@dataclass(frozen=True)
class ScenarioResult:
    """Losses of one strategy and of the reference, step by step."""

    strategy: str
    steps: int
    seed: int
    config: Config
    reserve_between: bool
    records: tuple[StepRecord, ...]
    final_params_max_abs_diff: float   # vs the reference trajectory's final parameters
    compute_nbytes: int                # the scheduler's compute buffer at the end
    static_nbytes: int                 # extra bytes the static strategy keeps for good (0 otherwise)
    driver: str = "graphs"
    presize: bool = False

    @property
    def losses(self) -> list[float]:
        return [r.loss for r in self.records]

    @property
    def reference_losses(self) -> list[float]:
        return [r.reference_loss for r in self.records]

    @property
    def final_loss(self) -> float:
        return self.records[-1].loss

    @property
    def reference_loss(self) -> float:
        return self.records[-1].reference_loss

    @property
    def max_abs_loss_diff(self) -> float:
        return max((abs(r.loss - r.reference_loss) for r in self.records), default=0.0)

    @property
    def max_update_diff(self) -> float:
        return max((r.update_max_abs_diff for r in self.records), default=0.0)

    def diverged(self, tol: float = 1e-6) -> bool:
        """Whether the run left the reference: a loss or a parameter update differs by more than ``tol``."""
        return self.max_abs_loss_diff > tol or self.max_update_diff > tol or self.final_params_max_abs_diff > tol

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "steps": self.steps,
            "seed": self.seed,
            "config": asdict(self.config),
            "reserve_between": self.reserve_between,
            "driver": self.driver,
            "presize": self.presize,
            "final_loss": self.final_loss,
            "reference_loss": self.reference_loss,
            "max_abs_loss_diff": self.max_abs_loss_diff,
            "max_update_diff": self.max_update_diff,
            "final_params_max_abs_diff": self.final_params_max_abs_diff,
            "diverged": self.diverged(),
            "compute_nbytes": self.compute_nbytes,
            "static_nbytes": self.static_nbytes,
            "losses": self.losses,
            "reference_losses": self.reference_losses,
            "records": [asdict(r) for r in self.records],
        }


# -- data ------------------------------------------------------------------------

Params = dict[str, np.ndarray]
Batch = tuple[np.ndarray, np.ndarray]


def init_params(cfg: Config, rng: np.random.Generator) -> Params:
    """Scaled normal weights, zero biases (numpy shapes: ggml's ``ne`` reversed)."""
    return {
        "W1": (rng.standard_normal((cfg.n_hidden, cfg.n_in)) / np.sqrt(cfg.n_in)).astype(np.float32),
        "b1": np.zeros(cfg.n_hidden, dtype=np.float32),
        "W2": (rng.standard_normal((cfg.n_out, cfg.n_hidden)) / np.sqrt(cfg.n_hidden)).astype(np.float32),
        "b2": np.zeros(cfg.n_out, dtype=np.float32),
    }


def make_batches(cfg: Config, steps: int, rng: np.random.Generator) -> list[Batch]:
    """A synthetic classification set: the class is the argmax of a fixed random linear teacher."""
    teacher = rng.standard_normal((cfg.n_out, cfg.n_in))
    batches = []
    for _ in range(steps):
        x = rng.standard_normal((cfg.batch, cfg.n_in)).astype(np.float32)
        cls = np.argmax(x @ teacher.T, axis=1)
        labels = np.zeros((cfg.batch, cfg.n_out), dtype=np.float32)
        labels[np.arange(cfg.batch), cls] = 1.0
        batches.append((x, labels))
    return batches


# -- the network -------------------------------------------------------------------

class Net:
    """Static parameters plus the two shared graphs of one training loop.

    ``ctx_static`` (one buffer, allocated once): W1, b1, W2, b2 (PARAM), the loss-gradient
    accumulator and ``sgd_params``. ``ctx``: the inputs ``x``, ``labels`` and every compute
    tensor of ``gf`` and ``gb`` (no memory until a scheduler binds them).
    """

    PARAM_NAMES = ("W1", "b1", "W2", "b2")

    def __init__(self, cfg: Config, params: Params, buft: BufferType, name: str = "") -> None:
        self.cfg = cfg
        self.ctx_static = Context(name=f"{name}static")
        cs = self.ctx_static
        self.W1 = cs.new_tensor_2d(F32, cfg.n_in, cfg.n_hidden, "W1")
        self.b1 = cs.new_tensor_1d(F32, cfg.n_hidden, "b1")
        self.W2 = cs.new_tensor_2d(F32, cfg.n_hidden, cfg.n_out, "W2")
        self.b2 = cs.new_tensor_1d(F32, cfg.n_out, "b2")
        for p in self.params():
            set_param(p)
        self.loss_grad_acc = cs.new_tensor_1d(F32, 1, "loss_grad_acc")
        self.sgd_params = cs.new_tensor_1d(F32, 2, "sgd_params")
        self.buf_static = alloc_ctx_tensors(cs, buft)
        self.set_params(params)
        memory.tensor_set(self.sgd_params, np.array([cfg.lr, 0.0], dtype=np.float32))

        self.ctx = Context(name=f"{name}compute")
        self.x, self.labels, self.loss = self.build_forward(self.ctx, cfg.batch)
        self.gf = Graph(grads=True)
        self.gf.build_forward_expand(self.loss)
        self.gb = self.gf.dup()
        accs: list[Tensor | None] = [None] * self.gf.n_nodes
        accs[self.gf.nodes.index(self.loss)] = self.loss_grad_acc
        build_backward_expand(self.ctx, self.gb, accs)
        # one SGD step per parameter, going backwards over the forward nodes (ggml-opt's order)
        for node in reversed(self.gf.nodes):
            if not node.flags & Flag.PARAM:
                continue
            grad = graph_get_grad(self.gb, node)
            if grad is None:
                continue
            step = ops.opt_step_sgd(self.ctx, node, grad, self.sgd_params)
            step.set_name(f"sgd step for {node.name}")
            self.gb.build_forward_expand(step)
        graph_reset(self.gb)  # the loss gradient accumulator starts at 1

    def params(self) -> list[Tensor]:
        return [self.W1, self.b1, self.W2, self.b2]

    def build_forward(self, ctx: Context, batch: int) -> tuple[Tensor, Tensor, Tensor]:
        """``x`` and ``labels`` (inputs) and the loss of the forward pass, in ``ctx``."""
        cfg = self.cfg
        x = ctx.new_tensor_2d(F32, cfg.n_in, batch, "x")
        set_input(x)
        labels = ctx.new_tensor_2d(F32, cfg.n_out, batch, "labels")
        set_input(labels)
        h_mm = ops.mul_mat(ctx, self.W1, x).set_name("h_mm")
        h_pre = ops.add(ctx, h_mm, self.b1).set_name("h_pre")
        h = ops.relu(ctx, h_pre).set_name("h")
        o_mm = ops.mul_mat(ctx, self.W2, h).set_name("o_mm")
        logits = ops.add(ctx, o_mm, self.b2).set_name("logits")
        set_output(logits)
        loss = ops.cross_entropy_loss(ctx, logits, labels).set_name("loss")
        set_output(loss)
        set_loss(loss)
        return x, labels, loss

    def get_params(self) -> Params:
        return {name: memory.tensor_get(t) for name, t in zip(self.PARAM_NAMES, self.params())}

    def set_params(self, values: Params) -> None:
        for name, t in zip(self.PARAM_NAMES, self.params()):
            memory.tensor_set(t, values[name])

    def free(self) -> None:
        self.ctx.free()
        self.ctx_static.free()
        bufs = self.buf_static if isinstance(self.buf_static, list) else [self.buf_static]
        for b in bufs:
            if b is not None:
                b.free(cause="net freed")


def _max_param_diff(a: Params, b: Params) -> float:
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)))) for k in a)


def new_scheduler(reclaim: bool = False) -> Any:
    """A scheduler with one CPU backend (``reclaim``: the 'invalidate' allocator)."""
    from vizalloc.runtime.backends import CPUBackend
    from vizalloc.runtime.sched import Scheduler

    return Scheduler([CPUBackend()], reclaim=reclaim)


def scalar(t: Tensor) -> float:
    return float(np.asarray(memory.tensor_get(t)).reshape(-1)[0])


def _alloc_shared_static(net: Net, buft: BufferType) -> tuple[Buffer | None, int]:
    """The ``static`` strategy: every tensor of ``gf`` without memory gets a slot in one
    buffer of its own, allocated once, so no scheduler ever plans it."""
    tensors = [t for t in (*net.gf.leafs, *net.gf.nodes) if t.data is None and t.view_src is None]
    nbytes = sum(pad(buft.alloc_size(t), buft.alignment) for t in tensors)
    if nbytes == 0:
        return None, 0
    buf = buft.alloc_buffer(nbytes, cause="static buffer for tensors shared by gf and gb")
    talloc = TensorAllocator(buf)
    for t in tensors:
        talloc.alloc(t)
    return buf, nbytes


class Trainer(Protocol):
    """One training loop under test: ``step(backward, batch)`` allocates and computes the
    forward (``backward=False``) or the backward+optimizer graph and returns the loss read
    after the compute."""

    static_nbytes: int

    def get_params(self) -> Params: ...

    def step(self, backward: bool, batch: Batch) -> float: ...

    def compute_nbytes(self) -> int: ...


class GraphsTrainer:
    """The golden ``seed_*`` loop: hand-built ``gf`` and ``gb`` through one Scheduler."""

    def __init__(self, strategy: str, cfg: Config, init: Params, reserve_between: bool = False,
                 presize: bool = False) -> None:
        from vizalloc.runtime.backends import CPUBackend

        self.strategy = strategy
        buft = CPUBackend().buffer_type
        self.net = Net(cfg, init, buft)
        self.sched = new_scheduler(reclaim=(strategy == "invalidate"))
        self.static_nbytes = _alloc_shared_static(self.net, buft)[1] if strategy == "static" else 0
        self.other: Graph | None = None
        if reserve_between:
            # a different graph (a worst-case "measure" forward pass, twice the batch) that the
            # program reserves between the switches, as one sizing a buffer would
            ctx_measure = Context(name="measure")
            _, _, measure_loss = self.net.build_forward(ctx_measure, 2 * cfg.batch)
            self.other = Graph(grads=True)
            self.other.build_forward_expand(measure_loss)
        self.copy_ctx: Context | None = None
        if presize:
            self.sched.reserve(self.net.gb)  # size the compute buffer for the largest graph first

    def get_params(self) -> Params:
        return self.net.get_params()

    def compute_nbytes(self) -> int:
        return int(self.sched.buffer_size(0))

    def step(self, backward: bool, batch: Batch) -> float:
        net, sched = self.net, self.sched
        graph = net.gb if backward else net.gf
        sched.reset()
        if self.other is not None:
            sched.reserve(self.other)
        if self.strategy == "clear":
            for t in net.ctx.tensors():
                memory.clear_tensor_pointers(t, by="clear")
        mapping: dict[int, Tensor] = {}
        g = graph
        if self.strategy == "dup":
            if self.copy_ctx is not None:
                self.copy_ctx.free()
            self.copy_ctx = Context(name="copy", max_tensors=graph.size + 1)
            g = graph_deep_copy(self.copy_ctx, graph)
            mapping = {o.id: c for o, c in zip(graph.leafs, g.leafs)}
            mapping.update({o.id: c for o, c in zip(graph.nodes, g.nodes)})
        if not sched.alloc_graph(g):
            raise AllocationError(f"strategy {self.strategy!r}: the scheduler could not allocate graph #{g.id}")
        memory.tensor_set(mapping.get(net.x.id, net.x), batch[0])
        memory.tensor_set(mapping.get(net.labels.id, net.labels), batch[1])
        sched.graph_compute(g)
        return scalar(mapping.get(net.loss.id, net.loss))


def one_step_fresh(cfg: Config, params: Params, batch: Batch, driver: str = "graphs") -> tuple[float, Params]:
    """The reference for one step: brand-new contexts and scheduler, one alloc, one compute
    of the backward graph. Returns the loss and the parameters after the SGD step."""
    if driver == "opt":
        from vizalloc.scenarios.shared_tensors_opt import OptTrainer

        trainer = OptTrainer("dup", cfg, params)
        try:
            loss = trainer.step(True, batch)
            return loss, trainer.get_params()
        finally:
            trainer.free()
    from vizalloc.runtime.backends import CPUBackend

    net = Net(cfg, params, CPUBackend().buffer_type, name="ref_")
    try:
        sched = new_scheduler()
        if not sched.alloc_graph(net.gb):
            raise AllocationError("reference step: the fresh scheduler could not allocate the backward graph")
        memory.tensor_set(net.x, batch[0])
        memory.tensor_set(net.labels, batch[1])
        sched.graph_compute(net.gb)
        return scalar(net.loss), net.get_params()
    finally:
        net.free()


def _make_trainer(driver: str, strategy: str, cfg: Config, init: Params, reserve_between: bool,
                  presize: bool) -> Trainer:
    if driver == "opt":
        from vizalloc.scenarios.shared_tensors_opt import OptTrainer

        return OptTrainer(strategy, cfg, init, reserve_between, presize)
    return GraphsTrainer(strategy, cfg, init, reserve_between, presize)


def run(
    strategy: str,
    steps: int = 6,
    seed: int = 0,
    config: Config | str = "A",
    *,
    reserve_between: bool = False,
    driver: str = "graphs",
    presize: bool = False,
    around_loop: Callable[[], ContextManager[Any]] | None = None,
) -> ScenarioResult:
    """Train ``steps`` steps with ``strategy`` and measure the distance to the reference.

    Args:
        strategy: one of ``STRATEGIES``.
        steps: training steps (each: forward graph, then backward graph).
        seed: seeds the parameters and the data.
        config: ``"A"``, ``"B"`` or a ``Config``.
        reserve_between: reserve another graph between the switches (the counter-example
            that defeats ``invalidate``).
        driver: ``"graphs"`` (the golden seed loop, graphs built here) or ``"opt"`` (the
            same MLP through ``vizalloc.runtime.opt.OptContext(fix=strategy)``, SGD).
        presize: reserve the backward graph once before the loop, as programs that size
            their compute buffer for the worst case do. Then no graph switch reallocates
            the buffer, and stale tensors alias live memory instead of freed memory.
        around_loop: a context manager factory wrapped around the strategy's loop only
            (for example ``lambda: vizalloc.trace.api.trace(path)``).
    """
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if driver not in DRIVERS:
        raise UsageError(f"unknown driver {driver!r}; choose one of {', '.join(DRIVERS)}")
    if steps < 1:
        raise UsageError(f"steps must be at least 1, got {steps}")
    if isinstance(config, str):
        if config not in CONFIGS:
            raise UsageError(f"unknown config {config!r}; choose one of {', '.join(CONFIGS)}")
        cfg = CONFIGS[config]
    else:
        cfg = config
    rng = np.random.default_rng(seed)
    init = init_params(cfg, rng)
    batches = make_batches(cfg, steps, rng)

    losses, losses_bwd, before, after = [], [], [], []
    with (around_loop() if around_loop is not None else contextlib.nullcontext()):
        trainer = _make_trainer(driver, strategy, cfg, init, reserve_between, presize)
        for batch in batches:
            before.append(trainer.get_params())
            losses.append(trainer.step(False, batch))
            losses_bwd.append(trainer.step(True, batch))
            after.append(trainer.get_params())
        compute_nbytes = trainer.compute_nbytes()

    # the reference trajectory, then the per-step update check (fresh schedulers throughout)
    ref_params = init
    ref_losses = []
    for batch in batches:
        loss, ref_params = one_step_fresh(cfg, ref_params, batch, driver)
        ref_losses.append(loss)
    records = []
    for i, batch in enumerate(batches):
        _, expected = one_step_fresh(cfg, before[i], batch, driver)
        records.append(StepRecord(i, losses[i], ref_losses[i], losses_bwd[i], _max_param_diff(after[i], expected)))
    return ScenarioResult(
        strategy=strategy, steps=steps, seed=seed, config=cfg, reserve_between=reserve_between,
        records=tuple(records), final_params_max_abs_diff=_max_param_diff(after[-1], ref_params),
        compute_nbytes=compute_nbytes, static_nbytes=trainer.static_nbytes, driver=driver, presize=presize,
    )
