"""Every example in vizalloc's docstrings runs and prints what it says (``doctest``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import vizalloc

MODULES = sorted(m.name for m in pkgutil.walk_packages(vizalloc.__path__, "vizalloc.")
                 if not m.name.endswith("__main__"))  # (importing __main__ runs the command line)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples of {name} failed (run python -m doctest -v on it)"
