"""A corpus of hostile graph case files for ``vizalloc plan``, generated from one golden case.

Each entry is a file's bytes and what ``vizalloc plan`` must do with it: refuse it with
exit 2 naming the field (``error``), or take it (``ok``: exit 0 or 1, names shown inert).
The test runs every entry in-process; the campaign below runs each one as its own process
under a time and memory limit and counts the outcomes:

    python -m tests.casefile.hostile          # clear errors / tracebacks / hangs / accepted
    python -m tests.casefile.hostile ../main  # the same corpus against another checkout
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
#: a small gallocr case: 8 tensors (one external), one alloc_graph step with results
BASE = json.loads((GOLDEN / "ew03_parent_is_output.json").read_text())
#: a case with views and a static buffer
VIEWS = json.loads((GOLDEN / "views02_views_of_views.json").read_text())


@dataclass(frozen=True)
class Hostile:
    name: str
    content: bytes
    #: "error": exit 2 and ``field`` in the message; "ok": exit 0 or 1
    expect: str
    field: str = ""
    args: tuple[str, ...] = ()


def _dump(data: Any) -> bytes:
    return json.dumps(data).encode()


def _mutated(base: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> bytes:
    data = copy.deepcopy(base)
    edit(data)
    return _dump(data)


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        cur = data
        for k in path[:-1]:
            cur = cur[k]
        if value is _DELETE:
            del cur[path[-1]]
        else:
            cur[path[-1]] = value
    return edit


_DELETE = object()
HUGE = 2**64
DEEP = 100_000


def chain(n: int, *, forward: bool = False, cycle: bool = False) -> dict[str, Any]:
    """An input and ``n`` unary nodes, each reading the one before it. ``forward``: ids in
    reverse creation order (every source has a larger id); ``cycle``: the first node reads
    the last."""
    ids = list(range(n + 1))
    if forward:
        ids.reverse()  # tensor k of the chain gets id ids[k]
    tensors: list[dict[str, Any]] = [{}] * (n + 1)
    for k in range(n + 1):
        src = [] if k == 0 else [ids[k - 1]]
        tensors[ids[k]] = {
            "id": ids[k], "name": "x" if k == 0 else f"relu_{k}", "type": "f32", "ne": [8, 1, 1, 1],
            "nb": [4, 32, 32, 32], "op": "NONE" if k == 0 else "UNARY", "unary_op": None if k == 0 else "RELU",
            "src": src, "view_src": None, "view_offs": 0, "flags": [], "flags_raw": 1 if k == 0 else 16,
            "external": False,
        }
    if cycle:
        tensors[ids[1]]["src"] = [ids[n]]
    return {"format": "vizalloc-golden/1", "name": f"chain{n}", "description": "", "driver": "ggml_gallocr",
            "buffer_types": [{"name": "CPU", "alignment": 32, "max_size": None}], "buffer_instances": [],
            "tensors": tensors,
            "steps": [{"index": 0, "action": "alloc_graph", "graph": {"nodes": ids[1:], "leafs": [ids[0]]},
                       "node_buffer_ids": None, "leaf_buffer_ids": None}]}


def corpus(*, big: int = 20_000, description_bytes: int = 20_000_000) -> Iterator[Hostile]:
    """Every hostile case; ``big`` sizes the long chains, ``description_bytes`` the long text."""
    b = BASE
    # -- whole-file encodings ----------------------------------------------------------
    yield Hostile("empty file", b"", "error", "not JSON")
    yield Hostile("deep array", b"[" * DEEP + b"]" * DEEP, "error", "too deeply")
    yield Hostile("deep object", b'{"a":' * DEEP + b"1" + b"}" * DEEP, "error", "too deeply")
    yield Hostile("invalid utf-8", b'{"format": "vizalloc-golden/1", "name": "\xff\xfe"}', "error", "not UTF-8")
    yield Hostile("utf-16", _dump(b).decode().encode("utf-16"), "error", "not UTF-8")
    yield Hostile("utf-8 bom", b"\xef\xbb\xbf" + _dump(b), "error", "BOM")
    yield Hostile("5000-digit integer", _dump(b)[:-1] + b', "x": ' + b"9" * 5000 + b"}", "error", "number")
    yield Hostile("NaN dimension", _mutated(b, _set(["tensors", 2, "ne", 0], float("nan"))), "error", "tensors[2].ne[0]")
    yield Hostile("trace file", b"VZTRACE\0" + bytes(64), "error", "is a vizalloc trace")
    for text in (b"null", b"[]", b"7", b'"case"', b"{}"):
        yield Hostile(f"top level {text.decode()}", text, "error", "format" if text == b"{}" else "JSON object")
    # -- values that must stay data -----------------------------------------------------
    yield Hostile("lone surrogate name", _dump(b).replace(b'"name": "x"', b'"name": "\\ud800x"', 1), "ok")
    yield Hostile("escape sequences", _mutated(b, lambda d: (
        d.__setitem__("description", "\x1b]0;owned\x07\x1b[2J\u202eevil"),
        d["tensors"][2].__setitem__("name", "\x1b[31mred\x1b[0m\u202egnp"),
        d.__setitem__("name", "[bold]case\x1b]8;;http://x\x07"))), "ok")
    yield Hostile("huge description", _mutated(b, _set(["description"], "\u202e\x1b[2J" * (description_bytes // 8))),
                  "ok")
    yield Hostile("10k-character name", _mutated(b, _set(["tensors", 2, "name"], "n" * 10_000)), "ok")
    yield Hostile("deep recorded value", _dump(b).replace(b'"ok": true', b'"ok": ' + b"[" * 50_000 + b"]" * 50_000, 1),
                  "error", "too deeply")
    yield Hostile("shallow wrong recorded value", _mutated(b, _set(["steps", 0, "result", "ok"], [[[[1]]]])), "ok",
                  args=("--check",))
    # -- top-level fields ---------------------------------------------------------------
    for key in ("buffer_types", "tensors", "steps"):
        for v in (None, {}, "x", 3):
            yield Hostile(f"{key} = {json.dumps(v)}", _mutated(b, _set([key], v)), "error", key)
    for key in ("name", "description", "driver", "variant"):
        yield Hostile(f"{key} as list", _mutated(b, _set([key], ["x"])), "error", key)
    yield Hostile("buffer_instances = 5", _mutated(b, _set(["buffer_instances"], 5)), "error", "buffer_instances")
    yield Hostile("no buffer types", _mutated(b, _set(["buffer_types"], [])), "error", "buffer_types")
    # -- buffer types -------------------------------------------------------------------
    bt = ["buffer_types", 0]
    for v in (0, 3, -32, True, 2**40, HUGE, "32", None):
        yield Hostile(f"alignment {v!r}", _mutated(b, _set([*bt, "alignment"], v)), "error", "buffer_types[0].alignment")
    for v in (0, -1, True, HUGE, "big"):
        yield Hostile(f"max_size {v!r}", _mutated(b, _set([*bt, "max_size"], v)), "error", "buffer_types[0].max_size")
    yield Hostile("buffer type name missing", _mutated(b, _set([*bt, "name"], _DELETE)), "error", "buffer_types[0].name")
    yield Hostile("same_buffer_type_as itself", _mutated(b, _set([*bt, "same_buffer_type_as"], 0)), "error",
                  "same_buffer_type_as")
    # -- tensors: every field missing or of the wrong kind ------------------------------
    t2 = ["tensors", 2]
    for key in ("id", "name", "type", "ne", "nb", "op", "src", "view_src", "view_offs", "flags_raw", "external"):
        yield Hostile(f"missing {key}", _mutated(b, _set([*t2, key], _DELETE)), "error", f"tensors[2].{key}")
    wrong: dict[str, list[Any]] = {
        "id": [True, 2.0, "2", -1, HUGE],
        "name": [None, 5, ["n"], {"n": 1}],
        "type": ["q4_0", ["f32"], {"f32": 1}, None, 4],
        "ne": [[1, 2, 3], [1, 2, 3, 4, 5], [-1, 1, 1, 1], [2**62, 1, 1, 1], [2**31, 2**31, 1, 1], [1.5, 1, 1, 1],
               [True, 1, 1, 1], [HUGE, 1, 1, 1], "x", None],
        "nb": [[4, 4, 4], [-4, 128, 512, 512], [0, 128, 512, 512], [4, 0, 512, 512], [4, 2**62, 2**63, 2**63],
               [8, 256, 1024, 1024], [4.0, 128, 512, 512], None],
        "op": [["ADD"], {"op": "ADD"}, "FROB", None, 3, "add"],
        "unary_op": ["FROB", ["RELU"], {"RELU": 1}, 7],
        "src": [[99], [-1], [True], ["1"], [0.5], list(range(11)), "0", {"0": 1}],
        "view_offs": [-4, 4, HUGE, 1.0, None],
        "flags_raw": [-1, 2**63, 2**31, True, 1.0, None, "1"],
        "external": ["yes", 1, None, [True]],
    }
    for key, values in wrong.items():
        for v in values:
            yield Hostile(f"{key} = {json.dumps(v)[:30]}", _mutated(b, _set([*t2, key], v)), "error", "tensors[2].")
    yield Hostile("tensor not an object", _mutated(b, _set(t2, [1, 2])), "error", "tensors[2]")
    # -- views --------------------------------------------------------------------------
    v = VIEWS
    views = [i for i, t in enumerate(v["tensors"]) if t["view_src"] is not None]
    vi = views[0]
    root = v["tensors"][vi]["view_src"]
    yield Hostile("view_src forward", _mutated(v, _set(["tensors", vi, "view_src"], len(v["tensors"]) - 1)), "error",
                  f"tensors[{vi}].view_src")
    yield Hostile("view_src itself", _mutated(v, _set(["tensors", vi, "view_src"], vi)), "error",
                  f"tensors[{vi}].view_src")
    yield Hostile("view_src bool", _mutated(v, _set(["tensors", vi, "view_src"], False)), "error",
                  f"tensors[{vi}].view_src")
    yield Hostile("view past its root", _mutated(v, _set(["tensors", vi, "view_offs"], 10**6)), "error",
                  f"tensors[{vi}].nb")
    yield Hostile("view with huge stride", _mutated(v, _set(["tensors", vi, "nb", 0], 2**40)), "error",
                  f"tensors[{vi}].nb")
    yield Hostile("view of a view", _mutated(v, _set(["tensors", views[1], "view_src"], vi)), "error", "view_src")
    yield Hostile("root with view_offs", _mutated(v, _set(["tensors", root, "view_offs"], 64)), "error",
                  f"tensors[{root}].view_offs")
    # -- steps ----------------------------------------------------------------------------
    s0 = ["steps", 0]
    for val in ("explode", ["alloc_graph"], {"a": 1}, None, 3):
        yield Hostile(f"action {json.dumps(val)}", _mutated(b, _set([*s0, "action"], val)), "error", "steps[0].action")
    yield Hostile("step not an object", _mutated(b, _set(s0, "reserve")), "error", "steps[0]")
    yield Hostile("graph missing", _mutated(b, _set([*s0, "graph"], _DELETE)), "error", "steps[0].graph")
    yield Hostile("nodes not a list", _mutated(b, _set([*s0, "graph", "nodes"], {"0": 1})), "error",
                  "steps[0].graph.nodes")
    yield Hostile("node id out of range", _mutated(b, _set([*s0, "graph", "nodes", 0], 999)), "error",
                  "steps[0].graph.nodes[0]")
    yield Hostile("node id as string", _mutated(b, _set([*s0, "graph", "nodes", 0], "2")), "error",
                  "steps[0].graph.nodes[0]")
    nodes = b["steps"][0]["graph"]["nodes"]
    yield Hostile("duplicated node", _mutated(b, _set([*s0, "graph", "nodes"], nodes + nodes[:1])), "error",
                  "listed twice")
    yield Hostile("node also a leaf", _mutated(b, _set([*s0, "graph", "leafs"], b["steps"][0]["graph"]["leafs"]
                                                       + nodes[:1])), "error", "listed twice")
    yield Hostile("node_buffer_ids short", _mutated(b, _set([*s0, "node_buffer_ids"], [0])), "error", "node_buffer_ids")
    yield Hostile("node_buffer_ids out of range", _mutated(b, _set([*s0, "node_buffer_ids"], [5] * len(nodes))),
                  "error", "node_buffer_ids")
    yield Hostile("result not an object", _mutated(b, _set([*s0, "result"], [1])), "error", "steps[0].result")
    yield Hostile("result tensors not an object", _mutated(b, _set([*s0, "result", "tensors"], [1])), "error",
                  "steps[0].result.tensors")
    yield Hostile("non-numeric tensor key", _mutated(b, lambda d: d["steps"][0]["result"]["tensors"].__setitem__(
        "abc", {"offset": 0})), "error", "not a tensor id")
    yield Hostile("tensor key out of range", _mutated(b, lambda d: d["steps"][0]["result"]["tensors"].__setitem__(
        "99999999999999999999999", {"offset": 0})), "error", "not a tensor id")
    ext = next(k for k, e in b["steps"][0]["result"]["tensors"].items() if e.get("external_buffer"))
    yield Hostile("non-numeric offset", _mutated(b, _set([*s0, "result", "tensors", ext, "offset"], "0x10")), "error",
                  "offset")
    yield Hostile("offset outside its static buffer", _mutated(b, _set([*s0, "result", "tensors", ext, "offset"],
                                                                        10**9)), "error", "offset")
    yield Hostile("cleared out of range", _mutated(b, lambda d: d["steps"].append(
        {"index": 1, "action": "clear_tensor_pointers", "cleared": [42]})), "error", "steps[1].cleared")
    # -- buffer instances -----------------------------------------------------------------
    bi = ["buffer_instances", 0]
    for val in (True, -1, "0", None, 1.0):
        yield Hostile(f"instance {json.dumps(val)}", _mutated(b, _set([*bi, "instance"], val)), "error",
                      "buffer_instances[0].instance")
    yield Hostile("duplicated instance", _mutated(b, lambda d: d["buffer_instances"].append(
        copy.deepcopy(d["buffer_instances"][0]))), "error", "listed twice")
    yield Hostile("external not boolean", _mutated(b, _set([*bi, "external"], "true")), "error",
                  "buffer_instances[0].external")
    for val in (-1, HUGE, 2**40, "1"):
        yield Hostile(f"static size {val!r}", _mutated(b, _set([*bi, "size"], val)), "error", "buffer_instances[0].size")
    # -- structure ------------------------------------------------------------------------
    yield Hostile("cycle through forward sources", _dump(chain(50, forward=True, cycle=True)), "error", "cycle")
    yield Hostile("two-tensor cycle", _mutated(b, lambda d: d["tensors"][2].__setitem__("src", [3])), "error", "cycle")
    yield Hostile("long chain", _dump(chain(big)), "ok")
    yield Hostile("long chain with forward references", _dump(chain(big, forward=True)), "ok")
    yield Hostile("long chain, full overlap list", _mutated(chain(big), lambda d: d["steps"][0].__setitem__(
        "result", {"overlaps": []})), "error" if big * (big - 1) // 2 > 1_000_000 else "ok", "overlapping pairs",
        args=("--check",))


def campaign(big: int = 100_000, description_bytes: int = 50_000_000, timeout_s: float = 120.0,
             root: Path | None = None) -> dict[str, int]:
    """Run every case as its own ``vizalloc plan`` process (tables, then ``--check``); count
    the worst outcome per case and print the ones that are not what the corpus expects."""
    import os
    import resource
    import subprocess
    import sys
    import tempfile

    root = root or Path(__file__).resolve().parents[2]  # another checkout: compare before/after
    env = dict(os.environ, PYTHONPATH=str(root), NO_COLOR="1")
    counts = {"clear error": 0, "traceback": 0, "hang": 0, "accepted": 0, "accepted (should be refused)": 0}
    peak_mb = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "case.json")
        for case in corpus(big=big, description_bytes=description_bytes):
            with open(path, "wb") as f:
                f.write(case.content)
            outcome = ""
            for mode in ([case.args] if case.args else [(), ("--check",)]):
                try:
                    p = subprocess.run([sys.executable, "-m", "vizalloc", "plan", path, *mode], env=env,
                                       capture_output=True, timeout=timeout_s, cwd=root, check=False)
                except subprocess.TimeoutExpired:
                    outcome = "hang"
                    break
                err = p.stderr.decode("utf-8", "replace")
                if "Traceback" in err or p.returncode not in (0, 1, 2):
                    outcome = "traceback"
                    break
                if p.returncode == 2:
                    outcome = "clear error" if err.startswith("vizalloc plan: error:") else "traceback"
                    break
                outcome = "accepted" if case.expect == "ok" else "accepted (should be refused)"
            peak_mb = max(peak_mb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
            counts[outcome] += 1
            if (outcome == "clear error") != (case.expect == "error") or outcome in ("traceback", "hang"):
                print(f"  {case.name}: {outcome} (expected {case.expect})")
    print(f"{sum(counts.values())} hostile case files: " + ", ".join(f"{n} {k}" for k, n in counts.items())
          + f"; largest process {peak_mb:.0f} MB")
    return counts


if __name__ == "__main__":
    import sys

    campaign(root=Path(sys.argv[1]) if len(sys.argv) > 1 else None)
