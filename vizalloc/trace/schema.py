"""The shape of every event kind as the trace file sees it: one column codec per field.

Each field's type annotation in ``events.py`` maps to a *codec name*, a short string
that the file header stores so a reader can check that a file was written with the
same event schema it knows:

=========================  ==========================================
annotation                 codec
=========================  ==========================================
``int``                    ``int``
``bool``                   ``bool``
``float``                  ``float``
``str``                    ``str`` (an id into the interned string table)
``bytes``                  ``bytes`` (lengths in the chunk, bytes raw after it)
an ``enum.Enum`` subclass  ``enum:<ClassName>`` (stored as its value's string id)
``tuple[X, ...]``          ``tuple<X>`` (lengths, then the flattened items)
``Union[int, float, str]`` ``scalar`` (a tag per item, then per-type columns)
=========================  ==========================================

It also builds a *fast constructor* per kind: a function that fills the slots of a
frozen event directly instead of going through the dataclass ``__init__`` (which calls
``object.__setattr__`` once per field and is the most expensive part of both recording
and loading a trace). The result is the same object ``cls(*fields)`` gives.

    >>> from vizalloc.trace import events as ev
    >>> from vizalloc.trace.schema import SCHEMA
    >>> SCHEMA[ev.TensorPlaced].codecs
    ('int', 'int', 'int', 'int', 'enum:PlacedBy', 'int')
    >>> SCHEMA[ev.Marker].new(1, 2, None, "hi") == ev.Marker(1, 2, None, "hi")
    True
"""

from __future__ import annotations

import enum
import types
import typing
from dataclasses import dataclass, fields
from collections import deque
from collections.abc import Sequence
from itertools import repeat
from typing import Any, Callable, Union

from vizalloc.trace import events as ev

#: Python types that may appear inside a ``scalar`` item (op params).
SCALAR_TYPES = (int, float, str, bool, type(None))

#: The enums event fields may use, by the name the file header records.
ENUMS: dict[str, type[enum.Enum]] = {
    cls.__name__: cls for cls in vars(ev).values()
    if isinstance(cls, type) and issubclass(cls, enum.Enum) and cls.__module__ == ev.__name__
}


@dataclass(frozen=True, slots=True)
class KindSchema:
    """One event kind: its index in ``KINDS``, payload field names and codecs, and a fast constructor."""

    index: int
    name: str
    cls: type[ev.Event]
    fields: tuple[str, ...]
    codecs: tuple[str, ...]
    new: Callable[..., ev.Event]
    #: ``new_many(n, columns)``: ``n`` events from one list per field (see ``bulk_constructor``)
    new_many: Callable[[int, Sequence[Sequence[Any]]], list[ev.Event]]


def codec_of(tp: Any, where: str) -> str:
    """The codec name for a resolved type annotation (raises TypeError for a type files cannot hold)."""
    if tp is bool:
        return "bool"
    if tp is int:
        return "int"
    if tp is float:
        return "float"
    if tp is str:
        return "str"
    if tp is bytes:
        return "bytes"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if ENUMS.get(tp.__name__) is not tp:
            raise TypeError(f"{where}: enum {tp.__name__} must be defined in vizalloc.trace.events")
        return f"enum:{tp.__name__}"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"tuple<{codec_of(args[0], where)}>"
    if origin in (Union, types.UnionType) and all(a in SCALAR_TYPES for a in args):
        return "scalar"
    raise TypeError(f"{where}: the trace file has no codec for type {tp!r}; add one to vizalloc/trace/schema.py")


def _slot_setters(cls: type[ev.Event]) -> dict[str, Callable[[Any, Any], None]]:
    """Each field's member-descriptor ``__set__`` (what writes a slot of a frozen instance)."""
    setters = {}
    for name in (f.name for f in fields(cls)):
        for klass in cls.__mro__:
            descriptor = klass.__dict__.get(name)
            if descriptor is not None:
                setters[name] = descriptor.__set__
                break
        else:  # pragma: no cover - every dataclass field of a slots class has a descriptor
            raise TypeError(f"{cls.__name__}.{name} has no slot")
    return setters


def bulk_constructor(cls: type[ev.Event]) -> Callable[[int, Sequence[Sequence[Any]]], list[ev.Event]]:
    """A function ``f(n, columns)``: ``n`` events of ``cls`` from one sequence per field
    (``seq``, ``t_ns``, ``loc``, then the payload), equal to ``[cls(*row) for row in zip(*columns)]``.

    It makes ``n`` empty instances, then fills one field of all of them at a time with
    ``map`` over that field's slot setter: no Python frame per event, which makes it
    faster than ``fast_constructor`` per event when loading big traces. Every
    column must have ``n`` items (not checked). Same conditions as ``fast_constructor``.
    """
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has __post_init__; the bulk constructor would skip it")
    setters = list(_slot_setters(cls).values())
    make = object.__new__

    def new_many(n: int, columns: Sequence[Sequence[Any]]) -> list[ev.Event]:
        objs: list[ev.Event] = list(map(make, repeat(cls, n)))
        for setter, column in zip(setters, columns, strict=True):
            deque(map(setter, objs, column), maxlen=0)  # runs the map in C, keeps nothing
        return objs

    return new_many


def fast_constructor(cls: type[ev.Event]) -> Callable[..., ev.Event]:
    """A function ``f(seq, t_ns, loc, *payload)`` equal to ``cls(...)``, but faster.

    It writes each slot through its member descriptor, which is what the frozen
    dataclass ``__init__`` ends up doing after a slower ``object.__setattr__`` lookup.
    Only valid for frozen slots dataclasses without ``__post_init__`` (checked here).
    """
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has __post_init__; the fast constructor would skip it")
    names = [f.name for f in fields(cls)]
    setters = _slot_setters(cls)
    params = ", ".join(f"f_{n}" for n in names)
    defaults = ", ".join(f"_s_{n}=_setters[{n!r}]" for n in names)
    body = "".join(f"    _s_{n}(o, f_{n})\n" for n in names)
    src = (
        f"def new_{cls.__name__}({params}, *, _new=_object_new, _cls=_cls, {defaults}):\n"
        f"    o = _new(_cls)\n{body}    return o\n"
    )
    scope: dict[str, Any] = {"_object_new": object.__new__, "_cls": cls, "_setters": setters}
    exec(compile(src, f"<vizalloc fast constructor {cls.__name__}>", "exec"), scope)  # noqa: S102 - our own code
    fn: Callable[..., ev.Event] = scope[f"new_{cls.__name__}"]
    return fn


def _build() -> dict[type[ev.Event], KindSchema]:
    out: dict[type[ev.Event], KindSchema] = {}
    for index, (name, cls) in enumerate(ev.KINDS.items()):
        hints = typing.get_type_hints(cls, vars(ev))
        names = ev.payload_fields(cls)
        codecs = tuple(codec_of(hints[n], f"{name}.{n}") for n in names)
        out[cls] = KindSchema(index, name, cls, names, codecs, fast_constructor(cls), bulk_constructor(cls))
    return out


#: Every kind's schema, in ``events.KINDS`` order.
SCHEMA: dict[type[ev.Event], KindSchema] = _build()

#: The same, by kind name.
BY_NAME: dict[str, KindSchema] = {s.name: s for s in SCHEMA.values()}


#: The Python type a field of each plain codec holds, exactly.
_EXACT_TYPES: dict[str, type] = {"int": int, "str": str, "bool": bool, "float": float, "bytes": bytes}


def _fits(codec: str, v: Any) -> bool:
    """Whether ``v`` is exactly what a field of ``codec`` holds (no int for a bool, no
    numpy scalar for an int, no list for a tuple)."""
    exact = _EXACT_TYPES.get(codec)
    if exact is not None:
        return type(v) is exact
    if codec == "scalar":
        return type(v) in SCALAR_TYPES
    if codec.startswith("enum:"):
        return type(v) is ENUMS[codec[5:]]
    if codec.startswith("tuple<"):
        inner = codec[6:-1]
        return type(v) is tuple and all(_fits(inner, e) for e in v)
    raise TypeError(f"unknown codec {codec}")  # pragma: no cover


def check_event(event: ev.Event) -> None:
    """Raise ``TypeError`` naming the kind, field, value and expected codec when a field of
    ``event`` holds a value of another type than the schema says (``emit`` does not check:
    the runtime's hot paths call it). Used by ``recorder.StrictRecorder``."""
    schema = SCHEMA.get(type(event))
    if schema is None:
        raise TypeError(f"{type(event).__name__} is not an event kind of vizalloc.trace.events")
    for name, codec in (("seq", "int"), ("t_ns", "int"), *zip(schema.fields, schema.codecs)):
        v = getattr(event, name)
        if not _fits(codec, v):
            raise TypeError(f"{schema.name}.{name} = {v!r} ({type(v).__name__}): the schema says {codec}")
    if event.loc is not None and type(event.loc) is not ev.Location:
        raise TypeError(f"{schema.name}.loc = {event.loc!r}: expected a Location or None")
