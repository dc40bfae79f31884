"""THREADS threads (default 8) compute graphs without end; after DELAY seconds (default
1.0) the main thread sends the process SIGTERM, which lands while they record. Prints the
signals that have handlers first ("caught signals" and /proc's SigCgt mask)."""

import os
import signal
import sys
import threading
import time

import ggml
from graphs import compute, cpu_backend

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 8
delay = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0


def work():
    backend = cpu_backend()
    while True:
        compute(backend)


# the signals that have a handler in this process (the capture must add none that writes)
caught = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("SigCgt:"))
print("caught signals", caught, flush=True)
for _ in range(threads):
    threading.Thread(target=work, daemon=True).start()
time.sleep(delay)
print("sending SIGTERM", flush=True)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(30)
