"""The result of a forward run (``mjsre`` Section 6 metrics) and its summary of the kernel's
per-replication sums: ratio estimators across replications with the idle-server control
variate, the stationarity checks and the status (:func:`jaxqueue.stats.judge`).

The HOL idle server-time of a job is ``sum_{i <= alpha} (W^alpha - W^i)`` (untruncated); the
total idle server-time follows from eq. (2) by telescoping, so the mean number of idle servers
equals ``s - lam E[alpha sigma]`` in expectation (``ForwardResult.idle_servers_expected``):
the measured value minus it is a control variate of mean 0 that moves against the waits
(``stats.ratio_ci``, from ``MIN_CONTROL_REPS`` replications on) and a stationarity test
(``stats.identity_z``). The drift test compares the mean wait of the second half of the
measured jobs with the first half.
"""

from __future__ import annotations

import numpy as np

from ...._tables import metrics_frame
from ....stats import (
    Result,
    Status,
    control_variate,
    density_from_hist,
    effective_samples,
    identity_z,
    judge,
    ratio_ci,
    stationarity,
    t_quantile,
)
from ..._estimators import (
    IDLE_LEVEL,
    MIN_CONTROL_REPS,
    MIN_EFFECTIVE,
    QUANTILES,
    RULES,
    Tails,
    quantile_fields,
    unconverged_reason,
)
from ..._tails import response_hists
from ..._workload import Workload

__all__ = ["ForwardResult", "summarise"]


class ForwardResult(Tails, Result):
    """Metrics of a forward MJSRE run (host-side numpy, float64).

    Class-indexed arrays follow the workload's class order. ``*_ci`` are ``[low, high]``
    intervals across replications at ``level`` (ratio estimators with the delta method).
    Quantiles come from per-class log-spaced histograms (``edges``; bin 0 holds the atom at
    0), interpolated within a bin, so they are accurate to a fraction of a bin width
    (``1 / bins_per_octave`` relative); ``wait_hists`` keeps them per section of the
    replications (``_forward.HIST_SECTIONS``), the groups over which the quantiles and tails
    get their intervals (``Tails``: :meth:`wait_quantile_ci`, :meth:`response_quantile_ci`,
    ...). The response time's histograms are those of the wait convolved with the service law
    (:meth:`tail_hists`, ``mjqm/_tails.py``: the wait does not depend on the job's own service
    time; none for a law with no known distribution function). ``estimate(name)`` gives the
    :class:`~jaxqueue.stats.Estimate` of ``wait_mean``, ``wait_mean_all``,
    ``system_time_mean``, ``number_in_system``, ``idle_servers``, ``hol_idle_servers``.
    """

    _size_field = "n_replications"

    workload: Workload
    lam: float
    n_jobs: int
    warmup: int
    n_replications: int
    level: float
    counts: np.ndarray  # (classes,) measured jobs per class
    wait_mean: np.ndarray
    wait_mean_ci: np.ndarray
    wait_var: np.ndarray
    system_time_mean: np.ndarray
    system_time_mean_ci: np.ndarray
    wait_mean_all: float
    wait_mean_all_ci: np.ndarray
    wait_var_all: float
    system_time_mean_all: float
    number_in_system: float
    number_in_system_ci: np.ndarray
    idle_servers: float
    idle_servers_ci: np.ndarray
    hol_idle_servers: float
    hol_idle_servers_ci: np.ndarray
    idle_servers_by_type: np.ndarray
    hol_idle_servers_by_type: np.ndarray
    utilisation: np.ndarray  # per resource type
    idle_servers_expected: float
    hist: np.ndarray  # (classes, bins) pooled waiting-time counts
    edges: np.ndarray  # (bins + 1,)
    wait_hists: np.ndarray  # (sections, classes, bins) waiting-time counts per section
    final_state: np.ndarray  # (replications, s) workload vectors after the last job
    device: str
    status: Status  # ok, nonstationary (the mean wait grows, the idle identity fails, a run
    # too short to judge) or unconverged (a class seen in < 2 replications, or fewer than
    # MIN_REPLICATIONS replications)
    wait_growth: float  # mean over replications of (2nd-half mean wait - 1st-half mean wait)
    idle_z: float = 0.0  # (idle servers - (s - lam E[alpha sigma])) / se (stats.identity_z)
    n_eff: float = float("inf")  # effective waits per replication (stats.effective_samples)
    rounds: tuple = ()  # (jobs, warm-up, status, seconds) per round of simulate_steady
    start: str = "empty"  # "empty", "init", or "backward" (simulate_steady)

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        if self.status == Status.unconverged:
            thin = "a class has waiting times in fewer than 2 replications; raise n_jobs"
            return unconverged_reason(self.n_replications, thin)
        return (
            f"a stationarity check failed (mean wait growth {self.wait_growth:.4g} between "
            f"halves, idle-server identity t = {self.idle_z:.2f}, {self.n_eff:.3g} effective "
            f"waits per replication where a start not known to be stationary needs "
            f"{MIN_EFFECTIVE:g})"
        )

    def tail_hists(self) -> tuple:
        """``(wait_hists, response_hists)``: the response time's (fractional) histograms are
        the waits' convolved with the service laws (class docstring), computed here."""
        return self.wait_hists, response_hists(self.wait_hists, self.edges, self.workload.services)

    def wait_density(self, cls: int | None = None) -> tuple[np.ndarray, np.ndarray, float]:
        """``(bin_centres, density, p0)``: the waiting-time density on the positive bins
        (geometric centres) and the probability of not waiting at all."""
        counts = self.hist.sum(axis=0) if cls is None else self.hist[cls]
        return density_from_hist(counts, self.edges)

    def as_dict(self, *, quantiles=QUANTILES, tails=()) -> dict:
        """The JSON object of ``jaxqueue mjqm simulate --json``, with the ``quantiles`` of the
        response time and of the wait and their intervals, and the tails at ``tails``
        (``_estimators.quantile_fields``), overall and per class."""
        wl = self.workload
        overall, per_class = quantile_fields(self, wl.n_classes, quantiles, tails)
        cores = np.asarray(wl.cores_array)
        probs = np.asarray(wl.probs, dtype=float)
        classes = []
        for c in range(wl.n_classes):
            classes.append(
                {
                    "cores": int(cores[c, 0]) if wl.n_types == 1 else cores[c].tolist(),
                    "prob": float(probs[c]),
                    "jobs": int(self.counts[c]),
                    "wait_mean": self.wait_mean[c],
                    "wait_mean_ci": self.wait_mean_ci[c],
                    "wait_var": self.wait_var[c],
                    "wait_p50": self.wait_quantile(0.5, c),
                    "wait_p90": self.wait_quantile(0.9, c),
                    "wait_p99": self.wait_quantile(0.99, c),
                    "system_time_mean": self.system_time_mean[c],
                    "system_time_mean_ci": self.system_time_mean_ci[c],
                    **per_class[c],
                }
            )
        return {
            "scenario": wl.name,
            "lam": self.lam,
            "lambda_ideal": float(wl.lambda_ideal()),
            "servers": list(wl.servers),
            "classes": classes,
            "wait_mean": self.wait_mean_all,
            "wait_mean_ci": self.wait_mean_all_ci,
            "wait_var": self.wait_var_all,
            "wait_p90": self.wait_quantile(0.9),
            **overall,
            "system_time_mean": self.system_time_mean_all,
            "number_in_system": self.number_in_system,
            "number_in_system_ci": self.number_in_system_ci,
            "idle_servers": self.idle_servers,
            "idle_servers_ci": self.idle_servers_ci,
            "hol_idle_servers": self.hol_idle_servers,
            "hol_idle_servers_ci": self.hol_idle_servers_ci,
            "idle_servers_expected": self.idle_servers_expected,
            "utilisation": self.utilisation,
            "jobs": self.n_jobs,
            "warmup": self.warmup,
            "replications": self.n_replications,
            "level": self.level,
            "device": self.device,
            "status": self.status,
            "wait_growth": self.wait_growth,
            "idle_z": self.idle_z,
            "n_eff": self.n_eff,
            "start": self.start,
            "rounds": [list(r) for r in self.rounds],
        }

    def to_frame(self):
        """One row per class, the ``classes`` of :meth:`as_dict` (intervals as ``_low`` /
        ``_high`` columns). Needs pandas (``pip install 'jaxqueue[tables]'``)."""
        return metrics_frame(self.as_dict())


def summarise(
    workload, lam, fsum, counts, hist, W, edges, *, n_jobs, warmup, level, device, stationary_start
):
    """The :class:`ForwardResult` of the kernel's per-replication sums ``fsum`` (``(R, 3 C + 1 +
    3 T + 2)``: per class waits, squared waits, system times; elapsed time; per type HOL idle,
    free idle and work; second-half waits and jobs), job ``counts`` ``(R, C)``, the pooled
    histogram and the final states ``W``: ratio estimators across replications with the
    idle-server control variate, the drift, identity and effective-size checks, the status.

    Raises:
        FloatingPointError: non-finite sums (the workload overflowed: a load beyond the limit).
    """
    C, T = workload.n_classes, workload.n_types
    R = fsum.shape[0]
    sw, sw2, ssys = fsum[:, :C], fsum[:, C : 2 * C], fsum[:, 2 * C : 3 * C]
    time = fsum[:, 3 * C]
    hol = fsum[:, 3 * C + 1 : 3 * C + 1 + T]
    free = fsum[:, 3 * C + 1 + T : 3 * C + 1 + 2 * T]
    work = fsum[:, 3 * C + 1 + 2 * T : 3 * C + 1 + 3 * T]
    w2, n2 = fsum[:, -2], fsum[:, -1]
    if not (np.all(np.isfinite(fsum)) and np.all(np.isfinite(W))):
        raise FloatingPointError(
            "non-finite values in the forward simulation (overflow of the workload: the load "
            "is probably beyond the stability limit)"
        )
    n = counts.astype(float)
    ncls = n.sum(axis=0)
    idle_time = (hol + free).sum(axis=1)
    idle, idle_ci = ratio_ci(idle_time, time, level)
    idle_expected = float(np.sum(workload.idle_servers_expected(lam)))
    cv = control_variate(idle_time, time, idle_expected) if R >= MIN_CONTROL_REPS else None
    wait_mean, wait_ci = ratio_ci(sw, n, level, cv)
    sys_mean, sys_ci = ratio_ci(ssys, n, level, cv)
    with np.errstate(invalid="ignore", divide="ignore"):
        raw = sw.sum(axis=0) / ncls
        wait_var = np.maximum(sw2.sum(axis=0) / ncls - raw**2, 0.0)  # >= 0 (rounding)
    ntot = n.sum(axis=1)
    all_mean, all_ci = ratio_ci(sw.sum(axis=1), ntot, level, cv)
    all_var = max(sw2.sum() / ntot.sum() - (sw.sum() / ntot.sum()) ** 2, 0.0)
    L, L_ci = ratio_ci(ssys.sum(axis=1), time, level, cv)
    growing, growth = stationarity(sw.sum(axis=1), ntot, w2, n2)
    idle_z = identity_z(float(idle), idle_ci, idle_expected, level, R)
    n_eff = effective_samples(sw.sum(axis=1), sw2.sum(axis=1), ntot)
    # a class of positive probability waited in fewer than 2 replications: no interval for it
    thin = np.any(((n > 0).sum(axis=0) < 2) & (np.asarray(workload.probs) > 0))
    status, _ = judge(
        RULES,
        replications=R,
        n_eff=n_eff,
        growing=growing,
        failed=abs(idle_z) > t_quantile(R, IDLE_LEVEL),
        thin=bool(thin),
        stationary_start=stationary_start,
    )
    hol_all, hol_ci = ratio_ci(hol.sum(axis=1), time, level)
    tt = time.sum()
    sections = hist.sum(axis=0)
    sections = sections[sections.sum(axis=(1, 2)) > 0]  # fewer replications than sections
    util = work.sum(axis=0) / (np.asarray(workload.servers, dtype=float) * tt)
    return ForwardResult(
        workload=workload,
        lam=lam,
        n_jobs=n_jobs,
        warmup=warmup,
        n_replications=R,
        level=level,
        counts=ncls.astype(np.int64),
        wait_mean=wait_mean,
        wait_mean_ci=wait_ci,
        wait_var=wait_var,
        system_time_mean=sys_mean,
        system_time_mean_ci=sys_ci,
        wait_mean_all=float(all_mean),
        wait_mean_all_ci=all_ci,
        wait_var_all=float(all_var),
        system_time_mean_all=float(ratio_ci(ssys.sum(axis=1), ntot, level, cv)[0]),
        number_in_system=float(L),
        number_in_system_ci=L_ci,
        idle_servers=float(idle),
        idle_servers_ci=idle_ci,
        hol_idle_servers=float(hol_all),
        hol_idle_servers_ci=hol_ci,
        idle_servers_by_type=(hol + free).sum(axis=0) / tt,
        hol_idle_servers_by_type=hol.sum(axis=0) / tt,
        utilisation=util,
        idle_servers_expected=idle_expected,
        idle_z=idle_z,
        n_eff=n_eff,
        hist=sections.sum(axis=0),
        edges=edges,
        wait_hists=sections,
        final_state=W,
        device=device,
        status=status,
        wait_growth=growth,
    )
