"""Put on PYTHONPATH by ``vizalloc run -- python ...`` so Python programs that call ggml
through ctypes (ggml-python) are traced too.

ctypes looks a function up in the library it loaded (``dlsym`` on that handle), which
skips the capture library preloaded into the global scope, so a call made from Python
would reach ggml unseen (calls made inside ggml are seen either way). Here, functions the
capture library defines are taken from the global scope, where the capture's own
definition forwards to the real one. Nothing else changes; a sitecustomize the program
would have loaded is still loaded.
"""

import os
import sys


def _chain_to_the_programs_own_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # type: ignore[import-not-found]  # noqa: F401  (the program's own, if any)
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if "sitecustomize" not in sys.modules and ours is not None:
            sys.modules["sitecustomize"] = ours


def _route_ctypes_through_the_capture() -> None:
    names = frozenset(filter(None, os.environ.get("VIZALLOC_CAPTURE_SYMBOLS", "").split(",")))
    if not names:
        return
    import ctypes

    try:
        global_scope = ctypes.CDLL(None)
    except OSError:
        return
    original = ctypes.CDLL.__getitem__

    def __getitem__(self, name_or_ordinal):
        if isinstance(name_or_ordinal, str) and name_or_ordinal in names and self is not global_scope:
            try:
                func = self._FuncPtr((name_or_ordinal, global_scope))
            except AttributeError:
                return original(self, name_or_ordinal)
            func.__name__ = name_or_ordinal
            return func
        return original(self, name_or_ordinal)

    ctypes.CDLL.__getitem__ = __getitem__  # type: ignore[method-assign]


_route_ctypes_through_the_capture()
_chain_to_the_programs_own_sitecustomize()
