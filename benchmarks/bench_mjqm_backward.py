"""Backward sub-perfect sampling (Algorithm 1) and the stability limit (Algorithm 2).

Targets (issue #4, 2-core CPU): 10,000 samples of ``five-class-exp`` at 75% of lambda_c in
< 3 s after compilation and >= 20x a numpy Algorithm 1 in the same run; at 95% of lambda_c the
work done within 1.5x of the work needed; lambda_c of the five-class scenarios to 1% relative
accuracy in < 10 s each (against numpy Algorithm 2 extrapolated to the same number of jobs);
``borg-cell-b`` in < 5 minutes (full run only). Issue 19: the same 10,000 samples (bias
control on) at >= 60k samples/s in the best configuration; issue 14: the work ratio at 95%
stays under 1.5.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxqueue.mjqm import pile_growth, sample_backward
from jaxqueue.scenarios import get
from tests.references.mjqm_numpy import pile_growth_numpy, sample_backward_numpy


def _draw_sigma(workload):
    """Plain numpy sampler of service times per class (same laws as the workload)."""
    from jaxqueue.dist import BoundedPareto, Erlang, Exponential, HyperExponential

    def one(law, rng, k):
        if isinstance(law, Exponential):
            return rng.exponential(float(law.mean_), k)
        if isinstance(law, Erlang):
            return rng.gamma(law.k, float(law.mean_) / law.k, k)
        if isinstance(law, HyperExponential):
            means = np.asarray(law.means, float)
            ph = rng.choice(len(means), size=k, p=np.asarray(law.probs, float))
            return rng.exponential(means[ph])
        if isinstance(law, BoundedPareto):
            lo, hi, a = float(law.xmin), float(law.xmax), float(law.shape)
            r = (lo / hi) ** a
            return lo * (r + rng.random(k) * (1 - r)) ** (-1 / a)
        raise TypeError(type(law).__name__)

    laws = workload.services

    def draw(rng, cls):
        out = np.empty(cls.shape)
        for c, law in enumerate(laws):
            idx = cls == c
            k = int(idx.sum())
            if k:
                out[idx] = one(law, rng, k)
        return out

    return draw


def _fields(wl):
    return wl.s, np.asarray(wl.cores_array)[:, 0], np.asarray(wl.probs, float)


def _stability_rows(fast: bool):
    rows, lam_c = [], {}
    names = ["five-class-exp"]
    if not fast:
        names += ["five-class-erlang3", "five-class-hyperexp", "five-class-bpareto", "borg-cell-b"]
    for name in names:
        wl = get(name)
        t0 = time.perf_counter()
        r = pile_growth(wl, key=jax.random.key(1), rel_tol=0.01, dtype=jnp.float32)
        total = time.perf_counter() - t0
        if name == "borg-cell-b":  # heavy: run once (compile time is a small part of it)
            r2, run = r, total
        else:
            t0 = time.perf_counter()
            r2 = pile_growth(wl, key=jax.random.key(2), rel_tol=0.01, dtype=jnp.float32)
            run = time.perf_counter() - t0
        lam_c[name] = r.lambda_c
        # numpy Algorithm 2 (sort per job, vectorised over replications), timed on a slice of
        # the work and extrapolated to the jobs the JAX run processed.
        s, cores, probs = _fields(wl)
        n_np = 500 if name == "borg-cell-b" else 4000
        t0 = time.perf_counter()
        pile_growth_numpy(s, cores, probs, _draw_sigma(wl), n_np, r.replications, seed=0)
        per_job = (time.perf_counter() - t0) / n_np
        jobs = r.jobs + (1 << 14)
        np_time = per_job * jobs
        limit = 300.0 if name == "borg-cell-b" else 10.0
        ok = total < limit and r.rel_half_width <= 0.0105
        sh = _sharded_run(_SHARDED_PILE, name) if name == "borg-cell-b" else None
        rows.append(
            f"| lambda_c `{name}` | {r.lambda_c:.5g} [{r.lambda_c_ci[0]:.5g}, "
            f"{r.lambda_c_ci[1]:.5g}] (rel {r.rel_half_width:.2%}; 2nd key {r2.lambda_c:.5g}) | "
            f"{total - run:.2f} | {run:.2f} ({total:.2f} total) | {np_time:.1f} (extrap. from "
            f"{n_np} jobs x {r.replications}) | {np_time / run:.1f}x | "
            f"< {limit:.0f} s total: {'PASS' if ok else 'FAIL'} |"
        )
        if sh is not None:
            same = "same as 1 device" if sh["lambda_c"] == r.lambda_c else "DIFFERS from 1 device"
            rows.append(
                f"| lambda_c `{name}`, {sh['devices']} host devices (replications sharded) | "
                f"{sh['lambda_c']:.5g} ({same}) | - | {sh['run']:.2f} (incl. compile) | "
                f"{np_time:.1f} | {np_time / sh['run']:.1f}x | "
                f"< {limit:.0f} s total: {'PASS' if sh['run'] < limit else 'FAIL'} |"
            )
    return rows, lam_c


_SHARDED = """
import json, sys, time
import jax, jax.numpy as jnp
from jaxqueue.mjqm import sample_backward
from jaxqueue.scenarios import get
wl = get("five-class-exp")
lam, n = float(sys.argv[1]), int(sys.argv[2])
sample_backward(wl, lam, n, key=jax.random.key(3), dtype=jnp.float32, override=True)
runs = []
for k in (4, 5, 6):
    t0 = time.perf_counter()
    S = sample_backward(wl, lam, n, key=jax.random.key(k), dtype=jnp.float32, override=True)
    runs.append(time.perf_counter() - t0)
print(json.dumps({"run": min(runs), "devices": jax.device_count()}))
"""

_REPEATS = 3
"""Timed calls per row at 75% lambda_c (new keys, same shapes); the best is reported."""


def _breakdown(wl, lam: float, n: int, key: int, label: str) -> str:
    """Where the time of one call goes, per sample: the sampler's device calls timed one by
    one (each waited for), the rest is host work (horizon floor, bias test, transfers). The
    call is made twice and the second timed (no compilation in it)."""
    from jaxqueue.mjqm import _backward as B

    names = {
        "_first_pair": "first two horizons of all samples",
        "_pair_more": "side-by-side replays of the samples not yet met",
        "_segment_batch": "pasts of the later doublings",
    }
    spent = dict.fromkeys(names, 0.0)
    calls = dict.fromkeys(names, 0)
    saved = {k: getattr(B, k) for k in names}

    def timed(k, f):
        def g(*a, **kw):
            t = time.perf_counter()
            out = jax.block_until_ready(f(*a, **kw))
            spent[k] += time.perf_counter() - t
            calls[k] += 1
            return out

        return g

    def call():
        return B.sample_backward(
            wl, lam, n, key=jax.random.key(key), dtype=jnp.float32, override=True
        )

    call()
    try:
        for k, f in saved.items():
            setattr(B, k, timed(k, f))
        t0 = time.perf_counter()
        S = call()
        total = time.perf_counter() - t0
    finally:
        for k, f in saved.items():
            setattr(B, k, f)
    us = 1e6 / n
    parts = [f"{names[k]} {spent[k] * us:.1f} ({calls[k]} calls)" for k in names]
    parts.append(f"host {(total - sum(spent.values())) * us:.1f}")
    tests = ", ".join(f"{t.kind} at {t.ell}: {'ok' if t.ok else 'fails'}" for t in S.bias_tests)
    return (
        f"| where the time goes at 75% lambda_c, 1 device, key {key} ({label}; us per sample) | "
        f"{total * us:.1f} in all: " + "; ".join(parts) + f"; bias tests {tests}; status "
        f"{S.status} | - | {total:.2f} | - | - | - |"
    )


_SHARDED_PILE = """
import json, sys, time
import jax, jax.numpy as jnp
from jaxqueue.mjqm import pile_growth
from jaxqueue.scenarios import get
wl = get(sys.argv[1])
t0 = time.perf_counter()
r = pile_growth(wl, key=jax.random.key(1), rel_tol=0.01, dtype=jnp.float32)
print(json.dumps({"run": time.perf_counter() - t0, "devices": jax.device_count(),
                  "lambda_c": r.lambda_c}))
"""


def _sharded_run(code: str, *args, ndev: int = 2) -> dict | None:
    """``code`` in a subprocess with ``ndev`` host devices (batch axis sharded); its JSON."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    if jax.devices()[0].platform != "cpu":
        return None
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={ndev}")
    root = str(pathlib.Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(fast: bool) -> str:
    dev = jax.devices()[0]
    lines = [
        "## Backward sampling and stability limit (`bench_mjqm_backward`, issue #4)",
        "",
        f"Device `{dev.platform}` ({dev.device_kind}) x{jax.device_count()}; float32 state; "
        "numpy baselines run in the same process. "
        + ("**fast mode** (reduced sizes)." if fast else "full sizes."),
        "",
        "| task | result | compile s | run s | numpy baseline s | speed-up | target |",
        "|---|---|---|---|---|---|---|",
    ]
    rows, lam_c = _stability_rows(fast)
    wl = get("five-class-exp")
    lc = lam_c["five-class-exp"]
    n = 1024 if fast else 10000
    for frac in (0.75, 0.95):
        lam = frac * lc
        t0 = time.perf_counter()
        S = sample_backward(wl, lam, n, key=jax.random.key(3), dtype=jnp.float32, override=True)
        first = time.perf_counter() - t0
        reps = _REPEATS if frac == 0.75 else 1
        run_s = float("inf")
        for k in range(reps):
            t0 = time.perf_counter()
            S = sample_backward(
                wl, lam, n, key=jax.random.key(4 + k), dtype=jnp.float32, override=True
            )
            run_s = min(run_s, time.perf_counter() - t0)
        if frac == 0.75:
            s, cores, probs = _fields(wl)
            n_np = 128 if fast else 512
            t0 = time.perf_counter()
            sample_backward_numpy(s, cores, probs, _draw_sigma(wl), lam, n_np, seed=0, ell0=1024)
            np_s = (time.perf_counter() - t0) * n / n_np
            speed = np_s / run_s
            rows.append(
                f"| {n} samples at 75% lambda_c, 1 device | {n / run_s:,.0f} samples/s, "
                f"{S.work_done / run_s / 1e6:.1f} M jobs/s, status {S.status} | "
                f"{first - run_s:.2f} | {run_s:.2f} | {np_s:.1f} (extrap. from {n_np} samples) | "
                f"{speed:.1f}x | - |"
            )
            best = run_s
            sh = _sharded_run(_SHARDED, lam, n)
            if sh is not None:
                best = min(best, sh["run"])
                rows.append(
                    f"| {n} samples at 75% lambda_c, {sh['devices']} host devices (sharded) | "
                    f"{n / sh['run']:,.0f} samples/s | - | {sh['run']:.2f} | {np_s:.1f} | "
                    f"{np_s / sh['run']:.1f}x | - |"
                )
            ok = best < 3.0 and np_s / best >= 20
            fast_ok = n / best >= 60_000
            rows.append(
                f"| best of the above | {n / best:,.0f} samples/s | - | {best:.2f} | {np_s:.1f} | "
                f"{np_s / best:.1f}x | < 3 s and >= 20x: {'PASS' if ok else 'FAIL'}; "
                f">= 60k samples/s (issue 19): {'PASS' if fast_ok else 'FAIL'} |"
            )
            rows.append(_breakdown(wl, lam, n, 4, "a timed key"))
            rows.append(_breakdown(wl, lam, n, 9, "another key"))
        else:
            ok = S.work_ratio <= 1.5
            rows.append(
                f"| {n} samples at 95% lambda_c | work done / needed = {S.work_ratio:.3f}, "
                f"mean ell {S.ell.mean():.0f}, max ell {S.ell.max()}, "
                f"{n / run_s:,.0f} samples/s | {first - run_s:.2f} | {run_s:.2f} | - | - | "
                f"ratio <= 1.5: {'PASS' if ok else 'FAIL'} |"
            )
    lines += rows
    lines += [
        "",
        "Compile s = first call minus second call (new key, same shapes); at 75% lambda_c the "
        f"run s is the best of {_REPEATS} calls (new keys). The numpy Algorithm 1 "
        "is the paper's batch layout (all samples double together until the slowest converges, "
        "sort per step), timed on 512 samples and scaled linearly to 10,000, which understates its "
        "cost (a larger batch waits for a slower slowest sample); numpy Algorithm 2 sorts per "
        "job, vectorised over the replications. "
        + ("Fast mode runs `five-class-exp` only." if fast else ""),
    ]
    return "\n".join(lines) + "\n"
