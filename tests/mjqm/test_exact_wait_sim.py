"""Exact waiting-time tails and quantiles against simulation, per class.

* The independent heapq event simulator (``tests/references/mjqm_events.py``, no code shared
  with the package): per-class empirical ``P(W_c > t)`` at the exact quantiles, with a
  batch-means interval, on a workload with a rare big class at two loads.
* The package's forward simulator (``mjqm.simulate``): its per-class waiting-time histograms
  (the source of ``wait_p90`` and the other quantiles) at the bin edges around the exact
  quantiles, over independent runs (slow tests): the rare big class at 0.8 ``lambda_c``, and
  the hard cases of the issue (``two-class-256`` at 0.8, ``five-class-exp`` at 0.95).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats

from jaxqueue import mjqm, scenarios
from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, exact, exact_lambda_c
from tests.references.mjqm_events import event_simulate, exp_sampler, random_jobs

QS = (0.5, 0.9, 0.99)
LEVEL = 0.999  # per comparison; about 30 comparisons per test


def _rare_big() -> Workload:
    """8 servers; 1-server jobs, and 5 % of jobs that take all 8 for 4 times as long."""
    return Workload(8, [1, 8], [0.95, 0.05], [Exponential(1.0), Exponential(4.0)])


def _batch_interval(hits: np.ndarray, batches: int) -> tuple[float, float]:
    """Batch-means interval of the mean of the 0/1 sequence ``hits`` (in job order)."""
    means = np.array([b.mean() for b in np.array_split(hits, batches) if b.size])
    half = stats.t.ppf(0.5 + LEVEL / 2, len(means) - 1) * means.std(ddof=1) / np.sqrt(len(means))
    return means.mean() - half, means.mean() + half


def _check_event_reference(load: float, n_jobs: int, batches: int, seed: int) -> None:
    w = _rare_big()
    lam = load * float(exact_lambda_c(w))
    dist = exact(w, lam).wait_distribution(quantiles=QS)
    rng = np.random.default_rng(seed)
    samplers = [exp_sampler(1.0), exp_sampler(4.0)]
    cls, alpha, sigma, tau = random_jobs(rng, n_jobs, [1, 8], [0.95, 0.05], samplers, lam)
    warm = n_jobs // 20
    wait = event_simulate(8, alpha, sigma, tau)["wait"][warm:]
    cls = cls[warm:]
    misses = []
    for c in (0, 1, None):
        w_c = wait if c is None else wait[cls == c]
        for q in QS:
            t = float(dist.quantile(q, c))
            # at an atom (t = 0) compare P(W > 0) instead
            exact_tail = float(dist.tail(t, c)) if t > 0 else float(dist.p_wait(c))
            lo, hi = _batch_interval((w_c > t).astype(float), batches)
            if not lo <= exact_tail <= hi:
                misses.append((c, q, t, exact_tail, lo, hi))
    assert not misses, misses


# Near saturation the big class makes long excursions (batch means of the wait over a tenth
# of 400,000 jobs at 0.85 lambda_c range from 12 to 33): 0.4 and 0.7 with 50,000 jobs, 0.85
# with 2,000,000.
@pytest.mark.slow
@pytest.mark.parametrize("load", [0.4, 0.7])
def test_tails_match_the_event_reference(load):
    """The default suite: the same tails and quantiles per class against the brute-force
    tagged-job chain (to 1e-6) and Erlang C (to 1e-10) in ``test_exact_wait.py``."""
    _check_event_reference(load, 50_000, batches=20, seed=11)


@pytest.mark.slow
@pytest.mark.parametrize("load", [0.5, 0.85])
def test_tails_match_the_event_reference_long(load):
    _check_event_reference(load, 2_000_000, batches=20, seed=12)


def _check_forward(w: Workload, load: float, runs: int, n_jobs: int, n_rep: int) -> None:
    """Per run, the histogram CDF at the bin edge just above each exact quantile; the mean
    over independent runs with a t interval must hold the exact CDF at that edge."""
    lam = load * float(exact_lambda_c(w))
    res = exact(w, lam)
    dist = res.wait_distribution(quantiles=QS)
    cdfs, edges = [], None
    for r in range(runs):
        sim = mjqm.simulate(
            w, lam, key=jax.random.key(100 + r), n_jobs=n_jobs, n_replications=n_rep
        )
        hist = np.asarray(sim.hist, dtype=float)
        edges = np.asarray(sim.edges, dtype=float)
        cdfs.append(np.cumsum(hist, axis=1) / hist.sum(axis=1, keepdims=True))
    cdfs = np.stack(cdfs)  # (runs, classes, bins): P(W <= edges[b + 1])
    misses = []
    for c in range(w.n_classes):
        for q in QS:
            t = float(dist.quantile(q, c))
            if t <= 0:
                continue
            b = int(np.searchsorted(edges, t)) - 1  # edges[b] < t <= edges[b + 1]
            x = cdfs[:, c, b]
            half = stats.t.ppf(0.5 + LEVEL / 2, runs - 1) * x.std(ddof=1) / np.sqrt(runs)
            exact_cdf = float(dist.cdf(float(edges[b + 1]), c))
            if abs(x.mean() - exact_cdf) > half:
                misses.append((c, q, t, float(edges[b + 1]), exact_cdf, x.mean(), half))
    assert not misses, misses


@pytest.mark.slow
def test_forward_histograms_match_exact_quantiles_small():
    """The default suite: the forward scan's histogram quantiles and tails against the M/M/4
    closed forms in ``test_tails_forward.py::test_forward_scan_quantiles_cover_erlang_c``, its
    per-class histograms against the event engine's on the same jobs in
    ``test_convolved_responses_agree_with_the_event_engines_binned_ones``, and the exact
    per-class quantiles against the tagged-job chain in ``test_exact_wait.py``."""
    _check_forward(_rare_big(), 0.8, runs=6, n_jobs=20_000, n_rep=16)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "load"), [("two-class-256", 0.8), ("five-class-exp", 0.95)])
def test_forward_histograms_match_exact_quantiles_hard_cases(name, load):
    _check_forward(scenarios.get(name), load, runs=8, n_jobs=200_000, n_rep=32)
