"""Stability limit by the pile growth rate (``papers/mjsre.md`` Theorem 5.1, Algorithm 2).

Ground truths: ``s / E[sigma]`` for one-core jobs (``1 / E[sigma]`` when ``s = 1``); eq. (8)
for one-or-all workloads (two independent implementations, and the pile itself); an
event-driven simulation of the *saturated* FCFS queue written here (a heap of departures, an
infinite backlog; its throughput is ``lambda_c``) for the five-class scenarios; and, for
exponential services, the exact limit of the QBD (``jaxqueue.mjqm.exact_lambda_c``; more in
``tests/mjqm/test_vs_exact.py``).
"""

import heapq
import math

import jax
import numpy as np
import pytest

from jaxqueue.dist import BoundedPareto, Deterministic, Erlang, Exponential
from jaxqueue.mjqm import Workload, exact_lambda_c, lambda_c_closed_form
from jaxqueue.mjqm._stability import (
    UnstableLoadError,
    lambda_c_estimate,
    pile_growth,
    pile_growth_numpy,
    require_stable,
)
from tests.references.mjqm_exact_values import FIVE_CLASS_EXP_LAMBDA_C

FIVE = dict(
    cores=[1, 2, 5, 10, 15],
    probs=[0.5, 0.1, 0.2, 0.19, 0.01],
    means=[0.5, 0.83, 1.25, 3.33, 10.0],
)


def five(law):
    return Workload(20, FIVE["cores"], FIVE["probs"], [law(m) for m in FIVE["means"]])


def saturated_throughput(s, cores, probs, draw, n_jobs, n_warm, rng):
    """Event-driven saturated FCFS multiserver-job queue: completions per unit time.

    An infinite backlog; at every departure the head-of-line jobs start while they fit.
    Measured between the ``n_warm``-th and the ``n_jobs``-th departure.
    """
    cls = rng.choice(len(cores), size=n_jobs + s + 1, p=probs)
    sig = draw(rng, cls)
    a = np.asarray(cores)[cls]
    free, t, nxt, done, heap = s, 0.0, 0, 0, []
    t_warm = 0.0
    while done < n_jobs:
        while a[nxt] <= free:
            free -= a[nxt]
            heapq.heappush(heap, (t + sig[nxt], a[nxt]))
            nxt += 1
        t, k = heapq.heappop(heap)
        free += k
        done += 1
        if done == n_warm:
            t_warm = t
    return (n_jobs - n_warm) / (t - t_warm)


def saturated_ci(s, cores, probs, draw, n_jobs, reps, seed):
    rng = np.random.default_rng(seed)
    x = np.array(
        [
            saturated_throughput(s, cores, probs, draw, n_jobs, n_jobs // 10, rng)
            for _ in range(reps)
        ]
    )
    return x.mean(), 2.576 * x.std(ddof=1) / math.sqrt(reps)


def draw_exp(rng, cls):
    return rng.exponential(np.asarray(FIVE["means"])[cls])


def test_one_core_jobs_limit_is_s_over_mean():
    wl = Workload(4, [1, 1], [0.3, 0.7], [Exponential(2.0), Erlang(3, 0.5)])
    exact = 4 / (0.3 * 2.0 + 0.7 * 0.5)
    r = pile_growth(wl, key=jax.random.key(0), replications=16, rel_tol=0.01, level=0.99)
    assert r.converged and r.lambda_c_ci[0] <= exact <= r.lambda_c_ci[1], r.as_dict()
    assert r.rel_half_width <= 0.0101
    assert float(wl.lambda_ideal()) == pytest.approx(exact)
    # s = 1: the pile grows by exactly sigma per job.
    w1 = Workload(1, [1], [1.0], [Exponential(2.0)])
    r1 = pile_growth(w1, key=jax.random.key(1), replications=16, level=0.99)
    assert r1.lambda_c_ci[0] <= 0.5 <= r1.lambda_c_ci[1], r1.as_dict()


def eq8_series(s, p_g, mean_g, small):
    """Eq. (8) summed term by term (a reference written apart from the package's closed form):
    ``gamma = p_g (E[sigma_g] + sum_k p_g (1 - p_g)^k E[M_k])`` with ``E[M_k] = H_min(k,s) m +
    (k - s)^+ m / s`` for exponential one-core jobs of mean ``m`` (list scheduling of ``k``
    memoryless jobs), ``ceil(k / s) m`` for deterministic ones."""
    m = float(small.mean())
    k = np.arange(int(np.ceil(np.log(1e-18) / np.log1p(-p_g))) + s + 2, dtype=float)
    w = p_g * (1 - p_g) ** k
    if isinstance(small, Exponential):
        harm = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, s + 1))])
        mk = harm[np.minimum(k, s).astype(int)] * m + np.maximum(k - s, 0) * m / s
    else:
        mk = np.ceil(k / s) * m
    return 1.0 / (p_g * (mean_g + float(np.sum(w * mk))))


def test_eq8_two_implementations_and_pile():
    # Small one-or-all workloads, exponential and deterministic one-core jobs.
    for small in (Exponential(1.0), Deterministic(1.0)):
        wl = Workload(8, [1, 8], [0.95, 0.05], [small, Exponential(4.0)])
        a = eq8_series(8, 0.05, 4.0, small)
        b = lambda_c_closed_form(wl)
        assert a == pytest.approx(b, rel=1e-10)
        if isinstance(small, Exponential):  # the QBD: a third, independent derivation
            assert float(exact_lambda_c(wl)) == pytest.approx(a, rel=1e-9)
        r = pile_growth(wl, key=jax.random.key(2), replications=16, rel_tol=0.01, level=0.99)
        assert r.lambda_c_ci[0] <= a <= r.lambda_c_ci[1], (type(small).__name__, a, r.as_dict())


@pytest.mark.slow
def test_eq8_two_class_256_pile():
    # The two-class-256 workload of Section 7.4 (p_b = 1e-3, mu_b = 0.025, mu_s = 1).
    wl = Workload(256, [1, 256], [0.999, 0.001], [Exponential(1.0), Exponential(40.0)])
    exact = lambda_c_closed_form(wl)
    assert float(exact_lambda_c(wl)) == pytest.approx(exact, rel=1e-9)  # 20.44807
    r = pile_growth(wl, key=jax.random.key(3), replications=32, rel_tol=0.01, level=0.99)
    assert r.lambda_c_ci[0] <= exact <= r.lambda_c_ci[1], (exact, r.as_dict())


def test_five_class_exp_against_saturated_event_simulation():
    wl = five(Exponential)
    r = pile_growth(wl, key=jax.random.key(4), rel_tol=0.005, level=0.99)
    m, hw = saturated_ci(20, FIVE["cores"], FIVE["probs"], draw_exp, 20000, 20, seed=5)
    assert abs(r.lambda_c - m) <= math.hypot(hw, 0.5 * (r.lambda_c_ci[1] - r.lambda_c_ci[0])), (
        r.as_dict(),
        m,
        hw,
    )
    assert r.lambda_c < r.lambda_ideal
    # Both 99% intervals cover the exact limit (tests/references/mjqm_exact_values.py; about 2%
    # family-wise): the pile, and the saturated event simulation that serves as reference.
    exact = FIVE_CLASS_EXP_LAMBDA_C
    assert r.lambda_c_ci[0] <= exact <= r.lambda_c_ci[1], (r.as_dict(), exact)
    assert abs(m - exact) <= hw, (m, hw, exact)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["erlang3", "hyperexp", "bpareto"])
def test_five_class_other_laws_against_saturated_event_simulation(name):
    rows = np.genfromtxt("jaxqueue/scenarios/data/five-class.csv", delimiter=",", names=True)
    if name == "erlang3":
        laws = [Erlang(3, float(m)) for m in rows["mean"]]

        def draw(rng, c):
            return rng.gamma(3, np.asarray(rows["mean"])[c] / 3)
    elif name == "hyperexp":
        from jaxqueue.dist import HyperExponential

        laws = [
            HyperExponential(
                [r["hyperexp_mean_phase1"], r["hyperexp_mean_phase2"]],
                [r["hyperexp_p_phase1"], 1 - r["hyperexp_p_phase1"]],
            )
            for r in rows
        ]

        def draw(rng, c):
            big = rng.random(c.shape) < rows["hyperexp_p_phase1"][c]
            m = np.where(big, rows["hyperexp_mean_phase1"][c], rows["hyperexp_mean_phase2"][c])
            return rng.exponential(m)
    else:
        laws = [
            BoundedPareto(r["bpareto_xmin"], r["bpareto_xmax"], r["bpareto_shape"]) for r in rows
        ]

        def draw(rng, c):
            lo, hi, a = rows["bpareto_xmin"][c], rows["bpareto_xmax"][c], rows["bpareto_shape"][c]
            u = rng.random(c.shape)
            return lo * ((lo / hi) ** a + u * (1 - (lo / hi) ** a)) ** (-1 / a)

    wl = Workload(20, FIVE["cores"], FIVE["probs"], laws)
    r = pile_growth(wl, key=jax.random.key(6), rel_tol=0.005, level=0.99)
    m, hw = saturated_ci(20, FIVE["cores"], FIVE["probs"], draw, 200000, 20, seed=7)
    assert abs(r.lambda_c - m) <= math.hypot(hw, 0.5 * (r.lambda_c_ci[1] - r.lambda_c_ci[0])), (
        r.as_dict(),
        m,
        hw,
    )


def test_float32_renormalised_pile_matches_float64():
    wl = five(Exponential)
    a = pile_growth(
        wl, key=jax.random.key(8), replications=8, jobs0=4096, max_jobs=1 << 16, rel_tol=1e-6
    )
    b = pile_growth(
        wl,
        key=jax.random.key(8),
        replications=8,
        jobs0=4096,
        max_jobs=1 << 16,
        rel_tol=1e-6,
        dtype=np.float32,
    )
    assert b.lambda_c == pytest.approx(a.lambda_c, rel=1e-4)
    assert not a.converged  # the cap is reported


def test_numpy_reference_pile():
    g = pile_growth_numpy(20, FIVE["cores"], FIVE["probs"], draw_exp, 20000, 16, seed=0)
    r = pile_growth(five(Exponential), key=jax.random.key(9), rel_tol=0.01, level=0.99)
    # |H_n| / n over-estimates gamma by O(1/n) (start-up); compare with a 2% margin.
    assert g.mean() == pytest.approx(r.gamma, rel=0.02)
    assert g.mean() == pytest.approx(1 / FIVE_CLASS_EXP_LAMBDA_C, rel=0.02)  # exact (QBD)
    assert r.lambda_c_ci[0] <= FIVE_CLASS_EXP_LAMBDA_C <= r.lambda_c_ci[1], r.as_dict()


def test_random_assignment_limit():
    # Appendix A: one-or-all jobs of size 1. A cycle is a big job then K ~ Geometric(p) small
    # ones; the next big job waits for the fullest server: R_K = max of a multinomial(K, 1/s)
    # under random assignment, ceil(K / s) under FCFS. gamma = p (1 + E[pile of the cycle]).
    s, p = 4, 0.2
    rng = np.random.default_rng(12)
    k = rng.geometric(p, size=40_000) - 1
    r_k = np.array([rng.multinomial(kk, [1 / s] * s).max() if kk else 0 for kk in k])
    lam_ra = 1 / (p * (1 + r_k.mean()))
    se_ra = lam_ra**2 * p * r_k.std(ddof=1) / math.sqrt(r_k.size)
    w2 = Workload(s, [1, s], [1 - p, p], [Deterministic(1.0), Deterministic(1.0)])
    ra = pile_growth(w2, key=jax.random.key(11), random_assignment=True, rel_tol=0.01, level=0.99)
    half = 0.5 * (ra.lambda_c_ci[1] - ra.lambda_c_ci[0])
    assert abs(ra.lambda_c - lam_ra) <= math.hypot(half, 2.576 * se_ra), (ra.as_dict(), lam_ra)
    fc = lambda_c_closed_form(w2)
    assert fc == pytest.approx(1 / (p * (1 + np.mean(np.ceil(k / s)))), rel=0.01)
    assert ra.lambda_c_ci[1] < fc, (ra.as_dict(), fc)


def test_guard_refuses_and_caches():
    wl = five(lambda m: Erlang(3, m))  # no exact limit: the guard's Monte Carlo needs a key
    key = jax.random.key(3)
    with pytest.raises(ValueError, match="key="):
        lambda_c_estimate(wl)
    assert require_stable(wl, 1.7) is None  # no key: nothing estimated, nothing refused
    est = lambda_c_estimate(wl, key=key)
    assert est.method == "pile"
    assert lambda_c_estimate(five(lambda m: Erlang(3, m)), key=key) is est  # memoised by value
    assert lambda_c_estimate(wl, key=jax.random.key(4)) is not est  # ... and by key
    assert require_stable(wl, 0.5, key=key) is None  # below 1 / E[sigma]: no estimate needed
    ok = require_stable(wl, 0.9 * est.lambda_c, key=key)  # accepted once an interval is above
    assert ok.lambda_c_ci[0] > 0.9 * est.lambda_c
    with pytest.raises(UnstableLoadError, match="interval"):
        require_stable(wl, est.lambda_c, key=key)
    assert require_stable(wl, 5.0, key=key, override=True) is None
    # Exponential services: the exact limit (QBD), no key needed, refused at lambda_c.
    ex = lambda_c_estimate(five(Exponential))
    assert ex.method == "exact (QBD)" and ex.lambda_c == pytest.approx(FIVE_CLASS_EXP_LAMBDA_C)
    with pytest.raises(UnstableLoadError):
        require_stable(five(Exponential), ex.lambda_c)
    # Closed forms are used where they apply.
    w8 = Workload(8, [1, 8], [0.95, 0.05], [Exponential(1.0), Exponential(4.0)])
    assert lambda_c_estimate(w8).method.startswith("closed-form")


def test_cli_stability_contract(capsys):
    import json

    from jaxqueue.cli import main

    # exponential services: the exact limit (saturated QBD), a degenerate interval
    argv = ["mjqm", "stability", "--scenario", "five-class-exp", "--json"]
    assert main(argv) == 0
    exact = json.loads(capsys.readouterr().out)
    assert exact["method"] == "exact" and exact["status"] == "ok"
    assert exact["lambda_c_ci"] == [exact["lambda_c"], exact["lambda_c"]]
    # pile growth on request: its interval holds the exact limit
    assert main(argv + ["--pile-growth", "--rel-tol", "0.03"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "pile-growth" and out["status"] in ("ok", "unconverged")
    lo, hi = out["lambda_c_ci"]
    assert lo <= out["lambda_c"] <= hi < out["lambda_ideal"]
    assert lo <= exact["lambda_c"] <= hi
    assert out["lambda_ideal"] == pytest.approx(2.1068, abs=1e-3)  # Section 8.2: 2.11
    # a non-exponential law: pile growth
    argv = ["mjqm", "stability", "--scenario", "five-class-erlang3", "--rel-tol", "0.05"]
    assert main(argv + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "pile-growth"
