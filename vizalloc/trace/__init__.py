"""Tracing: event records, the recorder seam, trace files.

The runtime imports only ``events`` and ``recorder`` from here; ``api`` holds the
user-facing ``trace()`` / ``load()``.
"""
