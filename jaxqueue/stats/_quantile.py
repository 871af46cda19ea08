"""Quantiles and tail probabilities with confidence intervals from per-replication histograms.

The distribution function of a histogram (bin 0 the atom at 0, log-spaced bins after it,
:mod:`._histogram`) is interpolated as :func:`quantile_from_hist` interpolates: linearly on
``(0, lo)``, linearly in ``log x`` within a later bin. The point estimate of a quantile is the
quantile of the pooled histogram; its interval is Woodruff's (Woodruff, "Confidence intervals
for medians and other position measures", JASA 47, 1952), with the replications as independent
clusters: the fraction ``F(x)`` of observations at or below the estimate ``x = F^-1(q)`` is a
ratio over replications (counts at or below ``x`` over counts), whose delta-method t interval
``q -+ h`` (:func:`~._ratio.linearise`) maps back through the pooled ``F^-1`` to
``[F^-1(q - h), F^-1(q + h)]``. It holds for correlated observations within a replication
(the waits of one queue) and needs no density estimate; its accuracy is also bounded by the
bin width (``1 / bins_per_octave`` octave). The tail ``P(X > t)`` is the same ratio at ``t``.
"""

from __future__ import annotations

import numpy as np

from ._ci import Estimate, t_quantile
from ._histogram import quantile_from_hist
from ._ratio import linearise

__all__ = ["hist_cdf", "quantile_ci", "tail_ci"]


def _below(hists, edges, x):
    """Per replication, the (interpolated) count of observations at or below ``x``."""
    hists = np.asarray(hists, dtype=float)
    cum = np.cumsum(hists, axis=-1)
    if x < 0:
        return np.zeros(hists.shape[:-1])
    # bin b holds (edges[b], edges[b + 1]]; bin 0 the atom at 0
    b = int(np.searchsorted(edges[1:], x, side="left"))
    if b == 0:
        return cum[..., 0]
    lo, hi = edges[b], edges[b + 1]
    if not np.isfinite(hi):  # the overflow bin: nothing known inside it
        frac = 0.0
    elif b == 1:
        frac = x / hi
    else:
        frac = np.log(x / lo) / np.log(hi / lo)
    return cum[..., b - 1] + frac * hists[..., b]


def hist_cdf(counts, edges, x) -> float:
    """``P(X <= x)`` of a histogram (``counts`` over the bins of ``edges``), interpolated as
    :func:`quantile_from_hist` interpolates (its inverse within a bin)."""
    counts = np.asarray(counts, dtype=float)
    n = counts.sum()
    return float(_below(counts, edges, float(x)) / n) if n > 0 else float("nan")


def _inverse(pooled, edges, p) -> float:
    """The pooled quantile at ``p`` clipped to ``[0, 1]``: 0 at or below 0, the top of the
    highest non-empty bin at or above 1 (``inf`` if that is the overflow bin)."""
    if p <= 0:
        return 0.0
    if p >= 1:
        top = int(np.flatnonzero(pooled)[-1]) if pooled.any() else 0
        return float(edges[top + 1])
    return quantile_from_hist(pooled, edges, p)


def _ratio_half_width(num, den, level) -> float:
    """Half-width of the delta-method t interval of ``sum(num) / sum(den)`` over
    replications."""
    _, z = linearise(num, den)
    return float(t_quantile(len(z), level) * np.std(z, ddof=1) / np.sqrt(len(z)))


def quantile_ci(hists, edges, q: float, level: float = 0.95) -> Estimate:
    """Quantile ``q`` of the observations binned in ``hists`` ``(R, bins)`` (one histogram per
    independent replication, at least 2) with Woodruff's interval (module docstring).

    Returns:
        :class:`Estimate` (``mean``: the quantile of the pooled histogram; ``nan`` when no
        observation was binned).

    Raises:
        ValueError: ``q`` outside ``(0, 1)``, fewer than 2 replications.
    """
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must lie in (0, 1), got {q}")
    hists = np.asarray(hists, dtype=float)
    R = hists.shape[0]
    t_quantile(R, level)  # checks R >= 2 and the level
    pooled = hists.sum(axis=0)
    if pooled.sum() <= 0:
        nan = np.float64(np.nan)
        return Estimate(nan, nan, nan, R, level)
    x = quantile_from_hist(pooled, edges, q)
    h = _ratio_half_width(_below(hists, edges, x), hists.sum(axis=-1), level)
    lo, hi = _inverse(pooled, edges, q - h), _inverse(pooled, edges, q + h)
    return Estimate(np.float64(x), np.float64(min(lo, x)), np.float64(max(hi, x)), R, level)


def tail_ci(hists, edges, t: float, level: float = 0.95) -> Estimate:
    """``P(X > t)`` of the observations binned in ``hists`` ``(R, bins)`` with the
    delta-method t interval of the ratio over replications, clipped to ``[0, 1]``.

    Raises:
        ValueError: ``t`` negative or not finite, fewer than 2 replications.
    """
    if not (np.isfinite(t) and t >= 0):
        raise ValueError(f"t must be finite and >= 0, got {t}")
    hists = np.asarray(hists, dtype=float)
    R = hists.shape[0]
    t_quantile(R, level)
    n = hists.sum(axis=-1)
    if n.sum() <= 0:
        nan = np.float64(np.nan)
        return Estimate(nan, nan, nan, R, level)
    above = n - _below(hists, edges, float(t))
    p = float(above.sum() / n.sum())
    h = _ratio_half_width(above, n, level)
    lo, hi = max(p - h, 0.0), min(p + h, 1.0)
    return Estimate(np.float64(p), np.float64(lo), np.float64(hi), R, level)
