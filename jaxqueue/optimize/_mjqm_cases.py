"""MJQM case studies: largest arrival rate and smallest server speed-up under waiting targets.

Both search one rate by a safeguarded Newton iteration on the steady-state values and
derivatives of :func:`jaxqueue.mjqm.sensitivity` (backward starts: stationary from the first
job; ``d/dlam`` pathwise for a mean wait, common-random-number differences for a quantile),
each with its interval (:func:`~jaxqueue.optimize._problem.interval_max_rate`: the derivative's
interval damps the step, the value's sets the stopping rule), on one key at every rate (a
sample-average problem). The workloads are exponential FCFS, so the answer is re-checked by the
exact solver :func:`jaxqueue.mjqm.exact`.

``mjqm-max-rate-exact`` is the exact counterpart of ``mjqm-max-rate`` (exponential services):
the same targets on the exact waits of :func:`jaxqueue.mjqm.exact`, solved by a safeguarded
Newton iteration driven by the exact derivative ``dW/dlam`` (``jax.grad`` through the QBD
solver), see :func:`exact_max_rate`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, exact, exact_lambda_c, sensitivity
from jaxqueue.scenarios import get as get_scenario

from ._problem import Target, interval_max_rate, max_rate_result
from ._report import summarize as _summary

__all__ = [
    "mjqm_max_rate",
    "mjqm_max_rate_exact",
    "mjqm_speedup",
    "exact_max_rate",
    "five_class_workload",
    "small_exact_workload",
    "MAX_RATE",
    "SPEEDUP",
    "SPEEDUP_FAST",
]

MAX_RATE = {"wait_target": 3.0, "lam0": 0.4, "rtol": 0.05}
SPEEDUP = {"lam": 1.0, "p90_target": 8.0, "speed0": 2.0, "rtol": 0.05}
SPEEDUP_FAST = {"lam": 2.0, "p90_target": 8.0, "speed0": 2.0, "rtol": 0.05}
"""The fast speed-up case on :func:`small_exact_workload` (``lambda_c = 1.688``): the rate
is above ``lambda_c``, so the answer is a speed-up."""


def five_class_workload() -> Workload:
    """The five-class MJQM of ``mjsre`` Section 8.2 / Table 2 with exponential service
    times (``jaxqueue.scenarios.get("five-class-exp")``)."""
    return get_scenario("five-class-exp")


def _sizes(fast: bool) -> dict:
    if fast:
        return {"search": {"n_jobs": 2000, "n_replications": 64}, "max_iter": 10}
    return {"search": {"n_jobs": 40000, "n_replications": 64}, "max_iter": 12}


def _runs(metric: str) -> int:
    """Forward runs of :func:`~jaxqueue.mjqm.sensitivity` per rate with ``wrt=("lam",)``:
    the value and the pathwise derivative of a mean; the value and two differenced rates of a
    quantile."""
    return 2 if metric == "wait_mean" else 3


def _binding(workload, metric, key, sizes, per_rate):
    """``at(lam)`` for :func:`~jaxqueue.optimize._problem.interval_max_rate`: the class whose
    upper bound is largest, from :func:`~jaxqueue.mjqm.sensitivity`'s per-class ``metric``
    and ``d/dlam`` at ``lam``, passed through ``per_rate(lam, value, derivative) -> (value,
    derivative)`` (the metric the target is on, applied to each bound of the intervals)."""

    def at(lam):
        res = sensitivity(
            workload, lam, wrt=("lam",), metric=metric, key=key, override=True, **sizes
        )
        v, d = res.value_class, res.derivatives_class["lam"]
        V, V_lo, V_hi = (np.asarray(x, np.float64) for x in (v.mean, v.low, v.high))
        D, D_lo, D_hi = (np.asarray(x, np.float64) for x in (d.mean, d.low, d.high))
        c = int(np.nanargmax(V_hi))
        val, der = per_rate(lam, V[c], D[c])
        return {
            "value": val,
            "value_ci": [per_rate(lam, V_lo[c], D[c])[0], per_rate(lam, V_hi[c], D[c])[0]],
            "derivative": der,
            "derivative_ci": [per_rate(lam, V[c], D_lo[c])[1], per_rate(lam, V[c], D_hi[c])[1]],
            "usable": res.status not in ("overflow", "nonstationary"),
            "binding_class": c,
            "status": str(res.status),
        }

    return at


def _search(fast, progress, seed, wl, metric, target, lam0, rtol, per_rate):
    """The Newton search of a case on ``seed``'s first key: the solution and its ``jobs``."""
    sz = _sizes(fast)
    key = jax.random.fold_in(jax.random.key(seed), 1)
    at = _binding(wl, metric, key, sz["search"], per_rate)
    sol = interval_max_rate(
        at,
        target,
        lam0=lam0,
        hi0=float(wl.lambda_ideal()),
        rtol=rtol,
        max_iter=sz["max_iter"],
        progress=progress,
    )
    n = sz["search"]["n_jobs"] * sz["search"]["n_replications"]
    return sol | {"jobs": _runs(metric) * n * sol["iterations"]}, sz


def _search_summary(sol) -> dict:
    h = sol["history"]
    keys = ("value", "value_ci", "derivative", "derivative_ci", "converged", "iterations", "jobs")
    return {k: sol[k] for k in keys} | {
        "binding_class": h["binding_class"][h["lam"].index(sol["lam"])],
        "status": h["status"][h["lam"].index(sol["lam"])],
        "history": h,
    }


def _rechecked(wl, lam_c, metrics, search, sizes) -> dict:
    """The summary's fields common to the cases re-checked by the exact solver."""
    return {
        "scenario": wl.name,
        "lambda_c": lam_c,
        "metrics": {k: np.asarray(v).tolist() for k, v in metrics.items()},
        "recheck": "exact",
        "search": search,
        "sizes": sizes,
    }


def mjqm_max_rate(fast: bool = False, progress=None, seed: int = 0):
    """Largest arrival rate of the five-class MJQM (exponential) such that the mean waiting
    time of every class stays under ``MAX_RATE["wait_target"]``: Newton on the simulated
    steady-state mean wait of the binding class and its pathwise ``d/dlam``, re-checked by
    the exact waits. With ``fast`` the same on :func:`small_exact_workload`."""
    wl = small_exact_workload() if fast else five_class_workload()
    target = MAX_RATE["wait_target"]
    sol, sz = _search(
        fast,
        progress,
        seed,
        wl,
        "wait_mean",
        target,
        MAX_RATE["lam0"],
        MAX_RATE["rtol"],
        lambda lam, v, d: (float(v), float(d)),
    )
    lam = sol["lam"]
    r = exact(wl, lam)
    lam_c = float(r.lambda_c)
    metrics = {
        "W": np.asarray(r.wait_mean_class),
        "W_all": float(r.wait_mean),
        "margin": 1.0 - lam / lam_c,
    }
    targets = [Target("W", target, index=c) for c in range(wl.n_classes)]
    h = sol["history"]
    res = max_rate_result(
        lam, metrics, targets, metrics["margin"] > 0, h["lam"], h["value"], target
    )
    return res, _summary(
        res,
        {
            "case": "mjqm-max-rate",
            "objective": "maximise lam (cost = -lam), simulated steady-state waits and d/dlam",
            "lam": lam,
            "targets": {"W": [target] * wl.n_classes},
            "params": {"lam": lam},
        }
        | _rechecked(wl, lam_c, metrics, _search_summary(sol), sz),
    )


def mjqm_speedup(fast: bool = False, progress=None, seed: int = 0):
    """Smallest server speed-up of the five-class MJQM (exponential) at ``SPEEDUP["lam"]``
    such that the 90th percentile of the waiting time of every class stays under
    ``SPEEDUP["p90_target"]``, re-checked by the exact quantiles. With ``fast`` the same on
    :func:`small_exact_workload` (``SPEEDUP_FAST``).

    A server speed ``v`` is a change of time unit: the waits at ``(lam, v)`` are those at rate
    ``x = lam / v`` and speed 1 divided by ``v``. The search is for the largest ``x`` whose
    ``P(x) = Q(x) x / lam`` meets the target (``Q`` the simulated steady-state quantile of the
    binding class, ``dP/dx = (Q + x dQ/dx) / lam`` from sensitivity's ``d/dlam``); then
    ``v = lam / x``."""
    c = SPEEDUP_FAST if fast else SPEEDUP
    wl = small_exact_workload() if fast else five_class_workload()
    lam, target = c["lam"], c["p90_target"]
    sol, sz = _search(
        fast,
        progress,
        seed,
        wl,
        "wait_quantile(0.9)",
        target,
        lam / c["speed0"],
        c["rtol"],
        lambda x, q, dq: (float(q * x / lam), float((q + x * dq) / lam)),
    )
    x = sol["lam"]
    speed = lam / x
    r = exact(wl, x)
    dist = r.wait_distribution(quantiles=(0.9,))
    lam_c = float(r.lambda_c)
    metrics = {
        "W_p90": np.asarray([float(dist.quantile(0.9, k)) for k in range(wl.n_classes)]) / speed,
        "W": np.asarray(r.wait_mean_class) / speed,
        "margin": 1.0 - x / lam_c,
    }
    targets = [Target("W_p90", target, index=k) for k in range(wl.n_classes)]
    h = sol["history"]
    res = max_rate_result(
        x,
        metrics,
        targets,
        metrics["margin"] > 0,
        h["lam"],
        h["value"],
        target,
        name="speed",
        of_rate=lambda y: lam / y,
    )
    return res, _summary(
        res,
        {
            "case": "mjqm-speedup",
            "lam": lam,
            "speed": speed,
            "targets": {"W_p90": [target] * wl.n_classes},
            "params": {"speed": speed},
        }
        | _rechecked(wl, lam_c, metrics, _search_summary(sol) | {"rate": x}, sz),
    )


# ------------------------------------------------------------------------ exact counterpart
def small_exact_workload():
    """Three classes on ``s = 6`` servers (1, 2 and 4 cores, probabilities 0.5 / 0.3 / 0.2,
    exponential services of means 1, 1.5 and 2): a 32-phase QBD, the ``fast`` size of
    ``mjqm-max-rate-exact`` (``lambda_c = 1.68789``)."""

    return Workload(
        6,
        [1, 2, 4],
        np.array([0.5, 0.3, 0.2]),
        [Exponential(1.0), Exponential(1.5), Exponential(2.0)],
        name="three-class-6",
    )


def exact_max_rate(
    workload,
    target: float,
    *,
    per_class: bool = True,
    lam0: float | None = None,
    rtol: float = 1e-10,
    max_iter: int = 40,
    progress=None,
) -> dict:
    """Largest arrival rate whose exact mean waiting time meets ``target``.

    ``W(lam)`` is the largest per-class mean wait ``max_c wait_mean_class`` of
    :func:`jaxqueue.mjqm.exact` (``per_class=True``, the constraint of ``mjqm-max-rate``;
    classes of probability 0, whose waits are ``nan``, are left out) or the
    mean wait of all jobs ``wait_mean`` (``per_class=False``); it increases from 0 to infinity
    on ``(0, lambda_c)``. The root of ``W(lam) = target`` is found by Newton's method on
    ``phi(lam) = lam / W(lam) - lam / target``, which is linear in ``lam`` when ``W`` has the
    M/M/1 shape ``a lam / (b - lam)`` (light traffic ``W ~ lam``, heavy traffic
    ``W ~ 1 / (lambda_c - lam)``), with ``dW/dlam`` from ``jax.grad`` through the exact solver.
    Safeguard: a bracket ``lo < root < hi`` (``lo`` meets the target, ``hi`` does not, or is
    ``lambda_c``) is kept and a Newton step that leaves it, or any non-finite value, is replaced
    by bisection. The iteration aims a hair under the target, at ``target (1 - rtol / 2)``, and
    stops when ``0 <= 1 - W / target <= rtol``: the answer meets the target and equals it to
    ``rtol`` (relative). This is :func:`~jaxqueue.optimize._problem.interval_max_rate` with
    exact values, whose intervals have zero width.

    Args:
        workload: exponential services and Poisson arrivals (:func:`jaxqueue.mjqm.exact`).
        target: the bound on the mean wait (> 0).
        per_class: every class's mean wait (``True``) or the mean over all jobs.
        lam0: starting rate (default ``lambda_c / 2``; one at or beyond ``lambda_c`` gives
            infinite waits and the next step bisects).
        rtol: relative tolerance on ``W / target`` (raised to ``1e3 eps`` of the dtype).
        max_iter: most solver calls.
        progress: optional ``progress(iteration, info)`` callback.

    Returns:
        dict with ``lam``, ``lambda_c``, ``W`` (the constrained wait at ``lam``), ``dW_dlam``,
        ``W_class``, ``W_all``, ``binding_class``, ``rel_error`` (``W / target - 1``),
        ``converged``, ``iterations`` and ``history`` (``lam``, ``W``, ``dW_dlam``, ``step`` per
        call: ``"newton"``, ``"bisect"`` or ``"start"``).

    Raises:
        ValueError: a workload the exact solver refuses, a non-positive target or ``lam0``.
    """

    if not float(target) > 0:
        raise ValueError(f"target: must be positive, got {target}")
    target = float(target)
    lam_c = float(exact_lambda_c(workload))

    def wait(lam):
        r = exact(workload, lam)
        w = jnp.nanmax(r.wait_mean_class) if per_class else r.wait_mean
        return w, (r.wait_mean_class, r.wait_mean)

    vg = jax.jit(jax.value_and_grad(wait, has_aux=True))
    dtype = workload.mean_service().dtype
    rtol = max(float(rtol), 1e3 * float(jnp.finfo(dtype).eps))
    lam0 = 0.5 * lam_c if lam0 is None else float(lam0)
    if not lam0 > 0:
        raise ValueError(f"lam0: must be positive, got {lam0}")

    def at(lam):  # an exact value and slope: intervals of zero width
        (w, (w_class, w_all)), dw = vg(jnp.asarray(lam, dtype))
        w, dw = float(w), float(dw)
        ok = math.isfinite(w) and math.isfinite(dw) and w > 0
        return {
            "value": w,
            "value_ci": [w, w],
            "derivative": dw,
            "derivative_ci": [dw, dw],
            "usable": ok,
            "W_class": np.asarray(w_class),
            "W_all": float(w_all),
        }

    sol = interval_max_rate(
        at, target, lam0=lam0, hi0=lam_c, rtol=rtol, max_iter=max_iter, progress=progress
    )
    h = sol["history"]
    i = h["lam"].index(sol["lam"])
    lam, w, dw, w_class = sol["lam"], sol["value"], sol["derivative"], h["W_class"][i]
    hist = {"lam": h["lam"], "W": h["value"], "dW_dlam": h["derivative"], "step": h["step"]}
    return {
        "lam": lam,
        "lambda_c": lam_c,
        "W": w,
        "dW_dlam": dw,
        "W_class": w_class,
        "W_all": h["W_all"][i],
        "binding_class": int(np.nanargmax(w_class)) if per_class else None,
        "rel_error": w / target - 1.0,
        "converged": sol["converged"],
        "iterations": len(hist["lam"]),
        "history": hist,
    }


def mjqm_max_rate_exact(fast: bool = False, progress=None, seed: int = 0):
    """Exact counterpart of :func:`mjqm_max_rate`: the largest arrival rate of five-class-exp
    such that the exact mean waiting time of every class is at most
    ``MAX_RATE["wait_target"]`` (:func:`exact_max_rate`, Newton on the exact gradient). With
    ``fast`` the same targets on :func:`small_exact_workload` (seconds instead of about a
    minute on a CPU). ``seed`` is unused (nothing is random)."""
    del seed
    wl = small_exact_workload() if fast else five_class_workload()
    target = MAX_RATE["wait_target"]
    sol = exact_max_rate(wl, target, lam0=MAX_RATE["lam0"], progress=progress)
    lam = sol["lam"]
    metrics = {
        "W": sol["W_class"],
        "W_all": sol["W_all"],
        "margin": 1.0 - lam / sol["lambda_c"],
    }
    targets = [Target("W", target, index=c) for c in range(wl.n_classes)]
    h = sol["history"]
    res = max_rate_result(lam, metrics, targets, metrics["margin"] > 0, h["lam"], h["W"], target)
    return res, _summary(
        res,
        {
            "case": "mjqm-max-rate-exact",
            "scenario": wl.name,
            "objective": "maximise lam (cost = -lam), exact waits, Newton on dW/dlam",
            "lam": lam,
            "lambda_c": sol["lambda_c"],
            "targets": {"W": [target] * wl.n_classes},
            "params": {"lam": lam},
            "metrics": {
                "W": np.asarray(sol["W_class"]).tolist(),
                "W_all": sol["W_all"],
                "margin": metrics["margin"],
            },
            "binding_class": sol["binding_class"],
            "dW_dlam": sol["dW_dlam"],
            "rel_error": sol["rel_error"],
            "converged": sol["converged"],
            "newton": {
                "lam": h["lam"],
                "W": h["W"],
                "dW_dlam": h["dW_dlam"],
                "step": h["step"],
            },
        },
    )
