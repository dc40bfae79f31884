"""The state of an analysis pass, declared by the pass: what each attribute is to the repetition proof.

The stream analysis (``stream.py``) skips a repeated step only when the step it analysed
read exactly what the one before it read (``observe.py``). It can only see what it is told
of: each pass (``model.TraceModel``, ``build.Builder``, ``dynamic.AccessScan``) lists every
attribute it has in ``STATE``, once, with how the proof treats it, and the stream derives
from these lists which containers it watches, what their keys are, which may grow in a
repeated step and what it measures (``tests/analysis/test_state.py`` fails when an
attribute is not listed).

    >>> Held.map("tensor", grows=True).viewed, Held.counter().viewed
    (True, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: containers a step's reads are noted in, through a view (``observe.py``)
VIEWED = frozenset({"map", "list", "set", "bytemaps", "fast"})
#: what has a size the stream measures before and after a step
SIZED = VIEWED | {"log"}


@dataclass(frozen=True, slots=True)
class Held:
    """How one attribute of a pass figures in the repetition proof.

    ``how``:

    * ``map`` / ``set``: entries read and written one at a time, keyed by ids of ``key``
      (``events.ID_FIELDS`` kinds), seen through a view that notes each read; ``list``: the
      model's placements, read by number; ``bytemaps``: per buffer, the last-writer byte map
      (read through a byte map view); ``fast``: the access pass' per-tensor tuples, which
      hold a byte map;
    * ``log``: only appended to, never read by a step's analysis: its growth is measured;
    * ``scalar``: one value the next events act on, noted at the start of each observed step;
      ``key`` is the id kind of its value (it then moves with the step), ``ident`` the
      attribute that names an object held there;
    * ``counter``: numbers objects or events; every step moves it, and ``runs.py`` moves the
      numbers of skipped steps' objects alike;
    * ``ref``: the same object as ``same_as`` (``owner.attribute``): given that one's view;
    * ``link``: no state of the pass: a collaborator, a setting, a cache rebuilt on demand.

    ``grows``: a repeated step may add entries (its own new objects); ``nested``: its size is
    that of its values' lists too.
    """

    how: str
    key: str | None = None
    grows: bool = False
    nested: bool = False
    same_as: str = ""
    ident: str = ""

    @property
    def viewed(self) -> bool:
        return self.how in VIEWED

    @staticmethod
    def map(key: str, *, grows: bool = False, nested: bool = False) -> Held:
        return Held("map", key, grows, nested)

    @staticmethod
    def log(*, grows: bool = False) -> Held:
        return Held("log", grows=grows)

    @staticmethod
    def scalar(key: str | None = None, ident: str = "") -> Held:
        return Held("scalar", key, ident=ident)

    @staticmethod
    def counter() -> Held:
        return Held("counter")

    @staticmethod
    def ref(same_as: str) -> Held:
        return Held("ref", same_as=same_as)

    @staticmethod
    def link() -> Held:
        return Held("link")


def attributes(obj: Any) -> list[str]:
    """The attributes an object holds (its slots, or its ``__dict__``)."""
    names: list[str] = []
    for cls in type(obj).__mro__:
        names += [s for s in getattr(cls, "__slots__", ()) if hasattr(obj, s)]
    if hasattr(obj, "__dict__"):
        names += list(vars(obj))
    return list(dict.fromkeys(names))
