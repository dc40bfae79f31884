"""Reading a graph case file (format ``vizalloc-golden/1``): every field is checked.

A case file is data from outside (the golden corpus, an observed ggml process, or anyone's
hand), so nothing in it is trusted: deep nesting, invalid UTF-8, 5,000-digit integers,
numbers where ids belong, strides that point outside a tensor, cycles, duplicated graph
entries, flags outside ggml's ``int32_t`` — each is a ``CaseFormatError`` naming the
field (``tensors[3].nb``) and what it must be. Nothing here recurses into a value it has
not checked, and error messages show values through :func:`show`, which never formats a
huge or deep value.

    >>> case = parse_case({"format": "vizalloc-golden/1", "buffer_types": [{"name": "CPU", "alignment": 32}],
    ...                    "tensors": [], "steps": []})
    >>> case.buffer_types[0]["name"], case.steps
    ('CPU', ())
    >>> parse_case('{"format": "vizalloc-golden/1", "buffer_types": 7}')
    Traceback (most recent call last):
    ...
    vizalloc.errors.CaseFormatError: buffer_types: expected a list, got the integer 7
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vizalloc.errors import CaseFormatError
from vizalloc.runtime.dtype import DType
from vizalloc.runtime.tensor import MAX_SRC, Op, UnaryOp, contiguous_strides
from vizalloc.text import inert
from vizalloc.trace.events import ggml_nbytes

FORMAT = "vizalloc-golden/1"
ACTIONS = ("reserve", "alloc_graph", "sched_reset", "sched_alloc_graph", "clear_tensor_pointers", "compute")
GRAPH_ACTIONS = ("reserve", "alloc_graph", "sched_alloc_graph", "compute")

#: ggml's ``size_t`` (max_size may be SIZE_MAX).
SIZE_MAX = 2**64 - 1
#: The largest dimension, stride or offset: ggml keeps them in ``int64_t`` / ``size_t`` and
#: multiplies them, so anything near 2^63 overflows in C.
MAX_EXTENT = 2**62 - 1
#: ggml's tensor ``flags`` is an ``int32_t`` bit field.
MAX_FLAGS = 2**31 - 1
#: The largest alignment a buffer type may ask for.
MAX_ALIGNMENT = 2**30
#: The most bytes a case's tensors may need in all (static buffers plus every tensor that
#: gets memory): the replay runs in real memory, and freed buffers are filled with poison.
MAX_CASE_BYTES = 2**30
_DTYPES = {t.label: t for t in DType}
# plain dicts: a mappingproxy's ``get`` is slower, and it runs per tensor
_OPS = dict(Op.__members__)
_UNARY_OPS = dict(UnaryOp.__members__)


@dataclass(slots=True)
class TensorSpec:
    """One tensor of a case (the file's fields, checked, with types and ops as vizalloc's enums).

    Not frozen only because a frozen dataclass is three times slower to make, and a
    100,000-tensor case makes 100,000 of them; nothing changes one after parsing.
    """

    id: int
    name: str
    type: DType
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    op: Op
    unary_op: UnaryOp | None
    src: tuple[int | None, ...]
    view_src: int | None
    view_offs: int
    flags_raw: int
    external: bool
    #: ``ggml_nbytes`` of the tensor
    nbytes: int
    #: the tensor that owns the memory: ``view_src`` for a view, else itself
    root: int


@dataclass(frozen=True)
class CaseStep:
    index: int
    action: str
    nodes: tuple[int, ...] | None
    leafs: tuple[int, ...] | None
    node_buffer_ids: tuple[int, ...] | None
    leaf_buffer_ids: tuple[int, ...] | None
    cleared: tuple[int, ...] | None
    expected: Mapping[str, Any] | None


@dataclass(frozen=True)
class Case:
    """A validated case file."""

    name: str
    description: str
    driver: str
    buffer_types: tuple[Mapping[str, Any], ...]
    buffer_instances: tuple[Mapping[str, Any], ...]
    tensors: tuple[TensorSpec, ...]
    steps: tuple[CaseStep, ...]
    variant: str = ""

    @property
    def is_sched(self) -> bool:
        return self.driver.startswith("ggml_backend_sched")

    @property
    def chunked(self) -> bool:
        return any(b.get("max_size") is not None for b in self.buffer_types)


# -- showing values in messages ------------------------------------------------------

def show(v: Any) -> str:
    """A short description of any JSON value for an error message (never deep, never huge)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if abs(v) < 10**30:
            return f"the integer {v}"
        return f"an integer of about {int(v.bit_length() * 0.30103)} digits"
    if isinstance(v, float):
        return f"the number {v!r}"
    if isinstance(v, str):
        return f"the string {inert(repr(v[:60]), 70)}" + (f" ({len(v):,} characters)" if len(v) > 60 else "")
    if isinstance(v, list):
        return f"a list of {len(v):,} item(s)"
    if isinstance(v, dict):
        return f"an object with {len(v):,} key(s)"
    return f"a {type(v).__name__}"


def _fail(where: str, what: str) -> CaseFormatError:
    return CaseFormatError(f"{where}: {what}")


def _int(v: Any, where: str, lo: int = 0, hi: int = MAX_EXTENT) -> int:
    if type(v) is not int or not lo <= v <= hi:
        if type(v) is int:
            raise _fail(where, f"expected an integer in {lo}..{hi:,}, got {show(v)}")
        raise _fail(where, f"expected an integer, got {show(v)}")
    return v


def _ints(v: Any, where: str, n: int | None = None, lo: int = 0, hi: int = MAX_EXTENT) -> tuple[int, ...]:
    if type(v) is not list or (n is not None and len(v) != n):
        raise _fail(where, f"expected {'a list of' if n is None else n} integers, got {show(v)}")
    for j, x in enumerate(v):
        if type(x) is not int or not lo <= x <= hi:
            raise _fail(f"{where}[{j}]", f"expected an integer in {lo}..{hi:,}, got {show(x)}")
    return tuple(v)


_INT_ONLY = {int}


def _ids(v: Any, where: str, n: int, what: str = "tensor id") -> tuple[int, ...]:
    """A list of ids ``0..n-1``."""
    if type(v) is not list:
        raise _fail(where, f"expected a list of {what}s, got {show(v)}")
    # the usual case, checked by C loops (a graph lists 100,000 nodes); the loop below names a bad one
    if not v or (set(map(type, v)) == _INT_ONLY and min(v) >= 0 and max(v) < n):
        return tuple(v)
    for j, x in enumerate(v):
        if type(x) is not int:
            raise _fail(f"{where}[{j}]", f"expected a {what}, got {show(x)}")
        if not 0 <= x < n:
            raise _fail(f"{where}[{j}]", f"{what} {show(x)[12:]} out of range (0..{n - 1})")
    return tuple(v)


def _str(v: Any, where: str, *, optional: bool = False) -> str:
    if v is None and optional:
        return ""
    if type(v) is not str:
        raise _fail(where, f"expected a string, got {show(v)}")
    return v


def _obj(v: Any, where: str) -> dict[str, Any]:
    if type(v) is not dict:
        raise _fail(where, f"expected an object, got {show(v)}")
    return v


def _list(v: Any, where: str) -> list[Any]:
    if type(v) is not list:
        raise _fail(where, f"expected a list, got {show(v)}")
    return v


# -- decoding ---------------------------------------------------------------------------

def decode_case(text: str | bytes, where: str = "the case") -> Any:
    """JSON text (or UTF-8 bytes) to Python values; every decoding failure is a CaseFormatError."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CaseFormatError(f"{where} is not UTF-8 text (byte {exc.start} is {text[exc.start]:#04x})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CaseFormatError(f"{where} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise CaseFormatError(f"{where} nests lists or objects too deeply for a case file") from None
    except ValueError as exc:  # integers with more digits than Python converts
        raise CaseFormatError(f"{where} holds a number vizalloc cannot read: {inert(str(exc), 120)}") from None


# -- the fields -------------------------------------------------------------------------

def parse_case(data: Any, *, where: str = "the case") -> Case:
    """Validate a case: JSON text, its UTF-8 bytes, or the parsed object; raises
    ``CaseFormatError`` naming the field (``where`` names the file in decoding errors)."""
    if isinstance(data, (str, bytes)):
        data = decode_case(data, where)
    if type(data) is not dict:
        raise CaseFormatError(f"the case must be a JSON object, got {show(data)}")
    if data.get("format") != FORMAT:
        raise _fail("format", f"expected {FORMAT!r}, got {show(data.get('format'))}")
    for key in ("buffer_types", "tensors", "steps"):
        _list(data.get(key), key)
    bufts = _buffer_types(data["buffer_types"])
    tensors = _tensors(data["tensors"])
    steps = _steps(data["steps"], len(tensors), len(bufts))
    insts = _buffer_instances(data.get("buffer_instances", []))
    _results(steps, tensors, insts)
    return Case(
        name=_str(data.get("name"), "name", optional=True),
        description=_str(data.get("description"), "description", optional=True),
        driver=_str(data.get("driver", "ggml_gallocr"), "driver"),
        buffer_types=tuple(bufts), buffer_instances=tuple(insts), tensors=tuple(tensors), steps=tuple(steps),
        variant=_str(data.get("variant"), "variant", optional=True),
    )


def _buffer_types(items: list[Any]) -> list[dict[str, Any]]:
    if not items:
        raise _fail("buffer_types", "expected at least one buffer type")
    out = []
    for i, b in enumerate(items):
        w = f"buffer_types[{i}]"
        _obj(b, w)
        _str(b.get("name"), f"{w}.name")
        a = _int(b.get("alignment"), f"{w}.alignment", 1, MAX_ALIGNMENT)
        if a & (a - 1):
            raise _fail(f"{w}.alignment", f"{a} is not a power of two")
        if b.get("max_size") is not None:
            _int(b["max_size"], f"{w}.max_size", 1, SIZE_MAX)
        same = b.get("same_buffer_type_as")
        if same is not None and not (type(same) is int and 0 <= same < i):
            raise _fail(f"{w}.same_buffer_type_as", f"expected the index of an earlier buffer type, got {show(same)}")
        out.append(b)
    return out


_TENSOR_FIELDS = ("id", "name", "type", "ne", "nb", "op", "src", "view_src", "view_offs", "flags_raw", "external")
_MISSING = object()
#: the fields of a tensor object in one call
_tensor_fields = operator.itemgetter(*_TENSOR_FIELDS)


def _tensors(items: list[Any]) -> list[TensorSpec]:
    n = len(items)
    out: list[TensorSpec] = []
    forward = False
    total = 0
    for i, t in enumerate(items):
        spec = _tensor_quick(t, i, out)
        if spec is None:  # the quick path takes no source after the tensor itself
            spec = _tensor(t, i, n, out)
            forward = forward or any(s is not None and s > i for s in spec.src)
        if spec.view_src is None:
            total += spec.nbytes
        out.append(spec)
    if total > MAX_CASE_BYTES:
        raise _fail("tensors", f"the tensors need {total:,} bytes; vizalloc plan replays at most "
                    f"{MAX_CASE_BYTES:,} in real memory")
    if forward:
        _no_cycles(out)
    return out


def _tensor_quick(t: Any, i: int, out: list[TensorSpec]) -> TensorSpec | None:
    """A well-formed tensor whose sources are itself or earlier tensors, checked without
    building any message; None when anything is off (or a source comes later), and
    :func:`_tensor` then finds and names it. Accepts only what ``_tensor`` accepts.
    (Unrolled: it runs once per tensor of files with 100,000 of them.)"""
    m = MAX_EXTENT
    try:
        tid, name, label, ne, nb, op, src, vs, offs, flags, ext = _tensor_fields(t)
        u = t.get("unary_op")
        n0, n1, n2, n3 = ne
        s0, s1, s2, s3 = nb
        # the ranges first, as chained comparisons (anything but a number raises
        # TypeError); they pass 8.0 and True, which the type tests below refuse
        if not (0 <= n0 <= m and 0 <= n1 <= m and 0 <= n2 <= m and 0 <= n3 <= m
                and 1 <= s0 <= m and 1 <= s1 <= m and 1 <= s2 <= m and 1 <= s3 <= m):
            return None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if (type(tid) is not int or tid != i or type(ne) is not list or type(nb) is not list
            or type(src) is not list or len(src) > MAX_SRC or type(name) is not str or type(ext) is not bool
            or type(flags) is not int or not 0 <= flags <= MAX_FLAGS or type(offs) is not int
            or not 0 <= offs <= m or type(label) is not str or type(op) is not str
            or type(n0) is not int or type(n1) is not int or type(n2) is not int or type(n3) is not int
            or type(s0) is not int or type(s1) is not int or type(s2) is not int or type(s3) is not int):
        return None
    dtype = _DTYPES.get(label)
    opv = _OPS.get(op)
    unary = None if u is None else (_UNARY_OPS.get(u) if type(u) is str else None)
    if dtype is None or opv is None or (u is not None and unary is None):
        return None
    for x in src:
        if x is not None and (type(x) is not int or not 0 <= x <= i):
            return None
    ne4, nb4 = (n0, n1, n2, n3), (s0, s1, s2, s3)
    if vs is None:
        # a root: contiguous strides (contiguous_strides, written out), view_offs 0
        ts = dtype.type_size
        if offs or s0 != ts or s1 != ts * n0 or s2 != s1 * n1 or s3 != s2 * n2:
            return None
        nbytes = s3 * n3 if n0 and n1 and n2 and n3 else 0  # ggml_nbytes of contiguous strides
        if nbytes > MAX_EXTENT:
            return None
    else:
        nbytes = ggml_nbytes(dtype.type_size, dtype.blck_size, ne4, nb4)
        if (nbytes > MAX_EXTENT or type(vs) is not int or not 0 <= vs < i or out[vs].view_src is not None
                or (nbytes and offs + nbytes > out[vs].nbytes)):
            return None
    return TensorSpec(i, name, dtype, ne4, nb4, opv, unary, tuple(src), vs, offs, flags, ext, nbytes,
                      i if vs is None else vs)


def _tensor(t: Any, i: int, n: int, out: list[TensorSpec]) -> TensorSpec:
    """Tensor ``i``, every field checked in file order; the first bad one is named."""
    w = f"tensors[{i}]"
    _obj(t, w)
    for key in _TENSOR_FIELDS:
        if key not in t:
            raise _fail(f"{w}.{key}", "missing")
    if t["id"] != i or type(t["id"]) is not int:
        raise _fail(f"{w}.id", f"expected {i} (ids are 0..n-1 in order), got {show(t['id'])}")
    _str(t["name"], f"{w}.name")
    label = t["type"]
    dtype = _DTYPES.get(label) if type(label) is str else None
    if dtype is None:
        raise _fail(f"{w}.type", f"unknown type {show(label)} (f32, f16, i32)")
    ne = _ints(t["ne"], f"{w}.ne", 4)
    nb = _ints(t["nb"], f"{w}.nb", 4, 1)
    op = _OPS.get(t["op"]) if type(t["op"]) is str else None
    if op is None:
        raise _fail(f"{w}.op", f"unknown op {show(t['op'])}")
    u = t.get("unary_op")
    unary = _UNARY_OPS.get(u) if type(u) is str else None
    if u is not None and unary is None:
        raise _fail(f"{w}.unary_op", f"unknown unary op {show(u)}")
    src = t["src"]
    if type(src) is not list or len(src) > MAX_SRC:
        raise _fail(f"{w}.src", f"expected a list of at most {MAX_SRC} tensor ids or nulls, got {show(src)}")
    for j, s in enumerate(src):
        if s is not None and (type(s) is not int or not 0 <= s < n):
            raise _fail(f"{w}.src[{j}]", f"expected the id of another tensor (0..{n - 1}) or null, got {show(s)}")
    nbytes = ggml_nbytes(dtype.type_size, dtype.blck_size, ne, nb)
    if nbytes > MAX_EXTENT:
        raise _fail(f"{w}.ne", f"the tensor would span {nbytes:,} bytes")
    vs = t["view_src"]
    offs = _int(t["view_offs"], f"{w}.view_offs")
    if vs is None:
        if offs:
            raise _fail(f"{w}.view_offs", f"a tensor that is not a view has view_offs 0, got {offs}")
        if nb != contiguous_strides(dtype, ne):  # type: ignore[arg-type]
            raise _fail(f"{w}.nb", f"a tensor that is not a view has the contiguous strides "
                        f"{list(contiguous_strides(dtype, ne))} of its shape, got {list(nb)}")  # type: ignore[arg-type]
    else:
        if type(vs) is not int or not 0 <= vs < i:
            raise _fail(f"{w}.view_src", f"expected the id of an earlier tensor or null, got {show(vs)}")
        root = out[vs]
        if root.view_src is not None:
            raise _fail(f"{w}.view_src", "a view's view_src must be a root (not another view)")
        if nbytes and offs + nbytes > root.nbytes:
            raise _fail(f"{w}.nb", f"the view spans bytes [{offs:,}, {offs + nbytes:,}) of tensor {vs}, "
                        f"which has {root.nbytes:,}")
    flags = _int(t["flags_raw"], f"{w}.flags_raw", 0, MAX_FLAGS)
    if type(t["external"]) is not bool:
        raise _fail(f"{w}.external", f"expected true or false, got {show(t['external'])}")
    return TensorSpec(i, t["name"], dtype, ne, nb, op, unary, tuple(src), vs, offs, flags,  # type: ignore[arg-type]
                      t["external"], nbytes, i if vs is None else vs)


def _no_cycles(tensors: list[TensorSpec]) -> None:
    """Sources form no cycle (a tensor listing itself, as ggml_cast does, is allowed)."""
    n = len(tensors)
    state = bytearray(n)  # 0 unvisited, 1 on the path, 2 done
    for start in range(n):
        if state[start]:
            continue
        stack = [(start, iter(tensors[start].src))]
        state[start] = 1
        while stack:
            k, it = stack[-1]
            for s in it:
                if s is None or s == k or state[s] == 2:
                    continue
                if state[s] == 1:
                    raise _fail(f"tensors[{k}].src", f"tensor {k} reads tensor {s}, which depends on tensor {k} "
                                "(a cycle; only ggml_cast lists itself as a source)")
                state[s] = 1
                stack.append((s, iter(tensors[s].src)))
                break
            else:
                state[k] = 2
                stack.pop()


def _steps(items: list[Any], n: int, n_bufts: int) -> list[CaseStep]:
    out = []
    for i, s in enumerate(items):
        w = f"steps[{i}]"
        _obj(s, w)
        action = s.get("action")
        if type(action) is not str or action not in ACTIONS:
            raise _fail(f"{w}.action", f"unknown action {show(action)} (one of {', '.join(ACTIONS)})")
        nodes: tuple[int, ...] | None = None
        leafs: tuple[int, ...] | None = None
        g = s.get("graph")
        if action in GRAPH_ACTIONS or g is not None:
            if type(g) is not dict:
                raise _fail(f"{w}.graph", f"action {action} needs a graph with nodes and leafs")
            nodes = _ids(g.get("nodes"), f"{w}.graph.nodes", n)
            leafs = _ids(g.get("leafs"), f"{w}.graph.leafs", n)
            if len({*nodes, *leafs}) < len(nodes) + len(leafs):  # a tensor listed twice: name the first repeat
                seen: set[int] = set()
                for key, ids in (("nodes", nodes), ("leafs", leafs)):
                    for j, k in enumerate(ids):
                        if k in seen:
                            raise _fail(f"{w}.graph.{key}[{j}]",
                                        f"tensor {k} is listed twice (a graph holds a tensor once)")
                        seen.add(k)
        nbi = None if s.get("node_buffer_ids") is None else _ids(s["node_buffer_ids"], f"{w}.node_buffer_ids",
                                                                  n_bufts, "buffer id")
        lbi = None if s.get("leaf_buffer_ids") is None else _ids(s["leaf_buffer_ids"], f"{w}.leaf_buffer_ids",
                                                                  n_bufts, "buffer id")
        for key, per_entry, cnt in (("node_buffer_ids", nbi, nodes), ("leaf_buffer_ids", lbi, leafs)):
            if per_entry is not None and (cnt is None or len(per_entry) != len(cnt)):
                raise _fail(f"{w}.{key}", "expected one buffer id per graph entry")
        cleared = None if s.get("cleared") is None else _ids(s["cleared"], f"{w}.cleared", n)
        result = s.get("result")
        if result is not None:
            _obj(result, f"{w}.result")
        out.append(CaseStep(i, action, nodes, leafs, nbi, lbi, cleared, result))
    return out


def _buffer_instances(items: Any) -> list[dict[str, Any]]:
    _list(items, "buffer_instances")
    seen: set[int] = set()
    total = 0
    for i, b in enumerate(items):
        w = f"buffer_instances[{i}]"
        _obj(b, w)
        inst = _int(b.get("instance"), f"{w}.instance")
        if inst in seen:
            raise _fail(f"{w}.instance", f"instance {inst} is listed twice")
        seen.add(inst)
        ext = b.get("external", False)
        if type(ext) is not bool:
            raise _fail(f"{w}.external", f"expected true or false, got {show(ext)}")
        if b.get("name") is not None:
            _str(b["name"], f"{w}.name")
        if ext:
            total += _int(b.get("size"), f"{w}.size", 0, MAX_CASE_BYTES)
    if total > MAX_CASE_BYTES:
        raise _fail("buffer_instances", f"the static buffers hold {total:,} bytes; vizalloc plan replays at most "
                    f"{MAX_CASE_BYTES:,} in real memory")
    return items


def _results(steps: list[CaseStep], tensors: list[TensorSpec], insts: list[dict[str, Any]]) -> None:
    """The parts of the recorded results the replay reads: where external tensors live."""
    n = len(tensors)
    for step in steps:
        tens = (step.expected or {}).get("tensors")
        if tens is None:
            continue
        w = f"steps[{step.index}].result.tensors"
        _obj(tens, w)
        for key, entry in tens.items():
            if not (key.isdigit() and key.isascii() and len(key) <= 19 and int(key) < n):
                raise _fail(w, f"key {inert(repr(key[:40]), 50)} is not a tensor id (0..{n - 1})")
            _obj(entry, f"{w}[{key!r}]")
            for field in ("instance", "offset"):
                if entry.get(field) is not None:
                    _int(entry[field], f"{w}[{key!r}].{field}")
