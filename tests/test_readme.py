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
