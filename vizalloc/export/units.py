"""Small number formats shared by the exporters.

    >>> fmt_bytes(48), fmt_bytes(1536), fmt_bytes(3 * 1024 * 1024)
    ('48 B', '1.5 KiB', '3.0 MiB')
    >>> fmt_range(0, 256)
    '[0, 256)'
    >>> step_label(-1, 4), step_label(2, 4), step_label(4, 4)
    ('in', '2', 'out')
    >>> fmt_shape(trimmed_shape((16, 8, 1, 1)))
    '[16, 8]'
    >>> buffer_title(2, "CPU", "CPU", "compute", 4768)
    'buffer #2 CPU compute 4.7 KiB'
    >>> mib(35934240), mib(35934240, 4)
    ('34.27 MiB', '34.2696 MiB')
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


def mib(nbytes: int, decimals: int = 2) -> str:
    """Bytes as llama.cpp logs its buffers: MiB with two decimals (four in the line it
    writes when a context is freed), so a size can be compared with its log as text."""
    return f"{nbytes / 1048576:.{decimals}f} MiB"


def fmt_range(offset: int, end: int) -> str:
    """A half-open byte range."""
    return f"[{offset}, {end})"


def step_label(step: int, n_steps: int) -> str:
    """A step of a graph of ``n_steps`` nodes as the memory pictures name it: ``in`` before the
    first node (leafs, inputs, weights), ``out`` after the last (kept to the end), else its index."""
    return "in" if step < 0 else ("out" if step >= n_steps else str(step))


def fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def trimmed_shape(ne: Sequence[int]) -> tuple[int, ...]:
    """A tensor's ``ne`` without trailing 1s (at least one dimension kept)."""
    dims = list(ne)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return tuple(dims)


def buffer_title(buffer_id: int, backend: str | None, buft: str | None, usage: str | None, nbytes: int | None) -> str:
    """How every view names a buffer: ``buffer #2 CPU compute 4.7 KiB``; the buffer type is
    named only when it is not the backend's own (``buffer #0 CPU (CPU_Mapped) weights``),
    the usage only when it says something (ggml's default ``any`` does not: a buffer of
    weights allocated by ``ggml_backend_alloc_ctx_tensors`` reads ``buffer #0 CPU 2.7 KiB``,
    not ``CPU any``). Unknown parts are left out. The caller makes the result inert for its
    target."""
    parts = [f"buffer #{buffer_id}"]
    if backend:
        parts.append(backend)
    if buft and buft != backend:
        parts.append(f"({buft})")
    if usage and usage != "any":
        parts.append(usage)
    if nbytes is not None:
        parts.append(fmt_bytes(nbytes))
    return " ".join(parts)
