"""Runtime tensors made again from a trace's records: the one way trace data becomes live
tensors (shadow execution and the CUDA split prediction both start here; what the runtime
then does is kept out of the caller's trace with ``vizalloc.trace.recorder.paused``).

    >>> from vizalloc.analysis.model import build_model
    >>> Rebuilt(build_model([]), "example").tensors
    {}
"""

from __future__ import annotations

from typing import Any

from vizalloc.analysis.model import TraceModel
from vizalloc.errors import UsageError
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.tensor import Op, Tensor, UnaryOp

_UNARY = {u.value: u for u in UnaryOp}


def runtime_params(op: str, params: tuple[Any, ...]) -> tuple[Any, ...]:
    """Op params as the runtime holds them: a UNARY op's function as its enum (the trace has its name)."""
    if op != "UNARY" or not params or not isinstance(params[0], str) or params[0] not in _UNARY:
        return params
    return (_UNARY[params[0]], *params[1:])


class Rebuilt:
    """Tensors of ``model`` rebuilt in a fresh context, each after its sources and view root.

    ``make(tensor_id)`` returns the runtime tensor for a trace id (made on first request);
    ``flags`` decides which of a tensor's recorded flags it gets (none by default).
    """

    def __init__(self, model: TraceModel, name: str, *, flags: int = 0, no_alloc: bool = True) -> None:
        self.model = model
        self.ctx = Context(name=name, max_tensors=None, no_alloc=no_alloc)
        self.tensors: dict[int, Tensor] = {}
        self._flags = flags
        #: (consumer's trace id, source index) -> the tensor it reads there instead of the recorded one
        self.sources: dict[tuple[int, int], Tensor] = {}

    def make(self, tid: int) -> Tensor:
        stack = [tid]
        records = self.model.tensors
        made = self.tensors
        while stack:
            cur = stack[-1]
            if cur in made:
                stack.pop()
                continue
            info = records.get(cur)
            if info is None:
                raise UsageError(f"{self.ctx.name}: tensor #{cur} has no TensorCreated record in the trace")
            deps = [d for i, d in enumerate((info.view_src, *info.srcs)) if d >= 0 and d not in made and d != cur
                    and (cur, i - 1) not in self.sources]
            if deps:
                stack.extend(deps)
                continue
            stack.pop()
            t = self.ctx.new_tensor_impl(
                DType.from_label(info.dtype), info.ne, made[info.view_src] if info.view_src >= 0 else None,
                info.view_offs, nb=info.nb, op=Op[info.op],
                src=[self.sources[(cur, i)] if (cur, i) in self.sources else made[s] if s >= 0 else None
                     for i, s in enumerate(info.srcs)],
                op_params=runtime_params(info.op, info.op_params), name=info.name,
            )
            if info.flags & self._flags:
                t._set_flags(info.flags & self._flags)
            made[cur] = t
        return made[tid]
