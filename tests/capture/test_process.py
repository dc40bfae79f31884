"""What real processes do, under `vizalloc run --` (issue 22): fork before and after ggml
use, nested forks, exec, many threads computing at once, a program that closes every
descriptor, hundreds of graph allocators, a signal landing while threads record. Each
program is a small ggml-python program in programs/; each test failed on the capture
before it kept a state per process image, a call stack per thread and its records in a
memory map."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from vizalloc.trace import events as ev
from vizalloc.trace.api import load

from tests.capture.conftest import PROGRAMS, run


def traced(tmp_path: Path, program: str, *args: str) -> tuple[int, str, dict[int, list[Path]]]:
    """Run ``program`` under the capture; its exit code, stderr and the traces by pid."""
    done = run(["run", "-o", "t.vztrace", "--", sys.executable, str(PROGRAMS / program), *args], tmp_path)
    traces: dict[int, list[Path]] = {}
    for pid, path in re.findall(r"^  pid (\d+): (\S+)$", done.stderr, re.M):
        traces.setdefault(int(pid), []).append(tmp_path / path)
    assert "error" not in done.stderr, done.stderr
    return done.returncode, done.stdout + done.stderr, traces


def events(path: Path) -> list[ev.Event]:
    return list(load(path).events)


def of(kind: type[ev.Event], path: Path) -> list:
    return [e for e in events(path) if isinstance(e, kind)]


def assert_clean(path: Path, computes: int) -> None:
    """The trace imported whole: no replay difference, ``computes`` graph computes."""
    assert not of(ev.ReplayMismatch, path), path
    assert len(of(ev.ComputeBegin, path)) == computes, path


def test_fork_after_a_buffer_both_processes_traced(tmp_path: Path) -> None:
    # the parent allocated weights and computed before the fork; the child computes over
    # the same weights: its capture describes the buffer, its type, the library again
    code, out, traces = traced(tmp_path, "forks.py", "after")
    assert code == 0, out
    assert "child [3.0, 6.0, 9.0, 12.0]" in out
    (parent, child) = sorted(traces, key=lambda pid: traces[pid][0].name != "t.vztrace")
    assert_clean(traces[parent][0], computes=2)
    assert_clean(traces[child][0], computes=1)
    names = {e.name for e in of(ev.TensorCreated, traces[child][0])}
    assert {"w", "x", "out"} <= names


def test_fork_before_ggml_use_and_a_worker_ending_with_os_exit(tmp_path: Path) -> None:
    # a forked worker ends with os._exit (as multiprocessing's do): no destructor runs, and
    # what it recorded after its last compute (reading the result) is still in its trace
    code, out, traces = traced(tmp_path, "forks.py", "before")
    assert code == 0, out
    assert len(traces) == 2
    for paths in traces.values():
        assert_clean(paths[0], computes=1)
        gets = of(ev.TensorGet, paths[0])
        names = {e.tensor_id: e.name for e in of(ev.TensorCreated, paths[0])}
        assert [names[g.tensor_id] for g in gets] == ["out"], paths[0]


def test_nested_forks_each_process_traced(tmp_path: Path) -> None:
    code, out, traces = traced(tmp_path, "forks.py", "nested")
    assert code == 0, out
    assert "grandchild [0.0, 4.0, 8.0, 12.0]" in out
    assert len(traces) == 3
    for paths in traces.values():
        assert_clean(paths[0], computes=1)


def test_a_graph_allocator_made_before_the_fork_used_on_both_sides(tmp_path: Path) -> None:
    code, out, traces = traced(tmp_path, "forks.py", "shared")
    assert code == 0, out
    counts = sorted(len(of(ev.ComputeBegin, paths[0])) for paths in traces.values())
    assert counts == [1, 2]
    for paths in traces.values():
        assert not of(ev.ReplayMismatch, paths[0])


def test_exec_each_image_traced_and_labelled(tmp_path: Path) -> None:
    code, out, traces = traced(tmp_path, "exec_chain.py")
    assert code == 7, out  # the exec'd program's own exit code
    ((pid, paths),) = traces.items()  # one pid, two images
    assert [p.name for p in paths] == ["t.vztrace", f"t.{pid}.1.vztrace"]
    programs = [of(ev.ProcessCaptured, p)[0].program for p in paths]
    assert programs[0].endswith("exec_chain.py")
    assert programs[1].endswith(f"exec_chain.py second (image 1 of pid {pid}, after exec)")
    for p in paths:
        assert_clean(p, computes=1)


def test_eight_threads_computing_at_once(tmp_path: Path) -> None:
    code, out, traces = traced(tmp_path, "threads.py", "8", "20")
    assert code == 0, out
    ((path,),) = traces.values()
    assert_clean(path, computes=160)
    check = run(["check", str(path)], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_program_that_closes_every_descriptor_keeps_its_own_file(tmp_path: Path) -> None:
    own = tmp_path / "own.txt"
    code, out, traces = traced(tmp_path, "close_descriptors.py", str(own))
    assert code == 0, out
    # the capture's descriptor is out of the way of the lowest numbers, and no exec inherits it
    ((number, cloexec),) = re.findall(r"^capture descriptor (\d+) close-on-exec (\d)$", out, re.M)
    assert int(number) >= 100 and cloexec == "1"
    # the program's file holds what it wrote and nothing of the capture's
    assert own.read_bytes() == b"the program's own line\n"
    assert "the capture opened its file again" in out
    ((path,),) = traces.values()
    assert_clean(path, computes=4)


def test_more_than_256_graph_allocators(tmp_path: Path) -> None:
    code, out, traces = traced(tmp_path, "many_gallocs.py", "300")
    assert code == 0, out
    ((path,),) = traces.values()
    assert not of(ev.ReplayMismatch, path)  # every allocator's sizes recorded (past 256 they were empty)
    assert "300 allocator calls replayed" in out


def test_a_signal_while_threads_record(tmp_path: Path) -> None:
    # SIGTERM lands while 8 threads record: the capture has no handler (nothing to write
    # twice); every record made before it is in the trace
    code, out, traces = traced(tmp_path, "signal_while_writing.py", "8", "0.3")
    assert code == 143, out
    caught = int(re.search(r"caught signals ([0-9a-f]+)", out)[1], 16)  # type: ignore[index]
    assert not caught & (1 << (15 - 1)), "a SIGTERM handler is installed"
    ((path,),) = traces.values()
    assert not of(ev.ReplayMismatch, path)
    assert of(ev.ComputeBegin, path)
