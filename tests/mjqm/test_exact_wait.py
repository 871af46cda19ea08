"""Waiting-time distributions of the exact FCFS MJQM (``ExactResult.wait_tail``, ``wait_cdf``,
``wait_quantile``, ``p_wait_class``; ``jaxqueue.mjqm._exact_wait``).

References, none of them the code under test:

* Erlang C for M/M/c, written here: ``P(W > t) = C(c, a) exp(-(c mu - lam) t)``;
* the QBD's own mean waits per class and ``P(W > 0)``, computed by another path (Little's law
  on stationary functionals, no transient chain): ``E[W_c] = int P(W_c > t) dt``;
* central finite differences for the gradients of the quantiles;
* the independent heapq event simulator ``tests/references/mjqm_events.py`` (per-class
  empirical tails with batch-means intervals), in ``test_exact_wait_sim.py``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, exact


def _erlang_c(c: int, a: float) -> float:
    """Probability of waiting in M/M/c with offered load ``a = lam / mu`` (``a < c``)."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize("c, mean, lam", [(1, 1.0, 0.7), (4, 2.0, 1.7)])
def test_mmc_tail_and_quantiles_are_erlang_c(c, mean, lam):
    mu = 1.0 / mean
    res = exact(Workload(c, [1], [1.0], [Exponential(mean)]), lam)
    ts = [0.0, 0.3, 1.0, 4.0, 12.0]
    qs = [0.5, 0.9, 0.99]
    dist = res.wait_distribution(times=ts, quantiles=qs)
    C = _erlang_c(c, lam / mu)
    gap = c * mu - lam
    for t in ts:
        assert abs(float(dist.tail(t)) - C * math.exp(-gap * t)) <= 1e-10
        assert float(dist.tail_error(t)) <= 1e-10
        assert abs(float(dist.cdf(t, 0)) - (1.0 - C * math.exp(-gap * t))) <= 1e-10
    for q in qs:
        closed = max(0.0, math.log(C / (1.0 - q)) / gap)
        assert abs(float(dist.quantile(q)) - closed) <= 1e-9 * max(1.0, closed)
    assert abs(float(res.p_wait_class[0]) - C) <= 1e-12


@pytest.fixture(scope="module")
def two_class():
    w = Workload(4, [1, 3], [0.7, 0.3], [Exponential(1.0), Exponential(2.0)])
    return w, exact(w, 0.8)


def test_means_and_p_wait_agree_with_the_stationary_functionals(two_class):
    w, res = two_class
    # enough steps that the mass left after the last one is below 1e-12
    dist = res.wait_distribution(quantiles=(1.0 - 1e-12,))
    assert float(np.max(np.asarray(dist.u[-1]))) < 1e-12
    means = [float(dist.mean(i)) for i in range(2)]
    np.testing.assert_allclose(means, np.asarray(res.wait_mean_class), rtol=1e-9)
    np.testing.assert_allclose(float(dist.mean()), float(res.wait_mean), rtol=1e-9)
    np.testing.assert_allclose(float(dist.p_wait()), float(res.p_wait), rtol=1e-10)
    p = np.asarray(w.probs)
    np.testing.assert_allclose(p @ np.asarray(res.p_wait_class), float(res.p_wait), rtol=1e-10)
    # a class that needs more servers waits more often and longer
    assert float(res.p_wait_class[1]) > float(res.p_wait_class[0])
    assert float(res.wait_quantile(0.9, 1)) > float(res.wait_quantile(0.9, 0))
    # the tail falls, the cdf rises to 1
    tails = [float(dist.tail(t, 1)) for t in (0.0, 1.0, 5.0, 20.0)]
    assert all(a > b for a, b in zip(tails, tails[1:], strict=False))


def test_response_means_are_wait_plus_service(two_class):
    w, res = two_class
    means = np.asarray(w.mean_service())
    np.testing.assert_allclose(
        np.asarray(res.response_mean_class), np.asarray(res.wait_mean_class) + means, rtol=1e-14
    )
    np.testing.assert_allclose(
        float(res.response_mean), float(res.wait_mean) + 0.7 * 1.0 + 0.3 * 2.0, rtol=1e-14
    )


def test_quantile_gradients_match_central_differences(two_class):
    w, res = two_class
    n = res.wait_distribution(quantiles=(0.9,)).steps

    def q90(lam, x):
        wx = Workload(4, [1, 3], jnp.stack([1.0 - x, x]), [Exponential(1.0), Exponential(2.0)])
        r = exact(wx, lam)
        return r.wait_quantile(0.9, 1, steps=n) + r.wait_quantile(0.9, steps=n)

    # under jit (one compiled program): the quantile equals the eager one
    value, grads = jax.jit(jax.value_and_grad(q90, argnums=(0, 1)))(0.8, 0.3)
    assert abs(float(value) - float(q90(0.8, 0.3))) <= 1e-12
    h = 1e-5
    fds = (
        (float(q90(0.8 + h, 0.3)) - float(q90(0.8 - h, 0.3))) / (2 * h),
        (float(q90(0.8, 0.3 + h)) - float(q90(0.8, 0.3 - h))) / (2 * h),
    )
    for g, fd in zip(grads, fds, strict=True):
        assert abs(float(g) - fd) <= 1e-5 * abs(fd)


@pytest.mark.parametrize("q", [0.0, 1.0, -0.5, 1.5, float("nan"), "x"])
def test_bad_quantile_is_one_line(two_class, q):
    _, res = two_class
    with pytest.raises(ValueError, match=r"q must be a number in \(0, 1\)") as e:
        res.wait_quantile(q)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("t", [-1.0, float("inf"), "x"])
def test_bad_time_is_one_line(two_class, t):
    _, res = two_class
    with pytest.raises(ValueError, match="t must be a finite number >= 0") as e:
        res.wait_tail(t)
    assert "\n" not in str(e.value)


def test_bad_class_and_traced_without_steps(two_class):
    w, res = two_class
    with pytest.raises(ValueError, match="cls must be an int"):
        res.wait_tail(1.0, 2)
    with pytest.raises(ValueError, match="pass steps="):
        jax.jit(lambda lam: exact(w, lam).wait_quantile(0.9))(0.8)


# The tagged-job chain of the default case below (``tests/references/mjqm_ph_ctmc.py``, cut at
# 14 jobs: 6 s of numpy), tabulated; test_tabulated_tagged_chain_is_what_the_chain_gives
# (slow) recomputes it. P(W > t) of all jobs and per class at TAGGED_TIMES.
TAGGED_TIMES = (0.0, 0.5, 2.0, 6.0)
TAGGED_CHAIN = {
    (3, (1, 2), (0.6, 0.4), (1.0, 1.5), 0.2): {
        "truncation_mass": 9.691738522832338e-10,
        "all": [
            0.0669876611077186,
            0.04719572605972484,
            0.018254147484604688,
            0.0017127861212165845,
        ],
        "class": [
            [0.027477008627385998, 0.1262536398282175],
            [0.01720912879290315, 0.09217562195995738],
            [0.005465272403475822, 0.03743746010629798],
            [0.0004746778672904328, 0.0035699485021058117],
        ],
    },
}


def _tagged_chain(s, cores, probs, means, lam):
    """``(truncation mass, P(W > t) of all jobs, per class)`` of the explicit chain (ordered
    waiting classes) cut at 14 jobs, a tagged job absorbed without arrivals."""
    from tests.references import mjqm_ph_ctmc as ph

    laws = [ph.exponential(m) for m in means]
    alphas, Ts = [a for a, _ in laws], [T for _, T in laws]
    chain = ph.build(s, cores, probs, alphas, Ts, lam, max_jobs=14)
    ref_all, ref_cls = chain.wait_tail(np.array(TAGGED_TIMES))
    return chain.result().truncation_mass, ref_all, ref_cls


@pytest.mark.parametrize(
    ("s", "cores", "probs", "means", "lam"),
    [
        (3, (1, 2), (0.6, 0.4), (1.0, 1.5), 0.2),
        pytest.param(4, (1, 3), (0.7, 0.3), (1.0, 2.0), 0.15, marks=pytest.mark.slow),
    ],
)
def test_tails_equal_the_brute_force_tagged_job_chain(s, cores, probs, means, lam):
    """``tests/references/mjqm_ph_ctmc.py``: the tagged-job chain (blocked-arrival mass below
    1e-9; tabulated above for the default case)."""
    case = (s, cores, probs, means, lam)
    if case in TAGGED_CHAIN:
        tab = TAGGED_CHAIN[case]
        mass, ref_all, ref_cls = tab["truncation_mass"], tab["all"], np.array(tab["class"])
    else:
        mass, ref_all, ref_cls = _tagged_chain(*case)
    assert mass < 1e-9
    res = exact(Workload(s, list(cores), list(probs), [Exponential(m) for m in means]), lam)
    dist = res.wait_distribution(times=TAGGED_TIMES)
    for j, t in enumerate(TAGGED_TIMES):
        assert abs(float(dist.tail(t)) - ref_all[j]) <= 1e-6
        for c in range(len(cores)):
            assert abs(float(dist.tail(t, c)) - ref_cls[j, c]) <= 1e-6
    np.testing.assert_allclose(np.asarray(res.p_wait_class), ref_cls[0], atol=1e-6)


@pytest.mark.slow
def test_tabulated_tagged_chain_is_what_the_chain_gives():
    for case, tab in TAGGED_CHAIN.items():
        mass, ref_all, ref_cls = _tagged_chain(*case)
        np.testing.assert_allclose(mass, tab["truncation_mass"], rtol=1e-6)
        np.testing.assert_allclose(ref_all, tab["all"], rtol=1e-12)
        np.testing.assert_allclose(ref_cls, tab["class"], rtol=1e-12)
