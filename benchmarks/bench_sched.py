"""Interruption scheduler: JAX kernel events per second vs the event-driven heapq baseline.

Both simulate Algorithm 1 of ``papers/bf-clusters.md`` on the same model in the same run:
the JAX kernel (``jaxqueue.sched``, 100 replications vmapped, sharded over the host devices)
and the separately written Python/heapq simulator ``tests/references/sched_events.py``. With
exponential sizes one jump of the kernel is one event of the baseline (arrival, departure or
interruption), so events per second compare directly. Target (issue #6): kernel >= 10x the
baseline with 100 replications on a 2-core CPU.

The sharded run is measured in a subprocess started with
``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>`` (the flag must be set before JAX
starts; full runs only); the single-device run in this process.

Old against new (issue 19): ``python -m benchmarks.bench_sched --old-new OLD_CHECKOUT`` runs the
``_kernel.py`` of another checkout (e.g. ``git worktree add -f /tmp/wt_sched <commit>``) and
this one's in one process on the same parameters (256 replications), interleaved, best of 3,
in jumps per second of wall time and per CPU-second (``time.process_time``: the fairer figure
on a shared machine). One device by default; with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` the replications are sharded over the
two host devices (128 each).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
TARGET = 10.0

CASES = {
    # name: (pool kind, args, rho, queue size)
    "m-model-sym": ("class", [[0, 2], [1, 2]], 3, 0.9, 128),
    "random S=100 d=2": ("random", 100, 2, 0.9, 256),
}
REPLICATIONS = 256
"""Replications per run: the class-queue kernel ran at 10-11 M jumps per CPU-second with 128-256
replications and 7.5-9 M with 512-4096 (M model, rho 0.9, 2026-11-25, loaded machine)."""
TARGETS = {"m-model-sym": 33e6, "random S=100 d=2": 4e6}
"""Issue 19: jumps/s per machine, twice the paper author's C simulator (gcc -O2, 16.7 M jumps/s
per machine on the M model) and 4 M on random assignment (C: 1.05 M per machine)."""


def _kernel(case: str, jumps: int, replications: int) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from jaxqueue.dist import get_law
    from jaxqueue.sched import ClassAssignment, RandomAssignment, simulate

    kind, a, b, rho, q = CASES[case]
    if kind == "class":
        pool, lam = ClassAssignment(a, np.ones(b)), np.full(2, rho * b / 2)
    else:
        pool, lam = RandomAssignment(a, b), np.array([rho * a])
    kw = dict(m=1.0, replications=replications, jumps=jumps, warmup=jumps // 4, queue_size=q)
    first = simulate(pool, lam, get_law("exp"), key=jax.random.key(0), **kw)
    best = simulate(pool, lam, get_law("exp"), key=jax.random.key(1), **kw)
    return {
        "devices": len(jax.devices()),
        "compile_s": first.compile_s,
        "jumps_per_s": best.jumps_per_s,
        "queue_size": int(best.queue_size),
        "run_s": replications * (best.jumps + best.warmup) / best.jumps_per_s,
    }


def _kernel_subprocess(case: str, jumps: int, replications: int, devices: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    ).strip()
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    code = (
        "import json, benchmarks.bench_sched as b; "
        f"print(json.dumps(b._kernel({case!r}, {jumps}, {replications})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _baseline(case: str, events: int) -> dict:
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from jaxqueue.dist import get_law
    from tests.references.sched_events import simulate_events

    kind, a, b, rho, _ = CASES[case]
    if kind == "class":
        out = simulate_events(
            a,
            np.ones(b),
            np.full(2, rho * b / 2),
            get_law("exp"),
            m=1.0,
            events=events,
            warmup=events // 10,
            seed=1,
        )
    else:
        out = simulate_events(
            None,
            np.ones(a),
            [rho * a],
            get_law("exp"),
            m=1.0,
            events=events,
            warmup=events // 10,
            seed=1,
            random_d=b,
        )
    return {"events_per_s": out["events_per_s"]}


def old_new(old_root: str, rounds: int = 3, replications: int = REPLICATIONS) -> str:
    """Old and new kernels interleaved in one process (module docstring); a table."""
    import functools
    import time

    import jax

    from benchmarks._timing import load_as

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    from jaxqueue.dist import get_law
    from jaxqueue.sched import ClassAssignment, RandomAssignment, _kernel, _simulate, as_assignment

    # a submodule of this jaxqueue.sched, so that its relative imports resolve
    old = load_as(
        "jaxqueue.sched._old_kernel", pathlib.Path(old_root) / "jaxqueue" / "sched" / "_kernel.py"
    )
    lines = [
        f"{replications} replications, {len(jax.devices())} device(s), best of {rounds}",
        "",
        "| model | kernel | jumps/s (wall) | jumps per CPU-s | mean number of jobs |",
        "|---|---|---|---|---|",
    ]
    keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.key(1), r))(jnp.arange(replications))
    if len(jax.devices()) > 1:
        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("r",))
        keys = jax.device_put(
            keys, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("r"))
        )
    for case, (kind, a, b, rho, q) in CASES.items():
        if kind == "class":
            pool, lam = ClassAssignment(a, np.ones(b)), np.full((1, 2), rho * b / 2)
        else:
            pool, lam = as_assignment(RandomAssignment(a, b)), np.array([[rho * a]])
        jumps = 20_000 if kind == "class" else 4_000
        mix, sigma = _simulate._law_arrays(get_law("exp"))
        params, shape = _simulate._kernel_params(pool, lam, np.ones(1) / sigma, mix, jnp.float64)
        one = jax.tree.map(lambda x: x[0], params)
        n_warm, n_chunks = jumps // 4000, jumps // 1000
        fns = {}
        for name, mod in (("old", old), ("new", _kernel)):
            ks = mod.KernelSpec(q, *shape, 1000)
            f = jax.vmap(functools.partial(mod.run_chain, ks, one), in_axes=(0, None, None))
            fns[name] = jax.jit(f).lower(keys, n_warm, n_chunks).compile()
        best = {name: [0.0, 0.0, 0.0] for name in fns}
        total = replications * (n_warm + n_chunks) * 1000
        for _ in range(rounds):
            for name, f in fns.items():
                t0, c0 = time.perf_counter(), time.process_time()
                out = jax.block_until_ready(f(keys, n_warm, n_chunks))
                t1, c1 = time.perf_counter(), time.process_time()
                L = float(np.mean(np.asarray(out.area).sum(-1) / np.asarray(out.time)))
                best[name] = [
                    max(best[name][0], total / (t1 - t0)),
                    max(best[name][1], total / (c1 - c0)),
                    L,
                ]
        for name, (wall, cpu, L) in best.items():
            lines.append(f"| {case} | {name} | {wall:.3g} | {cpu:.3g} | {L:.2f} |")
    return "\n".join(lines) + "\n"


def run(fast: bool = False) -> str:
    cores = os.cpu_count() or 1
    reps = 64 if fast else REPLICATIONS
    rows = []
    verdicts = []
    for case in CASES:
        jumps = (2_000 if fast else 20_000) if case.startswith("m-") else (500 if fast else 4_000)
        events = (
            (5_000 if fast else 40_000) if case.startswith("m-") else (2_000 if fast else 10_000)
        )
        base = _baseline(case, events)
        single = _kernel(case, jumps, reps)
        sharded = cores > 1 and not fast
        shard = _kernel_subprocess(case, jumps, reps, cores) if sharded else single
        best = max(single["jumps_per_s"], shard["jumps_per_s"])
        ratio = best / base["events_per_s"]
        ok = ratio >= TARGET and best >= TARGETS[case]
        verdicts.append(ok)
        rows.append(
            f"| {case} | {base['events_per_s']:.3g} | {single['jumps_per_s']:.3g} "
            f"({single['compile_s']:.1f} s compile, {single['run_s']:.2f} s run, "
            f"buffer {single['queue_size']}) | "
            f"{shard['jumps_per_s']:.3g} ({shard['devices']} devices, "
            f"{shard['compile_s']:.1f} s compile) | {ratio:.1f}x | "
            f">= {TARGETS[case] / 1e6:.0f} M and >= {TARGET:.0f}x: {'PASS' if ok else 'FAIL'} |"
        )
    lines = [
        "## sched: interruption scheduler (bf-clusters Algorithm 1)",
        "",
        f"Exponential sizes, m = 1, rho = 0.9, {reps} replications"
        f"{' (fast sizes)' if fast else ''}. Baseline: event-driven heapq simulator "
        "(`tests/references/sched_events.py`), events/s; kernel: jumps/s over all replications "
        "(warm-up included, compilation timed apart, `block_until_ready`); the job buffer "
        "grows (rerun, reported) if it overflows. Targets (issue 19): twice the paper "
        "author's C simulator per machine (M model 33 M jumps/s; random assignment 4 M).",
        "",
        "| model | baseline events/s | kernel jumps/s, 1 device | kernel jumps/s, sharded | "
        "speed-up | target |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"Overall: {'PASS' if all(verdicts) else 'FAIL'}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if "--old-new" in sys.argv:
        print(old_new(sys.argv[sys.argv.index("--old-new") + 1]))
    else:
        print(run(fast="--fast" in sys.argv))
