"""Files are created exclusively, never through a symbolic link; only -f / overwrite=True
replaces what is there (a link itself, never its target). One helper does it:
``vizalloc.files.create_new``."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import vizalloc
from vizalloc.cli import main
from vizalloc.cli.tui import export_writer
from vizalloc.errors import UsageError
from vizalloc.files import check_new, create_new
from vizalloc.scenarios.shared_tensors import run
from vizalloc.trace import api
from vizalloc.trace.value import Trace, TraceHeader

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink") or os.name != "posix", reason="POSIX links")


@pytest.fixture
def dangling(tmp_path: Path) -> tuple[Path, Path]:
    """A link whose target does not exist (the target's directory does)."""
    target = tmp_path / "elsewhere" / "victim"
    target.parent.mkdir()
    return target, tmp_path


def _link(at: Path, target: Path) -> Path:
    os.symlink(target, at)
    return at


# -- the helper ---------------------------------------------------------------------------

def test_create_new_refuses_what_is_there(tmp_path: Path, dangling: tuple[Path, Path]) -> None:
    target, _ = dangling
    existing = tmp_path / "a.txt"
    existing.write_text("keep me")
    with pytest.raises(UsageError, match="a.txt already exists; pass overwrite=True"):
        create_new(existing)
    assert existing.read_text() == "keep me"
    link = _link(tmp_path / "l.txt", target)
    with pytest.raises(UsageError, match=r"l.txt is a symbolic link \(to .*victim, which does not exist\)"):
        create_new(link)
    with pytest.raises(UsageError, match="symbolic link"):
        check_new(link)
    assert not target.exists() and link.is_symlink()
    with pytest.raises(UsageError, match="is a directory"):
        create_new(tmp_path, overwrite=True)


def test_overwrite_replaces_a_file_or_the_link_itself(tmp_path: Path, dangling: tuple[Path, Path]) -> None:
    target, _ = dangling
    existing = tmp_path / "a.txt"
    existing.write_text("old and longer")
    with create_new(existing, overwrite=True, text=True) as f:
        f.write("new")
    assert existing.read_text() == "new"
    link = _link(tmp_path / "l.txt", target)
    with create_new(link, overwrite=True) as f:
        f.write(b"mine")
    assert not link.is_symlink() and link.read_bytes() == b"mine" and not target.exists()
    # a link to an existing file: the link goes, the file it pointed at is untouched
    kept = tmp_path / "kept.txt"
    kept.write_text("untouched")
    link2 = _link(tmp_path / "l2.txt", kept)
    with create_new(link2, overwrite=True) as f:
        f.write(b"x")
    assert kept.read_text() == "untouched" and link2.read_bytes() == b"x" and not link2.is_symlink()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def attempt() -> None:
        try:
            create_new(fifo, overwrite=True)
        except BaseException as exc:  # noqa: BLE001
            done.append(exc)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "opening a FIFO blocked"
    assert done and isinstance(done[0], UsageError) and "not a regular file" in str(done[0])


# -- the library ---------------------------------------------------------------------------

def test_the_library_refuses_an_existing_trace_unless_told(tmp_path: Path) -> None:
    path = tmp_path / "t.vztrace"
    with vizalloc.trace(path):
        vizalloc.mark("first")
    before = path.read_bytes()
    with pytest.raises(UsageError, match="t.vztrace already exists; pass overwrite=True to replace it"):
        with vizalloc.trace(path):
            vizalloc.mark("second")
    assert path.read_bytes() == before
    with vizalloc.trace(path, overwrite=True):
        vizalloc.mark("second")
    assert [e.text for e in vizalloc.load(path).events] == ["second"]
    t = vizalloc.load(path)
    with pytest.raises(UsageError, match="already exists"):
        api.save(t, path)
    assert api.save(t, path, overwrite=True) == path.stat().st_size


def test_the_library_never_writes_through_a_dangling_link(dangling: tuple[Path, Path]) -> None:
    target, d = dangling
    link = _link(d / "t.vztrace", target)
    with pytest.raises(UsageError, match="symbolic link"):
        with vizalloc.trace(link):
            pass
    with pytest.raises(UsageError, match="symbolic link"):
        api.save(Trace(TraceHeader.new(), ()), link)
    assert not target.exists()
    with vizalloc.trace(link, overwrite=True):
        vizalloc.mark("here")
    assert not target.exists() and not link.is_symlink()
    assert [e.text for e in vizalloc.load(link).events] == ["here"]


def test_nested_blocks_on_one_file_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.vztrace"
    alias = _link(tmp_path / "alias.vztrace", path)
    with vizalloc.trace(path) as outer:
        vizalloc.mark("outer")
        for again, overwrite in ((path, False), (path, True), (alias, True)):
            with pytest.raises(UsageError, match="is being written by an active trace"):
                with vizalloc.trace(again, overwrite=overwrite):
                    vizalloc.mark("inner")
        with vizalloc.trace(tmp_path / "other.vztrace") as inner:  # another file is fine
            vizalloc.mark("both")
    assert [e.text for e in vizalloc.load(path).events] == ["outer", "both"]
    assert [e.text for e in inner.trace.events] == ["both"]
    assert outer.n_events == 2
    # once the outer block is over, the file may be replaced
    with vizalloc.trace(path, overwrite=True):
        vizalloc.mark("later")
    assert [e.text for e in vizalloc.load(path).events] == ["later"]


# -- the commands ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def a_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("src") / "src.vztrace"
    run("none", steps=1, seed=0, around_loop=lambda: api.trace(path))
    return path


def test_run_output_through_a_dangling_link(dangling: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    target, d = dangling
    monkeypatch.chdir(d)
    (d / "s.py").write_text("import vizalloc\nvizalloc.mark('hi')\n")
    link = _link(d / "t.vztrace", target)
    assert main(["run", "-o", str(link), "s.py"]) == 2
    assert "symbolic link" in capsys.readouterr().err and not target.exists()
    assert main(["run", "-o", str(link), "-f", "s.py"]) == 0
    assert not target.exists() and not link.is_symlink() and vizalloc.load(link).events


def test_export_through_a_dangling_link(a_trace: Path, dangling: tuple[Path, Path],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    target, d = dangling
    link = _link(d / "out.json", target)
    assert main(["export", str(a_trace), "--format", "json", "-o", str(link)]) == 2
    assert "symbolic link" in capsys.readouterr().err and not target.exists()
    # the default name, next to the trace
    default = a_trace.with_name("src.report.json")
    _link(default, target)
    assert main(["export", str(a_trace), "--format", "json"]) == 2
    assert not target.exists()
    assert main(["export", str(a_trace), "--format", "json", "-f"]) == 0
    assert not target.exists() and not default.is_symlink() and default.read_text().startswith("{")
    assert main(["export", str(a_trace), "--format", "json", "-o", str(link), "-f"]) == 0
    assert not target.exists() and not link.is_symlink()


def test_demo_out_dir_with_a_dangling_link(dangling: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    target, d = dangling
    _link(d / "demo-none.vztrace", target)
    assert main(["demo", "--steps", "1", "--out-dir", str(d), "--json"]) == 2
    assert "already exist" in capsys.readouterr().err and not target.exists()
    assert main(["demo", "--steps", "1", "--out-dir", str(d), "--json", "-f"]) == 0
    assert not target.exists() and not (d / "demo-none.vztrace").is_symlink()


def test_tui_export_writer_never_follows_a_link(dangling: tuple[Path, Path]) -> None:
    target, d = dangling
    _link(d / "run.layout.svg", target)
    write = export_writer(d, "run")
    assert write(".layout.svg", "<svg/>") == str(d / "run-1.layout.svg")
    assert write(".layout.svg", "<svg/>") == str(d / "run-2.layout.svg")
    assert not target.exists()
