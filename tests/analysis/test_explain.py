"""vizalloc.analysis.explain: what is live at a compute buffer's peak, grouped and named.

The traces are recorded with vizalloc's own runtime: a small attention-like graph whose
tensors carry llama.cpp's names (``kq-0``, ``kq_soft_max-0``, ``ffn_up-0``), planned by
the graph allocator, so the figures can be checked against the plan itself.
"""

from __future__ import annotations

import pytest

from vizalloc.analysis.explain import explain, fold_name, formula
from vizalloc.analysis.model import build_model
from vizalloc.analysis.quality import plan_quality
from vizalloc.runtime import ops
from vizalloc.runtime.alloc import GraphAllocator, alloc_ctx_tensors
from vizalloc.runtime.buffer import BufferType
from vizalloc.runtime.context import Context
from vizalloc.runtime.dtype import F32
from vizalloc.runtime.graph import Graph
from vizalloc.runtime.tensor import set_input, set_output
from vizalloc.trace.recorder import StrictRecorder

N_EMBD_HEAD, N_KV, N_TOKENS, N_HEAD, N_FF = 8, 64, 16, 4, 48


def attention_trace(n_layers: int = 2, *, parallel_layers: bool = False, name: str = "kq"):
    """Layers of kq = K·Q (n_kv × n_tokens × n_head), its soft-max in place, then an ffn.

    With ``parallel_layers`` every layer's kq is computed before any is consumed, so all of
    them are live at the peak (a group of several layers)."""
    buft = BufferType("CPU", alignment=32)
    with StrictRecorder() as rec:
        # the KV cache and the weights live in a buffer of their own, as in llama.cpp
        kv = Context(name="kv cache")
        ks = [kv.new_tensor_3d(F32, N_EMBD_HEAD, N_KV, N_HEAD, name=f"cache_k_l{il}") for il in range(n_layers)]
        ws = [kv.new_tensor_2d(F32, 1, N_FF, name=f"blk.{il}.ffn_up.weight") for il in range(n_layers)]
        alloc_ctx_tensors(kv, buft)
        ctx = Context(name="compute")
        x = ctx.new_tensor_2d(F32, N_EMBD_HEAD * N_HEAD, N_TOKENS, name="inp_embd")
        set_input(x)
        gf = Graph()
        outs = []
        kqs = []
        for il in range(n_layers):
            k = ks[il]
            q = ops.reshape_3d(ctx, ops.scale(ctx, x, 0.5), N_EMBD_HEAD, N_HEAD, N_TOKENS).set_name(f"Qcur-{il}")
            q = ops.permute(ctx, q, 0, 2, 1, 3)
            kq = ops.mul_mat(ctx, k, q).set_name(f"{name}-{il}")
            kqs.append(kq)
            if parallel_layers:
                gf.build_forward_expand(kq)  # every layer's scores first, as a graph built layer-parallel
        for il, kq in enumerate(kqs if parallel_layers else []):
            outs.append(_tail(ctx, kq, ws[il], il))
        if not parallel_layers:
            outs = [_tail(ctx, kq, ws[il], il) for il, kq in enumerate(kqs)]
        out = outs[0]
        for o in outs[1:]:
            out = ops.add(ctx, out, o)
        set_output(out)
        gf.build_forward_expand(out)
        ga = GraphAllocator(buft)
        assert ga.alloc_graph(gf)
    return build_model(rec.events)


def _tail(ctx: Context, kq, w, il: int):  # type: ignore[no-untyped-def]
    sm = ops.soft_max(ctx, kq).set_name(f"kq_soft_max-{il}")
    s = ops.sum_rows(ctx, sm)
    up = ops.mul_mat(ctx, w, ops.reshape_2d(ctx, s, 1, N_TOKENS * N_HEAD)).set_name(f"ffn_up-{il}")
    return ops.sum(ctx, up)


def test_fold_name_takes_the_layer_index_out() -> None:
    assert fold_name("kq-17") == ("kq-*", 17)
    assert fold_name("kq_soft_max_ext-3") == ("kq_soft_max_ext-*", 3)
    assert fold_name("blk.12.ffn_up.weight") == ("blk.*.ffn_up.weight", 12)
    assert fold_name("cache_v_l31 (view) (permuted)") == ("cache_v_l* (view) (permuted)", 31)
    assert fold_name("attn_inp_kq_mask") == ("attn_inp_kq_mask", None)
    assert fold_name("node_12")[0] == fold_name("node_907")[0] == "node_*"
    assert fold_name("x2y") == ("x2y", None)  # digits inside a word are not a layer


def test_formula_reads_the_shape_and_type() -> None:
    assert formula((8192, 512, 32), ("n_ctx", "n_ubatch", "n_head"), "f32") == \
        "n_ctx 8192 × n_ubatch 512 × n_head 32 × 4 B (f32)"
    assert formula((7, 3), ("", ""), "f16") == "7 × 3 × 2 B (f16)"


def test_buffer_figures_are_the_plans() -> None:
    model = attention_trace()
    expl = explain(model)
    assert len(expl.buffers) == 1
    b = expl.buffers[0]
    plan = model.plans[b.plan_id]
    sq = plan_quality(model, b.plan_id)[0].slots[0]
    assert b.size == sum(plan.chunk_sizes[0]) == b.allocated
    assert (b.lower_bound, b.greedy, b.peak_step) == (sq.lower_bound_bytes, sq.greedy_bytes, sq.peak_step)
    assert b.lower_bound <= b.size and b.greedy >= b.lower_bound
    # the groups hold exactly what is live at the peak, and the shares add up to 1
    assert sum(g.nbytes for g in b.groups) == b.lower_bound
    assert sum(g.share for g in b.groups) == pytest.approx(1.0)
    assert sum(g.count for g in b.groups) == b.n_live == len(sq.live_at_peak)
    assert b.buft == "CPU" and b.title == "CPU compute buffer"


def test_the_kq_scores_of_one_layer_decide_the_size() -> None:
    b = explain(attention_trace(), hints={"n_ctx": N_KV, "n_ubatch": N_TOKENS}).buffers[0]
    top = b.groups[b.deciding[0]]
    assert top.name == "kq-*" and top.count == 1 and top.op == "MUL_MAT"
    assert top.shape == (N_KV, N_TOKENS, N_HEAD)
    assert top.nbytes == N_KV * N_TOKENS * N_HEAD * 4
    assert top.words == "K·Q scores"
    # the hints rename n_kv and n_tokens; n_head comes from the tensor name
    assert top.dims == ("n_ctx", "n_ubatch", "n_head")
    assert top.formula == f"n_ctx {N_KV} × n_ubatch {N_TOKENS} × n_head {N_HEAD} × 4 B (f32)"
    # the soft-max takes its bytes over in place later; named, not counted twice
    assert top.then_in_place == ("kq_soft_max-0",)
    assert "K·Q scores of one layer" in b.sentence and top.names[0] in b.sentence
    assert f"{round(top.share * 100)}%" in b.sentence


def test_without_hints_the_dimensions_keep_llama_cpp_names() -> None:
    top = explain(attention_trace()).buffers[0].groups[0]
    assert top.dims == ("n_kv", "n_tokens", "n_head")


def test_layers_live_at_once_are_one_group() -> None:
    b = explain(attention_trace(3, parallel_layers=True)).buffers[0]
    kq = next(g for g in b.groups if g.name == "kq-*")
    assert kq.count == 3 and kq.layers == (0, 1, 2) and kq.label == "kq-* × 3"
    assert set(kq.names) == {"kq-0", "kq-1", "kq-2"}
    assert kq.nbytes == 3 * N_KV * N_TOKENS * N_HEAD * 4
    assert "3 layers" in b.sentence


def test_names_unknown_to_llama_cpp_are_numbers_only() -> None:
    b = explain(attention_trace(name="scores")).buffers[0]
    top = b.groups[0]
    assert top.name == "scores-*" and top.words == "" and top.dims == ("", "", "")
    assert top.formula == f"{N_KV} × {N_TOKENS} × {N_HEAD} × 4 B (f32)"
    assert "scores-0 of one layer (" in b.sentence


def test_a_trace_without_plans_has_nothing_to_explain() -> None:
    assert explain(build_model([])).buffers == ()


def test_a_flat_tensor_under_a_reshaped_name_keeps_its_dimensions_unnamed() -> None:
    """llama.cpp names the projection "Qcur-5" before and after its reshape to heads: the
    flat one's 2048 × 512 are not n_embd_head × n_head."""
    from vizalloc.analysis.explain import dim_names, tensor_kind

    assert dim_names(tensor_kind("Qcur-*"), (2048, 512)) == ("", "")
    assert dim_names(tensor_kind("Qcur-*"), (128, 16, 512)) == ("n_embd_head", "n_head", "n_tokens")
    assert dim_names(tensor_kind("CUDA0#Kcur-*#0"), (256, 512)) == ("", "")
    assert dim_names(tensor_kind("kq-*"), (4096, 512, 16)) == ("n_kv", "n_tokens", "n_head")
