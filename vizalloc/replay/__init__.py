"""Shadow execution: the one place trace data flows back into the runtime.

    from vizalloc.replay import shadow_compute
    result = shadow_compute(model, compute_id)   # ShadowResult (plain data)
"""

from __future__ import annotations

from vizalloc.replay.shadow import NodeDiff, ShadowResult, shadow_all, shadow_compute

__all__ = ["NodeDiff", "ShadowResult", "shadow_all", "shadow_compute"]
