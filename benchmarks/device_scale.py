"""Kernel throughput against the batch size on the default device (issue 19, item 5).

The ``bench_*`` modules run unchanged on any device but keep the batch sizes of this 2-core CPU
(1024 replications fill it; a GPU needs many more). This script times the same public entry
points as they would be called by a user, at growing batch sizes, and prints one markdown row
per size as soon as it is measured (a run cut short keeps its rows). Each row: the first call
(compile and run) and the best of two warm calls with a new key, so the run time excludes
compilation. A size is skipped once the previous one took longer than ``--budget`` seconds.

Usage: ``python -m benchmarks.device_scale [--budget 20] [--only forward sched backward policy]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxqueue import scenarios

FORWARD_LAM = 1.5  # as bench_mjqm_forward
FORWARD_JOBS = 20_000


def _si(x: float) -> str:
    """``x`` with a k / M / G suffix."""
    for scale, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if x >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _timed(call) -> tuple[float, float]:
    """``(compile s, run s)``: the first call minus the best of two warm calls, and that best."""
    t0 = time.perf_counter()
    call(0)
    first = time.perf_counter() - t0
    run = float("inf")
    for k in (1, 2):
        t0 = time.perf_counter()
        call(k)
        run = min(run, time.perf_counter() - t0)
    return max(first - run, 0.0), run


def _forward(r: int) -> tuple[float, float, float, str]:
    from jaxqueue.mjqm import simulate

    wl = scenarios.get("five-class-exp")

    def call(k):
        res = simulate(
            wl,
            FORWARD_LAM,
            key=jax.random.key(k),
            n_jobs=FORWARD_JOBS,
            n_replications=r,
            dtype=jnp.float32,
        )
        call.res = res

    c, t = _timed(call)
    res = call.res
    return c, t, r * FORWARD_JOBS / t, f"mean wait {res.wait_mean_all:.3f}, {res.status}"


def _sched(case: str, jumps: int):
    def row(r: int) -> tuple[float, float, float, str]:
        from jaxqueue.dist import get_law
        from jaxqueue.sched import ClassAssignment, RandomAssignment, simulate

        if case == "m-model":
            pool, lam, q = ClassAssignment([[0, 2], [1, 2]], np.ones(3)), np.full(2, 1.35), 128
        else:
            pool, lam, q = RandomAssignment(100, 2), np.array([90.0]), 256
        kw = dict(m=1.0, replications=r, jumps=jumps, warmup=jumps // 4, queue_size=q)

        def call(k):
            call.res = simulate(pool, lam, get_law("exp"), key=jax.random.key(k), **kw)

        c, t = _timed(call)
        res = call.res
        return c, t, r * (jumps + jumps // 4) / t, f"delay {np.mean(res.delay):.3f}, {res.status}"

    return row


def _backward(n: int) -> tuple[float, float, float, str]:
    from jaxqueue.mjqm import sample_backward

    wl = scenarios.get("five-class-exp")
    lam = 0.75 * 1.800855359  # 75% of the exact lambda_c (bench_mjqm_exact)

    def call(k):
        call.res = sample_backward(wl, lam, n, key=jax.random.key(k), dtype=jnp.float32)

    c, t = _timed(call)
    return c, t, n / t, f"{call.res.status}"


def _policy(name: str, jobs: int):
    def row(r: int) -> tuple[float, float, float, str]:
        from jaxqueue.mjqm import simulate_policy

        wl = scenarios.get("five-class-exp")

        def call(k):
            call.res = simulate_policy(
                wl, 0.900428, name, key=jax.random.key(k), n_jobs=jobs, n_replications=r
            )

        c, t = _timed(call)
        res = call.res
        return c, t, r * jobs / t, f"response {float(res.response_mean.mean):.3f}, {res.status}"

    return row


KERNELS = {
    "forward": (
        "MJQM forward scan, five-class-exp lam 1.5, 20k jobs",
        "replications",
        "sample-jobs/s",
        _forward,
        (1024, 8192, 32768, 131072),
    ),
    "sched-m": (
        "sched M model, rho 0.9, 20k jumps",
        "replications",
        "jumps/s",
        _sched("m-model", 20_000),
        (256, 4096, 32768),
    ),
    "sched-random": (
        "sched random S=100 d=2, rho 0.9, 4k jumps",
        "replications",
        "jumps/s",
        _sched("random", 4_000),
        (256, 4096, 16384),
    ),
    "backward": (
        "backward sampling, five-class-exp 75% lambda_c",
        "samples",
        "samples/s",
        _backward,
        (10_000, 100_000, 400_000),
    ),
    "policy-fcfs": (
        "event engine fcfs, five-class-exp lam 0.9, 2000 jobs",
        "replications",
        "jobs/s",
        _policy("fcfs", 2000),
        (1024, 16384),
    ),
    "policy-sf": (
        "event engine server-filling, same",
        "replications",
        "jobs/s",
        _policy("server-filling", 2000),
        (1024, 16384),
    ),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--budget", type=float, default=20.0, help="skip larger sizes after a row this slow (s)"
    )
    p.add_argument("--only", nargs="*", default=list(KERNELS))
    args = p.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    dev = jax.devices()[0]
    print(
        f"Device `{dev.platform}` ({dev.device_kind}) x{jax.device_count()}, "
        f"jax {jax.__version__}.\n"
    )
    print("| kernel | batch | compile s | run s | rate | result |")
    print("|---|---|---|---|---|---|", flush=True)
    for name in args.only:
        title, axis, unit, fn, sizes = KERNELS[name]
        for size in sizes:
            try:
                c, t, rate, note = fn(size)
            except Exception as e:  # a size that does not fit is a row, not the end of the run
                print(
                    f"| {title} | {size} {axis} | - | - | - | failed: {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:120]} |",
                    flush=True,
                )
                break
            print(
                f"| {title} | {size} {axis} | {c:.1f} | {t:.3f} | {_si(rate)} {unit} | {note} |",
                flush=True,
            )
            if c + 3 * t > args.budget:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
