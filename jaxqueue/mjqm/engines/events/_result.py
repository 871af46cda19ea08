"""The result of an event simulation: :class:`PolicyResult` and the summary of the
per-replication sums into estimates and a status."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ....stats import Estimate, Result, Status, drift, judge
from ....stats import effective_samples as _effective_jobs
from ....stats import ratio_ci as _ratio_ci
from ..._estimators import (
    MIN_EFFECTIVE,
    QUANTILES,
    RULES,
    Tails,
    quantile_fields,
    unconverged_reason,
)
from ..._workload import Workload

__all__ = ["PolicyResult"]


class PolicyResult(Tails, Result):
    """Event simulation of the MJQM under one policy (:func:`simulate_policy`).

    Attributes:
        policy: the policy name. lam: arrival rate.
        response_mean: mean response time (sojourn: wait plus service, preemptions included)
            of all measured jobs, a :class:`~jaxqueue.stats.Estimate` (ratio estimator over
            replications, delta-method t interval). response_mean_class: per class.
        wait_mean, wait_mean_class: time from arrival to the first start (for a non-preemptive
            policy the whole wait). wait_var_class: per class variance of that wait.
        jobs_mean: mean number in system. idle_servers: mean idle servers.
        hol_idle_servers: mean idle servers while someone waits (these three are time
            averages over the measuring window, Estimates).
        status: a :class:`~jaxqueue.stats.Status`: ``ok``, ``overflow`` (an arrival found
            its job deque full at
            ``max_buffer``), ``"nonstationary"`` (the second half of the measured jobs stays
            significantly longer than the first, the event cap was reached, or the run is too
            short to tell: ``n_eff < MIN_EFFECTIVE``), ``"unconverged"`` (a class with
            positive probability measured in fewer than 2 replications: no interval; or
            fewer than ``MIN_REPLICATIONS`` replications, the forward scan's rule: the
            interval of a ratio over few heavy-tailed replications is too short).
        drift: relative increase of the mean response time from the first to the second half.
        n_eff: effective independent responses per replication (``stats.effective_samples``,
            the rule of the forward scan started empty); below its ``MIN_EFFECTIVE`` the run is
            too short to judge and the status is ``nonstationary``.
        buffer: deque entries per replication. n_jobs, warmup, replications: the run's size.
        limit: ``(method, lambda_c, (low, high))`` of the policy (``None`` values when no
            method is known).
        hist: ``(classes, bins)`` waiting-time counts pooled over replications, binned as
            the forward scan bins (``edges``; bin 0 the atom at 0): :meth:`wait_quantile`.
        wait_hists, response_hists: ``(replications, classes, bins)`` waiting-time and
            response-time counts per replication (same bins): the quantiles and tails with
            intervals over replications (``Tails``: :meth:`response_quantile_ci`,
            :meth:`wait_quantile_ci`, :meth:`response_tail_ci`, :meth:`wait_tail_ci`).
    """

    policy: str
    lam: float
    response_mean: Estimate
    response_mean_class: Estimate
    wait_mean: Estimate
    wait_mean_class: Estimate
    wait_var_class: np.ndarray
    jobs_mean: Estimate
    idle_servers: Estimate
    hol_idle_servers: Estimate
    status: Status
    drift: float
    n_eff: float
    buffer: int
    n_jobs: int
    warmup: int
    replications: int
    limit: tuple
    hist: np.ndarray
    edges: np.ndarray
    wait_hists: np.ndarray
    response_hists: np.ndarray

    @property
    def level(self) -> float:
        """The confidence level of the intervals."""
        return self.response_mean.level

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        if self.status == Status.overflow:
            return f"an arrival found the job buffer full at {self.buffer} jobs; raise max_buffer"
        if self.status == Status.unconverged:
            thin = "a class was measured in fewer than 2 replications; raise n_jobs"
            return unconverged_reason(self.replications, thin)
        return (
            f"the mean response grew by {self.drift:.3g} (relative) from the first half to the "
            f"second, the event cap was reached, or {self.n_eff:.3g} effective responses per "
            f"replication are fewer than {MIN_EFFECTIVE:g}; raise n_jobs or lower lam"
        )

    def as_dict(self, workload: Workload, *, quantiles=QUANTILES, tails=()) -> dict:
        """The JSON object of ``jaxqueue mjqm simulate --policy NAME --json``: the keys of
        ``mjqm simulate`` that the event engine measures, plus
        ``response_mean``, ``response_mean_ci``, the ``quantiles`` of the response time and of
        the wait with their intervals and, for each ``t`` of ``tails``, ``P(T > t)`` and
        ``P(W > t)`` (:func:`quantile_fields`; overall and per class) and the policy's
        stability limit. ``wait_p90``: from the waiting-time histogram
        (:meth:`wait_quantile`)."""
        cores = np.asarray(workload.cores_array)[:, 0]

        def pair(e: Estimate, i=None):
            m, lo, hi = (np.asarray(x) for x in (e.mean, e.low, e.high))
            if i is not None:
                m, lo, hi = m[i], lo[i], hi[i]
            return float(m), [float(lo), float(hi)]

        overall, per_class = quantile_fields(self, workload.n_classes, quantiles, tails)
        classes = []
        for c in range(workload.n_classes):
            r, r_ci = pair(self.response_mean_class, c)
            w, w_ci = pair(self.wait_mean_class, c)
            classes.append(
                {
                    "cores": int(cores[c]),
                    "prob": float(workload.probs[c]),
                    "response_mean": r,
                    "response_mean_ci": r_ci,
                    "wait_mean": w,
                    "wait_mean_ci": w_ci,
                    "wait_var": float(self.wait_var_class[c]),
                    "wait_p90": self.wait_quantile(0.9, c),
                    **per_class[c],
                }
            )
        r, r_ci = pair(self.response_mean)
        w, w_ci = pair(self.wait_mean)
        method, lam_c, lam_c_ci = self.limit
        return {
            "scenario": workload.name,
            "policy": self.policy,
            "lam": self.lam,
            "lambda_ideal": float(workload.lambda_ideal()),
            "servers": list(workload.servers),
            "classes": classes,
            "response_mean": r,
            "response_mean_ci": r_ci,
            "wait_mean": w,
            "wait_mean_ci": w_ci,
            "wait_var": None,
            "wait_p90": self.wait_quantile(0.9),
            **overall,
            "number_in_system": pair(self.jobs_mean)[0],
            "number_in_system_ci": pair(self.jobs_mean)[1],
            "idle_servers": pair(self.idle_servers)[0],
            "idle_servers_ci": pair(self.idle_servers)[1],
            "hol_idle_servers": pair(self.hol_idle_servers)[0],
            "hol_idle_servers_ci": pair(self.hol_idle_servers)[1],
            "stability": {
                "lambda_c": lam_c,
                "ci": lam_c_ci,
                "method": method,
                "lambda_c_ci": lam_c_ci,
            },
            "drift": self.drift,
            "n_eff": self.n_eff,
            "buffer": self.buffer,
            "jobs": self.n_jobs,
            "warmup": self.warmup,
            "replications": self.replications,
            "status": self.status,
        }


def _estimate(num, den, level) -> Estimate:
    m, ci = _ratio_ci(num, den, level)
    return Estimate(
        jnp.asarray(m), jnp.asarray(ci[..., 0]), jnp.asarray(ci[..., 1]), len(num), level
    )


def _summarise(
    policy, lam, probs, acc, overflow, capped, B, n_jobs, warmup, level, limit, edges
) -> PolicyResult:
    a = jax.tree.map(lambda x: np.asarray(x).T, acc)  # replications first
    cnt = a.cnt.sum(1)
    resp = a.resp.sum(1)
    early, late = response_halves(a)
    scale = float(resp.sum() / max(cnt.sum(), 1))
    inc, growing = drift(early, late, scale)
    n_eff = _effective_jobs(resp, a.resp2.sum(1), cnt)
    seen = (a.cnt > 0).sum(0)  # replications that measured each class
    thin = bool(np.any((np.asarray(probs) > 0) & (seen < 2)))
    status, _ = judge(
        RULES,
        replications=len(cnt),
        n_eff=n_eff,
        growing=bool(growing),
        failed=bool(capped),  # the event cap: the run did not settle
        thin=thin,
        overflow=bool(overflow),
    )
    wait_hists = _with_zero_waits(a.hist.reshape(len(cnt), len(probs), -1), a.cnt)
    with np.errstate(invalid="ignore", divide="ignore"):
        wm = a.wait.sum(0) / a.cnt.sum(0)
        wvar = a.wait2.sum(0) / a.cnt.sum(0) - wm**2
    return PolicyResult(
        policy=policy,
        lam=float(lam),
        response_mean=_estimate(resp, cnt, level),
        response_mean_class=_estimate(a.resp, a.cnt, level),
        wait_mean=_estimate(a.wait.sum(1), cnt, level),
        wait_mean_class=_estimate(a.wait, a.cnt, level),
        wait_var_class=wvar,
        jobs_mean=_estimate(a.area_jobs, a.time, level),
        idle_servers=_estimate(a.area_idle, a.time, level),
        hol_idle_servers=_estimate(a.area_hol, a.time, level),
        status=status,
        drift=float(inc) / scale if scale > 0 else float("nan"),
        n_eff=n_eff,
        buffer=B,
        n_jobs=n_jobs,
        warmup=warmup,
        replications=len(cnt),
        limit=limit,
        hist=wait_hists.sum(axis=0),
        edges=edges,
        wait_hists=wait_hists,
        response_hists=a.rhist.reshape(len(cnt), len(probs), -1),
    )


def response_halves(a):
    """The mean response of the first and of the second half of each replication's measured
    jobs (the drift test's input), from the sums ``a`` with the replications first."""
    early = (a.resp.sum(1) - a.late_resp) / np.maximum(a.cnt.sum(1) - a.late_cnt, 1)
    return early, a.late_resp / np.maximum(a.late_cnt, 1)


def _with_zero_waits(hist, counts):
    """The histograms ``(..., classes, bins)`` with bin 0 (no wait) filled in: each class's
    measured jobs (``counts``, all of them started and left) minus those that waited (the
    kernel counts only these)."""
    hist = np.array(hist, copy=True)
    hist[..., 0] = np.maximum(np.rint(counts).astype(hist.dtype) - hist[..., 1:].sum(axis=-1), 0)
    return hist
