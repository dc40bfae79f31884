"""Hypothesis strategies that build any event of any kind, field by field from its schema."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from vizalloc.trace import events as ev
from vizalloc.trace.schema import ENUMS, SCHEMA

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
SMALL_INT = st.integers(min_value=-5, max_value=1 << 20)
INTS = st.one_of(SMALL_INT, INT64)
TEXT = st.text(max_size=12)
LOCATIONS = st.one_of(
    st.none(),
    st.builds(ev.Location, st.sampled_from(["a.py", "/home/u/train.py", "ünï.py"]), st.integers(0, 10**6),
              st.sampled_from(["main", "<module>", "step"])),
)
SCALARS = st.one_of(INTS, st.floats(allow_nan=False), TEXT, st.booleans(), st.none())


def for_codec(codec: str) -> st.SearchStrategy[Any]:
    if codec == "int":
        return INTS
    if codec == "str":
        return TEXT
    if codec == "bool":
        return st.booleans()
    if codec == "float":
        return st.floats(allow_nan=False)
    if codec == "bytes":
        return st.binary(max_size=64)
    if codec == "scalar":
        return SCALARS
    if codec.startswith("enum:"):
        return st.sampled_from(list(ENUMS[codec[5:]]))
    if codec.startswith("tuple<"):
        return st.lists(for_codec(codec[6:-1]), max_size=5).map(tuple)
    raise AssertionError(f"no strategy for codec {codec}")


NON_NEGATIVE_INT = st.one_of(st.integers(0, 1 << 20), st.integers(0, (1 << 63) - 1))


def event_of(cls: type[ev.Event]) -> st.SearchStrategy[ev.Event]:
    """Any event of ``cls``; the fields the reader refuses negative (the graph allocator's
    positions, ``chunk_decoder.NON_NEGATIVE``) stay 0 or more."""
    from vizalloc.trace.chunk_decoder import NON_NEGATIVE

    schema = SCHEMA[cls]
    positions = NON_NEGATIVE.get(cls, ())
    return st.builds(cls, INT64, INT64, LOCATIONS, *[NON_NEGATIVE_INT if f in positions else for_codec(c)
                                                     for f, c in zip(schema.fields, schema.codecs)])


ANY_EVENT = st.one_of([event_of(cls) for cls in SCHEMA])
