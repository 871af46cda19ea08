"""Stability limit by the pile growth rate (``papers/mjsre.md`` Theorem 5.1, Algorithm 2).

Ground truths: ``s / E[sigma]`` for one-core jobs (``1 / E[sigma]`` when ``s = 1``); eq. (8)
for one-or-all workloads (two independent implementations, and the pile itself); an
event-driven simulation of the *saturated* FCFS queue written here (a heap of departures, an
infinite backlog; its throughput is ``lambda_c``) for the five-class scenarios; and, for
exponential services, the exact limit of the QBD (``jaxqueue.mjqm.exact_lambda_c``; more in
``tests/mjqm/test_vs_exact.py``).
"""

import dataclasses
import heapq
import math

import jax
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import BoundedPareto, Deterministic, Erlang, Exponential
from jaxqueue.mjqm import (
    UnstableLoadError,
    Workload,
    exact_lambda_c,
    lambda_c_closed_form,
    pile_growth,
    simulate,
    stability_limit,
)
from jaxqueue.mjqm.policies import RandomAssignment
from tests.references.mjqm_exact_values import FIVE_CLASS_EXP_LAMBDA_C
from tests.references.mjqm_numpy import pile_growth_numpy

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


@pytest.mark.slow
def test_five_class_exp_against_saturated_event_simulation():
    """(Slow: 20 saturated event runs in Python. The default suite: the pile's interval on
    five-class-exp covers the exact QBD limit in test_numpy_reference_pile and
    ``tests/mjqm/test_vs_exact.py::test_pile_growth_limit_contains_exact[five-class-exp]``,
    lambda_c < lambda_ideal in test_stability_limit_by_policy.)"""
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
    ra = pile_growth(
        w2, key=jax.random.key(11), policy=RandomAssignment(), rel_tol=0.01, level=0.99
    )
    half = 0.5 * (ra.lambda_c_ci[1] - ra.lambda_c_ci[0])
    assert abs(ra.lambda_c - lam_ra) <= math.hypot(half, 2.576 * se_ra), (ra.as_dict(), lam_ra)
    fc = lambda_c_closed_form(w2)
    assert fc == pytest.approx(1 / (p * (1 + np.mean(np.ceil(k / s)))), rel=0.01)
    assert ra.lambda_c_ci[1] < fc, (ra.as_dict(), fc)


def test_stability_limit_by_policy():
    # FCFS, exponential services: exact (the QBD), no key needed
    ex = stability_limit(five(Exponential))
    assert ex.method == "exact" and ex.lambda_c == pytest.approx(FIVE_CLASS_EXP_LAMBDA_C)
    assert ex.lambda_c_ci == (ex.lambda_c, ex.lambda_c) and ex.status == "ok"
    assert ex.summary() == {"lambda_c": ex.lambda_c, "ci": list(ex.lambda_c_ci), "method": "exact"}
    # eq. (8) in closed form where it applies
    w8 = Workload(8, [1, 8], [0.95, 0.05], [Exponential(1.0), Exponential(4.0)])
    assert stability_limit(w8).method == "closed-form"
    assert stability_limit(w8).lambda_c == pytest.approx(lambda_c_closed_form(w8))
    # FCFS, bounded Pareto: pile growth with the caller's key, an interval; no key, no estimate
    bp = scenarios.get("five-class-bpareto")
    with pytest.raises(ValueError, match="key="):
        stability_limit(bp)
    with pytest.raises(ValueError, match="does not apply"):
        stability_limit(bp, method="exact")
    est = stability_limit(bp, key=jax.random.key(3), rel_tol=0.05, max_jobs=1 << 16)
    lo, hi = est.lambda_c_ci
    assert est.method == "pile" and lo < est.lambda_c < hi < est.lambda_ideal
    assert est.summary()["method"] == "pile-growth" and est.summary()["ci"] == [lo, hi]
    # server-filling under a divisibility chain (1 | 2 | 4 | 8): lambda_ideal, exactly
    chain = Workload(8, [1, 2, 4, 8], [0.4, 0.3, 0.2, 0.1], [Exponential(1.0)] * 4)
    sf = stability_limit(chain, "server-filling")
    assert sf.method == "ideal" and sf.lambda_c == pytest.approx(float(chain.lambda_ideal()))
    assert stability_limit(five(Exponential), "server-filling").method == "unknown"
    # window:W: the throughput of the saturated queue, with its interval
    win = stability_limit(w8, "window:2", key=jax.random.key(5), n_jobs=2000, replications=8)
    lo, hi = win.lambda_c_ci
    assert win.method == "saturated" and lo < win.lambda_c < hi < float(w8.lambda_ideal())
    # msf: no method known, said plainly
    msf = stability_limit(five(Exponential), "msf", key=jax.random.key(6))
    assert msf.method == "unknown" and msf.lambda_c is None and msf.lambda_c_ci is None
    assert msf.status != "ok" and "unknown" in msf.describe()
    assert msf.summary() == {"lambda_c": None, "ci": None, "method": "unknown"}
    with pytest.raises(ValueError, match="recurrence"):
        stability_limit(five(Exponential), "msf", method="pile-growth", key=jax.random.key(6))


def test_simulate_runs_no_estimate_without_limit(monkeypatch):
    """Without ``limit`` a simulation runs the cheap checks only: no QBD, no pile growth, no
    saturated run (each patched to fail here), and the run's status says the load is too
    high. With ``limit=stability_limit(...)`` the same load is refused in one line naming the
    limit and where it comes from."""
    import jaxqueue.mjqm._exact as exact_mod
    import jaxqueue.mjqm._limit as limit_mod
    import jaxqueue.mjqm.engines.recurrence._pile as stab_mod

    def boom(*args, **kwargs):
        raise AssertionError("an estimate ran behind a simulation")

    wl = scenarios.get("five-class-exp")
    lim = stability_limit(wl)  # exact, before the patches
    for mod, name in [
        (exact_mod, "exact_lambda_c"),
        (exact_mod, "exact_lambda_c_or_none"),
        (stab_mod, "pile_growth"),
        (limit_mod, "pile_growth"),
        (limit_mod, "exact_lambda_c_or_none"),
        (limit_mod, "saturated_throughput"),
    ]:
        monkeypatch.setattr(mod, name, boom)
    key = jax.random.key(0)
    # the sizes of test_forward.py's five_f32 (float32 by default): one compiled kernel
    run = dict(n_jobs=3000, n_replications=64)
    lam = 2.0  # beyond lambda_c = 1.80, below lambda_ideal = 2.11
    res = simulate(wl, lam, key=key, **run)
    assert res.status != "ok"
    with pytest.raises(UnstableLoadError) as err:
        simulate(wl, lam, key=key, **run, limit=lim)
    msg = str(err.value)
    assert "\n" not in msg and "lambda_c = 1.80086" in msg and "exact" in msg, msg
    assert err.value.lambda_c == lim.lambda_c
    # an estimate: refused unless below the lower end of its interval
    est = dataclasses.replace(lim, lambda_c_ci=(1.7, 1.9), method="pile")
    with pytest.raises(UnstableLoadError, match=r"not below the lower end 1\.7 .*pile growth"):
        simulate(wl, 1.75, key=key, **run, limit=est)
    with pytest.raises(UnstableLoadError, match="a number passed"):
        simulate(wl, 1.6, key=key, **run, limit=1.5)
    # the cheap checks: lambda_ideal, eq. (8) for FCFS, but not for random assignment
    with pytest.raises(UnstableLoadError, match=r"lambda_ideal = 2\.10"):
        simulate(wl, 2.2, key=key)
    w8 = Workload(8, [1, 8], [0.95, 0.05], [Exponential(1.0), Exponential(4.0)])
    lam8 = 1.01 * lambda_c_closed_form(w8)
    with pytest.raises(UnstableLoadError, match=r"closed form, eq. \(8\)"):
        simulate(w8, lam8, key=key)
    ra = simulate(w8, lam8, RandomAssignment(), key=key, n_jobs=512, n_replications=4)
    assert ra.lam == pytest.approx(lam8)


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
    # a law without a phase form: pile growth
    argv = ["mjqm", "stability", "--scenario", "five-class-bpareto", "--rel-tol", "0.05"]
    assert main(argv + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "pile-growth"


def test_cli_sample_load_uses_the_limit_it_prints(capsys):
    """``mjqm sample --load F``: the command computes the limit once, runs at ``F`` times it,
    and prints it as ``"stability": {"lambda_c", "ci", "method"}``."""
    import json

    from jaxqueue.cli import main

    argv = ["mjqm", "sample", "--scenario", "five-class-exp", "--load", "0.5", "--samples", "64"]
    assert main(argv + ["--max-seconds", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    st = out["stability"]
    assert st["method"] == "exact" and st["ci"] == [st["lambda_c"], st["lambda_c"]]
    assert st["lambda_c"] == pytest.approx(FIVE_CLASS_EXP_LAMBDA_C)
    assert out["lam"] == pytest.approx(0.5 * st["lambda_c"], rel=1e-12)
