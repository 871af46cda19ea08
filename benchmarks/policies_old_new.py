"""Old and new event engines in one process, interleaved, best of 3.

Usage: ``python -m benchmarks.policies_old_new OLD_REV [REPLICATIONS JOBS [POLICY ...]]``,
with ``OLD_REV`` a git revision of this repository: its ``jaxqueue/mjqm`` is extracted to a
temporary folder and loaded as the package ``jaxqueue.mjqm_old`` (the rest of ``jaxqueue`` is
shared). Set ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` for two host devices. Runs
the engine's ``_runs`` (``engines/events/_simulate.py``; ``_events.py`` before it) as
``bench_policies`` does (five-class-exp, lam 0.900428, float64, default
1024 replications x 2000 jobs, all policies) and prints, per policy, jobs per second of wall
time and per CPU-second of each engine (the latter is less sensitive to other processes on a
shared machine) and whether the per-replication sums are bit for bit the same.

``python -m benchmarks.policies_old_new OLD_REV --hlo [POLICY ...]`` instead compiles the old
and the new kernel of each policy (16 replications of five-class-exp) and says whether their
optimised HLO text, source locations left out, is the same: the same compiled work, whatever
the load of the machine.
"""

from __future__ import annotations

import difflib
import importlib
import pathlib
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._timing import git_extract, load_as
from benchmarks.bench_policies import POLICIES

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _old_package(rev: str):
    """``jaxqueue/mjqm`` of git revision ``rev`` as the package ``jaxqueue.mjqm_old``."""
    tmp = git_extract(ROOT, rev, "jaxqueue/mjqm")
    load_as("jaxqueue.mjqm_old", tmp / "jaxqueue" / "mjqm")
    return _engine("jaxqueue.mjqm_old"), importlib.import_module("jaxqueue.mjqm_old.policies")


def _engine(package: str):
    """The module holding ``_runs`` in the ``mjqm`` package ``package`` (either layout)."""
    try:
        return importlib.import_module(f"{package}.engines.events._simulate")
    except ModuleNotFoundError:
        return importlib.import_module(f"{package}._events")


def _compiled(package: str, policy, wl) -> str:
    """The optimised HLO text of the kernel of ``package`` for ``policy``, source locations
    and stack frames stripped."""
    try:
        loop = importlib.import_module(f"{package}.engines.events._loop")
        bins = importlib.import_module(f"{package}.engines.events._accumulate")._wait_bins(wl)
    except ModuleNotFoundError:
        loop = importlib.import_module(f"{package}._events")
        bins = loop._wait_bins(wl)
    f64, i32 = jnp.float64, jnp.int32
    args = (jnp.asarray(0.9, f64), jax.random.key(0), jnp.arange(16, dtype=i32), i32(60))
    args = (*args, i32(300), i32(2000), 64, False, jnp.dtype(f64))
    if hasattr(loop, "Run"):  # the kernel takes its run's arguments as one ``Run``
        args = (loop.Run(*args),)
    policy = policy.bind(wl) if hasattr(policy, "bind") else policy  # as the engine's callers do
    compiled = loop._kernel.lower(policy, wl, *args, None, bins=bins[:3]).compile().compiled
    text = compiled.as_text()
    text = text[text.index("\n%") :]  # the computations, after the file and frame tables
    text = re.sub(r", metadata=\{[^}]*\}", "", text)
    return re.sub(r",? ?stack_frame_id=\d+", "", text)


def compare_hlo(rev: str, policies) -> None:
    """Print per policy whether the old and new kernels compile to the same HLO."""
    import jaxqueue.mjqm.policies as new_pol
    from jaxqueue import scenarios

    _, old_pol = _old_package(rev)
    wl = scenarios.get("five-class-exp")
    for policy in policies:
        try:
            old_policy = old_pol.parse_policy(policy)
        except ValueError:
            print(f"{policy:22s} new only (the old revision does not know it)", flush=True)
            continue
        old = _compiled("jaxqueue.mjqm_old", old_policy, wl)
        new = _compiled("jaxqueue.mjqm", new_pol.parse_policy(policy), wl)
        print(f"{policy:22s} HLO {'identical' if old == new else 'DIFFERS'}", flush=True)
        if old != new:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
            print("\n".join(list(diff)[:20]))


def main(argv: list[str]) -> None:
    jax.config.update("jax_enable_x64", True)
    if argv[1:2] == ["--hlo"]:
        return compare_hlo(argv[0], argv[2:] or POLICIES)
    import jaxqueue.mjqm.policies as new_pol
    from jaxqueue import scenarios

    new = _engine("jaxqueue.mjqm")
    old, old_pol = _old_package(argv[0])
    R, N = (int(v) for v in argv[1:3]) if len(argv) >= 3 else (1024, 2000)
    policies = argv[3:] or POLICIES
    wl = scenarios.get("five-class-exp")
    sizes = (R, N // 5, N)
    print(f"{len(jax.devices())} device(s), {R} x {N} jobs, float64")
    for policy in policies:
        try:
            old_pol.parse_policy(policy)
        except ValueError:
            print(f"{policy:22s} new only (the old revision does not know it)", flush=True)
            continue
        engines = (("old", old, old_pol), ("new", new, new_pol))
        best: dict[str, list[float]] = {}
        accs = {}
        for rep in range(3):
            for name, mod, pol in engines:
                args = (pol.parse_policy(policy), wl, 0.900428, jax.random.key(0), sizes)
                args = (*args, None, 4096, jnp.dtype(jnp.float64))
                if rep == 0:
                    accs[name] = mod._runs(*args)[0]  # compile
                w0, c0 = time.perf_counter(), time.process_time()
                mod._runs(*args)
                w, c = time.perf_counter() - w0, time.process_time() - c0
                b = best.setdefault(name, [float("inf")] * 2)
                b[0], b[1] = min(b[0], w), min(b[1], c)
        same = all(
            np.array_equal(np.asarray(x), np.asarray(y))
            for x, y in zip(accs["old"], accs["new"], strict=True)
        )
        (ow, oc), (nw, nc) = best["old"], best["new"]
        jobs = R * N / 1e6
        print(
            f"{policy:22s} wall {jobs / ow:6.3f} -> {jobs / nw:6.3f} M/s ({ow / nw:4.2f}x), "
            f"CPU {jobs / oc:6.3f} -> {jobs / nc:6.3f} M/s ({oc / nc:4.2f}x), "
            f"sums {'bit-identical' if same else 'DIFFER'}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
