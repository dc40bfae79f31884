"""Why is a compute buffer as big as it is? The tensors live at its peak, grouped, and a
sentence naming the one or two groups that decide its size.

For every buffer a graph allocator sized (one per allocator and buffer slot), the plan
that needed the most bytes is the one that decided the size. At that plan's peak (the
planner step where the most bytes are live, :func:`vizalloc.analysis.quality.lower_bound`)
the blocks live are grouped by tensor name with the layer index folded (``kq-5`` and
``kq-17`` are both ``kq-*``), and each group gets its op, shape, bytes, share of the peak
and a formula read off its shape and type (``n_kv 2048 × n_tokens 512 × n_head 4 × 4 B``).
The figures are quality's (lower bound and greedy-by-size, defined there once); nothing
here looks at a model file, only at the trace.

Dimension names come from the tensor names llama.cpp gives its graph (``kq``,
``attn_inp_kq_mask``, ``ffn_up``, ...: :data:`LLAMA_TENSORS`); a tensor with another name
is described by its numbers alone. ``hints`` (``{"n_ctx": 8192, "n_ubatch": 512}``, from
the settings a run was made with) rename a dimension whose size equals the hint:
``n_kv 8192`` becomes ``n_ctx 8192`` when the context is 8192.

    >>> from vizalloc.analysis.model import build_model
    >>> explain(build_model([])).buffers
    ()
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vizalloc.analysis.model import TraceModel
from vizalloc.analysis.placed import sizing_plans
from vizalloc.analysis.records import NEVER, TYPE_SIZES
from vizalloc.analysis.quality import Block, plan_quality

#: ``vizalloc explain --json`` writes this in its ``schema`` key (docs/explain-schema.md)
SCHEMA = "vizalloc.explain/1"

#: A group counts as deciding the size when it is at least this share of the peak, or is
#: the largest; at most two are named.
DECIDING_SHARE = 0.10
#: Naming stops once the named groups make up this share of the peak.
ENOUGH_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class TensorKind:
    """What llama.cpp means by a tensor name: words and the meaning of each dimension
    (``ne[0]`` first; a tensor with fewer dimensions takes the first ones, trailing 1s
    trimmed). ``exact``: only a tensor with every dimension is named, because llama.cpp
    gives the same name to the flat tensor before its reshape (``Qcur`` is first
    ``n_head · n_embd_head × n_tokens``)."""

    words: str
    dims: tuple[str, ...]
    exact: bool = False


_KQ = ("n_kv", "n_tokens", "n_head", "n_stream")
#: llama.cpp's graph tensor names (llama-graph.cpp, llama-model.cpp), by the name with the
#: layer suffix removed
LLAMA_TENSORS: dict[str, TensorKind] = {
    "kq": TensorKind("K·Q scores", _KQ),
    "kq_soft_max": TensorKind("soft-max of the K·Q scores", _KQ),
    "kq_soft_max_ext": TensorKind("soft-max of the K·Q scores", _KQ),
    "kq_scaled": TensorKind("scaled K·Q scores", _KQ),
    "kq_masked": TensorKind("masked K·Q scores", _KQ),
    "attn_inp_kq_mask": TensorKind("attention mask", ("n_kv", "n_tokens", "n_stream")),
    "attn_inp_kq_mask_swa": TensorKind("sliding-window attention mask", ("n_kv", "n_tokens", "n_stream")),
    "kqv": TensorKind("attention-weighted values", ("n_embd_head", "n_tokens", "n_head")),
    "kqv_out": TensorKind("attention output", ("n_embd_v", "n_tokens")),
    "__fattn__": TensorKind("flash-attention output", ("n_embd_head", "n_head", "n_tokens")),
    "Qcur": TensorKind("queries", ("n_embd_head", "n_head", "n_tokens"), exact=True),
    "Kcur": TensorKind("keys", ("n_embd_head", "n_head_kv", "n_tokens"), exact=True),
    "Vcur": TensorKind("values", ("n_embd_head", "n_head_kv", "n_tokens"), exact=True),
    "inp_embd": TensorKind("input embeddings", ("n_embd", "n_tokens")),
    "inp_pos": TensorKind("token positions", ("n_tokens",)),
    "attn_norm": TensorKind("normed layer input", ("n_embd", "n_tokens")),
    "attn_out": TensorKind("attention output", ("n_embd", "n_tokens")),
    "ffn_inp": TensorKind("feed-forward input", ("n_embd", "n_tokens")),
    "ffn_norm": TensorKind("normed feed-forward input", ("n_embd", "n_tokens")),
    "ffn_out": TensorKind("feed-forward output", ("n_embd", "n_tokens")),
    "ffn_up": TensorKind("feed-forward up projection", ("n_ff", "n_tokens")),
    "ffn_gate": TensorKind("feed-forward gate", ("n_ff", "n_tokens")),
    "ffn_gate_par": TensorKind("feed-forward gate", ("n_ff", "n_tokens")),
    "ffn_swiglu": TensorKind("feed-forward activations", ("n_ff", "n_tokens")),
    "ffn_geglu": TensorKind("feed-forward activations", ("n_ff", "n_tokens")),
    "ffn_silu": TensorKind("feed-forward activations", ("n_ff", "n_tokens")),
    "ffn_gelu": TensorKind("feed-forward activations", ("n_ff", "n_tokens")),
    "l_out": TensorKind("layer output", ("n_embd", "n_tokens")),
    "norm": TensorKind("normed activations", ("n_embd", "n_tokens")),
    "result_norm": TensorKind("normed output", ("n_embd", "n_outputs")),
    "result_output": TensorKind("output logits", ("n_vocab", "n_outputs")),
}

#: a hint renames a dimension of this name when the sizes agree (the worst-case reserve
#: attends over the whole context with a full micro-batch)
_HINTED = {"n_kv": "n_ctx", "n_tokens": "n_ubatch"}

# a layer index: "kq-5", "blk.5.attn_q", "cache_k_l5", "layers.5"; the digits go, "*" stays
_LAYER = re.compile(r"(?<=[-.])\d+(?=$|[-. (])|(?<=_l)\d+(?=$|[-._ (])|(?<=^layer)\d+|(?<=[._]layer)\d+")
# ggml's names for unnamed tensors: one group per op
_UNNAMED = re.compile(r"^(node|leaf)_\d+$|^#\d+$")


def fold_name(name: str) -> tuple[str, int | None]:
    """The name with its layer index replaced by ``*``, and the index (None: no layer).

        >>> fold_name("kq-5"), fold_name("blk.12.attn_q.weight"), fold_name("cache_k_l3 (view)")
        (('kq-*', 5), ('blk.*.attn_q.weight', 12), ('cache_k_l* (view)', 3))
        >>> fold_name("inp_embd"), fold_name("node_237")
        (('inp_embd', None), ('node_*', None))
    """
    if _UNNAMED.match(name):
        return (name.split("_", 1)[0] + "_*" if "_" in name else "#*"), None
    found = list(_LAYER.finditer(name))
    if not found:
        return name, None
    m = found[-1]
    return name[:m.start()] + "*" + name[m.end():], int(m.group(0))


# ggml's scheduler names the copy of a tensor read on another backend "<backend>#<name>#<copy>"
_SCHED_COPY = re.compile(r"^([^#]+)#(.+)#(\d+)$")


def tensor_kind(folded: str) -> TensorKind | None:
    """What llama.cpp calls a tensor of this (folded) name, if it is one of its own; a
    scheduler's input copy of one (``CUDA0#attn_inp_kq_mask#0``) is its copy.

        >>> tensor_kind("kq-*").words, tensor_kind("CUDA0#attn_inp_kq_mask#0").words
        ('K·Q scores', 'copy of the attention mask on CUDA0')
    """
    copy = _SCHED_COPY.match(folded)
    if copy is not None:
        inner = tensor_kind(copy.group(2))
        words = f"copy of the {inner.words} on {copy.group(1)}" if inner is not None else \
            f"copy of {copy.group(2)} on {copy.group(1)}"
        return TensorKind(words, inner.dims if inner is not None else (), inner is not None and inner.exact)
    base = folded[:-2] if folded.endswith("-*") else folded
    return LLAMA_TENSORS.get(base)


def trimmed(ne: Sequence[int]) -> tuple[int, ...]:
    dims = list(ne)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return tuple(dims)


def dim_names(kind: TensorKind | None, shape: Sequence[int], hints: Mapping[str, int] | None = None) -> tuple[str, ...]:
    """A name per dimension of ``shape`` ("" when unknown); ``hints`` rename a dimension
    whose size equals the hinted setting (``n_kv`` -> ``n_ctx``)."""
    if kind is None or len(kind.dims) < len(shape) or (kind.exact and len(kind.dims) != len(shape)):
        return ("",) * len(shape)
    names = list(kind.dims[:len(shape)])
    for i, (n, size) in enumerate(zip(names, shape)):
        hinted = _HINTED.get(n)
        if hinted and hints and hints.get(hinted) == size:
            names[i] = hinted
    return tuple(names)


def formula(shape: Sequence[int], names: Sequence[str], dtype: str) -> str:
    """``n_kv 2048 × n_tokens 512 × n_head 4 × 4 B (f32)``: the product that makes the bytes.

        >>> formula((2048, 512, 4), ("n_kv", "n_tokens", "n_head"), "f32")
        'n_kv 2048 × n_tokens 512 × n_head 4 × 4 B (f32)'
        >>> formula((640, 3), ("", ""), "q8_0")
        '640 × 3 elements of q8_0'
    """
    parts = [f"{n} {d}" if n else str(d) for n, d in zip(names, shape)]
    size = TYPE_SIZES.get(dtype)
    if size is None:
        return " × ".join(parts) + f" elements of {dtype}"
    return " × ".join([*parts, f"{size} B ({dtype})"])


@dataclass(frozen=True, slots=True)
class Group:
    """Tensors live at a buffer's peak that share a name but for the layer index, and an op."""

    name: str                  # the folded name: "kq-*"
    words: str                 # what llama.cpp means by it ("K·Q scores"), "" when unknown
    op: str
    dtype: str
    count: int                 # blocks of this group live at the peak
    layers: tuple[int, ...]    # their layer indices (sorted, distinct)
    names: tuple[str, ...]     # their tensors' own names
    shape: tuple[int, ...]     # ne (trailing 1s cut) of the largest member
    same_shape: bool           # every member has that shape
    dims: tuple[str, ...]      # a name per dimension of ``shape`` ("" when unknown)
    formula: str               # how one member's bytes come about; members of several shapes: one
                               # product per shape, summed ("2 × A + B"), so it adds up to the group
    nbytes: int                # bytes the group holds at the peak (as the planner padded them)
    share: float               # of the bytes live at the peak
    then_in_place: tuple[str, ...]  # tensors that later reuse the bytes in place (names folded for several)

    @property
    def label(self) -> str:
        """``kq-* × 2`` (the count when more than one)."""
        return self.name if self.count == 1 else f"{self.name} × {self.count}"


@dataclass(frozen=True, slots=True)
class BufferExplanation:
    """One buffer a graph allocator sized, explained at its peak."""

    galloc_id: int
    slot: int
    plan_id: int                # the plan that needed the most bytes here (the latest such)
    same_plans: tuple[int, ...]  # every plan of the allocator that needed as many bytes
    backend: str                # "" when the trace never allocated the buffer
    buft: str
    buffer_ids: tuple[int, ...]  # the trace's buffers of this allocator slot, in order
    size: int                   # bytes the buffer needs: the plan's (what ggml allocates)
    allocated: int | None       # the last such buffer's bytes in the trace (None: never allocated)
    lower_bound: int            # the most bytes live at once (quality.lower_bound)
    greedy: int                 # greedy-by-size on the same lifetimes (quality.greedy_by_size)
    peak_step: int              # the planner step of the peak
    peak_tensor: str            # the tensor allocated at that step
    peak_op: str
    n_live: int                 # blocks live at the peak
    groups: tuple[Group, ...]   # largest first
    deciding: tuple[int, ...]   # indices into ``groups`` named in ``sentence``
    sentence: str

    @property
    def title(self) -> str:
        """``CPU compute buffer`` (``slot 1 of allocator 0`` when the trace has no buffer)."""
        if self.buft:
            return f"{self.buft} compute buffer"
        return f"compute buffer (allocator {self.galloc_id}, slot {self.slot})"


@dataclass(frozen=True)
class Explanation:
    buffers: tuple[BufferExplanation, ...]
    hints: dict[str, int] = field(default_factory=dict)


def _holder(block: Block, step: int) -> int:
    """Which of a block's tensors holds its bytes at ``step`` (the last to take them by then)."""
    idx = 0
    for i, j in enumerate(block.joined):
        if j <= step:
            idx = i
    return idx


def _percent(share: float) -> str:
    return f"{share * 100:.0f}%" if share >= 0.01 else "<1%"


def _phrase(g: Group) -> str:
    """``the K·Q scores of one layer (kq-5: n_kv 2048 × ... × 4 B)``."""
    who = g.names[0] if g.count == 1 else g.label
    if g.count == 1 and g.layers:
        scope = " of one layer"
    elif len(g.layers) > 1:
        scope = f" of {len(g.layers)} layers"
    elif g.count > 1:
        scope = f" ({g.count} tensors)"
    else:
        scope = ""
    how = g.formula
    if g.count > 1 and g.same_shape:
        how = f"{g.count} × {how}" if not g.layers or len(g.layers) == g.count else how
    after = ""
    if g.then_in_place:
        after = f"; {', '.join(g.then_in_place)} then reuse{'s' if len(g.then_in_place) == 1 else ''} it in place"
    if not g.words:  # a name llama.cpp does not give: the name is the subject
        return f"{who}{scope} ({how}{after})"
    return f"the {g.words}{scope} ({who}: {how}{after})"


def deciding_text(groups: Sequence[Group], deciding: Sequence[int]) -> str:
    """``54% of it is the K·Q scores of one layer (kq-5: ...), and 20% of it the ...``: the
    groups that decide a buffer's size, with their share of its peak."""
    named = [groups[i] for i in deciding]
    return ", and ".join(f"{_percent(g.share)} of it {'is ' if i == 0 else ''}{_phrase(g)}"
                         for i, g in enumerate(named))


def _sentence(buf_title: str, size: int, live: int, peak_tensor: str, groups: Sequence[Group],
              deciding: Sequence[int]) -> str:
    if not groups:
        return f"The {buf_title} holds nothing at any step of its plan."
    text = f"At its peak, while {peak_tensor} is allocated, {live:,} B are live; {deciding_text(groups, deciding)}."
    extra = size - live
    if extra > 0:
        text += (f" The buffer is {extra:,} B ({_percent(extra / size)}) more than that: fragmentation from the order "
                 "ggml's planner places tensors in.")
    return text


def _choose(groups: Sequence[Group]) -> tuple[int, ...]:
    chosen: list[int] = []
    total = 0.0
    for i, g in enumerate(groups[:2]):
        if i == 0 or (g.share >= DECIDING_SHARE and total < ENOUGH_SHARE):
            chosen.append(i)
            total += g.share
    return tuple(chosen)


def _groups(model: TraceModel, live: Sequence[Block], peak_step: int, peak_bytes: int,
            hints: Mapping[str, int] | None) -> list[Group]:
    by_key: dict[tuple[str, str], list[tuple[Block, int]]] = {}
    for b in live:
        idx = _holder(b, peak_step)
        info = model.tensors.get(b.tensor_ids[idx])
        folded, _ = fold_name(model.label(b.tensor_ids[idx]))
        op = info.op if info is not None else "?"
        by_key.setdefault((folded, op), []).append((b, idx))
    groups = []
    for (folded, op), members in by_key.items():
        members.sort(key=lambda m: -m[0].nbytes)
        infos = [model.tensors.get(b.tensor_ids[i]) for b, i in members]
        names = tuple(model.label(b.tensor_ids[i]) for b, i in members)
        layers = sorted({lay for n in names if (lay := fold_name(n)[1]) is not None})
        first = infos[0]
        shape = trimmed(first.ne) if first is not None else ()
        same = all(inf is not None and trimmed(inf.ne) == shape for inf in infos)
        dtype = first.dtype if first is not None else "?"
        kind = tensor_kind(folded)
        dims = dim_names(kind, shape, hints)
        # who takes the bytes over in place after the peak: by name for one member, folded for several
        after: list[str] = []
        for b, i in members:
            for t in b.tensor_ids[i + 1:]:
                later = model.label(t) if len(members) == 1 else fold_name(model.label(t))[0]
                if later not in after and later != folded:
                    after.append(later)
        nbytes = sum(b.nbytes for b, _ in members)
        how = formula(shape, dims, dtype)
        if not same:
            how = _formula_sum(infos, kind, hints)
        groups.append(Group(folded, kind.words if kind else "", op, dtype, len(members), tuple(layers), names, shape,
                            same, dims, how, nbytes,
                            nbytes / peak_bytes if peak_bytes else 0.0, tuple(after)))
    groups.sort(key=lambda g: (-g.nbytes, g.name))
    return groups


def _formula_sum(infos: Sequence[Any], kind: TensorKind | None, hints: Mapping[str, int] | None) -> str:
    """The members of a group of several shapes as a sum, largest first: ``n_ctx 32768 ×
    n_ubatch 512 × 2 B (f16) + n_kv 1024 × n_ubatch 512 × 2 B (f16)`` (a full and a
    sliding-window attention mask), so the formula adds up to the group's bytes."""
    counts: dict[tuple[tuple[int, ...], str], int] = {}
    for inf in infos:
        if inf is not None:
            key = (trimmed(inf.ne), inf.dtype)
            counts[key] = counts.get(key, 0) + 1
    terms = []
    for (shape, dtype), n in counts.items():
        one = formula(shape, dim_names(kind, shape, hints), dtype)
        terms.append(f"{n} × {one}" if n > 1 else one)
    return " + ".join(terms)


def explain(model: TraceModel, *, hints: Mapping[str, int] | None = None) -> Explanation:
    """Every compute buffer of the trace explained at its peak (by allocator, then slot)."""
    out: list[BufferExplanation] = []
    sizing = sizing_plans(model)
    by_galloc: dict[int, list[int]] = {}
    for plan in sorted(model.plans.values(), key=lambda p: p.begin_seq):
        if plan.chunk_sizes:
            by_galloc.setdefault(plan.galloc_id, []).append(plan.plan_id)
    for galloc_id in sorted(by_galloc):
        plan_ids = by_galloc[galloc_id]
        slots = sorted({s for pid in plan_ids for s in range(len(model.plans[pid].chunk_sizes))})
        for slot in slots:
            sizes = {pid: sum(model.plans[pid].chunk_sizes[slot]) if slot < len(model.plans[pid].chunk_sizes) else 0
                     for pid in plan_ids}
            size = max(sizes.values())
            if size == 0:
                continue
            same = tuple(pid for pid in plan_ids if sizes[pid] == size)
            plan_id = sizing[(galloc_id, slot)]   # the latest of ``same``: the one the layout draws too
            quality = plan_quality(model, plan_id)[0]
            sq = next((s for s in quality.slots if s.slot == slot), None)
            if sq is None:  # a slot sharing another's allocator: explained with that one
                continue
            buffers = sorted((b for b in model.buffers.values() if b.pool_id == galloc_id and b.slot == slot),
                             key=lambda b: (b.alloc_seq, b.chunk))
            # the buffer as the trace left it: its chunks never freed, else the last allocated
            current = [b for b in buffers if b.freed_seq == NEVER] or \
                [b for b in buffers if b.alloc_seq == buffers[-1].alloc_seq]
            allocated = sum(b.nbytes for b in current) if current else None
            named = current[0] if current else None
            live = list(sq.live_at_peak)
            groups = _groups(model, live, sq.peak_step, sq.lower_bound_bytes, hints)
            peak_block = next((b for b in live if b.start == sq.peak_step), None)
            peak_info = model.tensors.get(peak_block.tensor_ids[0]) if peak_block is not None else None
            peak_tensor = peak_info.label if peak_info is not None else "?"
            deciding = _choose(groups)
            title = f"{named.buft} compute buffer" if named is not None else "compute buffer"
            sentence = _sentence(title, size, sq.lower_bound_bytes, peak_tensor, groups, deciding)
            out.append(BufferExplanation(
                galloc_id, slot, plan_id, same, named.backend if named else "", named.buft if named else "",
                tuple(b.buffer_id for b in buffers), size, allocated, sq.lower_bound_bytes,
                sq.greedy_bytes, sq.peak_step, peak_tensor, peak_info.op if peak_info is not None else "?",
                len(live), tuple(groups), deciding, sentence))
    return Explanation(tuple(out), dict(hints or {}))
