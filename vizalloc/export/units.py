"""Small number formats shared by the exporters.

    >>> fmt_bytes(48), fmt_bytes(1536), fmt_bytes(3 * 1024 * 1024)
    ('48 B', '1.5 KiB', '3.0 MiB')
    >>> fmt_range(0, 256)
    '[0, 256)'
    >>> fmt_shape(trimmed_shape((16, 8, 1, 1)))
    '[16, 8]'
"""

from __future__ import annotations

from collections.abc import Sequence


def fmt_bytes(nbytes: int) -> str:
    """Bytes in binary units, one decimal above 1 KiB."""
    if nbytes < 1024:
        return f"{nbytes} B"
    value = float(nbytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024.0
        if value < 1024.0 or unit == "TiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def fmt_range(offset: int, end: int) -> str:
    """A half-open byte range."""
    return f"[{offset}, {end})"


def fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def trimmed_shape(ne: Sequence[int]) -> tuple[int, ...]:
    """A tensor's ``ne`` without trailing 1s (at least one dimension kept)."""
    dims = list(ne)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return tuple(dims)
