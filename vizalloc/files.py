"""Creating output files safely: the one way vizalloc creates a file (and reads one that
another process could have planted: :func:`read_regular`).

A file is created exclusively (``O_CREAT | O_EXCL``): anything already at the path, a
symbolic link too (even one whose target does not exist), makes it fail, so vizalloc
never writes through a link someone left in a shared directory, and never replaces a
file between checking and opening it. Only when asked to overwrite does it replace what
is there: a regular file is truncated (opened with ``O_NOFOLLOW``), a symbolic link is
removed and a new file made in its place; the link's target is never touched.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with create_new(os.path.join(d, "a.txt"), text=True) as f:
    ...     _ = f.write("hello")
    >>> create_new(os.path.join(d, "a.txt"))
    Traceback (most recent call last):
    ...
    vizalloc.errors.UsageError: ... already exists; pass overwrite=True to replace it
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO, Literal, TextIO, overload

from vizalloc.errors import UsageError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

#: How the library asks to replace a file (the CLI says ``-f``).
LIBRARY_FLAG = "overwrite=True"


def check_new(path: str | os.PathLike[str], *, overwrite: bool = False, flag: str = LIBRARY_FLAG,
              other: str = "") -> None:
    """Raise ``UsageError`` now if ``create_new(path, overwrite=overwrite)`` would refuse
    because of what is at ``path`` (to refuse before doing long work; ``create_new``
    checks again when it creates the file). ``flag`` and ``other`` as ``create_new``'s."""
    problem = _problem(os.fspath(path), overwrite, flag, other)
    if problem:
        raise UsageError(problem)


def _problem(path: str, overwrite: bool, flag: str, other: str) -> str:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    if stat.S_ISDIR(st.st_mode):
        return f"{path} is a directory; choose a file name"
    if stat.S_ISLNK(st.st_mode):
        if overwrite:
            return ""
        target = os.readlink(path)
        dangling = "" if os.path.exists(path) else ", which does not exist"
        return (f"{path} is a symbolic link (to {target}{dangling}); vizalloc never writes through a link: "
                f"remove it{', ' + other if other else ''}, or pass {flag} to replace the link itself (its target "
                "is left alone)")
    if not overwrite:
        return f"{path} already exists; pass {flag} to replace it{', or ' + other if other else ''}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file; choose another name"
    return ""


@overload
def create_new(path: str | os.PathLike[str], *, overwrite: bool = ..., text: Literal[False] = ...,
               buffering: int = ..., flag: str = ..., other: str = ...) -> BinaryIO: ...


@overload
def create_new(path: str | os.PathLike[str], *, overwrite: bool = ..., text: Literal[True],
               buffering: int = ..., flag: str = ..., other: str = ...) -> TextIO: ...


def create_new(path: str | os.PathLike[str], *, overwrite: bool = False, text: bool = False,
               buffering: int = -1, flag: str = LIBRARY_FLAG, other: str = "") -> BinaryIO | TextIO:
    """Open a new file at ``path`` for writing (binary, or UTF-8 text with ``\\n`` line ends).

    Args:
        overwrite: replace what is at ``path`` (a regular file or a symbolic link) instead
            of refusing.
        buffering: as ``open``'s (0: unbuffered, binary only).
        flag: how the caller asks to overwrite, for messages (``-f`` in the CLI).
        other: another way out, for messages (``use -o to choose another name``).

    Raises:
        UsageError: something is at ``path`` (without ``overwrite``), it is a directory or
            a special file, or the file cannot be created (the OS's reason).
    """
    name = os.fspath(path)
    base = os.O_WRONLY | _BINARY | _CLOEXEC
    for _ in range(3):  # a link or file swapped in between the steps makes it start again
        try:
            fd = os.open(name, base | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
            break
        except FileExistsError:
            pass
        except OSError as exc:
            raise UsageError(f"cannot write {name}: {exc.strerror or exc}") from None
        problem = _problem(name, overwrite, flag, other)
        if problem:
            raise UsageError(problem)
        try:
            if os.path.islink(name):
                os.unlink(name)  # replace the link itself; never open its target
                continue
            fd = os.open(name, base | os.O_TRUNC | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise UsageError(f"{name} is not a regular file; choose another name")
            break
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # became a link after the check
                continue
            raise UsageError(f"cannot write {name}: {exc.strerror or exc}") from None
    else:
        raise UsageError(f"cannot write {name}: it keeps changing while vizalloc creates it")
    try:
        if text:
            return os.fdopen(fd, "w", encoding="utf-8", newline="\n", buffering=buffering)
        return os.fdopen(fd, "wb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(mode: int) -> str:
    """What a file that is not a regular one is (``st_mode``), for messages; '' for a regular file."""
    if stat.S_ISREG(mode):
        return ""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike[str], *, what: str = "the file", follow: bool = True) -> int:
    """A descriptor of ``path`` opened for reading, only if it is a regular file.

    A FIFO would block the open (and every read) forever, a device such as ``/dev/zero``
    never ends, a directory cannot be read: each is refused with a ``UsageError`` naming it
    before it is opened, and checked again on the descriptor (it may be swapped in between).
    ``follow=False`` refuses a symbolic link too (a file in a folder that others can write).
    """
    name = os.fspath(path)
    try:
        st = os.stat(name) if follow else os.lstat(name)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {name}: {exc.strerror or exc}") from None
    if not follow and stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{what} {name} is a symbolic link (to {os.readlink(name)}), not a file vizalloc wrote: "
                         "it is not read")
    kind = special_kind(st.st_mode)
    if kind:
        raise UsageError(f"{what} {name} is {kind}, not a regular file: it is not read")
    flags = os.O_RDONLY | _BINARY | _CLOEXEC | getattr(os, "O_NONBLOCK", 0) | (0 if follow else _NOFOLLOW)
    try:
        fd = os.open(name, flags)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {name}: {exc.strerror or exc}") from None
    kind = special_kind(os.fstat(fd).st_mode)
    if kind:
        os.close(fd)
        raise UsageError(f"{what} {name} is {kind}, not a regular file: it is not read")
    return fd


def read_regular(path: str | os.PathLike[str], limit: int | None = None, *, what: str = "the file",
                 follow: bool = True) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`): as many as it had
    when opened (a file that grows meanwhile is not followed), at most ``limit``."""
    fd = open_regular(path, what=what, follow=follow)
    try:
        size = os.fstat(fd).st_size
        want = size if limit is None else min(size, limit)
        parts = []
        while want > 0:
            chunk = os.read(fd, min(want, 1 << 24))
            if not chunk:
                break
            parts.append(chunk)
            want -= len(chunk)
        return b"".join(parts)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {os.fspath(path)}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
