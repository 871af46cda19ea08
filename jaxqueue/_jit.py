"""Kernels jitted per platform: XLA:CPU options on the CPU only (other backends reject them)."""

from __future__ import annotations

from collections.abc import Callable

import jax


def jit_per_platform(fn: Callable, cpu_options: dict, **kw) -> Callable[[str], Callable]:
    """``fn`` jitted twice, with the XLA:CPU ``cpu_options`` for CPU devices and without for
    the other backends (``kw`` goes to both ``jax.jit`` calls). Returns
    ``for_platform(platform) -> jitted fn``, ``platform`` as in ``device.platform``."""
    on_cpu = jax.jit(fn, compiler_options=cpu_options, **kw)
    other = jax.jit(fn, **kw)
    return lambda platform: on_cpu if platform == "cpu" else other
