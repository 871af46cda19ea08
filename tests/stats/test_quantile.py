"""Quantiles and tails with intervals from per-replication histograms (``stats.quantile_ci``,
``stats.tail_ci``), against a correlated process with a known marginal law."""

import numpy as np
import pytest
from scipy.special import ndtr

from jaxqueue import stats

ATOM = 0.3  # P(X = 0); above it X is exponential of mean 1: P(X > x) = (1 - ATOM) e^-x


def _true_quantile(q):
    return 0.0 if q <= ATOM else float(-np.log((1 - q) / (1 - ATOM)))


def _correlated_hists(rng, experiments, R, n, rho, edges):
    """Histograms ``(experiments, R, bins)`` of ``n`` values per replication of a stationary
    sequence with the marginal above, strongly correlated (a Gaussian AR(1) of coefficient
    ``rho`` pushed through the marginal's quantile function)."""
    z = rng.standard_normal((experiments, R))
    bins = np.empty((n, experiments, R), np.int64)
    for i in range(n):
        z = rho * z + np.sqrt(1 - rho**2) * rng.standard_normal(z.shape)
        u = ndtr(z)
        x = np.where(u <= ATOM, 0.0, -np.log(np.maximum(1 - u, 1e-300) / (1 - ATOM)))
        bins[i] = np.searchsorted(edges[1:], x, side="left")
    nb = len(edges) - 1
    flat = bins + nb * np.arange(experiments * R).reshape(experiments, R)
    return np.bincount(flat.ravel(), minlength=experiments * R * nb).reshape(experiments, R, nb)


@pytest.fixture(scope="module")
def experiments():
    edges = stats.log_histogram(1.0)[3]
    rng = np.random.default_rng(7)
    return _correlated_hists(rng, 400, 32, 1000, 0.9, edges), edges


def test_quantile_interval_covers_correlated_truth(experiments):
    """Over 400 independent experiments of 32 replications x 1000 correlated values (lag-1
    correlation 0.9, so an interval that took the values as independent would cover far less),
    the 95% intervals of p50, p90 and p99 cover the true quantile in 92-98% of them (the
    binomial spread of 400 trials at 95% is 1.1%)."""
    hists, edges = experiments
    for q in (0.5, 0.9, 0.99):
        truth = _true_quantile(q)
        ests = [stats.quantile_ci(h, edges, q) for h in hists]
        cover = np.mean([float(e.low) <= truth <= float(e.high) for e in ests])
        assert 0.92 <= cover <= 0.98, (q, cover)
        # the point estimates centre on the truth within a bin width (1/16 octave)
        mid = np.median([float(e.mean) for e in ests])
        assert abs(np.log2(mid / truth)) < 1 / 16, (q, mid, truth)


def test_quantile_in_the_atom_is_zero(experiments):
    """Below P(X = 0) the quantile and both ends of its interval are 0."""
    hists, edges = experiments
    e = stats.quantile_ci(hists[0], edges, 0.1)
    assert float(e.mean) == float(e.low) == float(e.high) == 0.0


def test_tail_interval_covers_correlated_truth(experiments):
    """``P(X > t)`` at t = 0.5 and 3: its 95% intervals cover ``(1 - ATOM) e^-t`` in 92-98%
    of the experiments, and ``hist_cdf`` of the pooled counts agrees with ``1 - P(X > t)``."""
    hists, edges = experiments
    for t in (0.5, 3.0):
        truth = (1 - ATOM) * np.exp(-t)
        ests = [stats.tail_ci(h, edges, t) for h in hists]
        cover = np.mean([float(e.low) <= truth <= float(e.high) for e in ests])
        assert 0.92 <= cover <= 0.98, (t, cover)
        pooled = hists[0].sum(axis=0)
        assert stats.hist_cdf(pooled, edges, t) == pytest.approx(1 - float(ests[0].mean))


def test_hist_cdf_inverts_quantile_from_hist():
    """Within a bin the interpolated distribution function is the inverse of
    ``quantile_from_hist``."""
    edges = stats.log_histogram(1.0)[3]
    rng = np.random.default_rng(3)
    counts = np.bincount(
        np.searchsorted(edges[1:], rng.exponential(1.0, 5000), side="left"),
        minlength=len(edges) - 1,
    )
    for q in (0.05, 0.5, 0.9, 0.999):
        x = stats.quantile_from_hist(counts, edges, q)
        assert stats.hist_cdf(counts, edges, x) == pytest.approx(q, abs=1e-12)


def test_bad_arguments_are_refused():
    edges = stats.log_histogram(1.0)[3]
    h = np.ones((4, len(edges) - 1))
    with pytest.raises(ValueError, match="q must lie in"):
        stats.quantile_ci(h, edges, 1.0)
    with pytest.raises(ValueError, match="at least 2 replications"):
        stats.quantile_ci(h[:1], edges, 0.5)
    with pytest.raises(ValueError, match="t must be finite"):
        stats.tail_ci(h, edges, -1.0)
