"""The memory an exact engine may plan to use, from the machine it runs on.

Every exact engine (balanced fairness on a pool, the exact MJQM, networks) predicts its memory
before it allocates anything and refuses a problem above :func:`memory_budget`, naming the
prediction and the budget.
"""

from __future__ import annotations

import os

import jax

__all__ = ["memory_budget"]


def _machine_bytes() -> tuple[float | None, str]:
    """Bytes of the memory that holds the arrays (the first device's allocator limit on a GPU
    or TPU, else the host's physical memory) and its name, or ``None`` when unknown."""
    dev = jax.devices()[0]
    if dev.platform != "cpu":
        stats = dev.memory_stats() or {}
        if stats.get("bytes_limit"):
            return float(stats["bytes_limit"]), f"{dev.platform} memory"
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")), "memory"
    except (ValueError, OSError, AttributeError):
        return None, "memory"


def memory_budget(cap: float) -> tuple[float, str]:
    """``min(cap, half the machine's memory)`` in bytes, and a few words saying which it is.

    Half leaves room for XLA's temporaries and the rest of the process; ``cap`` keeps one solve
    from taking a large machine whole (an engine's own figure, measured where its time, not
    its memory, becomes the limit).
    """
    total, what = _machine_bytes()
    if total is None or cap <= 0.5 * total:
        return cap, f"{cap / 1e9:.3g} GB"
    return 0.5 * total, f"{0.5 * total / 1e9:.3g} GB, half of this machine's {what}"
