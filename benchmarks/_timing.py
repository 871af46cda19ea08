"""Timing helpers shared by the benchmarks: compile time apart from run time."""

from __future__ import annotations

import time
from collections.abc import Callable

import jax


def time_jit(fn: Callable, *args, repeats: int = 5) -> tuple[float, float]:
    """Return ``(compile_s, best_run_s)`` of ``jax.jit(fn)(*args)``."""
    jitted = jax.jit(fn)
    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        best = min(best, time.perf_counter() - t0)
    return compile_s, best


def time_call(fn: Callable, *args, repeats: int = 3) -> float:
    """Best wall time of ``fn(*args)`` (results blocked on)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best
