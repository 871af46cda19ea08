"""Self-tests of tests/references/mjqm_ph_ctmc.py and tests/references/closed_forms.py.

The brute force (``mjqm_ph_ctmc``) against: Pollaczek-Khinchine and the M/PH/1 waiting-time law
(s = 1), Erlang C (one-server jobs, exponential), the exponential CTMC reference
``mjqm_ctmc`` (means and lambda_c), its own tagged-job means (Little), and the heapq event
simulator ``mjqm_events`` (waiting-time tails, within batch-means intervals).
"""

import math

import numpy as np
import pytest

from tests.references import closed_forms as cf
from tests.references import mjqm_ctmc as ctmc
from tests.references import mjqm_events as ev
from tests.references import mjqm_ph_ctmc as ph

E3 = ph.erlang(3, 1.0)
H2 = ph.hyperexp([0.2, 0.8], [3.0, 0.5])
EXP1 = ph.exponential(1.0)


def _laws(*laws):
    return [a for a, _ in laws], [T for _, T in laws]


# ------------------------------------------------------------------------- closed forms
def test_closed_forms_agree_with_each_other():
    # Erlang C with c = 1 is rho; the M/PH/1 tail with one phase is M/M/1's
    lam, mu = 0.7, 1.3
    assert math.isclose(cf.erlang_c(1, lam / mu), lam / mu, rel_tol=1e-14)
    t = [0.0, 0.4, 3.0]
    np.testing.assert_allclose(cf.mmc_wait_tail(1, lam, mu, t), cf.mm1_wait_tail(lam, mu, t))
    np.testing.assert_allclose(
        cf.mph1_wait_tail(lam, [1.0], [[-mu]], t), cf.mm1_wait_tail(lam, mu, t), rtol=1e-13
    )
    # Erlang C by the textbook sum
    c, a = 4, 2.9
    top = a**c / math.factorial(c) / (1 - a / c)
    ref = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    assert math.isclose(cf.erlang_c(c, a), ref, rel_tol=1e-13)
    # PH moments against the Erlang / H2 ones; the quantile inverts the tail
    np.testing.assert_allclose([ph_m(E3, 1), ph_m(E3, 2)], cf.erlang_moments(3, 1.0), rtol=1e-13)
    np.testing.assert_allclose(
        [ph_m(H2, 1), ph_m(H2, 2)], cf.h2_moments([0.2, 0.8], [3.0, 0.5]), rtol=1e-13
    )
    q = cf.mmc_wait_quantile(c, 2.9, 1.0, 0.95)
    assert math.isclose(cf.mmc_wait_tail(c, 2.9, 1.0, q), 0.05, rel_tol=1e-12)
    assert cf.mmc_wait_quantile(c, 2.9, 1.0, 0.1) == 0.0
    # the M/PH/1 law: P(W > 0) = rho, its mean the P-K mean
    lam = 0.5
    es, es2 = cf.h2_moments([0.2, 0.8], [3.0, 0.5])
    assert math.isclose(cf.mph1_wait_tail(lam, *H2, [0.0])[0], lam * es, rel_tol=1e-13)
    assert math.isclose(cf.mph1_mean_wait(lam, *H2), cf.mg1_mean_wait(lam, es, es2), rel_tol=1e-12)


def ph_m(law, n):
    return cf.ph_moment(law[0], law[1], n)


# --------------------------------------------------------------------- s = 1: M/PH/1
@pytest.mark.parametrize(
    "law,lam,max_jobs",
    [(E3, 0.6, 60), (H2, 0.5, 120), (ph.coxian([3.0, 2.0, 1.5], [0.6, 0.5]), 0.7, 110)],
    ids=["erlang3", "h2", "coxian3"],
)
def test_mph1_is_pollaczek_khinchine(law, lam, max_jobs):
    ch = ph.build(1, [1], [1.0], [law[0]], [law[1]], lam, max_jobs=max_jobs)
    r = ch.result()
    assert r.truncation_mass < 1e-12
    es, es2 = cf.ph_moment(*law, 1), cf.ph_moment(*law, 2)
    w = cf.mg1_mean_wait(lam, es, es2)
    np.testing.assert_allclose(r.wait_mean, w, rtol=1e-9)
    np.testing.assert_allclose(r.p_wait, cf.mg1_p_wait(lam, es), rtol=1e-11)
    np.testing.assert_allclose(r.response_mean_class, [w + es], rtol=1e-9)
    np.testing.assert_allclose(r.jobs_mean, lam * (w + es), rtol=1e-9)
    t = [0.0, 0.3, 2.0, 10.0]
    tail, per = ch.wait_tail(t)
    np.testing.assert_allclose(tail, cf.mph1_wait_tail(lam, *law, t), rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(per[:, 0], tail)
    np.testing.assert_allclose(ch.wait_tail(t, method="expm")[0], tail, rtol=1e-10, atol=1e-15)
    q = r.wait_quantile(0.9)
    np.testing.assert_allclose(cf.mph1_wait_tail(lam, *law, [q]), [0.1], rtol=1e-8)


def test_two_all_core_classes_are_mg1():
    # both classes hold all 3 servers: M/G/1 with the mixture law, every class waits alike
    p, lam = [0.4, 0.6], 0.05
    a, T = _laws(E3, H2)
    r = ph.solve(3, [3, 3], p, a, T, lam, max_jobs=1000, min_weight=1e-10, theta=0.2)
    assert r.truncation_mass < 1e-9
    es = p[0] * 1.0 + p[1] * ph.mean_service(*H2)
    es2 = p[0] * ph_m(E3, 2) + p[1] * ph_m(H2, 2)
    w = cf.mg1_mean_wait(lam, es, es2)
    np.testing.assert_allclose(r.wait_mean_class, [w, w], rtol=1e-7)
    np.testing.assert_allclose(r.p_wait_class, [lam * es] * 2, rtol=1e-8)
    np.testing.assert_allclose(ph.lambda_c(3, [3, 3], p, a, T), 1.0 / es, rtol=1e-12)


# ------------------------------------------------------------------ M/M/c: Erlang C
def test_one_server_exponential_jobs_are_erlang_c():
    c, lam = 3, 2.1
    ch = ph.build(c, [1], [1.0], [EXP1[0]], [EXP1[1]], lam, max_jobs=120)
    r = ch.result()
    assert r.truncation_mass < 1e-13
    pw = cf.erlang_c(c, lam)
    np.testing.assert_allclose([r.p_wait, r.wait_mean], [pw, cf.mmc_mean_wait(c, lam, 1.0)], 1e-10)
    t = np.array([0.0, 0.5, 2.0, 6.0])
    np.testing.assert_allclose(ch.wait_tail(t)[0], cf.mmc_wait_tail(c, lam, 1.0, t), rtol=1e-10)
    for q in (0.5, 0.9, 0.99):
        np.testing.assert_allclose(
            r.wait_quantile(q), cf.mmc_wait_quantile(c, lam, 1.0, q), rtol=1e-9, atol=1e-12
        )
    np.testing.assert_allclose(ph.lambda_c(c, [1], [1.0], [EXP1[0]], [EXP1[1]]), c, rtol=1e-12)


def test_two_labelled_exponential_classes_are_erlang_c():
    # two classes that differ only by their label: each sees the M/M/c wait
    c, lam, p = 2, 0.3, [0.3, 0.7]
    a, T = _laws(EXP1, EXP1)
    ch = ph.build(c, [1, 1], p, a, T, lam, max_jobs=1000, min_weight=1e-9, theta=0.3)
    r = ch.result()
    assert r.truncation_mass < 1e-10
    np.testing.assert_allclose(r.p_wait_class, [cf.erlang_c(c, lam)] * 2, rtol=1e-8)
    t = np.array([0.0, 1.0, 4.0])
    tail, per = ch.wait_tail(t)
    mmc = np.stack([cf.mmc_wait_tail(c, lam, 1.0, t)] * 2, 1)
    np.testing.assert_allclose(per, mmc, rtol=1e-7, atol=1e-9)


# ------------------------------------------------- exponential laws: the exponential CTMC
EXP_SYSTEMS = [
    (4, [1, 2], [0.6, 0.4], [1.0, 2.0], 0.1),
    (5, [2, 3], [0.5, 0.5], [1.0, 1.5], 0.1),
    (3, [1, 2, 3], [0.6, 0.3, 0.1], [1.0, 0.7, 1.5], 0.05),
]


@pytest.mark.parametrize(
    "s,cores,probs,means,lam",
    [EXP_SYSTEMS[0], *(pytest.param(*x, marks=pytest.mark.slow) for x in EXP_SYSTEMS[1:])],
)
def test_exponential_laws_match_the_exponential_ctmc(s, cores, probs, means, lam):
    a, T = _laws(*(ph.exponential(m) for m in means))
    r = ph.solve(s, cores, probs, a, T, lam, max_jobs=1000, min_weight=1e-9, theta=0.3)
    ref = ctmc.solve_mjqm(s, cores, probs, means, lam, tol=1e-11)
    assert r.truncation_mass < 1e-9
    for mine, theirs in [
        (r.wait_mean_class, ref.wait_mean_class),
        (r.wait_mean, ref.wait_mean),
        (r.p_wait, ref.p_wait),
        (r.jobs_mean, ref.jobs_mean),
        (r.jobs_waiting_class, ref.jobs_waiting_class),
        (r.jobs_service_class, ref.jobs_service_class),
    ]:
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)


@pytest.mark.parametrize("s,cores,probs,means,lam", EXP_SYSTEMS)
def test_exponential_lambda_c_matches_the_exponential_ctmc(s, cores, probs, means, lam):
    a, T = _laws(*(ph.exponential(m) for m in means))
    mus = [1.0 / m for m in means]
    np.testing.assert_allclose(
        ph.lambda_c(s, cores, probs, a, T),
        ctmc.fcfs_saturated_throughput(s, cores, probs, mus),
        rtol=1e-12,
    )


def test_erlang_phases_change_lambda_c():
    # lambda_c depends on the law, not only on the mean; exponential vs Erlang-2, same means
    s, cores, probs = 4, [1, 3], [0.7, 0.3]
    ex = _laws(ph.exponential(1.0), ph.exponential(2.0))
    er = _laws(ph.erlang(2, 1.0), ph.erlang(2, 2.0))
    a = ph.lambda_c(s, cores, probs, *ex)
    b = ph.lambda_c(s, cores, probs, *er)
    np.testing.assert_allclose(a, ctmc.fcfs_saturated_throughput(s, cores, probs, [1.0, 0.5]))
    assert abs(a - b) > 1e-3


# ------------------------------------------------------------- internal consistency
PH_SYSTEM = (3, [1, 2], [0.7, 0.3], _laws(E3, ph.hyperexp([0.25, 0.75], [2.0, 2 / 3])))


def test_tagged_job_is_littles_law_and_tail_starts_at_p_wait():
    s, cores, p, (a, T) = PH_SYSTEM
    ch = ph.build(s, cores, p, a, T, 0.3, max_jobs=7)
    r = ch.result()
    assert 1e-6 < r.truncation_mass < 1e-2  # a coarse cut: identities hold for any cut
    np.testing.assert_allclose(ch.wait_mean_tagged(), r.wait_mean_class, rtol=1e-10)
    tail, per = ch.wait_tail([0.0, 1.0, 5.0])
    np.testing.assert_allclose(per[0], r.p_wait_class, rtol=1e-12)
    np.testing.assert_allclose(tail[0], r.p_wait, rtol=1e-12)
    np.testing.assert_allclose(ch.wait_tail([1.0, 5.0], method="expm")[1], per[1:], rtol=1e-10)
    assert np.all(np.diff(per, axis=0) < 0)
    # Little on the servers: E[n_k in service] = admitted rate x mean service
    rate = (
        r.throughput * np.array(p) * (ch.pi @ ch.admitted) / (np.array(p) @ (ch.pi @ ch.admitted))
    )
    np.testing.assert_allclose(r.jobs_service_class, rate * r.service_mean_class, rtol=1e-10)
    # a finer cut moves the metrics by little more than the mass it adds
    fine = ph.solve(s, cores, p, a, T, 0.3, max_jobs=9)
    assert fine.truncation_mass < 1e-5
    np.testing.assert_allclose(
        r.wait_mean_class, fine.wait_mean_class, rtol=200 * r.truncation_mass
    )


# ---------------------------------------------------------- against the event simulator
def _simulated_tail(s, cores, p, laws, lam, t, n, seed, batches=20):
    """Per-class P(W > t) from the heapq simulator, with a batch-means half-width (99.9%)."""
    rng = np.random.default_rng(seed)
    samplers = [ph.ph_sampler(a, T) for a, T in laws]
    cls, need, sigma, tau = ev.random_jobs(rng, n, cores, p, samplers, lam)
    wait = ev.event_simulate(s, need, sigma, tau)["wait"]
    keep = slice(n // 20, None)  # warm-up
    cls, wait = cls[keep], wait[keep]
    b = np.array_split(np.arange(len(wait)), batches)
    est = np.zeros((batches, len(t) + 1, len(p) + 1))
    for i, idx in enumerate(b):
        for j, tt in enumerate([*t, 0.0]):
            over = wait[idx] > tt
            est[i, j, -1] = over.mean()
            for k in range(len(p)):
                est[i, j, k] = over[cls[idx] == k].mean()
    mean = est.mean(0)
    half = 3.9 * est.std(0, ddof=1) / math.sqrt(batches)  # t_{19}, 99.9%
    return mean, half


@pytest.mark.parametrize(
    "n",
    [pytest.param(60_000, id="fast"), pytest.param(2_000_000, id="long", marks=pytest.mark.slow)],
)
def test_wait_tail_matches_the_event_simulator(n):
    s, cores, p, (a, T) = PH_SYSTEM
    lam, t = 0.45, [0.5, 2.0]
    ch = ph.build(s, cores, p, a, T, lam, max_jobs=10 if n < 10**6 else 13)
    r = ch.result()
    assert r.truncation_mass < 1e-3  # far below the simulator's resolution (checked below)
    tail, per = ch.wait_tail(t)
    exact = np.zeros((len(t) + 1, len(p) + 1))
    exact[: len(t), :-1], exact[: len(t), -1] = per, tail
    exact[-1, :-1], exact[-1, -1] = r.p_wait_class, r.p_wait
    mean, half = _simulated_tail(s, cores, p, list(zip(a, T, strict=True)), lam, t, n, seed=7)
    assert np.all(np.abs(mean - exact) <= half), (mean, exact, half)
    assert np.all(half < 0.05)  # the intervals say something
    assert np.all(half > 10 * r.truncation_mass)


# ----------------------------------------------------------------- the tabulated values
TABLE_KEYS = [
    "wait_mean",
    "wait_mean_class",
    "response_mean_class",
    "jobs_mean",
    "jobs_mean_class",
    "p_wait",
    "p_wait_class",
    "wait_tail",
    "wait_tail_class",
    "wait_quantile",
    "wait_quantile_class",
]


def test_reference_table_lambda_c_and_cut():
    assert set(ph.REFERENCE_VALUES) == set(ph.REFERENCE_SYSTEMS)
    for name, ref in ph.REFERENCE_VALUES.items():
        sysd = ph.REFERENCE_SYSTEMS[name]
        args = [sysd[k] for k in ("s", "cores", "probs", "alphas", "Ts")]
        np.testing.assert_allclose(ph.lambda_c(*args), ref["lambda_c"], rtol=1e-12, err_msg=name)
        # the cut is converged far beyond the 1e-6 the solver tests ask for
        assert ref["truncation_mass"] < 1e-9 and ref["coarse_spread"] < 1e-5, name
        assert ref["error_estimate"] < 2e-6, name
        assert sysd["lam"] < 0.5 * ref["lambda_c"]


@pytest.mark.parametrize(
    "name,cut",
    [
        pytest.param("s2-erlang2-exp", "coarse_cut", id="s2-coarse"),
        *(
            pytest.param(n, "cut", id=n, marks=pytest.mark.slow)
            for n in [
                "s2-erlang2-exp",
                "s3-h2-erlang3",
                "s4-three-class",
                "s6-rare-big",
                "s5-coxian3-erlang2",
            ]
        ),
    ],
)
def test_reference_table_is_what_the_chain_gives(name, cut):
    ref = ph.REFERENCE_VALUES[name]
    got = ph.reference_values(name, cut)
    rtol = 1e-6 if cut == "coarse_cut" else 1e-10  # the coarse cut of s2 moves < 1e-7
    for k in TABLE_KEYS:
        np.testing.assert_allclose(got[k], ref[k], rtol=rtol, err_msg=k)
