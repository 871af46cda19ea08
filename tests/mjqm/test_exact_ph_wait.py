"""Waiting-time distributions of ``mjqm.exact`` with phase-type services.

References, none of them the code under test:

* M/PH/1: the waiting time is phase-type, ``P(W > x) = beta exp((T + t beta) x) 1``
  (``tests/references/closed_forms.py``), to 1e-10;
* the brute-force tagged-job chain of ``tests/references/mjqm_ph_ctmc.py`` (explicit ordered
  queue with phases, a tagged arrival absorbed without arrivals): its tabulated ``P(W > t)``
  overall and per class, ``P(W_k > 0)`` and the 0.99 quantiles;
* the result's own mean waits, by another path (stationary functionals, no transient chain);
* central finite differences for the gradients of the 0.9 quantile;
* the independent heapq event simulator ``tests/references/mjqm_events.py`` with service
  times drawn by the reference's phase-process sampler: per-class empirical ``P(W_c > t)``
  at the exact quantiles, batch-means intervals, a rare big class at two loads.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats

from jaxqueue.dist import Coxian, Erlang, HyperExponential
from jaxqueue.mjqm import Workload, exact, exact_lambda_c
from tests.mjqm.test_exact_ph_solver import _grad_system, _workload
from tests.references import closed_forms as cf
from tests.references import mjqm_ph_ctmc as ref
from tests.references.mjqm_events import event_simulate, random_jobs

H2 = HyperExponential(np.array([0.4, 3.0]), np.array([0.7, 0.3]))


@pytest.mark.parametrize(
    "law",
    [
        Erlang(3, 1.0),
        H2,
        pytest.param(
            Coxian(np.array([3.0, 1.5, 2.0]), np.array([0.6, 0.4])), marks=pytest.mark.slow
        ),
    ],
    ids=["e3", "h2", "cox3"],
)
def test_one_server_tails_are_the_mph1_law(law):
    a, T = (np.asarray(x, float) for x in law.phase_form())
    es = cf.ph_moment(a, T, 1)
    lam = 0.7 / es
    res = exact(Workload(1, [1], [1.0], [law]), lam)
    ts = np.array([0.0, 0.5, 2.0, 6.0])
    dist = res.wait_distribution(times=ts, quantiles=(0.5, 0.9, 0.99))
    closed = cf.mph1_wait_tail(lam, a, T, ts)
    for t, c in zip(ts, closed, strict=True):
        assert abs(float(dist.tail(t)) - c) <= 1e-10, (t, float(dist.tail(t)), c)
        assert float(dist.tail_error(t)) <= 1e-10
    for q in (0.5, 0.9, 0.99):
        t = float(dist.quantile(q))
        assert abs(cf.mph1_wait_tail(lam, a, T, [t])[0] - (1.0 - q)) <= 1e-10


@pytest.mark.parametrize(
    "name",
    ["s2-erlang2-exp", "s5-coxian3-erlang2"]
    + [pytest.param(n, marks=pytest.mark.slow) for n in ("s3-h2-erlang3", "s6-rare-big")],
)
def test_tails_equal_the_brute_force_tagged_job_tables(name):
    res = exact(_workload(name), ref.REFERENCE_SYSTEMS[name]["lam"])
    exp = ref.REFERENCE_VALUES[name]
    q = ref.REFERENCE_QUANTILE
    dist = res.wait_distribution(times=ref.REFERENCE_TIMES, quantiles=(q,))
    K = len(exp["wait_mean_class"])
    for i, t in enumerate(ref.REFERENCE_TIMES):
        assert abs(float(dist.tail(t)) - exp["wait_tail"][i]) <= 1e-6 * exp["wait_tail"][i]
        for k in range(K):
            want = exp["wait_tail_class"][i][k]
            assert abs(float(dist.tail(t, k)) - want) <= 1e-6 * want, (t, k)
    np.testing.assert_allclose(np.asarray(res.p_wait_class), exp["p_wait_class"], rtol=1e-6)
    np.testing.assert_allclose(float(dist.quantile(q)), exp["wait_quantile"], rtol=1e-6)
    for k in range(K):
        np.testing.assert_allclose(
            float(dist.quantile(q, k)), exp["wait_quantile_class"][k], rtol=1e-6, atol=1e-9
        )


def test_tail_means_equal_the_stationary_means():
    w = _workload("s5-coxian3-erlang2")
    res = exact(w, 0.6 * float(exact_lambda_c(w)))
    dist = res.wait_distribution(quantiles=(1.0 - 1e-12,))
    assert float(np.max(np.asarray(dist.u[-1]))) < 1e-12
    means = [float(dist.mean(k)) for k in range(2)]
    np.testing.assert_allclose(means, np.asarray(res.wait_mean_class), rtol=1e-9)
    np.testing.assert_allclose(float(dist.p_wait()), float(res.p_wait), rtol=1e-10)


@pytest.mark.slow  # the default suite: the same solve differentiated in test_exact_ph_solver.py
def test_quantile_gradients_match_central_differences():
    """(Slow: 16 CPU-s.) The default suite differentiates this solve's mean wait
    (``test_exact_ph_solver.py``) and the quantiles of the exponential one
    (``test_exact_wait.py``)."""
    n = exact(_grad_system(2.0, 0.35, 0.5), 0.5).wait_distribution(quantiles=(0.9,)).steps

    def f(lam, rate, x):
        r = exact(_grad_system(rate, x, 0.5), lam)
        return r.wait_quantile(0.9, steps=n) + r.wait_quantile(0.9, 1, steps=n)

    x0 = (0.5, 2.0, 0.35)
    grads = jax.grad(f, argnums=(0, 1, 2))(*x0)
    h = 1e-5
    for i, g in enumerate(grads):
        up, dn = list(x0), list(x0)
        up[i] += h
        dn[i] -= h
        fd = (float(f(*up)) - float(f(*dn))) / (2 * h)
        assert abs(float(g) - fd) <= 1e-5 * abs(fd), (i, float(g), fd)


# ------------------------------------------------------------------ against the event simulator
QS = (0.5, 0.9, 0.99)
LEVEL = 0.999  # per comparison; 9 comparisons per load
BIG = ([0.7, 0.3], [1.0, 10.0])  # the rare big class: hyperexponential, mean 3.7


def _rare_big() -> Workload:
    """8 servers; one-server Erlang-2 jobs, and 5 % of jobs that take all 8 for a
    hyperexponential time of mean 3.7 (scv about 3.8)."""
    return Workload(
        8, [1, 8], [0.95, 0.05], [Erlang(2, 1.0), HyperExponential(np.array(BIG[1]), BIG[0])]
    )


def _batch_interval(hits: np.ndarray, batches: int) -> tuple[float, float]:
    means = np.array([b.mean() for b in np.array_split(hits, batches) if b.size])
    half = stats.t.ppf(0.5 + LEVEL / 2, len(means) - 1) * means.std(ddof=1) / np.sqrt(len(means))
    return means.mean() - half, means.mean() + half


def _check_event_reference(load: float, n_jobs: int, batches: int, seed: int) -> None:
    w = _rare_big()
    lam = load * float(exact_lambda_c(w))
    dist = exact(w, lam).wait_distribution(quantiles=QS)
    rng = np.random.default_rng(seed)
    samplers = [ref.ph_sampler(*ref.erlang(2, 1.0)), ref.ph_sampler(*ref.hyperexp(*BIG))]
    cls, alpha, sigma, tau = random_jobs(rng, n_jobs, [1, 8], [0.95, 0.05], samplers, lam)
    warm = n_jobs // 20
    wait = event_simulate(8, alpha, sigma, tau)["wait"][warm:]
    cls = cls[warm:]
    misses = []
    for c in (0, 1, None):
        w_c = wait if c is None else wait[cls == c]
        for q in QS:
            t = float(dist.quantile(q, c))
            exact_tail = float(dist.tail(t, c)) if t > 0 else float(dist.p_wait(c))
            lo, hi = _batch_interval((w_c > t).astype(float), batches)
            if not lo <= exact_tail <= hi:
                misses.append((c, q, t, exact_tail, lo, hi))
    assert not misses, misses


@pytest.mark.slow
@pytest.mark.parametrize("load", [0.4, 0.7])
def test_tails_match_the_event_reference(load):
    """The default suite: the same tails and quantiles per class against the brute-force
    tagged-job tables (to 1e-6) and the M/PH/1 law (to 1e-10) above."""
    _check_event_reference(load, 40_000, batches=20, seed=21)


@pytest.mark.slow
@pytest.mark.parametrize("load", [0.5, 0.85])
def test_tails_match_the_event_reference_long(load):
    _check_event_reference(load, 2_000_000, batches=20, seed=22)
