"""The command dispatcher imports only the chosen command's module."""

from __future__ import annotations

import subprocess
import sys


def _imported_after(args: list[str]) -> set[str]:
    code = (
        "import sys\n"
        "from vizalloc.cli import main\n"
        f"main({args!r})\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_check_help_does_not_import_the_runtime_or_the_tui() -> None:
    mods = _imported_after(["check", "--help"])
    assert "vizalloc.cli.check" in mods
    assert "vizalloc.runtime" not in mods and "vizalloc.scenarios" not in mods and "textual" not in mods


def test_top_level_help_lists_every_command(capsys) -> None:
    from vizalloc.cli import COMMANDS, main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_is_a_usage_error(capsys) -> None:
    from vizalloc.cli import main

    assert main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err
