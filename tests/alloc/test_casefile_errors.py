"""Malformed case files raise CaseFormatError naming the field; the CLI exits 2."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from vizalloc import cli
from vizalloc.errors import CaseFormatError
from vizalloc.casefile import parse_case

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
BASE = json.loads((GOLDEN / "ew03_parent_is_output.json").read_text())


def _mutated(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    cur = data
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return data


@pytest.mark.parametrize("path, value, message", [
    (["tensors", 3, "ne"], [1, 2, 3], "tensors[3].ne: expected 4 integers"),
    (["tensors", 3, "ne"], "x", "tensors[3].ne: expected 4 integers"),
    (["tensors", 2, "nb"], [4, 4, 4], "tensors[2].nb: expected 4 integers"),
    (["tensors", 1, "type"], "q9_9", "tensors[1].type: unknown type"),
    (["tensors", 1, "op"], "FROB", "tensors[1].op: unknown op"),
    (["tensors", 4, "src"], [99], "tensors[4].src[0]: expected the id of another tensor"),
    (["tensors", 4, "view_src"], 7, "tensors[4].view_src: expected the id of an earlier tensor"),
    (["tensors", 0, "id"], 5, "tensors[0].id: expected 0"),
    (["tensors", 0, "external"], "yes", "tensors[0].external: expected true or false"),
    (["buffer_types", 0, "alignment"], 48, "buffer_types[0].alignment: 48 is not a power of two"),
    (["steps", 0, "action"], "explode", "steps[0].action: unknown action"),
    (["steps", 0, "graph", "nodes"], [0, 999], "steps[0].graph.nodes[1]: tensor id 999 out of range"),
    (["steps", 0, "node_buffer_ids"], [0], "steps[0].node_buffer_ids: expected one buffer id per graph entry"),
    (["format"], "other/1", "format: expected 'vizalloc-golden/1'"),
])
def test_malformed_field_is_named(path: list[Any], value: Any, message: str) -> None:
    with pytest.raises(CaseFormatError) as exc:
        parse_case(_mutated(path, value))
    assert message in str(exc.value)


def test_cli_exit_code_2_for_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(_mutated(["tensors", 3, "ne"], [1, 2])))
    assert cli.main(["plan", str(p), "--check"]) == 2
    assert "tensors[3].ne: expected 4 integers" in capsys.readouterr().err
    p.write_text("{not json")
    assert cli.main(["plan", str(p)]) == 2
    assert cli.main(["plan", str(tmp_path / "missing.json")]) == 2
