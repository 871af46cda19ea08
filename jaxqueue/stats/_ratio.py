"""Ratio estimators over independent replications, their control variate and run diagnostics.

A ratio ``sum(num) / sum(den)`` over replications (time averages, per-job means) gets a
delta-method interval from its linearised replications; a control variate of known mean 0
(the MJQM's idle-server identity, ``mjsre`` eq. (2) telescoped) narrows it (Glasserman,
*Monte Carlo Methods in Financial Engineering*, 2003, Section 4.1). The diagnostics judge
whether a run forgot its start: the effective sample size ``n / (2 tau_int)`` (Sokal,
"Monte Carlo methods in statistical mechanics", 1997, Section 2), the drift of the mean
between the two halves of the measured jobs, and the t statistic of an identity.
"""

from __future__ import annotations

import numpy as np

from ._ci import drift, mean_ci, t_quantile

__all__ = [
    "linearise",
    "ratio_ci",
    "control_variate",
    "identity_z",
    "effective_samples",
    "stationarity",
]


def linearise(num, den):
    """Ratio ``r = sum(num) / sum(den)`` over replications (axis 0) and the per-replication
    delta-method values ``z = r + (num - r den) / mean(den)`` whose mean is ``r``."""
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    tot = den.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = num.sum(axis=0) / tot
        z = r + (num - r * den) / (tot / den.shape[0])
    return np.where(tot > 0, r, np.nan), np.nan_to_num(z)


def ratio_ci(num, den, level, control=None):
    """Ratio estimator ``sum(num) / sum(den)`` over replications with a delta-method t
    interval, corrected for the skewness and kurtosis of the replications
    (``mean_ci(shape=True)``). Returns ``(value, [low, high] on the last axis)``.

    ``control``: optional ``(R,)`` per-replication values of a control variate with known mean
    0 (:func:`control_variate`). The estimate is then ``r - beta mean(control)`` with
    ``beta = cov(z, control) / var(control)`` per column, and the interval that of the
    residuals ``z - beta control`` (Glasserman 2003, Section 4.1; ``beta`` estimated from the
    same replications, a bias of order ``1 / R``)."""
    r, z = linearise(num, den)
    if control is not None:
        c = np.asarray(control, float).reshape((-1,) + (1,) * (z.ndim - 1))
        cc = c - c.mean()
        var = float(np.sum(cc**2))
        beta = np.sum((z - z.mean(axis=0)) * cc, axis=0) / var if var > 0 else 0.0
        z = z - beta * c
    est = mean_ci(z, axis=0, level=level, shape=True)
    m, lo, hi = (np.asarray(v, float) for v in (est.mean, est.low, est.high))
    bad = np.isnan(r)
    m, lo, hi = (np.where(bad, np.nan, v) for v in (m, lo, hi))
    return m, np.stack([lo, hi], axis=-1)


def control_variate(num, den, expected):
    """Per replication, the linearised ratio ``num / den`` minus its known stationary value
    ``expected``: mean 0 for a stationary run. For the MJQM, the idle server-time over the
    elapsed time minus ``s - lam E[alpha sigma]``: a replication that drew more work has
    fewer idle servers and longer waits, so it removes much of the spread of the waits."""
    return linearise(num, den)[1] - expected


def identity_z(value, ci, expected, level, n_reps) -> float:
    """``(value - expected) / se``, ``se`` read back from the ``level`` interval ``ci`` of
    ``value`` over ``n_reps`` replications (Student t): a significant difference says an
    identity that holds for a stationary run (the MJQM's idle servers) failed."""
    se = (ci[1] - ci[0]) / (2 * t_quantile(n_reps, level))
    return float((value - expected) / se) if se > 0 else 0.0


def effective_samples(total, total_sq, n) -> float:
    """Effective independent observations per replication, ``n / (2 tau_int)``.

    ``s_w^2 / s_b^2``: the mean within-replication variance (from the sums ``total`` and
    ``total_sq`` of ``n`` observations per replication) over the variance of the replication
    means across replications. For a stationary run of ``n`` observations the variance of
    its mean is ``s_w^2 2 tau_int / n`` (``tau_int`` the integrated autocorrelation time;
    Sokal 1997, Section 2), so the ratio is the run's length in units of ``2 tau_int``; a run
    not much longer than its own correlation time cannot show that it forgot its start.
    Infinite when the means are equal.
    """
    ok = n > 0
    if ok.sum() < 2:
        return float("inf")
    m = total[ok] / n[ok]
    within = float(np.mean(np.maximum(total_sq[ok] / n[ok] - m**2, 0.0)))
    between = float(np.var(m, ddof=1))
    return within / between if between > 0 else float("inf")


def stationarity(total, n, total2, n2, level=0.999):
    """Compare the mean of the second half of the measured observations (sums ``total2`` of
    ``n2`` per replication) with the first half (``total - total2`` of ``n - n2``), paired by
    replication (:func:`drift`): a significant increase (one-sided, ``level``) flags a load
    beyond the stability limit or a run too short to reach the stationary regime. Returns
    ``(growing, mean increase)``; fewer than 2 replications with both halves: not growing."""
    n1 = n - n2
    ok = (n1 > 0) & (n2 > 0)
    if ok.sum() < 2:
        return False, float("nan")
    first = (total[ok] - total2[ok]) / n1[ok]
    inc, growing = drift(first, total2[ok] / n2[ok], float(np.mean(total[ok] / n[ok])), level=level)
    return bool(growing), float(inc)
