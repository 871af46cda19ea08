"""Quantiles with intervals of the FCFS forward scan (the recurrence engine): its waiting-time
histograms per section of the replications and its response-time histograms (the waits
convolved with the service laws, ``mjqm/_tails.py``), against Erlang C (M/M/s), against the
event engine's directly binned responses of the same jobs, and the service laws' distribution
functions against samples."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.dist import (
    BoundedPareto,
    Deterministic,
    Empirical,
    Erlang,
    Exponential,
    HyperExponential,
)
from jaxqueue.mjqm import Workload, simulate, simulate_policy
from jaxqueue.mjqm._tails import service_cdf

LAWS = [
    Exponential(2.0),
    Erlang(3, 1.5),
    HyperExponential(means=(0.5, 5.0), probs=(0.9, 0.1)),
    BoundedPareto(0.2, 50.0, 1.5),
    Empirical(jnp.asarray([0.5, 1.0, 1.0, 4.0])),
]


@pytest.mark.parametrize("law", LAWS, ids=lambda law: type(law).__name__)
def test_service_cdf_matches_samples(law):
    """The closed forms against the empirical distribution function of 200,000 draws
    (Kolmogorov distance below 0.005, about 2 standard errors of its largest term)."""
    x = np.asarray(law.sample(jax.random.key(0), (200_000,)), dtype=float)
    grid = np.quantile(x, np.linspace(0.01, 0.99, 60))
    emp = np.searchsorted(np.sort(x), grid, side="right") / len(x)
    assert np.max(np.abs(service_cdf(law, grid) - emp)) < 0.005
    assert service_cdf(Deterministic(2.0), np.array([1.9, 2.0])).tolist() == [0.0, 1.0]


def _erlang_c(s, a):
    top = a**s / math.factorial(s) * s / (s - a)
    return top / (sum(a**k / math.factorial(k) for k in range(s)) + top)


def test_forward_scan_quantiles_cover_erlang_c():
    """M/M/4 at lam = 3 through the forward scan: the 95% intervals of the wait's p90 and p99,
    of ``P(W > 1)`` and of the response's p90 (the convolution with the exponential service)
    cover the closed forms; the JSON carries the keys of every policy run."""
    s, mu, lam = 4, 1.0, 3.0
    wl = Workload(servers=s, cores=(1,), probs=(1.0,), services=(Exponential(1.0 / mu),))
    res = simulate(wl, lam, key=jax.random.key(1), n_jobs=20_000, n_replications=64)
    assert res.status == "ok" and res.wait_hists.shape[0] == 32
    C, d = _erlang_c(s, lam / mu), s * mu - lam
    for q in (0.9, 0.99):
        e = res.wait_quantile_ci(q)
        assert float(e.low) <= math.log(C / (1 - q)) / d <= float(e.high), q
    e = res.wait_tail_ci(1.0)
    assert float(e.low) <= C * math.exp(-d) <= float(e.high)

    def response_tail(t):  # P(W + S > t) with d = mu
        return math.exp(-mu * t) * (1 + C * mu * t)

    lo, hi = 0.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if response_tail(mid) > 0.1 else (lo, mid)
    e = res.response_quantile_ci(0.9)
    assert float(e.low) <= lo <= float(e.high)
    out = res.as_dict(tails=("1",))
    for block in (out, *out["classes"]):
        assert set(block["response_quantiles"]) == {"0.5", "0.9", "0.99"}
        assert set(block["wait_quantiles_ci"]) == {"0.5", "0.9", "0.99"}
        assert set(block["response_tail"]) == {"1"}


def test_convolved_responses_agree_with_the_event_engines_binned_ones():
    """fcfs on the event engine and on the forward scan draw the same jobs: the response-time
    quantiles of the forward scan (waits convolved with Erlang, hyperexponential and bounded
    Pareto services) and those the event engine bins job by job have overlapping 95%
    intervals, per class and overall."""
    wl = Workload(
        servers=4,
        cores=(1, 2, 4),
        probs=(0.5, 0.3, 0.2),
        services=(
            Erlang(2, 1.0),
            HyperExponential(means=(0.5, 3.0), probs=(0.8, 0.2)),
            BoundedPareto(0.3, 20.0, 1.6),
        ),
    )
    key, kw = jax.random.key(5), dict(n_jobs=3000, warmup=600, n_replications=64)
    fw = simulate(wl, 0.6, key=key, dtype=jnp.float64, **kw)
    ev = simulate_policy(wl, 0.6, "fcfs", key=key, **kw)
    np.testing.assert_allclose(
        np.asarray(ev.wait_mean_class.mean), fw.wait_mean, rtol=1e-9
    )  # the same jobs
    for c in (None, 0, 1, 2):
        for q in (0.5, 0.9, 0.99):
            a, b = fw.response_quantile_ci(q, c), ev.response_quantile_ci(q, c)
            assert float(a.low) <= float(b.high) and float(b.low) <= float(a.high), (c, q)
            assert abs(math.log(float(a.mean) / float(b.mean))) < 0.1, (c, q)
