"""Kernels jitted per platform: XLA:CPU options on the CPU only (other backends reject them);
the wording of the run-time checks (``eqx.error_if``) of traced inputs."""

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


def refused(message: str) -> str:
    """The message of a run-time check (``eqx.error_if``): under a plain ``jax.jit`` it ends
    XLA's long error, so its first words say whose refusal it is and how to see it plainly."""
    return (
        f"jaxqueue refused the input (under jax.jit this line ends XLA's long error; "
        f"eqx.filter_jit shows it without XLA's part): {message}"
    )
