"""``stability_limit``: the stability limit of a policy on a workload, as an explicit call.

Where a limit is known it is exact: eq. (8) of ``mjsre`` and the one-class forms in closed
form (:func:`~jaxqueue.mjqm.lambda_c_closed_form`), a policy's ``closed_form_limit``
(``lambda_ideal`` where it leaves no server idle once enough is present: server-filling, its
SRPT and Gittins variants, msf and maxweight under a divisibility chain; one G/G/k queue per
class for balanced-splitting without helpers), the saturated QBD for FCFS with exponential
services (:func:`~jaxqueue.mjqm.exact_lambda_c`). Otherwise it is estimated with a key: FCFS by the
pile growth rate (Theorem 5.1, Algorithm 2), a policy whose service depends only on the jobs
in service and a window of waiting ones by the throughput of its saturated queue. Any other
policy's limit is unknown, and said so (so is FCFS's with several resource types or specific
servers beyond eq. (8)). The simulations never call this: they take its
result as ``limit=``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from ._exact import exact_lambda_c_or_none
from ._stability import (
    StabilityResult,
    _bounds,
    exact_limit,
    lambda_c_closed_form,
    unknown_limit,
)
from .engines.events import saturated_throughput
from .engines.recurrence import pile_growth
from .policies import Policy, parse_policy

__all__ = ["stability_limit"]

_METHODS = ("auto", "closed-form", "ideal", "exact", "pile-growth", "saturated")


def _fcfs_closed_form(workload) -> float | None:
    """FCFS in closed form: one-core jobs only (``lambda_ideal``), else eq. (8)."""
    if workload.n_types == 1 and workload.specific is None:
        if (workload.cores_array[:, 0] == 1).all():
            return float(workload.lambda_ideal())
    return lambda_c_closed_form(workload)


def stability_limit(
    workload,
    policy: str | Policy = "fcfs",
    *,
    method: str = "auto",
    key=None,
    rel_tol: float = 0.01,
    max_jobs: int = 1 << 20,
    replications: int = 32,
    n_jobs: int = 20_000,
    throw: bool = False,
) -> StabilityResult:
    """The stability limit of ``policy`` on ``workload`` (module docstring).

    Args:
        workload: the model.
        policy: a job-list policy (``policies.FCFS()``) or its name (``"fcfs"``,
            ``"window:4"``, ...).
        method: ``"auto"`` (exact where known, else an estimate with ``key``, else unknown),
            or one of ``"closed-form"`` (FCFS: eq. (8); another policy: its
            ``closed_form_limit``), ``"ideal"`` (``lambda_ideal``: the limit of a policy that
            never leaves a server idle while a job waits, an upper bound for any other),
            ``"exact"`` (FCFS, exponential services: the QBD), ``"pile-growth"`` (FCFS:
            Algorithm 2 with ``key``, float32, ``replications`` piles of at most ``max_jobs``
            jobs each, to ``rel_tol``), ``"saturated"`` (a policy with ``saturation_limit``, or
            FCFS: the saturated queue's throughput with ``key``, ``replications`` x ``n_jobs``).
        key: PRNG key of the estimates (never needed for an exact limit).
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the status is not ``ok``
            (an estimate short of ``rel_tol``, an unknown limit).

    Returns:
        :class:`StabilityResult` (``method = "unknown"``, ``lambda_c = None`` where no method
        is known).

    Raises:
        ValueError: an unknown method, a method that does not apply to this policy or
            workload, or an estimate asked for (or needed by ``"auto"``) without ``key``.
    """
    pol = parse_policy(policy)
    if method not in _METHODS:
        raise ValueError(f"stability_limit: method must be one of {_METHODS}, got {method!r}")
    res = _limit(workload, pol, method, key, rel_tol, max_jobs, replications, n_jobs)
    return res.raise_for_status() if throw else res


def _limit(workload, pol, method, key, rel_tol, max_jobs, replications, n_jobs):
    label, fcfs = pol.label, pol.recurrence

    def need_key(what: str):
        if key is None:
            raise ValueError(
                f"stability_limit: the limit of {label} on this workload needs {what}: pass "
                "key= (or method='ideal' for the bound lambda_ideal)"
            )

    def refuse(why: str):
        raise ValueError(f"stability_limit: method {method!r} does not apply: {why}")

    if method == "ideal":
        return exact_limit(workload, workload.lambda_ideal(), "ideal", label)
    closed = _fcfs_closed_form(workload) if fcfs else pol.closed_form_limit(workload)
    if closed is not None and method in ("auto", "closed-form"):
        ideal = not fcfs and closed == float(workload.lambda_ideal())
        kind = "ideal" if ideal else "closed-form"
        return exact_limit(workload, closed, kind, label)
    if method == "closed-form":
        refuse(f"no closed form is known for {label} on this workload")
    if method in ("auto", "exact") and fcfs:
        exact = exact_lambda_c_or_none(workload, full=method == "exact")
        if exact is not None:
            return exact_limit(workload, exact, "exact", label)
    if method == "exact":
        refuse(f"{label} has no exact limit here (FCFS, phase-type services, within the limits)")
    plain = workload.n_types == 1 and workload.specific is None
    if method == "pile-growth" or (method == "auto" and fcfs and plain):
        if not fcfs:
            refuse(f"{label} has no recurrence form (pile growth is FCFS's)")
        need_key("a pile-growth estimate (Algorithm 2)")
        res = pile_growth(
            workload,
            key=key,
            replications=replications,
            rel_tol=rel_tol,
            max_jobs=max_jobs,
            dtype=jnp.float32,
        )
        return res if label == "fcfs" else _relabel(res, label)
    if method == "saturated" or (method == "auto" and pol.saturation_limit):
        if not (pol.saturation_limit or fcfs):
            refuse(f"{label}'s limit is not the throughput of its saturated queue")
        need_key("the throughput of the saturated queue")
        mean, ci = saturated_throughput(
            workload, pol, key=key, n_jobs=n_jobs, n_replications=replications
        )
        return _saturated(workload, mean, ci, replications, n_jobs, label)
    return unknown_limit(workload, label)


def _relabel(res: StabilityResult, label: str) -> StabilityResult:
    return dataclasses.replace(res, policy=label)


def _saturated(workload, mean, ci, replications, n_jobs, label) -> StabilityResult:
    lid, llo = _bounds(workload)
    lo, hi = float(ci[0]), float(ci[1])
    return StabilityResult(
        lambda_c=float(mean),
        lambda_c_ci=(lo, hi),
        gamma=1.0 / float(mean),
        gamma_ci=(1.0 / hi, 1.0 / lo if lo > 0 else float("inf")),
        lambda_ideal=lid,
        lambda_lower=llo,
        jobs=int(n_jobs),
        replications=int(replications),
        rel_half_width=(hi - lo) / 2 / float(mean),
        converged=True,
        method="saturated",
        policy=label,
    )
