"""What the commands say about their own use: one wording for a missing trace file,
a helpful `run` without a script, --help without reST markup."""

from __future__ import annotations

import pytest

from vizalloc.cli import COMMANDS, main


@pytest.mark.parametrize("argv", [["check"], ["summary"], ["export"], ["tui"], ["diff", "{}"]],
                         ids=["check", "summary", "export", "tui", "diff"])
def test_every_command_words_a_missing_trace_the_same(argv, tmp_path, capsys):
    missing = str(tmp_path / "nope.vztrace")
    words = [argv[0], missing] + [w.format(missing) for w in argv[1:]]
    assert main(words) == 2
    err = capsys.readouterr().err
    assert err == (f"vizalloc {argv[0]}: error: no trace file at {missing}; record one with "
                   f"`vizalloc run -o {missing} script.py` or `vizalloc demo`\n")
    assert main([argv[0], str(tmp_path)] + [w.format(tmp_path) for w in argv[1:]]) == 2
    assert f"{tmp_path} is a directory, not a trace file" in capsys.readouterr().err


def test_run_without_a_script_says_what_to_give(capsys):
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert "required: script.py, args" not in err
    assert "name what to trace" in err and "vizalloc run -o train.vztrace train.py" in err
    assert "-- PROGRAM" in err  # a real ggml program goes after --


@pytest.mark.parametrize("argv", [["run"], ["run", "nosuch.py"], ["run", "--"], ["run", "--", "no-such-program-here"]],
                         ids=["nothing", "no-script", "no-program", "program-not-found"])
def test_run_usage_errors_name_the_command(argv, tmp_path, monkeypatch, capsys):
    # the REMAINDER positional once shared its dest with the subcommand's name, and the
    # message read "vizalloc ['nosuch.py']: error: ..."
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("vizalloc run: error: "), err


def test_run_passes_a_prefix_of_its_options_to_the_script(tmp_path, capsys):
    script = tmp_path / "argv.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n")
    assert main(["run", "-o", str(tmp_path / "t.vztrace"), str(script), "--c", "-f"]) == 0
    assert "['--c', '-f']" in capsys.readouterr().out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_has_no_rest_double_backticks(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and "usage: vizalloc " + command in out
