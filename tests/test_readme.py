"""The README's library example runs as written (in a temporary directory)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_library_example_runs(tmp_path, monkeypatch, capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README has no python example"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], str(README), "exec"), {"__name__": "readme_example"})
    assert "(32, 128)" in capsys.readouterr().out
    assert (tmp_path / "mlp.vztrace").stat().st_size > 0


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first_block is not None
    lines = [line.split("#")[0].strip() for line in first_block.group(1).strip().splitlines()]
    assert lines == ["pip install -e . && vizalloc demo", "pip install -e '.[test]' && python -m pytest -q"]


def test_readme_demo_walkthrough_runs_as_written(tmp_path, monkeypatch, capsys) -> None:
    """`vizalloc demo`, then the "Then look at why" commands, in order, as a user types
    them: check finds the stale overlap (exit 1), demo --capture-values -f records values,
    check --shadow replays and names the first diverging node, export writes the layout.
    The TUI line is only checked for its trace (it needs a terminal)."""
    import shlex

    from vizalloc.cli import main

    text = README.read_text(encoding="utf-8")
    block = re.search(r"Then look at why:\n\n```bash\n(.*?)```", text, re.S)
    assert block is not None, "the README lost its 'Then look at why' commands"
    lines = [line.split("#")[0].strip() for line in block.group(1).strip().splitlines()]
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    capsys.readouterr()
    ran = []
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "vizalloc", line
        if words[1] == "tui":
            assert (tmp_path / words[2]).exists()
            continue
        code = main(words[1:])
        out = capsys.readouterr().out
        ran.append(words[1:3])
        if words[1] == "check" and "--shadow" in words:
            assert code == 1 and "first diverging node" in out and "no captured values" not in out, out[-2000:]
        elif words[1] == "check":
            assert code == 1 and "stale-overlap 'x'" in out
        else:
            assert code == 0, line
    assert ["demo", "--capture-values"] in ran and ["check", "demo-none.vztrace"] in ran
    assert (tmp_path / "demo-none.layout.svg").stat().st_size > 0
