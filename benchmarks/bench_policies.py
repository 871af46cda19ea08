"""Issue 17: the event engine per scheduling policy against the plain-Python heapq simulator
(``tests/ref_policy_events.py``) in the same run.

Five-class exponential scenario at half the FCFS stability limit; 1024 replications, the
compiled kernel timed apart from compilation (one device, and the replications sharded over two
host devices in a subprocess); the heapq simulator on one long run. Target (issue 17): jobs per
second at least 30x the heapq simulator's."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxqueue import scenarios
from jaxqueue.mjqm import exact, exact_lambda_c
from jaxqueue.mjqm._events import _runs
from jaxqueue.mjqm.policies import parse_policy

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

POLICIES = (
    "fcfs",
    "first-fit",
    "window:4",
    "preemptive-first-fit",
    "msf",
    "server-filling",
    "easy-backfilling",
)
REPS = 1024
TARGET = 30.0


def _engine(policy: str, lam: float, n_jobs: int, devices=None) -> tuple[float, float, float, int]:
    """``(compile s, run s, mean response, last slots)`` of the engine as ``simulate_policy``
    runs it (the replications that overflow run again with twice the slots), warm."""
    wl = scenarios.get("five-class-exp")
    sizes = (REPS, n_jobs // 5, n_jobs)
    args = (parse_policy(policy), wl, lam, jax.random.key(0), sizes, None, 4096)
    args = (*args, jnp.dtype(jnp.float64))
    args = (*args, devices)
    t0 = time.perf_counter()
    _runs(*args)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    acc, overflow, _, B = _runs(*args)
    run = time.perf_counter() - t0
    assert not overflow
    resp = float(np.asarray(acc.resp).sum() / np.asarray(acc.cnt).sum())
    return max(first - run, 0.0), run, resp, B


def _heapq(policy: str, lam: float, n_jobs: int) -> tuple[float, float]:
    import ref_policy_events as ref

    wl = scenarios.get("five-class-exp")
    needs = [int(a) for a in wl.cores_array[:, 0]]
    means = [float(m) for m in wl.mean_service()]
    t0 = time.perf_counter()
    res = ref.simulate(
        policy,
        wl.s,
        needs,
        [float(p) for p in wl.probs],
        ref.exp_work(means),
        lam,
        n_jobs,
        n_jobs // 5,
        1,
    )
    return time.perf_counter() - t0, res["response_mean"]


def _sharded(lam: float, n_jobs: int) -> dict | None:
    """Jobs per second per policy with the replications over two host devices (subprocess)."""
    code = (
        "import json, jax, jax.numpy as jnp\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "from benchmarks.bench_policies import _engine, POLICIES\n"
        f"out = {{p: _engine(p, {lam!r}, {n_jobs})[1] for p in POLICIES}}\n"
        "print(json.dumps({'devices': len(jax.devices()), 'run': out}))\n"
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(fast: bool = False) -> str:
    wl = scenarios.get("five-class-exp")
    lam = 0.5 * float(exact_lambda_c(wl))
    n_jobs = 500 if fast else 2000
    n_ref = 5_000 if fast else 40_000
    truth = float(exact(wl, lam).wait_mean) + float(np.dot(wl.probs, wl.mean_service()))
    one = jax.devices()[:1]
    sharded = _sharded(lam, n_jobs)
    rows = []
    for pol in POLICIES:
        print(f"[bench_policies] {pol}", file=sys.stderr, flush=True)
        comp, t_run, resp, B = _engine(pol, lam, n_jobs, one)
        t_ref, resp_ref = _heapq(pol, lam, n_ref)
        rate = REPS * n_jobs / t_run
        rate2 = REPS * n_jobs / sharded["run"][pol] if sharded else float("nan")
        rate_ref = n_ref / t_ref
        best = max(rate, rate2) if sharded else rate
        ok = best >= TARGET * rate_ref
        rows.append(
            f"| `{pol}` | {B} | {comp:.1f} | {t_run:.2f} | {rate / 1e6:.3f} M | "
            f"{rate2 / 1e6:.3f} M | {rate_ref / 1e3:.0f} k | {best / rate_ref:.1f}x | "
            f"{resp:.4f} / {resp_ref:.4f} | {'PASS' if ok else 'FAIL'} |"
        )
    lines = [
        "## Scheduling policies: the event engine against a heapq simulator (issue 17)",
        "",
        f"`five-class-exp` at lam = {lam:.6f} (half the FCFS lambda_c), float64, {REPS} "
        f"replications x {n_jobs} jobs (warm-up {n_jobs // 5}) per policy; the heapq simulator "
        f"(`tests/ref_policy_events.py`, plain Python, one process) on {n_ref} jobs. Jobs/s: "
        "jobs simulated (warm-up included) over the run time of the compiled kernel; the "
        "two-device column shards the replications over two host devices "
        "(`--xla_force_host_platform_device_count=2`, the same 2 cores). The last figures are "
        "the mean response times of the two runs (different random numbers: a sanity check; "
        "job-by-job equality on the same inputs is in `tests/test_mjqm_policies.py`); for "
        f"fcfs the exact mean response (QBD) is {truth:.4f}.",
        "",
        "| policy | slots (last round) | compile s | run s | jobs/s, 1 device | "
        "jobs/s, 2 host devices | heapq jobs/s | speed-up (best) | "
        "mean response, engine / heapq | >= 30x |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "One round of the engine advances every replication by one event (two per job), on "
        "`(slots, replications)` arrays; its cost grows with the slots (measured 2026-11-25, "
        "fcfs, 1024 replications: 16 slots 1.4 M jobs/s, 32 slots 1.0 M, 64 slots 0.36 M), "
        "so the buffer starts at the most jobs in service plus 8 and only the replications "
        "that fill their buffer go on from where they stopped with twice the slots (the run "
        "time includes those rounds). At half the FCFS limit this workload needs them: with "
        "fcfs, 619 of the 1024 replications fill 32 slots within 2000 jobs, 60 fill 64 and one "
        "fills 128 (a blocked 15-core head lets the queue grow), so most of the run is at 64 "
        "slots and more. The 30x target is missed: a round costs about 0.5 ms at 32 slots x 1024 "
        "replications (about a hundred passes over the `(slots, replications)` arrays: time "
        "advance, shift, insert, the policy's scans; about 5 microseconds each on this CPU), "
        "0.5 microseconds per replication-event, where the heapq simulator spends about 4 "
        "microseconds of Python per event. The MJSRE scan (`mjqm.simulate`) stays the fast "
        "path for fcfs (section above).",
    ]
    return "\n".join(lines) + "\n"
