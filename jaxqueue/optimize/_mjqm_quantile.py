"""The largest arrival rate whose wait quantile meets a target under an event-engine policy.

``mjqm-p99-server-filling``: five-class-bpareto under server-filling, p99 of the wait of all
jobs at most ``P99["target"]``. No exact solver reaches it; the value and its derivative in
``lam`` come from :func:`jaxqueue.mjqm.sensitivity` (common-random-number central differences
of the replications' quantiles, each with a Student t interval), on one key at every rate (a
sample-average problem: the iteration does not chase fresh noise). Then an independent long
:func:`jaxqueue.mjqm.simulate` on another key re-checks the answer, and a grid search over the
rate on the same sample reaches its answer to the same precision for a cost comparison.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from jaxqueue.dist import HyperExponential
from jaxqueue.mjqm import Workload, sensitivity, simulate
from jaxqueue.scenarios import get as get_scenario

from ._problem import Target, interval_max_rate, max_rate_result
from ._report import summarize as _summary

__all__ = ["quantile_max_rate", "grid_max_rate", "mjqm_p99_server_filling", "P99"]

P99 = {"policy": "server-filling", "q": 0.99, "target": 100.0, "lam0": 0.5, "rtol": 0.05}
"""The full case: scenario five-class-bpareto, its target on the p99 wait, the starting rate
and the precision (the answer's upper confidence bound within ``rtol`` under the target)."""

P99_FAST = {"policy": "server-filling", "q": 0.99, "target": 10.0, "lam0": 0.3, "rtol": 0.1}
"""The fast case on :func:`small_hyperexp_workload`."""


def small_hyperexp_workload() -> Workload:
    """Two classes on ``s = 4`` servers (1 and 2 cores, probabilities 0.6 / 0.4),
    hyperexponential services of means 1 and 2 (squared coefficient of variation 5.5): the
    ``fast`` size of ``mjqm-p99-server-filling`` (``lambda_ideal = 1.818``)."""
    return Workload(
        4,
        [1, 2],
        np.array([0.6, 0.4]),
        [
            HyperExponential(np.array([5.5, 0.5]), np.array([0.1, 0.9])),
            HyperExponential(np.array([11.0, 1.0]), np.array([0.1, 0.9])),
        ],
        name="two-class-hyperexp-4",
    )


def _sizes(fast: bool) -> dict:
    if fast:
        return {
            "search": {"n_jobs": 2000, "n_replications": 16},
            "check": {"n_jobs": 20000, "n_replications": 16},
            "max_iter": 8,
        }
    return {
        "search": {"n_jobs": 10000, "n_replications": 32},
        "check": {"n_jobs": 40000, "n_replications": 64},
        "max_iter": 12,
    }


def _jobs(sizes: dict) -> int:
    return int(sizes["n_jobs"]) * int(sizes["n_replications"])


def quantile_max_rate(
    workload, policy, q, target, *, lam0, hi0, key, sizes, rtol, max_iter, progress=None
) -> dict:
    """Largest ``lam`` whose wait quantile ``q`` under ``policy`` meets ``target``:
    :func:`~jaxqueue.optimize._problem.interval_max_rate` on the quantile ``V`` and ``dV/dlam``
    of :func:`~jaxqueue.mjqm.sensitivity` (``wrt=("lam",)``, on ``key`` at every rate), a run
    that overflowed or is not stationary being unusable.

    Returns:
        :func:`~jaxqueue.optimize._problem.interval_max_rate`'s dict and ``jobs`` (simulated
        jobs: three runs of ``sizes`` per rate).
    """

    def at(lam):
        res = sensitivity(
            workload,
            lam,
            policy,
            wrt=("lam",),
            metric=f"wait_quantile({q})",
            key=key,
            override=True,
            **sizes,
        )
        v, d = res.value, res.derivatives["lam"]
        return {
            "value": float(v.mean),
            "value_ci": [float(v.low), float(v.high)],
            "derivative": float(d.mean),
            "derivative_ci": [float(d.low), float(d.high)],
            "usable": res.status not in ("overflow", "nonstationary"),
        }

    sol = interval_max_rate(
        at, target, lam0=lam0, hi0=hi0, rtol=rtol, max_iter=max_iter, progress=progress
    )
    return sol | {"jobs": 3 * _jobs(sizes) * sol["iterations"]}


def grid_max_rate(workload, policy, q, target, *, lam0, lam_hi, key, sizes, rtol) -> dict:
    """The grid search the Newton iteration is compared with: the rates ``lam0 (1 + rtol)^k``
    upwards, each simulated once with ``sizes`` on the sample of :func:`quantile_max_rate`'s
    value runs on ``key`` (``sensitivity`` draws its jobs from the second half of its key:
    the same quantile at the same rate), until the first whose upper bound exceeds ``target``
    (or ``lam_hi``). Returns ``lam`` (the last rate meeting the target with confidence;
    ``nan`` if none), ``value_ci``, ``points``, ``jobs`` and ``history`` (``lam``,
    ``value_ci`` per point)."""
    jobs_key = jax.random.split(key)[1]
    lam, best = float(lam0), (math.nan, [math.nan, math.nan])
    hist = {"lam": [], "value_ci": []}
    while lam < lam_hi:
        r = simulate(workload, lam, policy, key=jobs_key, **sizes)
        e = r.wait_quantile_ci(q)
        hist["lam"].append(lam)
        hist["value_ci"].append([float(e.low), float(e.high)])
        if r.status in ("overflow", "nonstationary") or not float(e.high) <= target:
            break
        best = (lam, [float(e.low), float(e.high)])
        lam *= 1.0 + float(rtol)
    points = len(hist["lam"])
    return {
        "lam": best[0],
        "value_ci": best[1],
        "points": points,
        "jobs": points * _jobs(sizes),
        "history": hist,
    }


def _recheck(workload, policy, q, lam, key, sizes) -> dict:
    r = simulate(workload, lam, policy, key=key, **sizes)
    e = r.wait_quantile_ci(q)
    return {
        "value": float(e.mean),
        "ci": [float(e.low), float(e.high)],
        "status": str(r.status),
        "jobs": _jobs(sizes),
    }


def mjqm_p99_server_filling(fast: bool = False, progress=None, seed: int = 0):
    """The largest arrival rate of five-class-bpareto under server-filling such that the
    99th percentile of the wait of all jobs is at most ``P99["target"]``
    (:func:`quantile_max_rate`), re-checked by an independent long simulation, with the cost
    (simulated jobs) of a grid search reaching the same answer. With ``fast`` the same on
    :func:`small_hyperexp_workload` (``P99_FAST``)."""
    c = P99_FAST if fast else P99
    wl = small_hyperexp_workload() if fast else get_scenario("five-class-bpareto")
    sz = _sizes(fast)
    k = jax.random.key(seed)
    k_opt, k_check = jax.random.fold_in(k, 1), jax.random.fold_in(k, 2)
    pol, q, target, rtol = c["policy"], c["q"], c["target"], c["rtol"]
    lam_ideal = float(wl.lambda_ideal())
    search = {"lam0": c["lam0"], "key": k_opt, "sizes": sz["search"]}  # one sample for both
    sol = quantile_max_rate(
        wl,
        pol,
        q,
        target,
        hi0=lam_ideal,
        rtol=rtol,
        max_iter=sz["max_iter"],
        progress=progress,
        **search,
    )
    lam = sol["lam"]
    check = _recheck(wl, pol, q, lam, k_check, sz["check"])
    elasticity = sol["derivative"] * lam / sol["value"]  # d log V / d log lam
    spacing = rtol / elasticity if elasticity > 0 else rtol
    grid = grid_max_rate(wl, pol, q, target, lam_hi=lam_ideal, rtol=spacing, **search)
    grid["check"] = _recheck(wl, pol, q, grid["lam"], k_check, sz["check"])
    name = f"W_p{round(100 * q)}"
    metrics = {name: check["value"], "margin": 1.0 - lam / lam_ideal}
    stable = check["status"] not in ("overflow", "nonstationary")
    h = sol["history"]
    res = max_rate_result(
        lam, metrics, [Target(name, target)], stable, h["lam"], h["value"], target
    )
    return res, _summary(
        res,
        {
            "case": "mjqm-p99-server-filling",
            "scenario": wl.name,
            "policy": pol,
            "objective": f"maximise lam (cost = -lam), wait quantile {q:g} of all jobs",
            "lam": lam,
            "lambda_ideal": lam_ideal,
            "targets": {name: [target]},
            "params": {"lam": lam},
            "metrics": {name: check["value"], f"{name}_ci": check["ci"]},
            "search": {
                "value": sol["value"],
                "value_ci": sol["value_ci"],
                "derivative": sol["derivative"],
                "derivative_ci": sol["derivative_ci"],
                "converged": sol["converged"],
                "iterations": sol["iterations"],
                "jobs": sol["jobs"],
                "history": sol["history"],
            },
            "recheck": check,
            "grid": grid | {"spacing": rtol / elasticity if elasticity > 0 else rtol},
            "sizes": sz,
        },
    )
