"""MJQM case studies: largest arrival rate and smallest server speed-up under waiting targets.

The optimisation runs on a common-random-number sample (:class:`MJQMSampler`, pathwise
derivatives by forward-mode autodiff); the answer is re-evaluated, and polished, with the
independent forward simulator :func:`jaxqueue.mjqm.simulate` on a different key and a larger
sample.

``mjqm-max-rate-exact`` is the exact counterpart of ``mjqm-max-rate`` (exponential services):
the same targets on the exact waits of :func:`jaxqueue.mjqm.exact`, solved by a safeguarded
Newton iteration driven by the exact derivative ``dW/dlam`` (``jax.grad`` through the QBD
solver), see :func:`exact_max_rate`. One value-and-gradient costs a few seconds on
five-class-exp (CPU), too much for the hundreds of steps of :func:`minimize`; Newton needs a
handful.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, exact, exact_lambda_c, simulate

from ._minimize import Polish, minimize
from ._mjqm import MJQMSampler, five_class_workload
from ._problem import Box, Problem, Target, max_rate_result, newton_rate_step
from ._report import summarize as _summary

__all__ = [
    "mjqm_max_rate",
    "mjqm_max_rate_exact",
    "mjqm_speedup",
    "exact_max_rate",
    "forward_metrics",
    "small_exact_workload",
    "MAX_RATE",
    "SPEEDUP",
]

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


def _five_class_case(case, fast, progress, seed, *, param, x0, box, at, cost, polish, target, head):
    """A case of five-class-exp with one parameter ``param`` (from ``x0``, within ``box(wl)``),
    optimised on the pathwise sampler and re-evaluated with :func:`forward_metrics`.

    ``at(x)``: the model's parameters at ``param = x`` (the sampler's; as floats, those of
    :func:`forward_metrics`). ``cost(x)``. ``polish``: ``(range, move(x, factor))``.
    ``target``: ``(metric, bound, reported metrics)``, the bound on every class. ``head``: the
    summary's keys after ``case`` and ``scenario``. Returns ``(result, summary)``."""
    wl, sz = five_class_workload(), _sizes(fast)
    k_opt, k_eval = _keys(seed)
    sampler = MJQMSampler(wl, key=k_opt, **sz["sampler"])
    fw = sz["forward"]
    metric, bound, shown = target
    polish_range, move = polish
    problem = Problem(
        params0={param: jnp.asarray(x0)},
        transforms={param: box(wl)},
        cost=lambda p: cost(p[param]),
        metrics=lambda p: sampler.metrics({k: jnp.asarray(v) for k, v in at(p[param]).items()}),
        targets=[Target(metric, bound, index=c) for c in range(wl.n_classes)],
        evaluate=lambda p: forward_metrics(
            wl, key=k_eval, **fw, **{k: float(v) for k, v in at(p[param]).items()}
        ),
        polish=lambda p, s: {param: move(p[param], s)},
    )
    res = minimize(
        problem,
        steps=sz["steps"],
        rounds=sz["rounds"],
        learning_rate=0.05,
        grad_mode="forward",
        polish=Polish(range=polish_range, iters=10 if fast else 16),
        progress=progress,
    )
    x = float(res.params[param])
    return res, _summary(
        res,
        {
            "case": case,
            "scenario": "five-class-exp",
            **head,
            param: x,
            f"{param}_gradient": float(res.relaxed_params[param]),
            "targets": {metric: [bound] * wl.n_classes},
            "params": {param: x},
            "metrics": {m: res.metrics[m].tolist() for m in shown},
            "sizes": sz,
        },
    )


def mjqm_max_rate(fast: bool = False, progress=None, seed: int = 0):
    """Largest arrival rate of the five-class MJQM (exponential) such that the mean waiting
    time of every class stays under ``MAX_RATE["wait_target"]``."""
    return _five_class_case(
        "mjqm-max-rate",
        fast,
        progress,
        seed,
        param="lam",
        x0=MAX_RATE["lam0"],
        box=lambda wl: Box(0.01, 0.999 * float(wl.lambda_ideal()), log=True),
        at=lambda x: {"lam": x},
        cost=lambda x: -x,
        polish=((0.8, 4.0), lambda x, s: x / s),
        target=("W", MAX_RATE["wait_target"], ("W", "W_ci")),
        head={"objective": "maximise lam (cost = -lam)"},
    )


def mjqm_speedup(fast: bool = False, progress=None, seed: int = 0):
    """Smallest server speed-up of the five-class MJQM (exponential) at ``SPEEDUP["lam"]``
    such that the 90th percentile of the waiting time of every class stays under
    ``SPEEDUP["p90_target"]``."""
    lam = SPEEDUP["lam"]
    return _five_class_case(
        "mjqm-speedup",
        fast,
        progress,
        seed,
        param="speed",
        x0=SPEEDUP["speed0"],
        box=lambda wl: Box(1.001 * lam / float(wl.lambda_ideal()), 20.0, log=True),
        at=lambda x: {"lam": lam, "speed": x},
        cost=lambda x: x,
        polish=((0.5, 4.0), lambda x, s: x * s),
        target=("W_p90", SPEEDUP["p90_target"], ("W_p90", "W")),
        head={"lam": lam},
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
    ``rtol`` (relative).

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
    aim = target * (1.0 - 0.5 * rtol)
    lo, hi = 0.0, lam_c
    lam = 0.5 * lam_c if lam0 is None else float(lam0)
    if not lam > 0:
        raise ValueError(f"lam0: must be positive, got {lam0}")
    hist = {"lam": [], "W": [], "dW_dlam": [], "step": []}
    step, best, converged = "start", None, False
    for it in range(int(max_iter)):
        (w, (w_class, w_all)), dw = vg(jnp.asarray(lam, dtype))
        w, dw = float(w), float(dw)
        for k, v in (("lam", lam), ("W", w), ("dW_dlam", dw), ("step", step)):
            hist[k].append(v)
        if progress is not None:
            viol = math.log(w / target) if math.isfinite(w) and w > 0 else math.inf
            progress(it, {"round": it + 1, "rounds": max_iter, "cost": -lam, "violation": viol})
        finite = math.isfinite(w) and math.isfinite(dw)
        if finite and w <= target:
            lo = max(lo, lam)
            best = (lam, w, dw, np.asarray(w_class), float(w_all))
            if 1.0 - w / target <= rtol:
                converged = True
                break
        else:
            hi = min(hi, lam)
        lam, step = newton_rate_step(lam, w, dw, aim, lo, hi, usable=finite and w > 0)
        if hi - lo <= 1e-15 * hi:
            break
    if best is None:
        raise RuntimeError("exact_max_rate: no rate meeting the target was found")
    lam, w, dw, w_class, w_all = best
    return {
        "lam": lam,
        "lambda_c": lam_c,
        "W": w,
        "dW_dlam": dw,
        "W_class": w_class,
        "W_all": w_all,
        "binding_class": int(np.nanargmax(w_class)) if per_class else None,
        "rel_error": w / target - 1.0,
        "converged": converged,
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
