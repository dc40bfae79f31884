"""Real ggml (ggml-python 0.0.45, whose ggml-alloc.c is byte-identical to the golden
commit) as a live oracle for the graph allocator.

A random "program" (a list of op steps) is built with the ggml API; every ggml tensor is
mirrored into a vizalloc tensor with the same type, ne, nb, op, sources, view root, view
offset and flags (read back from the C struct, cheap for small graphs), so both
allocators plan exactly the same graph. Buffer types are copies of ggml's CPU buffer type
with their own alignment and max size, and an ``alloc_buffer`` hook that logs every
chunk buffer ggml allocates (so placements can be attributed to a chunk).

Every op the generator emits respects ggml's constructor asserts: a failed assert
aborts the whole process.
"""

from __future__ import annotations

import ctypes
import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import ggml

from vizalloc.runtime import BufferType, Context, DType, Graph
from vizalloc.errors import AllocationError
from vizalloc.runtime.alloc import GraphAllocator
from vizalloc.runtime.tensor import Op, Tensor

for _fn in ("ggml_backend_cpu_buffer_type", "ggml_backend_alloc_buffer", "ggml_backend_buffer_get_base"):
    getattr(ggml.lib, _fn).restype = ctypes.c_void_p
ggml.lib.ggml_backend_buffer_get_base.argtypes = [ctypes.c_void_p]

_P = ctypes.c_void_p
_SizeFn = ctypes.CFUNCTYPE(ctypes.c_size_t, _P)
_AllocFn = ctypes.CFUNCTYPE(_P, _P, ctypes.c_size_t)


class _BuftIface(ctypes.Structure):
    _fields_ = [(n, _P) for n in ("get_name", "alloc_buffer", "get_alignment", "get_max_size",
                                  "get_alloc_size", "is_host")]


class _Buft(ctypes.Structure):
    # struct ggml_backend_buffer_type at the golden commit: iface, device, context
    _fields_ = [("iface", _BuftIface), ("device", _P), ("context", _P)]


_CPU = _Buft.from_address(ggml.lib.ggml_backend_cpu_buffer_type())
_CPU_ALLOC = _AllocFn(_CPU.iface.alloc_buffer)
SIZE_MAX = 2**64 - 1
_KEEP: list = []
_ALLOC_SEQ = itertools.count()
#: outcomes that are not differences: graphs whose second allocation hit ggml's unchecked leaf
STATS = {"leaf_overflow": 0, "graphs": 0, "allocations": 0, "refused_alike": 0, "reserve_n_size": 0,
         "chunked": 0, "second_graph": 0}


class GgmlBuft:
    """A copy of the CPU buffer type with its own alignment and max size; logs allocations."""

    def __init__(self, alignment: int, max_size: int | None) -> None:
        self.alignment = alignment
        self.max_size = max_size
        self.log: list[tuple[int, int]] = []  # (buffer pointer, size) in allocation order
        self.seq: list[int] = []  # a global allocation number per log entry
        self.struct = _Buft()
        ctypes.pointer(self.struct)[0] = _CPU
        self._fa = _SizeFn(lambda _b: alignment)
        self._fm = _SizeFn(lambda _b: SIZE_MAX if max_size is None else max_size)

        def alloc(bp: int, size: int) -> int:
            r = _CPU_ALLOC(bp, size)
            self.log.append((r, size))
            self.seq.append(next(_ALLOC_SEQ))
            return r

        self._fal = _AllocFn(alloc)
        self.struct.iface.get_alignment = ctypes.cast(self._fa, _P).value
        self.struct.iface.get_max_size = ctypes.cast(self._fm, _P).value
        self.struct.iface.alloc_buffer = ctypes.cast(self._fal, _P).value
        self.ptr = ctypes.addressof(self.struct)
        _KEEP.append(self)


def _contiguous(t: Any) -> bool:
    s = t.contents
    ne, nb = list(s.ne), list(s.nb)
    return nb[0] == 4 and nb[1] == 4 * ne[0] and nb[2] == nb[1] * ne[1] and nb[3] == nb[2] * ne[2]


def _graph_leafs(gf: Any) -> list[int]:
    # struct ggml_cgraph: int size, n_nodes, n_leafs; then nodes, grads, grad_accs, leafs pointers
    addr = ctypes.cast(gf, _P).value
    n_leafs = ctypes.c_int.from_address(addr + 8).value
    leafs = ctypes.c_void_p.from_address(addr + 40).value
    return [ctypes.c_void_p.from_address(leafs + 8 * i).value for i in range(n_leafs)]


def _graph_nodes(gf: Any) -> list[int]:
    n = ggml.ggml_graph_n_nodes(gf)
    return [ctypes.cast(ggml.ggml_graph_node(gf, i), _P).value for i in range(n)]


@dataclass
class Program:
    """A random graph program and its parameters (drawn from one seed)."""

    seed: int
    bufts: list[tuple[int, int | None]]      # distinct buffer types (alignment, max_size)
    slots: list[int]                         # buffer id -> index into bufts (repeats share)
    steps1: list[tuple]                      # ops of the first graph
    steps2: list[tuple]                      # ops added for the second graph (shares tensors)
    n_leafs: int
    roots1: list[int] = field(default_factory=list)
    roots2: list[int] = field(default_factory=list)


# -- random programs ------------------------------------------------------------------

_UNARY = ["relu", "gelu", "neg", "abs", "tanh", "silu"]
_BINARY = ["add", "mul", "sub", "div"]


def random_program(seed: int, max_ops: int = 20) -> Program:
    rng = random.Random(seed)
    n_bt = rng.choice([1, 1, 1, 2, 3])
    bufts = []
    for _ in range(n_bt):
        align = rng.choice([16, 32, 32, 64, 256])
        max_size = rng.choice([None, None, 256, 512, 1024, 2048])
        bufts.append((align, max_size))
    n_slots = rng.choice([1, 1, 2, 3]) if n_bt == 1 else rng.randint(n_bt, 3)
    slots = [i if i < n_bt else rng.randrange(n_bt) for i in range(n_slots)]
    n_leafs = rng.randint(1, 4)
    prog = Program(seed, bufts, slots, [], [], n_leafs)
    prog.steps1 = [_random_op(rng) for _ in range(rng.randint(1, max_ops))]
    prog.steps2 = [_random_op(rng) for _ in range(rng.randint(0, max_ops // 2))]
    return prog


def _random_op(rng: random.Random) -> tuple:
    kind = rng.choices(
        ["unary", "binary", "inplace", "scale", "softmax", "cont", "view", "reshape", "transpose",
         "permute", "matmul", "concat", "sum_rows", "cpy", "sqr", "leaf", "input", "output"],
        weights=[8, 10, 5, 3, 2, 3, 4, 3, 2, 2, 3, 3, 2, 1, 2, 2, 2, 3],
    )[0]
    return (kind, rng.random(), rng.random(), rng.random(), rng.randrange(1 << 30))


class Built:
    """One program built in ggml and mirrored into vizalloc."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self.rng = random.Random(prog.seed ^ 0x5EED)
        self.ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=4 * 1024 * 1024, mem_buffer=None, no_alloc=True))
        self.vctx = Context(name=f"diff{prog.seed}")
        self.g_tensors: list[Any] = []          # ggml tensor pointers (ctypes)
        self.v_of: dict[int, Tensor] = {}       # ggml address -> vizalloc tensor
        self.pool: list[Any] = []                # tensors ops may use
        self.outputs: list[Any] = []
        self.frozen: set[int] = set()
        self.gbufts = [GgmlBuft(a, m) for a, m in prog.bufts]
        self.vbufts = [BufferType(f"B{i}", alignment=a, max_size=m) for i, (a, m) in enumerate(prog.bufts)]

    def free(self) -> None:
        ggml.ggml_free(self.ctx)

    # -- construction ------------------------------------------------------------
    def _new(self, t: Any) -> Any:
        self.g_tensors.append(t)
        return t

    def leaf(self, shape: tuple[int, ...], dtype: int = ggml.GGML_TYPE_F32) -> Any:
        ne = list(shape) + [1] * (4 - len(shape))
        t = ggml.ggml_new_tensor_4d(self.ctx, dtype, *ne)
        return self._new(t)

    def _pick(self, pred=lambda t: True, *, view: bool = False) -> Any | None:  # type: ignore[no-untyped-def]
        cands = [t for t in self.pool if pred(t) and self._usable(t, view)]
        if not cands:
            return None
        # prefer recent tensors so lifetimes stay bounded
        k = min(len(cands), 6)
        return cands[-1 - self.rng.randrange(k)]

    def _usable(self, t: Any, view: bool) -> bool:
        # After a first allocation a compute buffer may have been freed by a re-plan. ggml
        # binds a view whose root points there through ggml_backend_view_init, which reads
        # the freed ggml_backend_buffer struct (use after free, seen under ASan in the golden
        # seed case): undefined behaviour that aborted the oracle at random. So the second
        # graph makes no new views of first-graph tensors and leaves out their unbound views.
        if not self.frozen:
            return True
        addr = ctypes.cast(t, _P).value
        if addr not in self.frozen:
            return True
        if view:
            return False
        s = t.contents
        # only tensors the first graph bound (their ancestors were bound with them)
        return bool(s.data) and not (s.view_src and not s.buffer)

    def freeze(self) -> None:
        """Mark every tensor made so far as belonging to the first graph."""
        self.frozen = {ctypes.cast(t, _P).value for t in self.g_tensors}
        self.pool = [t for t in self.pool if self._usable(t, False)]

    def run(self, steps: list[tuple]) -> list[Any]:
        made = []
        for step in steps:
            t = self._apply(step)
            if t is not None:
                made.append(t)
                self.pool.append(t)
        return made

    def _apply(self, step: tuple) -> Any | None:  # noqa: C901
        kind, u, v, w, r = step
        c = self.ctx
        f32 = lambda t: t.contents.type == ggml.GGML_TYPE_F32  # noqa: E731
        cont = lambda t: f32(t) and _contiguous(t)  # noqa: E731
        if kind in ("leaf", "input"):
            ne0 = [4, 8, 16, 24][int(u * 4)]
            ne1 = [1, 2, 3, 4][int(v * 4)]
            t = self.leaf((ne0, ne1))
            if kind == "input":
                ggml.ggml_set_input(t)
            return t
        if kind == "output":
            a = self._pick()
            if a is not None:
                ggml.ggml_set_output(a)
                self.outputs.append(a)
            return None
        if kind == "unary":
            a = self._pick(cont)
            if a is None:
                return None
            return self._new(getattr(ggml, "ggml_" + _UNARY[int(u * len(_UNARY))])(c, a))
        if kind == "sqr":
            a = self._pick(f32)
            if a is None:
                return None
            return self._new([ggml.ggml_sqr, ggml.ggml_sqrt, ggml.ggml_log][int(u * 3)](c, a))
        if kind == "binary":
            a = self._pick(f32)
            if a is None:
                return None
            ne = list(a.contents.ne)
            # b of a's shape, or a row to broadcast
            b = self._pick(lambda t: f32(t) and t is not a and list(t.contents.ne) == ne)
            if b is None or v < 0.3:
                b = self._pick(lambda t: f32(t) and list(t.contents.ne) == [ne[0], 1, 1, 1])
            if b is None:
                b = self.leaf((ne[0],) if v < 0.5 else tuple(ne))
            fn = getattr(ggml, "ggml_" + _BINARY[int(u * len(_BINARY))])
            return self._new(fn(c, a, b))
        if kind == "inplace":
            a = self._pick(cont, view=True)
            if a is None:
                return None
            if u < 0.4:
                b = self._pick(lambda t: f32(t) and list(t.contents.ne) == list(a.contents.ne) and t is not a)
                if b is None:
                    return None
                return self._new(ggml.ggml_add_inplace(c, a, b))
            if u < 0.7:
                return self._new(ggml.ggml_scale_inplace(c, a, 0.5))
            return self._new(ggml.ggml_relu_inplace(c, a))
        if kind == "scale":
            a = self._pick(cont)
            return None if a is None else self._new(ggml.ggml_scale(c, a, 2.0))
        if kind == "softmax":
            a = self._pick(cont)
            return None if a is None else self._new(ggml.ggml_soft_max(c, a))
        if kind == "cont":
            a = self._pick(f32)
            return None if a is None else self._new(ggml.ggml_cont(c, a))
        if kind == "view":
            a = self._pick(f32, view=True)
            if a is None:
                return None
            ne = list(a.contents.ne)
            nb = list(a.contents.nb)
            if u < 0.5 or ne[1] == 1:
                n = max(1, int(ne[0] * (0.25 + 0.75 * v)))
                off = int((ne[0] - n) * w) * nb[0]
                return self._new(ggml.ggml_view_1d(c, a, n, off))
            rows = max(1, int(ne[1] * v))
            off = int((ne[1] - rows) * w) * nb[1]
            return self._new(ggml.ggml_view_2d(c, a, ne[0], rows, nb[1], off))
        if kind == "reshape":
            a = self._pick(cont, view=True)
            if a is None:
                return None
            n = ggml.ggml_nelements(a)
            if u < 0.5 or n % 2:
                return self._new(ggml.ggml_reshape_1d(c, a, n))
            return self._new(ggml.ggml_reshape_2d(c, a, n // 2, 2))
        if kind == "transpose":
            a = self._pick(f32, view=True)
            return None if a is None else self._new(ggml.ggml_transpose(c, a))
        if kind == "permute":
            a = self._pick(f32, view=True)
            return None if a is None else self._new(ggml.ggml_permute(c, a, 1, 0, 2, 3))
        if kind == "matmul":
            a = self._pick(lambda t: cont(t) and t.contents.ne[2] == 1)
            if a is None:
                return None
            ne0 = a.contents.ne[0]
            b = self._pick(lambda t: f32(t) and t.contents.ne[0] == ne0 and t.contents.ne[2] == 1 and t is not a)
            if b is None:
                b = self.leaf((ne0, [1, 2, 4][int(v * 3)]))
            return self._new(ggml.ggml_mul_mat(c, a, b))
        if kind == "concat":
            a = self._pick(f32)
            if a is None:
                return None
            ne = list(a.contents.ne)
            b = self._pick(lambda t: f32(t) and list(t.contents.ne) == ne)
            if b is None:
                return None
            return self._new(ggml.ggml_concat(c, a, b, 0 if u < 0.5 else 1))
        if kind == "sum_rows":
            a = self._pick(f32)
            return None if a is None else self._new(ggml.ggml_sum_rows(c, a) if u < 0.7 else ggml.ggml_sum(c, a))
        if kind == "cpy":
            a = self._pick(f32)
            if a is None:
                return None
            dst = self.leaf(tuple(a.contents.ne))
            return self._new(ggml.ggml_cpy(c, a, dst))
        raise AssertionError(kind)

    # -- mirroring ----------------------------------------------------------------
    def mirror(self) -> None:
        """Create vizalloc twins of ggml tensors made since the last call; sync every flag."""
        for t in self.g_tensors:
            addr = ctypes.cast(t, _P).value
            if addr in self.v_of:
                continue
            s = t.contents
            vs = None
            if s.view_src:
                vs = self.v_of[ctypes.cast(s.view_src, _P).value]
            srcs = []
            for j in range(10):
                p = s.src[j]
                srcs.append(self.v_of[ctypes.cast(p, _P).value] if p else None)
            dtype = DType.from_label(ggml.ggml_type_name(s.type).decode())
            op = Op[ggml.ggml_op_name(s.op).decode()]
            vt = self.vctx.new_tensor_impl(dtype, tuple(s.ne), vs, s.view_offs if vs is not None else 0,
                                           nb=tuple(s.nb), op=op, src=srcs)
            self.v_of[addr] = vt
        for t in self.g_tensors:
            self.v_of[ctypes.cast(t, _P).value].flags = t.contents.flags

    def graph(self, roots: list[Any]) -> tuple[Any, Graph]:
        gf = ggml.ggml_new_graph_custom(self.ctx, 4096, False)
        g = Graph(size=4096)
        for t in roots:
            ggml.ggml_build_forward_expand(gf, t)
        self.mirror()
        for t in roots:
            g.build_forward_expand(self.v_of[ctypes.cast(t, _P).value])
        gn = [self.v_of[a] for a in _graph_nodes(gf)]
        gl = [self.v_of[a] for a in _graph_leafs(gf)]
        assert [t.id for t in g.nodes] == [t.id for t in gn], "node order differs from ggml"
        assert [t.id for t in g.leafs] == [t.id for t in gl], "leaf order differs from ggml"
        self.mirror()  # build_forward_expand sets ggml's COMPUTE flag on nodes
        return gf, g


def _attribute(built: Built, prev: dict[int, Any]) -> dict[int, Any]:
    """Where each ggml tensor's data is: (data, (buffer type, allocation number), offset).

    A pointer kept from an earlier step keeps its attribution (ggml may hand a freed
    buffer's address to a new buffer); a view follows its root.
    """
    # a freed buffer's struct address can come back for a later buffer (of any type):
    # a pointer maps to its latest allocation
    latest: dict[int, tuple[int, int, int]] = {}
    for bi, gb in enumerate(built.gbufts):
        for n, ((ptr, _size), seq) in enumerate(zip(gb.log, gb.seq)):
            if ptr not in latest or latest[ptr][0] < seq:
                latest[ptr] = (seq, bi, n)
    gnum = {ptr: (bi, n) for ptr, (_seq, bi, n) in latest.items()}
    out: dict[int, Any] = {}
    views = []
    for t in built.g_tensors:
        addr = ctypes.cast(t, _P).value
        s = t.contents
        if s.view_src:
            views.append((addr, s))
            continue
        data = s.data
        if not data:
            out[addr] = None
            continue
        old = prev.get(addr)
        if old is not None and old[0] == data:
            out[addr] = old
            continue
        buf = s.buffer
        base = ggml.lib.ggml_backend_buffer_get_base(buf) if buf else None
        out[addr] = (data, gnum.get(buf) if buf else None, data - base if base is not None else None)
    for addr, s in views:
        data = s.data
        if not data:
            out[addr] = None
            continue
        root = out.get(ctypes.cast(s.view_src, _P).value)
        if root is None:
            out[addr] = (data, None, None)
        else:
            out[addr] = (data, root[1], root[2] + (data - root[0]))
    return out


def _v_attribute(built: Built, vnum: dict[int, tuple[int, int]]) -> dict[int, Any]:
    out: dict[int, Any] = {}
    for t in built.g_tensors:
        addr = ctypes.cast(t, _P).value
        vt = built.v_of[addr]
        if vt.data is None:
            out[addr] = None
            continue
        st = vt.storage
        out[addr] = (vnum.get(st.id), vt.data - st.base)
    return out


def run_differential(seed: int) -> list[str]:
    """Build a random program in both runtimes, allocate twice, return every difference."""
    prog = random_program(seed)
    STATS["graphs"] += 1
    b = Built(prog)
    diffs: list[str] = []
    try:
        for _ in range(prog.n_leafs):
            b.pool.append(b.leaf(([4, 8, 16][b.rng.randrange(3)], b.rng.randint(1, 3))))
        made1 = b.run(prog.steps1)
        roots1 = _roots(b, made1)
        gf1, g1 = b.graph(roots1)
        slot_bufts_g = [b.gbufts[i] for i in prog.slots]
        slot_bufts_v = [b.vbufts[i] for i in prog.slots]
        arr = (ctypes.c_void_p * len(prog.slots))(*[bt.ptr for bt in slot_bufts_g])
        galloc_g = ggml.ggml_gallocr_new_n(ctypes.cast(arr, ctypes.POINTER(ctypes.c_void_p)), len(prog.slots))
        galloc_v = GraphAllocator(slot_bufts_v)
        vnum: dict[int, tuple[int, int]] = {}
        vsizes: dict[tuple[int, int], int] = {}
        prev_g: dict[int, Any] = {}
        try:
            for step, (gf, g) in enumerate(_graphs(b, prog, gf1, g1)):
                n_slots = len(prog.slots)
                # with several ids: reserve_n first (and sometimes ask reserve_n_size before),
                # except now and then on the second graph, where alloc_graph must refuse alike
                if n_slots > 1 and (step == 0 or b.rng.random() < 0.8):
                    nids = [b.rng.randrange(n_slots) for _ in g.nodes]
                    lids = [b.rng.randrange(n_slots) for _ in g.leafs]
                    na = (ctypes.c_int * max(1, len(nids)))(*nids)
                    la = (ctypes.c_int * max(1, len(lids)))(*lids)
                    if b.rng.random() < 0.25:
                        sizes = (ctypes.c_size_t * n_slots)()
                        ggml.lib.ggml_gallocr_reserve_n_size(galloc_g, gf, na, la, sizes)
                        sizes_v = galloc_v.reserve_n_size(g, nids, lids)
                        STATS["reserve_n_size"] += 1
                        if list(sizes) != sizes_v:
                            diffs.append(f"step {step}: reserve_n_size ggml={list(sizes)} vizalloc={sizes_v}")
                    ok_g = ggml.ggml_gallocr_reserve_n(galloc_g, gf, na, la)
                    ok_v = galloc_v.reserve_n(g, nids, lids)
                    if bool(ok_g) != ok_v:
                        diffs.append(f"step {step}: reserve_n ok ggml={ok_g} vizalloc={ok_v}")
                reuse = galloc_v.needs_realloc(g) is None
                try:
                    ok_v = galloc_v.alloc_graph(g)
                except AllocationError as exc:
                    # ggml does not check leaf records when it reuses a plan: a bigger leaf at
                    # the same position overflows its slot and ggml aborts in
                    # ggml_backend_tensor_alloc (semantics §5.7). vizalloc raises instead.
                    if not (reuse and "leaf" in str(exc)):
                        diffs.append(f"step {step}: vizalloc raised {exc}")
                    STATS["leaf_overflow"] += 1
                    break
                ok_g = bool(ggml.ggml_gallocr_alloc_graph(galloc_g, gf))
                STATS["allocations"] += 1
                STATS["second_graph"] += step == 1
                STATS["refused_alike"] += not ok_g and not ok_v
                STATS["chunked"] += any(len(vb or []) > 1 for vb in galloc_v.buffers)
                if ok_g != ok_v:
                    diffs.append(f"step {step}: alloc_graph ok ggml={ok_g} vizalloc={ok_v}")
                # vizalloc buffers numbered per buffer type in allocation order, like the ggml log
                counters = {bi: len([k for k, v in vnum.items() if v[0] == bi]) for bi in range(len(prog.bufts))}
                for slot, vb in enumerate(galloc_v.buffers):
                    if vb is None:
                        continue
                    bi = prog.slots[slot]
                    for buf in vb:
                        if buf.id not in vnum:
                            vnum[buf.id] = (bi, counters[bi])
                            vsizes[(bi, counters[bi])] = buf.nbytes
                            counters[bi] += 1
                for slot in range(n_slots):
                    sg = ggml.ggml_gallocr_get_buffer_size(galloc_g, slot)
                    sv = galloc_v.buffer_size(slot)
                    if sg != sv:
                        diffs.append(f"step {step}: buffer_size({slot}) ggml={sg} vizalloc={sv}")
                for bi in range(len(prog.bufts)):
                    sizes_g = [s for _p, s in b.gbufts[bi].log]
                    sizes_v = [vsizes.get((bi, n)) for n in range(max(len(sizes_g), counters[bi]))]
                    if sizes_g != sizes_v:
                        diffs.append(f"step {step}: buffer type {bi} allocations ggml={sizes_g} vizalloc={sizes_v}")
                prev_g = _attribute(b, prev_g)
                v_at = _v_attribute(b, vnum)
                for t in b.g_tensors:
                    addr = ctypes.cast(t, _P).value
                    ga, va = prev_g[addr], v_at[addr]
                    gk = None if ga is None else (ga[1], ga[2])
                    if gk != va:
                        vt = b.v_of[addr]
                        diffs.append(f"step {step}: tensor #{vt.id} {vt.op.name}{list(vt.ne)} ggml={gk} vizalloc={va}")
        finally:
            ggml.ggml_gallocr_free(galloc_g)
    finally:
        b.free()
    return diffs


def _roots(b: Built, made: list[Any]) -> list[Any]:
    if not made:
        made = [b.pool[-1]]
    # the last tensor, the outputs, and a couple of random earlier results
    roots = [made[-1]] + [t for t in b.outputs if t not in made[-1:] and b._usable(t, False)]
    used = set()
    for t in made:
        for j in range(10):
            p = t.contents.src[j]
            if p:
                used.add(ctypes.cast(p, _P).value)
    # results nobody consumes (graph outputs in practice), and a few random others
    extra = [t for t in made[:-1] if (ctypes.cast(t, _P).value not in used and b.rng.random() < 0.6)
             or b.rng.random() < 0.1]
    return roots + extra


def _graphs(b: Built, prog: Program, gf1: Any, g1: Graph):  # type: ignore[no-untyped-def]
    yield gf1, g1
    b.freeze()
    if prog.steps2:
        made2 = b.run(prog.steps2)
        if made2:
            yield b.graph(_roots(b, made2))
