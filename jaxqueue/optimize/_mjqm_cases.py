"""MJQM case studies: largest arrival rate and smallest server speed-up under waiting targets.

The optimisation runs on a common-random-number sample (:class:`MJQMSampler`, pathwise
derivatives by forward-mode autodiff); the answer is re-evaluated, and polished, with the
independent forward simulator :func:`jaxqueue.mjqm.simulate` on a different key and a larger
sample.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._minimize import minimize
from ._mjqm import MJQMSampler, five_class_workload
from ._problem import Box, Problem, Target
from ._report import summarize as _summary

__all__ = ["mjqm_max_rate", "mjqm_speedup", "forward_metrics", "MAX_RATE", "SPEEDUP"]

MAX_RATE = {"wait_target": 3.0, "lam0": 0.4}
SPEEDUP = {"lam": 1.0, "p90_target": 8.0, "speed0": 2.0}


def _sizes(fast: bool) -> dict:
    if fast:
        return {
            "sampler": {"n_jobs": 1000, "n_replications": 16},
            "forward": {"n_jobs": 5000, "n_replications": 16},
            "steps": 30,
            "rounds": 3,
        }
    return {
        "sampler": {"n_jobs": 4000, "n_replications": 64},
        "forward": {"n_jobs": 40000, "n_replications": 128},
        "steps": 50,
        "rounds": 4,
    }


def forward_metrics(workload, lam: float, *, speed: float = 1.0, key, n_jobs, n_replications):
    """Independent re-evaluation with :func:`jaxqueue.mjqm.simulate`.

    A server speed ``v`` is a change of time unit: waiting times at ``(lam, v)`` are those at
    ``(lam / v, 1)`` divided by ``v``.

    Returns:
        dict with ``W``, ``W_ci`` (per class), ``W_p90`` and ``margin`` (``1 - rate /
        lambda_ideal``; ``-1`` with infinite waits when the simulator refuses the load).
    """
    from jaxqueue.mjqm import simulate

    rate = float(lam) / float(speed)
    C = workload.n_classes
    margin = 1.0 - rate / float(workload.lambda_ideal())
    try:
        r = simulate(
            workload,
            rate,
            key=key,
            n_jobs=int(n_jobs),
            n_replications=int(n_replications),
            dtype=jnp.float64,
        )
    except ValueError:
        return {
            "W": np.full(C, np.inf),
            "W_ci": np.full((C, 2), np.inf),
            "W_p90": np.full(C, np.inf),
            "margin": min(margin, -1.0),
        }
    v = float(speed)
    return {
        "W": np.asarray(r.wait_mean) / v,
        "W_ci": np.asarray(r.wait_mean_ci) / v,
        "W_p90": np.array([r.wait_quantile(0.9, c) for c in range(C)]) / v,
        "margin": margin,
    }


def _keys(seed: int):
    k = jax.random.key(seed)
    return jax.random.fold_in(k, 1), jax.random.fold_in(k, 2)


def _minimize(problem, sz, fast, polish_range, progress):
    """The optimiser settings shared by the MJQM cases (forward-mode pathwise gradients)."""
    return minimize(
        problem,
        steps=sz["steps"],
        rounds=sz["rounds"],
        learning_rate=0.05,
        grad_mode="forward",
        polish_range=polish_range,
        polish_iters=10 if fast else 16,
        progress=progress,
    )


def mjqm_max_rate(fast: bool = False, progress=None, seed: int = 0):
    """Largest arrival rate of the five-class MJQM (exponential) such that the mean waiting
    time of every class stays under ``MAX_RATE["wait_target"]``."""
    wl = five_class_workload()
    sz = _sizes(fast)
    k_opt, k_eval = _keys(seed)
    sampler = MJQMSampler(wl, key=k_opt, **sz["sampler"])
    lam_max = 0.999 * float(wl.lambda_ideal())
    target = MAX_RATE["wait_target"]
    fw = sz["forward"]
    problem = Problem(
        params0={"lam": jnp.asarray(MAX_RATE["lam0"])},
        transforms={"lam": Box(0.01, lam_max, log=True)},
        cost=lambda p: -p["lam"],
        metrics=lambda p: sampler.metrics({"lam": p["lam"]}),
        targets=[Target("W", target, index=c) for c in range(wl.n_classes)],
        evaluate=lambda p: forward_metrics(wl, float(p["lam"]), key=k_eval, **fw),
        polish=lambda p, s: {"lam": p["lam"] / s},
    )
    res = _minimize(problem, sz, fast, (0.8, 4.0), progress)
    lam = float(res.params["lam"])
    return res, _summary(
        res,
        {
            "case": "mjqm-max-rate",
            "scenario": "five-class-exp",
            "objective": "maximise lam (cost = -lam)",
            "lam": lam,
            "lam_gradient": float(res.relaxed_params["lam"]),
            "targets": {"W": [target] * wl.n_classes},
            "params": {"lam": lam},
            "metrics": {"W": res.metrics["W"].tolist(), "W_ci": res.metrics["W_ci"].tolist()},
            "sizes": sz,
        },
    )


def mjqm_speedup(fast: bool = False, progress=None, seed: int = 0):
    """Smallest server speed-up of the five-class MJQM (exponential) at ``SPEEDUP["lam"]``
    such that the 90th percentile of the waiting time of every class stays under
    ``SPEEDUP["p90_target"]``."""
    wl = five_class_workload()
    sz = _sizes(fast)
    k_opt, k_eval = _keys(seed)
    sampler = MJQMSampler(wl, key=k_opt, **sz["sampler"])
    lam = SPEEDUP["lam"]
    target = SPEEDUP["p90_target"]
    v_min = 1.001 * lam / float(wl.lambda_ideal())
    fw = sz["forward"]
    problem = Problem(
        params0={"speed": jnp.asarray(SPEEDUP["speed0"])},
        transforms={"speed": Box(v_min, 20.0, log=True)},
        cost=lambda p: p["speed"],
        metrics=lambda p: sampler.metrics({"lam": jnp.asarray(lam), "speed": p["speed"]}),
        targets=[Target("W_p90", target, index=c) for c in range(wl.n_classes)],
        evaluate=lambda p: forward_metrics(wl, lam, speed=float(p["speed"]), key=k_eval, **fw),
        polish=lambda p, s: {"speed": p["speed"] * s},
    )
    res = _minimize(problem, sz, fast, (0.5, 4.0), progress)
    speed = float(res.params["speed"])
    return res, _summary(
        res,
        {
            "case": "mjqm-speedup",
            "scenario": "five-class-exp",
            "lam": lam,
            "speed": speed,
            "speed_gradient": float(res.relaxed_params["speed"]),
            "targets": {"W_p90": [target] * wl.n_classes},
            "params": {"speed": speed},
            "metrics": {"W_p90": res.metrics["W_p90"].tolist(), "W": res.metrics["W"].tolist()},
            "sizes": sz,
        },
    )
