"""Old and new forward kernels in one process, interleaved, best of 3 (issue 19).

Usage: ``python -m benchmarks.forward_old_new OLD_CHECKOUT [REPLICATIONS JOBS]``, with
``OLD_CHECKOUT`` a checkout of the code to compare with (``git worktree add /tmp/old REV``);
set ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` for two host devices. Prints the
rate of each in sample-jobs per second of wall time and per CPU-second (the latter is less
sensitive to other processes on a shared machine). Five-class scenario, lam = 1.5, float32.
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
import jax.numpy as jnp

from benchmarks._timing import load_as


def _old_module(checkout: str):
    path = pathlib.Path(checkout) / "jaxqueue" / "mjqm"
    return load_as("jaxqueue.mjqm_old", path)


def main(argv: list[str]) -> None:
    jax.config.update("jax_enable_x64", True)
    import jaxqueue.mjqm as new
    from jaxqueue import scenarios

    old = _old_module(argv[0])
    R, N = (int(v) for v in argv[1:3]) if len(argv) >= 3 else (1024, 50_000)
    wl = scenarios.get("five-class-exp")
    kw = dict(key=jax.random.key(0), n_jobs=N, n_replications=R, dtype=jnp.float32)
    best: dict[str, list[float]] = {}
    for rep in range(3):
        for name, mod in (("old", old), ("new", new)):
            if rep == 0:
                mod.simulate(wl, 1.5, **kw)  # compile
            w0, c0 = time.perf_counter(), time.process_time()
            mod.simulate(wl, 1.5, **kw)
            w, c = time.perf_counter() - w0, time.process_time() - c0
            b = best.setdefault(name, [float("inf")] * 2)
            b[0], b[1] = min(b[0], w), min(b[1], c)
    for name, (w, c) in best.items():
        print(
            f"{name}: {len(jax.devices())} device(s), {R} x {N}: wall {R * N / w / 1e6:.1f} M/s, "
            f"{R * N / c / 1e6:.1f} M per CPU-second"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
