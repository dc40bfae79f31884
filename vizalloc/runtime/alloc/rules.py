"""Which ggml the allocators follow: the rules that changed between ggml versions.

vizalloc's allocators reproduce ggml at commit d99724f2 (version 0.21.0), checked against
the golden corpus and ggml-python 0.0.45 (which reports 0.15.3 but carries the same
``ggml-alloc.c``). A traced real process may run another ggml; its graphs are replayed
with that version's rules, as far as they are known to differ:

* 0.26.0 (the ggml inside ``xllamacpp==2026.10.11549``): ``ggml_op_can_inplace`` also lets
  ``CLAMP`` take over its source's bytes. ``struct ggml_tensor``, the op and type enums and
  the rest of ``ggml-alloc.c``'s planner are unchanged (the linear allocation of a
  context's tensors moved into the buffer type, which placements show as they happen).

An unknown version is replayed with the rules of the nearest older known one; every
offset is still compared with what the process did, so a rule change shows up as a
replay difference rather than as a wrong picture.

    >>> rules_for("0.26.0").inplace_ops - rules_for("0.21.0").inplace_ops
    frozenset({Op.CLAMP})
"""

from __future__ import annotations

from dataclasses import dataclass

from vizalloc.runtime.tensor import INPLACE_OPS, Op


@dataclass(frozen=True)
class AllocatorRules:
    """The version-dependent parts of ggml's graph allocator."""

    version: str
    #: ``ggml_op_can_inplace``
    inplace_ops: frozenset[Op]
    #: where the rules come from
    source: str


GGML_0_21 = AllocatorRules("0.21.0", INPLACE_OPS, "ggml commit d99724f2 (the golden corpus)")
GGML_0_26 = AllocatorRules("0.26.0", INPLACE_OPS | {Op.CLAMP}, "ggml 0.26.0 as in xllamacpp 2026.10.11549")
DEFAULT = GGML_0_21

#: versions whose ggml-alloc.c was compared with these rules
KNOWN: dict[str, AllocatorRules] = {"0.15.3": GGML_0_21, "0.21.0": GGML_0_21, "0.26.0": GGML_0_26}


def _key(version: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in version.split("."))
    except ValueError:
        return None


def rules_for(version: str) -> AllocatorRules:
    """The rules for ``version``: exact when known, else those of the nearest older known version."""
    if version in KNOWN:
        return KNOWN[version]
    key = _key(version)
    if key is None:
        return DEFAULT
    older = [(k, r) for v, r in KNOWN.items() if (k := _key(v)) is not None and k <= key]
    return max(older, key=lambda kr: kr[0])[1] if older else DEFAULT


def is_known(version: str) -> bool:
    return version in KNOWN
