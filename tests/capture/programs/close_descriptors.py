"""Computes a graph, prints the capture's descriptors (number and close-on-exec flag),
closes every descriptor above stderr (as a daemon does), opens a file of its own (PATH,
given as the first argument) and writes a line to it, computes again."""

import fcntl
import os
import sys

import ggml
from graphs import compute, cpu_backend

backend = cpu_backend()
print("before", compute(backend), flush=True)
for name in os.listdir("/proc/self/fd"):  # where the capture keeps its file, and whether an exec keeps it
    try:
        target = os.readlink(f"/proc/self/fd/{name}")
    except OSError:
        continue
    if target.endswith(".vzcap"):
        print("capture descriptor", name, "close-on-exec", fcntl.fcntl(int(name), fcntl.F_GETFD) & fcntl.FD_CLOEXEC,
              flush=True)
os.closerange(3, 65536)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
for _ in range(3):
    print("after", compute(backend), flush=True)
os.write(fd, b"the program's own line\n")
os.close(fd)
