"""Old and new code in one process: every kernel, same numbers bit for bit, speed side by side.

Usage: ``python -m benchmarks.old_new OLD_REV [KERNEL ...]``. The ``jaxqueue`` package of git
revision ``OLD_REV`` is extracted to a temporary folder and loaded as ``jaxqueue_old`` beside
this checkout's ``jaxqueue``. Each kernel runs on both through the public API of its own
version (``CASES``: one call for each side, so a renamed entry point is compared with its
predecessor), in float64. Per kernel: whether every array of the two results is bit for bit
the same, and the best of 5 interleaved runs of each after a compiling run, in wall
time and in CPU time of the process (the latter less sensitive to other processes). Set
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` for two host devices.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._timing import git_extract, load_as

ROOT = pathlib.Path(__file__).resolve().parents[1]


def old_package(rev: str):
    """``jaxqueue`` of git revision ``rev`` as the package ``jaxqueue_old``."""
    tmp = git_extract(ROOT, rev, "jaxqueue")
    for f in (tmp / "jaxqueue").rglob("*.py"):  # absolute imports point at the old copy
        text = f.read_text()
        new = re.sub(r"\b(from|import) jaxqueue\b", r"\1 jaxqueue_old", text)
        if new != text:
            f.write_text(new)
    return load_as("jaxqueue_old", tmp / "jaxqueue")


def _leaves(x) -> list[np.ndarray]:
    """The arrays of a result: pytree leaves, dataclass fields and dict values, in order."""
    if isinstance(x, dict):
        return [a for k in sorted(x) for a in _leaves(x[k])]
    if isinstance(x, list | tuple):
        return [a for v in x for a in _leaves(v)]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return [a for f in dataclasses.fields(x) for a in _leaves(getattr(x, f.name))]
    if isinstance(x, str):
        return [np.asarray(x)]
    if isinstance(x, int | float | bool | np.ndarray | jax.Array | np.generic):
        return [np.asarray(x)]
    return []


def _same(a, b) -> bool:
    la, lb = _leaves(a), _leaves(b)
    return len(la) == len(lb) and all(
        x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
        for x, y in zip(la, lb, strict=True)
    )


def _pools(jq):
    p = jq.pools
    pool = p.Pool([[0, 2], [1, 2], [0, 1, 2, 3], [3]], mu=[1.0, 1.5, 0.8, 1.2])
    res = p.solve(pool, [0.4, 0.5, 0.6, 0.3])
    grad = jax.grad(lambda mu: p.solve(pool, [0.4, 0.5, 0.6, 0.3], mu=mu).T_mean)(pool.mu)
    return res.psi, res.L, res.T, res.psi_server, grad


def _structured(jq):
    s = jq.pools.structured
    return s.RandomAssignment(100, (6, 12), p=[0.5, 0.5]).solve(0.9).gamma


def _typed(jq):
    p = jq.pools
    pool = p.TypedPool([64, 64, 32, 16], [[0, 1], [1, 2], [2, 3], [0, 3]], [1.0, 1.0, 1.5, 2.0])
    res = p.solve(pool, [30.0, 30.0, 20.0, 20.0])
    return res.psi, res.L, res.T


def _networks(jq):
    n = jq.networks
    net = n.Network(
        [[[0, 1], [1]], [[2, 3]]],
        [1.0, 1.2, 0.8, 1.5],
        [[0.1, 0.0, 0.5], [0.0, 0.2, 0.3], [0.2, 0.1, 0.0]],
        [0.25, 0.2, 0.1],
    )
    res = n.solve(net)
    return res.L, res.lam, res.T


def _sched(jq):
    s = jq.sched
    pool = s.ClassAssignment([[0, 2], [1, 2]], [1.0, 1.0, 1.0])
    res = s.simulate(
        pool,
        [0.9, 0.9],
        jq.dist.get_law("bimodal"),
        m=1.0,
        key=jax.random.key(0),
        replications=64,  # with 8 the call's fixed costs hid the kernel in run-to-run noise
        jumps=20_000,
    )
    return res.delay, res.delay_low, res.delay_high, res.service_rate


def _wl(jq, name="five-class-exp"):
    return jq.scenarios.get(name)


REPEATS = 5  # best of 5 interleaved runs: best of 3 moves with the load of a shared machine
_JITTED: dict = {}  # per package version: one compiled gradient, one stability limit


def _exact(jq):
    wl = _wl(jq)
    res = jq.mjqm.exact(wl, 1.5)
    if jq not in _JITTED:
        _JITTED[jq] = jax.jit(jax.grad(lambda lam: jq.mjqm.exact(wl, lam).wait_mean))
    return res.wait_mean, res.wait_mean_class, _JITTED[jq](1.5)


def _forward(jq):
    kw = dict(n_jobs=20_000, n_replications=1024, dtype=jnp.float64)
    res = jq.mjqm.simulate(_wl(jq), 1.5, key=jax.random.key(0), **kw)
    return res.wait_mean, res.wait_mean_ci, res.idle_servers, res.status


def _backward(jq):
    wl, m = _wl(jq), jq.mjqm
    # the horizon floor reads the limit: the old code computed it inside (kept in a module
    # cache after the first call), the new takes it, computed once here as a user would
    kw = {}
    if hasattr(m, "stability_limit"):
        if ("limit", jq) not in _JITTED:
            _JITTED["limit", jq] = m.stability_limit(wl)
        kw = {"limit": _JITTED["limit", jq]}
    res = m.sample_backward(wl, 1.35, 2000, key=jax.random.key(1), **kw)
    return res.W, res.status


def _pile(jq):
    res = jq.mjqm.pile_growth(_wl(jq, "five-class-erlang3"), key=jax.random.key(2), replications=16)
    return res.lambda_c, res.lambda_c_ci


def _policy(name):
    def run(jq):
        m = jq.mjqm
        simulate = getattr(m, "simulate_policy", None)
        kw = dict(key=jax.random.key(3), n_jobs=2000, n_replications=1024)
        if simulate is None:  # the new front door takes the policy
            res = m.simulate(_wl(jq), 0.900428, m.policies.parse_policy(name), **kw)
        else:
            res = simulate(_wl(jq), 0.900428, name, **kw)
        return res.wait_mean, res.response_mean, str(res.status)

    return run


POLICIES = (
    "fcfs",
    "first-fit",
    "window:4",
    "preemptive-first-fit",
    "msf",
    "server-filling",
    "easy-backfilling",
)

CASES: dict[str, Callable] = {
    "pools": _pools,
    "structured": _structured,
    "typed": _typed,
    "networks": _networks,
    "sched": _sched,
    "exact": _exact,
    "forward": _forward,
    "backward": _backward,
    "pile-growth": _pile,
    **{f"events:{p}": _policy(p) for p in POLICIES},
}


def main(argv: list[str]) -> None:
    jax.config.update("jax_enable_x64", True)
    import jaxqueue

    old = old_package(argv[0])
    for sub in ("pools", "networks", "sched", "mjqm", "dist", "scenarios"):
        __import__(f"jaxqueue_old.{sub}")
        __import__(f"jaxqueue.{sub}")
    __import__("jaxqueue_old.pools.structured")
    __import__("jaxqueue.pools.structured")
    names = argv[1:] or list(CASES)
    print(f"{len(jax.devices())} device(s), float64, old {argv[0]}", flush=True)
    for name in names:
        case = CASES[name]
        out, wall, cpu = {}, {}, {}
        for rep in range(1 + REPEATS):  # the first run compiles
            for side, pkg in (("old", old), ("new", jaxqueue)):
                t0, c0 = time.perf_counter(), time.process_time()
                out[side] = jax.block_until_ready(case(pkg))
                if rep:
                    wall[side] = min(wall.get(side, np.inf), time.perf_counter() - t0)
                    cpu[side] = min(cpu.get(side, np.inf), time.process_time() - c0)
        same = _same(out["old"], out["new"])
        print(
            f"{name:30s} {'bit-identical' if same else 'DIFFER':13s} old {wall['old']:8.4f} s"
            f"  new {wall['new']:8.4f} s  ({wall['old'] / wall['new']:4.2f}x)"
            f"  CPU-s old {cpu['old']:8.4f}  new {cpu['new']:8.4f}"
            f"  ({cpu['old'] / cpu['new']:4.2f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
