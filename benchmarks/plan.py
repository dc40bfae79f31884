"""How fast does vizalloc plan a graph? ``GraphAllocator.reserve`` vs ggml's
``ggml_gallocr_reserve`` (C, through ggml-python 0.0.45) on the same random graphs.

One description (a random DAG: elementwise binary and unary ops, in-place capable and
not, copies, views, sums, a few outputs; sources drawn from recent results so lifetimes
stay bounded, as in real models) is built in both runtimes, then each side plans it
several times on one allocator (buffers exist after the first reserve, so the runs time
the planner). The best of the runs is reported, with and without a trace recording
(vizalloc only: an in-memory ``ListRecorder`` receives every planning event).

    python benchmarks/plan.py            # 1k, 10k and 100k nodes
    python benchmarks/plan.py --quick    # 1k and 10k
    python benchmarks/plan.py --locality # also: the same graphs with tensors created in graph order

Prints µs per node for each side, the ratio vizalloc/ggml, and the 100k/10k time ratio
(linear growth is 10; the target is <= 11). Both sides must produce the same buffer size.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vizalloc.runtime import F32, BufferType, Context, Graph  # noqa: E402
from vizalloc.runtime.alloc import GraphAllocator  # noqa: E402
from vizalloc.runtime.tensor import Flag, Op, UnaryOp  # noqa: E402
from vizalloc.trace.recorder import ListRecorder  # noqa: E402

SHAPES = [(64,), (32, 8), (128, 4), (16, 16), (256,)]
#: (op name, number of sources, in the description)
OPS = ["add", "mul", "relu", "scale", "sqr", "cont", "view", "sum_rows", "add_inplace"]
WEIGHTS = [20, 10, 15, 8, 6, 8, 6, 3, 4]


def describe(n_nodes: int, seed: int = 0) -> tuple[list[tuple], int]:
    """A random program: ("leaf", shape_index) or (op, src indices...) per tensor; returns (program, n_leafs)."""
    rng = random.Random(seed)
    prog: list[tuple] = []
    shape_of: list[int] = []
    by_shape: dict[int, list[int]] = {k: [] for k in range(len(SHAPES))}
    n_leafs = 0
    for k in range(len(SHAPES)):
        prog.append(("leaf", k, False))
        shape_of.append(k)
        by_shape[k].append(len(prog) - 1)
        n_leafs += 1
    made = 0
    while made < n_nodes:
        if rng.random() < 0.05:
            k = rng.randrange(len(SHAPES))
            prog.append(("leaf", k, rng.random() < 0.5))
            shape_of.append(k)
            by_shape[k].append(len(prog) - 1)
            n_leafs += 1
            continue
        k = rng.randrange(len(SHAPES))
        recent = by_shape[k][-12:]
        a = rng.choice(recent)
        op = rng.choices(OPS, WEIGHTS)[0]
        if op in ("add", "mul", "add_inplace"):
            b = rng.choice(recent)
            entry: tuple = (op, a, b)
        elif op == "sum_rows":
            entry = (op, a)
        else:
            entry = (op, a)
        # outputs only on non-views: ggml-python's ggml_set_output may not flag a view's root
        # the way ggml at the golden commit does, and the two graphs must be identical
        out = rng.random() < 0.01 and op not in ("view", "add_inplace")
        prog.append(entry + (out,))
        kk = k if op not in ("sum_rows", "view") else -1
        shape_of.append(kk)
        if kk >= 0:
            by_shape[k].append(len(prog) - 1)
        made += 1
    return prog, n_leafs


def unconsumed(prog: list[tuple]) -> list[int]:
    """The tensors of ``prog`` no other entry reads, in order: the graph is expanded from them."""
    consumed = set()
    for entry in prog:
        if entry[0] != "leaf":
            consumed.update(i for i in entry[1:-1] if isinstance(i, int) and not isinstance(i, bool))
    return [i for i in range(len(prog)) if i not in consumed]


def build_vizalloc(prog: list[tuple]) -> Graph:
    ctx = Context(name="bench")
    ts = []
    for entry in prog:
        kind = entry[0]
        if kind == "leaf":
            t = ctx.new_tensor_impl(F32, SHAPES[entry[1]])
            if entry[2]:
                t.flags = int(Flag.INPUT)
        else:
            a = ts[entry[1]]
            if kind in ("add", "mul"):
                t = ctx.new_tensor_impl(F32, a.ne, op=Op.ADD if kind == "add" else Op.MUL, src=[a, ts[entry[2]]])
            elif kind == "add_inplace":
                t = ctx.new_tensor_impl(F32, a.ne, a, 0, nb=a.nb, op=Op.ADD, src=[a, ts[entry[2]]])
            elif kind == "relu":
                t = ctx.new_tensor_impl(F32, a.ne, op=Op.UNARY, src=[a], op_params=(UnaryOp.RELU,))
            elif kind == "scale":
                t = ctx.new_tensor_impl(F32, a.ne, op=Op.SCALE, src=[a], op_params=(2.0,))
            elif kind == "sqr":
                t = ctx.new_tensor_impl(F32, a.ne, op=Op.SQR, src=[a])
            elif kind == "cont":
                t = ctx.new_tensor_impl(F32, a.ne, op=Op.CONT, src=[a])
            elif kind == "view":
                t = ctx.new_tensor_impl(F32, (a.ne[0] // 2,), a, 0, op=Op.VIEW, src=[a])
            elif kind == "sum_rows":
                t = ctx.new_tensor_impl(F32, (1,) + a.ne[1:], op=Op.SUM_ROWS, src=[a])
            else:
                raise AssertionError(kind)
            if entry[-1]:
                t.flags |= int(Flag.OUTPUT)
        ts.append(t)
    g = Graph(size=len(prog) + 16)
    for i in unconsumed(prog):
        g.build_forward_expand(ts[i])
    return g


def in_graph_order(g: Graph) -> Graph:
    """The same graph rebuilt with its tensors created in graph order (leafs, then nodes).

    ``describe`` creates tensors in program order and ``build_forward_expand`` lists them
    depth first, so consecutive graph positions lie kilobytes apart in memory; at 100k nodes
    the planner's passes over the tensor objects miss the caches. This copy shows how much
    of the growth is that memory layout (``--locality``).
    """
    ctx = Context(name="bench-graph-order")
    new: dict[int, object] = {}

    def copy(t):  # type: ignore[no-untyped-def]
        c = new.get(id(t))
        if c is None:
            vs = copy(t.view_src) if t.view_src is not None else None
            c = ctx.new_tensor_impl(t.type, t.ne, vs, t.view_offs, nb=t.nb, op=t.op, op_params=t.op_params,
                                    src=[copy(s) if s is not None else None for s in t.src])
            c.flags = t.flags
            new[id(t)] = c
        return c

    for t in g.leafs + g.nodes:
        copy(t)
    # the lists are set directly: re-expanding would also need the original roots in order
    g2 = Graph(size=len(g.nodes) + len(g.leafs) + 16)
    g2.leafs = [new[id(t)] for t in g.leafs]  # type: ignore[misc]
    g2.nodes = [new[id(t)] for t in g.nodes]  # type: ignore[misc]
    return g2


def build_ggml(prog: list[tuple]):  # type: ignore[no-untyped-def]
    import ggml

    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=(len(prog) + 64) * 1024, mem_buffer=None, no_alloc=True))
    ts = []
    for entry in prog:
        kind = entry[0]
        if kind == "leaf":
            ne = list(SHAPES[entry[1]]) + [1] * (4 - len(SHAPES[entry[1]]))
            t = ggml.ggml_new_tensor_4d(ctx, ggml.GGML_TYPE_F32, *ne)
            if entry[2]:
                ggml.ggml_set_input(t)
        else:
            a = ts[entry[1]]
            if kind == "add":
                t = ggml.ggml_add(ctx, a, ts[entry[2]])
            elif kind == "mul":
                t = ggml.ggml_mul(ctx, a, ts[entry[2]])
            elif kind == "add_inplace":
                t = ggml.ggml_add_inplace(ctx, a, ts[entry[2]])
            elif kind == "relu":
                t = ggml.ggml_relu(ctx, a)
            elif kind == "scale":
                t = ggml.ggml_scale(ctx, a, 2.0)
            elif kind == "sqr":
                t = ggml.ggml_sqr(ctx, a)
            elif kind == "cont":
                t = ggml.ggml_cont(ctx, a)
            elif kind == "view":
                t = ggml.ggml_view_1d(ctx, a, a.contents.ne[0] // 2, 0)
            elif kind == "sum_rows":
                t = ggml.ggml_sum_rows(ctx, a)
            if entry[-1]:
                ggml.ggml_set_output(t)
        ts.append(t)
    gf = ggml.ggml_new_graph_custom(ctx, len(prog) + 16, False)
    for i in unconsumed(prog):
        ggml.ggml_build_forward_expand(gf, ts[i])
    return ctx, gf


def best_of(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run(n_nodes: int, repeat: int, locality: bool = False) -> dict[str, float]:
    import ggml

    ggml.lib.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p
    prog, _ = describe(n_nodes)
    g = build_vizalloc(prog)
    gctx, gf = build_ggml(prog)
    n = len(g.nodes)
    if n != ggml.ggml_graph_n_nodes(gf):
        raise SystemExit(f"graphs differ: vizalloc {n} nodes, ggml {ggml.ggml_graph_n_nodes(gf)}")

    galloc_g = ggml.ggml_gallocr_new(ggml.lib.ggml_backend_cpu_buffer_type())
    galloc_v = GraphAllocator(BufferType("CPU", alignment=32))
    # interleaved, best of each: the machine is shared, so the minimum is the steadiest figure
    t_g = t_v = float("inf")
    for _ in range(repeat):
        t_g = min(t_g, best_of(lambda: ggml.ggml_gallocr_reserve(galloc_g, gf), 1))
        t_v = min(t_v, best_of(lambda: galloc_v.reserve(g), 1))

    def traced() -> None:
        with ListRecorder():
            galloc_v.reserve(g)

    t_t = best_of(traced, max(1, repeat // 2))
    t_l = float("nan")
    if locality:
        g2 = in_graph_order(g)
        galloc_l = GraphAllocator(BufferType("CPU", alignment=32))
        t_l = best_of(lambda: galloc_l.reserve(g2), repeat)
        if galloc_l.buffer_size(0) != galloc_v.buffer_size(0):
            raise SystemExit(f"the graph-order copy plans differently at {n} nodes")
    size_g = ggml.ggml_gallocr_get_buffer_size(galloc_g, 0)
    size_v = galloc_v.buffer_size(0)
    ggml.ggml_gallocr_free(galloc_g)
    ggml.ggml_free(gctx)
    if size_g != size_v:
        raise SystemExit(f"plans differ at {n} nodes: ggml {size_g} bytes, vizalloc {size_v}")
    return {"nodes": n, "leafs": len(g.leafs), "ggml": t_g, "vizalloc": t_v, "traced": t_t, "bytes": size_v,
            "graph_order": t_l}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k nodes only")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--locality", action="store_true",
                        help="also time vizalloc on a copy whose tensors were created in graph order")
    args = parser.parse_args()
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    rows = []
    print(f"{'nodes':>8} {'leafs':>6} {'ggml µs/node':>13} {'vizalloc µs/node':>17} {'ratio':>6} "
          f"{'traced µs/node':>15} {'traced ratio':>13} {'buffer B':>10}")
    for size in sizes:
        r = run(size, args.repeat if size < 100_000 else max(2, args.repeat // 2), args.locality)
        rows.append(r)
        n = r["nodes"]
        print(f"{n:>8} {r['leafs']:>6} {r['ggml'] / n * 1e6:>13.3f} {r['vizalloc'] / n * 1e6:>17.3f} "
              f"{r['vizalloc'] / r['ggml']:>6.1f} {r['traced'] / n * 1e6:>15.3f} {r['traced'] / r['ggml']:>13.1f} "
              f"{r['bytes']:>10}")
        if args.locality:
            print(f"{'':>8} {'':>6} {'tensors created in graph order:':>31} {r['graph_order'] / n * 1e6:>17.3f} "
                  f"{r['graph_order'] / r['ggml']:>6.1f}")
    if len(rows) == 3:
        print(f"growth 100k/10k: vizalloc {rows[2]['vizalloc'] / rows[1]['vizalloc']:.1f}x "
              f"(linear: {rows[2]['nodes'] / rows[1]['nodes']:.1f}x; target <= 11), "
              f"ggml {rows[2]['ggml'] / rows[1]['ggml']:.1f}x")
        if args.locality:
            print(f"growth 100k/10k with tensors created in graph order: vizalloc "
                  f"{rows[2]['graph_order'] / rows[1]['graph_order']:.1f}x")


if __name__ == "__main__":
    main()
