"""Dependencies point one way: runtime → trace → analysis → export / tui → cli.

``replay`` is the one way back from trace data into the runtime; ``capture`` turns a real
ggml process's record into trace events through the runtime's allocators; ``casefile``
drives the runtime from case files. Modules at the package root (``errors.py``,
``text.py``) import nothing of vizalloc, so every layer may use them. The test walks
every module's imports (top level and inside functions) with ``ast``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "vizalloc"

# subpackage -> vizalloc subpackages it may import (besides itself and the SHARED modules)
ALLOWED: dict[str, set[str]] = {
    "runtime": {"trace"},
    "trace": set(),
    "analysis": {"trace"},
    "replay": {"runtime", "trace", "analysis"},
    # case files drive the runtime from outside (a test harness, `vizalloc plan`), like
    # replay; their overlap report uses the analysis' both_live rule and rectangle sweep
    "casefile": {"runtime", "trace", "analysis"},
    # a real ggml process: its record is replayed through the runtime's allocators into
    # ordinary trace events; it never reaches into the analysis
    "capture": {"runtime", "trace"},
    # a model explained as a library: it runs a capture and explains its trace (and the
    # simulated GPU split of it), so it sits above both and below the CLI
    "predict": {"runtime", "trace", "analysis", "replay", "capture", "export"},
    "export": {"trace", "analysis"},
    "tui": {"trace", "analysis", "export"},
    "scenarios": {"runtime", "trace"},
    "cli": {"runtime", "trace", "analysis", "replay", "casefile", "capture", "export", "tui", "scenarios", "predict"},
}

# top-level modules every layer may import
SHARED = {"errors", "gcpause", "__init__"}

# the runtime may see only the trace's seam, not its files or API
RUNTIME_TRACE_MODULES = {"vizalloc.trace.events", "vizalloc.trace.recorder", "vizalloc.trace"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _modules() -> list[tuple[str, Path]]:
    return [(p.relative_to(PACKAGE).parts[0], p) for p in sorted(PACKAGE.rglob("*.py")) if len(p.relative_to(PACKAGE).parts) > 1]


@pytest.mark.parametrize(("layer", "path"), _modules(), ids=lambda v: str(v.relative_to(PACKAGE)) if isinstance(v, Path) else v)
def test_imports_point_one_way(layer: str, path: Path) -> None:
    allowed = ALLOWED.get(layer)
    if allowed is None:
        pytest.fail(f"{path} is in an unknown subpackage {layer!r}: add it to ALLOWED")
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] != "vizalloc" or len(parts) < 2:
            continue
        target = parts[1]
        if target in (layer, *SHARED) or target not in ALLOWED:
            continue
        assert target in allowed, f"{path.relative_to(PACKAGE)} imports {name}: {layer} may not depend on {target}"
        if layer == "runtime" and target == "trace":
            module = ".".join(parts[:3])
            assert module in RUNTIME_TRACE_MODULES, f"{path.relative_to(PACKAGE)} imports {name}: the runtime sees only trace.events/recorder"


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_root_modules_import_no_subpackage(path: Path) -> None:
    if path.name in ("__init__.py", "__main__.py"):
        return  # the package's lazy public names and the console entry point
    for name in _imports(path):
        parts = name.split(".")
        assert parts[0] != "vizalloc" or len(parts) < 2 or parts[1] in ("errors", "text"), (
            f"{path.name} imports {name}: root modules are below every layer")


def test_cupy_only_in_its_backend() -> None:
    for layer, path in _modules():
        if path.name == "cuda.py" and path.parent.name == "backends":
            continue
        for name in _imports(path):
            assert name.split(".")[0] != "cupy", f"{path.relative_to(PACKAGE)} imports cupy; only runtime/backends/cuda.py may"


def test_analysis_never_imports_textual() -> None:
    for layer, path in _modules():
        if layer in ("analysis", "trace", "runtime"):
            for name in _imports(path):
                assert name.split(".")[0] not in ("textual", "graphviz"), f"{path.relative_to(PACKAGE)} imports {name}"
