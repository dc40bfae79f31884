"""Computes a graph, then replaces itself (exec, same pid) with a second ggml program
(``exec_chain.py second``), which computes another and exits 7."""

import os
import sys

import ggml
from graphs import compute, cpu_backend

if sys.argv[1:] == ["second"]:
    print("second", compute(cpu_backend(), scale=5.0), flush=True)
    sys.exit(7)
print("first", compute(cpu_backend()), flush=True)
os.execv(sys.executable, [sys.executable, __file__, "second"])
