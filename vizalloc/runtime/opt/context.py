"""The optimizer context (``ggml_opt_context``, ``src/ggml-opt.cpp``): the forward graph
``gf``, the gradient graph ``gb_grad`` (``gf`` shallow-copied + backward pass) and the
optimizer graph ``gb_opt`` (``gb_grad`` shallow-copied + one optimizer step per
parameter), sharing tensor objects, allocated in turn through a ``Scheduler``.

    >>> from vizalloc.runtime import Context, F32, ops, set_param
    >>> from vizalloc.runtime.backends import CPUBackend
    >>> from vizalloc.runtime.alloc import alloc_ctx_tensors
    >>> from vizalloc.runtime.memory import tensor_set
    >>> from vizalloc.runtime.sched import Scheduler
    >>> from vizalloc.runtime.opt import LossType, OptContext, OptResult, default_params
    >>> ctx_static, ctx_compute = Context(), Context()
    >>> x = ctx_static.new_tensor_1d(F32, 1, name="inputs")
    >>> w = ctx_static.new_tensor_1d(F32, 1, name="weights"); set_param(w)
    >>> out = ops.scale(ctx_compute, ops.add(ctx_compute, x, w), 1.0)
    >>> buf = alloc_ctx_tensors(ctx_static, CPUBackend().buffer_type); tensor_set(w, [3.0])
    >>> params = default_params(Scheduler([CPUBackend()]), LossType.SUM)
    >>> params.ctx_compute, params.inputs, params.outputs = ctx_compute, x, out
    >>> opt = OptContext(params, fix="dup")
    >>> opt.alloc(backward=False); tensor_set(x, [1.0]); r = OptResult(); opt.eval(r)
    >>> r.loss()[0]
    4.0

Fidelity: ``_build``, ``alloc``, ``eval`` and ``reset`` follow ggml-opt line by line: the
same loss chains and names, the same static-context contents and creation order, the same
graph node order, ``graph_reset`` calls, AdamW/SGD parameter tensors and iteration count.
Knowing differences: ``count_equal`` is i32 here (ggml: i64), so ``ncorrect`` takes 4
bytes of ``buf_static`` instead of 8; a failed ``Scheduler.alloc_graph`` raises
``AllocationError`` (ggml ignores the return value). The ``fix`` option is vizalloc's own:
ggml always behaves as ``fix="dup"`` (see ``Fix``); in dynamic mode (no ``ctx_compute``)
every graph is fresh and the fix does not matter, as in ggml.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from vizalloc.errors import AllocationError, GraphError, UsageError
from vizalloc.runtime import memory, ops
from vizalloc.runtime.alloc import TensorAllocator, alloc_ctx_tensors
from vizalloc.runtime.backward import build_backward_expand, graph_get_grad, graph_get_grad_acc, graph_reset
from vizalloc.runtime.buffer import Buffer, BufferType, Usage, pad
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.graph import GRAPH_DEFAULT_SIZE, Graph, graph_deep_copy
from vizalloc.runtime.opt.params import BuildType, Fix, LossType, OptimizerType, OptParams
from vizalloc.runtime.opt.result import OptResult
from vizalloc.runtime.opt.rng import MT19937
from vizalloc.runtime.tensor import Flag, Tensor, set_input, set_loss, set_output


def _cpu_buffer_type() -> BufferType:
    from vizalloc.runtime.backends.cpu import CPU_BUFFER_TYPE

    return CPU_BUFFER_TYPE


def _free_buffers(buf: Buffer | list[Buffer] | None, cause: str) -> None:
    for b in buf if isinstance(buf, list) else [buf]:
        if b is not None:
            b.free(cause=cause)


class OptContext:
    """``ggml_opt_init`` and the context it returns.

    Args:
        params: ``OptParams`` (``default_params(sched, loss_type)`` plus the graph).
        fix: how shared tensors are kept from going stale between graphs (``Fix``);
            ``"dup"`` is ggml's behaviour.

    Attributes mirror ggml's accessors: ``inputs``, ``outputs``, ``labels``, ``loss``,
    ``pred``, ``ncorrect``, the graphs ``gf`` / ``gb_grad`` / ``gb_opt``, the static
    buffer ``buf_static`` and ``allocated_graph`` / ``allocated_graph_copy`` (the graph
    the scheduler really allocated: a deep copy under ``fix="dup"``, else the original).
    """

    def __init__(self, params: OptParams, *, fix: Fix | str = Fix.DUP) -> None:
        if params.opt_period < 1:
            raise UsageError(f"OptParams.opt_period must be >= 1, got {params.opt_period}")
        self.sched = params.sched
        self.fix = Fix(fix)
        self.ctx_compute: Context | None = params.ctx_compute
        self.loss_type = LossType(params.loss_type)
        self.build_type = BuildType(params.build_type)
        self.build_type_alloc = BuildType(params.build_type)
        self.inputs: Tensor | None = params.inputs
        self.outputs: Tensor | None = params.outputs
        self.opt_period = params.opt_period
        self.get_opt_pars = params.get_opt_pars
        self.get_opt_pars_ud = params.get_opt_pars_ud
        self.optimizer = OptimizerType(params.optimizer)
        #: ggml's ``std::mt19937 rng`` (default seed), used by dataset shuffles
        self.rng = MT19937()

        self.allocated_graph: Graph | None = None
        self.allocated_graph_copy: Graph | None = None
        self.ctx_static: Context | None = None
        self.ctx_cpu: Context | None = None
        self.ctx_copy: Context | None = None
        self.buf_static: Buffer | list[Buffer] | None = None
        self.buf_cpu: Buffer | list[Buffer] | None = None
        #: fix="static": the buffer holding the tensors the graphs share
        self.buf_shared: Buffer | None = None

        self.labels: Tensor | None = None
        self.loss: Tensor | None = None
        self.pred: Tensor | None = None
        self.ncorrect: Tensor | None = None
        self.gf: Graph | None = None
        self.gb_grad: Graph | None = None
        self.gb_opt: Graph | None = None
        self.static_graphs = self.ctx_compute is not None
        self.eval_ready = False
        self.grad_accs: list[Tensor | None] = []
        self.grad_m: list[Tensor | None] = []
        self.grad_v: list[Tensor | None] = []
        self.iter = 1
        self.opt_i = 0
        self.loss_per_datapoint = False
        self.opt_step_params: Tensor | None = None

        if self.fix is Fix.INVALIDATE:
            galloc = getattr(self.sched, "galloc", None)
            if galloc is None or not hasattr(galloc, "reclaim"):
                raise UsageError("fix='invalidate' needs a Scheduler whose graph allocator supports reclaim")
            galloc.reclaim = True  # same as Scheduler(..., reclaim=True)

        if not self.static_graphs:
            if self.inputs is not None or self.outputs is not None:
                raise UsageError("OptParams: inputs/outputs are given with ctx_compute (static graphs) only; "
                                 "for dynamic graphs pass them to prepare_alloc")
            return
        if self.inputs is None or self.outputs is None:
            raise UsageError("OptParams with ctx_compute needs inputs and outputs")
        self.gf = Graph(GRAPH_DEFAULT_SIZE, grads=True)
        self.gf.build_forward_expand(self.outputs)
        self._build()
        if self.fix is Fix.STATIC:
            self._alloc_shared()

    # -- ggml_opt_build -------------------------------------------------------------------
    def _build(self) -> None:  # noqa: C901 - one function in ggml, kept whole for comparison
        if self.ctx_compute is None or self.gf is None or self.inputs is None or self.outputs is None:
            raise UsageError("no compute context set: use static graphs or call prepare_alloc first")
        if self.static_graphs and self.inputs.data is None:
            raise UsageError(
                f"with static graphs the inputs ({self.inputs.name or self.inputs.id!r}) must already have memory; "
                "allocate their context before creating the OptContext"
            )
        ctx_compute = self.ctx_compute
        optimizer = self.optimizer
        accumulate = self.build_type_alloc >= BuildType.GRAD and not (
            self.static_graphs and self.build_type_alloc == BuildType.OPT and self.opt_period == 1
        )
        need_momenta = self.build_type_alloc == BuildType.OPT and optimizer is OptimizerType.ADAMW

        set_input(self.inputs)
        set_output(self.outputs)

        n_param = 0
        for node in self.gf.nodes:
            if node.flags & Flag.PARAM:
                n_param += 1
            if node.flags & Flag.LOSS:
                raise GraphError(f"node {node.name!r} is flagged LOSS: extra loss terms are not supported (as in ggml)")

        if self.ctx_static is None:
            # gradients (1 per loss, 1 per param when accumulating), momenta (2 per param),
            # and with static graphs: labels, loss chain, pred, ncorrect (9 at most)
            per_param = (1 if accumulate else 0) + (2 if need_momenta else 0)
            n_const = 9 if self.static_graphs else 0
            self.ctx_static = Context(name="opt_static", max_tensors=1 + per_param * n_param + n_const)

        if self.build_type > self.build_type_alloc:
            raise UsageError(f"build type {self.build_type.name} exceeds the allocated {self.build_type_alloc.name}")

        # the cpu context (optimizer parameters) is rebuilt every time, as in ggml
        if self.ctx_cpu is not None:
            self.ctx_cpu.free()
        self.ctx_cpu = Context(name="opt_cpu", max_tensors=1)
        _free_buffers(self.buf_cpu, "opt cpu buffer rebuilt")
        self.buf_cpu = None

        ctx_results = self.ctx_static if self.static_graphs else ctx_compute
        outputs = self.outputs
        n_out = outputs.nelements
        if self.loss_type is LossType.MEAN:
            loss = ops.sum(ctx_results, outputs)
            loss.set_name("loss_sum")
            loss = ops.scale(ctx_results, loss, float(np.float32(1.0) / np.float32(self.opt_period * n_out)))
            loss.set_name("loss_mean")
            self.loss_per_datapoint = True
        elif self.loss_type is LossType.SUM:
            loss = ops.sum(ctx_results, outputs)
            loss.set_name("loss_sum")
            self.loss_per_datapoint = False
        elif self.loss_type is LossType.CROSS_ENTROPY:
            self.labels = ctx_results.dup_tensor(outputs)
            set_input(self.labels)
            self.labels.set_name("labels")
            loss = ops.cross_entropy_loss(ctx_results, outputs, self.labels)
            loss.set_name("loss_cross_entropy")
            if self.opt_period > 1:
                loss = ops.scale(ctx_results, loss, float(np.float32(1.0) / np.float32(self.opt_period)))
                loss.set_name("loss_cross_entropy_scaled")
            self.loss_per_datapoint = True
        else:  # MEAN_SQUARED_ERROR
            self.labels = ctx_results.dup_tensor(outputs)
            set_input(self.labels)
            self.labels.set_name("labels")
            loss = ops.sub(ctx_results, outputs, self.labels)
            loss.set_name("loss_error")
            loss = ops.sqr(ctx_results, loss)
            loss.set_name("loss_squared_error")
            loss = ops.sum(ctx_results, loss)
            loss.set_name("loss_sum_squared_error")
            loss = ops.scale(ctx_results, loss, float(np.float32(1.0) / np.float32(self.opt_period * n_out)))
            loss.set_name("loss_mean_squared_error")
            self.loss_per_datapoint = True
        self.loss = loss
        set_output(loss)
        set_loss(loss)
        self.gf.build_forward_expand(loss)

        if self.loss_type is LossType.CROSS_ENTROPY:
            assert self.labels is not None
            self.pred = ops.argmax(ctx_results, outputs)
            self.pred.set_name("pred")
            set_output(self.pred)
            self.gf.build_forward_expand(self.pred)
            self.ncorrect = ops.count_equal(ctx_results, self.pred, ops.argmax(ctx_results, self.labels))
            self.ncorrect.set_name("ncorrect")
            set_output(self.ncorrect)
            self.gf.build_forward_expand(self.ncorrect)

        if self.buf_static is not None:
            if self.build_type == BuildType.FORWARD:
                return
        elif self.build_type_alloc == BuildType.FORWARD:
            self._alloc_static()
            return

        if not self.grad_accs:
            if self.build_type_alloc < BuildType.GRAD:
                raise UsageError("gradient accumulators need build type GRAD or OPT")
            nodes = self.gf.nodes
            self.grad_accs = [
                self.ctx_static.new_tensor(DType.F32, node.ne)
                if (accumulate and node.flags & Flag.PARAM) or node.flags & Flag.LOSS else None
                for node in nodes
            ]
            if need_momenta and self.build_type_alloc >= BuildType.OPT:
                self.grad_m, self.grad_v = [], []
                for node in nodes:
                    if node.flags & Flag.PARAM:
                        self.grad_m.append(self.ctx_static.new_tensor(DType.F32, node.ne))
                        self.grad_v.append(self.ctx_static.new_tensor(DType.F32, node.ne))
                    else:
                        self.grad_m.append(None)
                        self.grad_v.append(None)

        # gb_grad: forward pass, then backward pass computing the gradients
        self.gb_grad = self.gf.dup()
        self.gb_grad.has_grads = True  # ggml_graph_dup(..., force_grads = true)
        build_backward_expand(ctx_compute, self.gb_grad, self.grad_accs)

        if self.buf_static is not None:
            if self.build_type == BuildType.GRAD:
                return
        elif self.build_type_alloc == BuildType.GRAD:
            self._alloc_static()
            graph_reset(self.gb_grad)

        if self.build_type_alloc != BuildType.OPT:
            # ggml-opt at d99724f2 asserts here: a context built for GRAD cannot be created
            raise UsageError(
                "build type GRAD cannot be initialised: ggml-opt asserts build_type_alloc == OPT after building "
                "the gradient graph (GGML_ASSERT in ggml_opt_build); use BuildType.OPT with opt_period > 1 "
                "to accumulate gradients"
            )

        # gb_opt: forward pass, backward pass, then one optimizer step per parameter
        self.gb_opt = self.gb_grad.dup()
        self.gb_opt.has_grads = True
        self.opt_step_params = self.ctx_cpu.new_tensor_1d(DType.F32, 7 if need_momenta else 2)
        set_input(self.opt_step_params)
        self.opt_step_params.set_name(f"{optimizer.value}_params")
        n_f = self.gf.n_nodes
        for i in range(n_f - 1, -1, -1):
            node = self.gb_opt.nodes[i]
            grad = graph_get_grad(self.gb_opt, node)
            if grad is None or not node.flags & Flag.PARAM:
                continue
            if optimizer is OptimizerType.ADAMW:
                m, v = self.grad_m[i], self.grad_v[i]
                assert m is not None and v is not None
                m.set_name(f"AdamW m for {node.name}")
                v.set_name(f"AdamW v for {node.name}")
                step = ops.opt_step_adamw(ctx_compute, node, grad, m, v, self.opt_step_params)
            else:
                step = ops.opt_step_sgd(ctx_compute, node, grad, self.opt_step_params)
            step.set_name(f"{optimizer.value} step for {node.name}")
            self.gb_opt.build_forward_expand(step)

        if self.buf_static is None:
            self._alloc_static()
            graph_reset(self.gb_opt)

        self.buf_cpu = alloc_ctx_tensors(self.ctx_cpu, _cpu_buffer_type())

    def _alloc_static(self) -> None:
        """``ggml_backend_alloc_ctx_tensors(ctx_static, backend 0)``."""
        assert self.ctx_static is not None
        backend = self.sched.get_backend(0)
        self.buf_static = alloc_ctx_tensors(self.ctx_static, backend.buffer_type)

    # -- fix="static" ---------------------------------------------------------------------
    def _graphs_allocated(self) -> list[Graph]:
        """The graphs ``alloc`` may hand to the scheduler."""
        graphs = [g for g in (self.gf,) if g is not None]
        if self.gb_grad is not None and (self.opt_period > 1 or self.build_type_alloc == BuildType.GRAD):
            graphs.append(self.gb_grad)
        if self.gb_opt is not None:
            graphs.append(self.gb_opt)
        return graphs

    def shared_tensors(self) -> list[Tensor]:
        """Compute-context tensors that more than one allocatable graph holds, in creation order."""
        assert self.ctx_compute is not None
        counts: dict[int, int] = {}
        for g in self._graphs_allocated():
            for t in _graph_tensors(g):
                counts[t.id] = counts.get(t.id, 0) + 1
        return [t for t in self.ctx_compute.tensors() if counts.get(t.id, 0) > 1]

    def _alloc_shared(self) -> None:
        """Place every shared root tensor without memory in one buffer, once (tallocr order)."""
        backend = self.sched.get_backend(0)
        buft = backend.buffer_type
        roots = [t for t in self.shared_tensors() if t.view_src is None and t.data is None]
        nbytes = sum(pad(buft.alloc_size(t), buft.alignment) for t in roots)
        if nbytes == 0:
            return
        self.buf_shared = buft.alloc_buffer(nbytes, Usage.ANY, cause="opt shared tensors (fix=static)")
        talloc = TensorAllocator(self.buf_shared)
        for t in roots:
            talloc.alloc(t)

    # -- the public API -------------------------------------------------------------------
    def prepare_alloc(self, ctx_compute: Context, gf: Graph, inputs: Tensor, outputs: Tensor) -> None:
        """``ggml_opt_prepare_alloc``: hand over a fresh graph (dynamic mode only)."""
        if self.static_graphs:
            raise UsageError("prepare_alloc is for dynamic graphs; this OptContext was built with ctx_compute")
        self.ctx_compute, self.gf, self.inputs, self.outputs = ctx_compute, gf, inputs, outputs

    def alloc(self, backward: bool) -> None:
        """``ggml_opt_alloc``: pick gf / gb_grad / gb_opt and allocate it unless it already is."""
        if self.eval_ready:
            raise UsageError("alloc() called twice: call eval() after every alloc()")
        if self.build_type == BuildType.OPT and self.opt_period > 1 and self.opt_i == 0:
            graph_reset(self.gb_grad)  # type: ignore[arg-type]
        if backward:
            opt_i_next = (self.opt_i + 1) % self.opt_period
            self.build_type = BuildType.OPT if opt_i_next == 0 else BuildType.GRAD
        else:
            self.build_type = BuildType.FORWARD

        if not self.static_graphs:
            self._build()

        graph = {BuildType.FORWARD: self.gf, BuildType.GRAD: self.gb_grad, BuildType.OPT: self.gb_opt}[self.build_type]
        if graph is None:
            raise UsageError(f"no {self.build_type.name} graph: the context was built with build type "
                             f"{self.build_type_alloc.name}")
        if self.allocated_graph is graph:
            self.eval_ready = True
            return

        self.sched.reset()  # clears the previous graph's backend assignments, not its tensor pointers
        if self.static_graphs and self.fix is Fix.DUP:
            if self.ctx_copy is not None:
                self.ctx_copy.free()
            # ggml sizes ctx_copy for graph.size tensors
            self.ctx_copy = Context(name="opt_copy", max_tensors=graph.size)
            copy = graph_deep_copy(self.ctx_copy, graph)
        else:
            if self.static_graphs and self.fix is Fix.CLEAR:
                self._clear_compute_tensors()
            copy = graph
        if not self.sched.alloc_graph(copy):
            raise AllocationError(f"the scheduler could not allocate the {self.build_type.name} graph #{graph.id}")
        self.allocated_graph = graph
        self.allocated_graph_copy = copy
        self.eval_ready = True

    def _clear_compute_tensors(self) -> None:
        """fix="clear": forget every compute tensor's placement; static memory stays."""
        assert self.ctx_compute is not None
        for t in self.ctx_compute.tensors():
            if t.view_src is None and t.buffer is not None and t.buffer.usage is not Usage.COMPUTE:
                continue  # placed outside the scheduler (user-allocated in ctx_compute): static
            memory.clear_tensor_pointers(t, by="clear")

    def eval(self, result: OptResult | None = None) -> None:
        """``ggml_opt_eval``: set optimizer parameters, compute, and add the batch to ``result``."""
        if not self.eval_ready:
            raise UsageError("eval() without alloc(): call alloc(backward) first")
        if self.allocated_graph is self.gb_opt:
            self._write_optimizer_params()
        assert self.allocated_graph_copy is not None
        self.sched.graph_compute(self.allocated_graph_copy)
        self.iter += int(self.allocated_graph is self.gb_opt)
        self.opt_i = (self.opt_i + 1) % self.opt_period

        if not self.static_graphs:
            self.gf = self.gb_grad = self.gb_opt = None
            self.allocated_graph = self.allocated_graph_copy = None
        self.eval_ready = False

        if result is None:
            return
        assert self.outputs is not None and self.loss is not None
        ndata = self.outputs.ne[1]
        if self.loss.nelements != 1 or self.loss.type is not DType.F32:
            raise GraphError(f"the loss {self.loss.name!r} must be a scalar f32")
        loss = float(memory.tensor_get(self.loss).reshape(-1)[0])
        pred = None
        if self.pred is not None:
            pred = [int(p) for p in memory.tensor_get(self.pred).reshape(-1)]
        ncorrect = None
        if self.ncorrect is not None and result.ncorrect >= 0:
            ncorrect = int(memory.tensor_get(self.ncorrect).reshape(-1)[0])
        result.add_batch(
            ndata=ndata, loss=loss, loss_per_datapoint=self.loss_per_datapoint, opt_period=self.opt_period,
            pred=pred, ncorrect=ncorrect,
        )

    def _write_optimizer_params(self) -> None:
        pars = self.get_opt_pars(self.get_opt_pars_ud)
        assert self.opt_step_params is not None
        f32 = np.float32
        if self.optimizer is OptimizerType.ADAMW:
            a = pars.adamw
            if not (a.alpha > 0 and 0 <= a.beta1 <= 1 and 0 <= a.beta2 <= 1 and a.eps >= 0 and 0 <= a.wd <= 1):
                raise UsageError(f"invalid AdamW parameters {a}: need alpha > 0, beta1/beta2/wd in [0, 1], eps >= 0")
            # bias corrections after warm-up, in float as ggml computes them (powf)
            beta1h = f32(1.0) / (f32(1.0) - f32(np.power(f32(a.beta1), f32(self.iter))))
            beta2h = f32(1.0) / (f32(1.0) - f32(np.power(f32(a.beta2), f32(self.iter))))
            values = np.array([a.alpha, a.beta1, a.beta2, a.eps, a.wd, beta1h, beta2h], dtype=np.float32)
        else:
            s = pars.sgd
            if not (s.alpha > 0 and 0 <= s.wd <= 1):
                raise UsageError(f"invalid SGD parameters {s}: need alpha > 0 and wd in [0, 1]")
            values = np.array([s.alpha, s.wd], dtype=np.float32)
        memory.tensor_set(self.opt_step_params, values)

    def reset(self, optimizer: bool) -> None:
        """``ggml_opt_reset``: zero gradients (and, with ``optimizer``, momenta and the iteration)."""
        if optimizer:
            graph_reset(self.gb_opt)  # type: ignore[arg-type]
            self.iter = 1
        else:
            graph_reset(self.gb_grad)  # type: ignore[arg-type]

    def grad_acc(self, node: Tensor) -> Tensor | None:
        """``ggml_opt_grad_acc``: the gradient accumulator of ``node`` in ``gb_opt``."""
        if self.gb_opt is None:
            return None
        return graph_get_grad_acc(self.gb_opt, node)

    def free(self) -> None:
        """``ggml_opt_free``: release the static, cpu, shared buffers and the contexts."""
        _free_buffers(self.buf_static, "opt context freed")
        _free_buffers(self.buf_cpu, "opt context freed")
        _free_buffers(self.buf_shared, "opt context freed")
        self.buf_static = self.buf_cpu = self.buf_shared = None
        for c in (self.ctx_static, self.ctx_cpu, self.ctx_copy):
            if c is not None:
                c.free()

    @property
    def optimizer_type(self) -> OptimizerType:
        """``ggml_opt_context_optimizer_type``."""
        return self.optimizer

    def __repr__(self) -> str:
        mode = "static" if self.static_graphs else "dynamic"
        return (f"<OptContext {mode} {self.loss_type.value} {self.optimizer.value} fix={self.fix.value} "
                f"iter={self.iter}>")


def _graph_tensors(g: Graph) -> Iterable[Tensor]:
    """Every tensor a graph touches: nodes, leafs, their sources and view roots (once each)."""
    seen: set[int] = set()
    for t in (*g.leafs, *g.nodes):
        for u in (t, t.view_src, *t.src):
            if u is not None and u.id not in seen:
                seen.add(u.id)
                yield u
