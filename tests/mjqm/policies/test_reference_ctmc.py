"""Self-checks of the brute-force policy CTMC (``tests/references/mjqm_ctmc.py``, no jaxqueue).

Closed forms (Erlang C, Pollaczek-Khinchine), a lumped chain for ``s = 1``, the busy-server
identity, equivalences between policies, hand-worked policy decisions and truncation
convergence.
"""

import math

import numpy as np
import pytest

from tests.references.mjqm_ctmc import (
    ALL_POLICIES,
    ctmc_policy,
    decide,
    fcfs_saturated_throughput,
    solve_mjqm,
)

POLICIES = ALL_POLICIES + ("window:1", "window:3")
NONPRE = ("fcfs", "first-fit", "window:1", "window:2", "window:3")


def _same(a, b, rtol=1e-10, keys=None):
    keys = keys or [k for k in a if k != "policy"]
    for k in keys:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=0, err_msg=k)


# --------------------------------------------------------------------------- policy decisions

# classes 0, 1, 2 need 1, 2, 4 servers; s = 4
CORES = (1, 2, 4)


@pytest.mark.parametrize(
    "policy, jobs, expected",
    [
        # fcfs: the need-4 job blocks the two need-1 jobs behind it
        ("fcfs", [(1, 0), (2, 0), (0, 0), (0, 0)], (1, 0, 0, 0)),
        ("window:1", [(1, 0), (2, 0), (0, 0), (0, 0)], (1, 0, 0, 0)),
        ("first-fit", [(1, 0), (2, 0), (0, 0), (0, 0)], (1, 0, 1, 1)),
        ("window:2", [(1, 0), (2, 0), (0, 0), (0, 0)], (1, 0, 1, 1)),
        # window:2 sees only (2, 2) after starting the first job; window:3 reaches the need-1 job
        ("window:2", [(1, 0), (2, 0), (2, 0), (0, 0)], (1, 0, 0, 0)),
        ("window:3", [(1, 0), (2, 0), (2, 0), (0, 0)], (1, 0, 0, 1)),
        ("first-fit", [(1, 0), (2, 0), (2, 0), (0, 0)], (1, 0, 0, 1)),
        # the window counts WAITING jobs only (jobs in service are not in it)
        ("window:1", [(0, 1), (0, 1), (1, 0), (0, 0)], (1, 1, 1, 0)),
        ("window:1", [(0, 1), (0, 1), (0, 1), (1, 0), (0, 0)], (1, 1, 1, 0, 0)),
        ("window:2", [(0, 1), (0, 1), (0, 1), (1, 0), (0, 0)], (1, 1, 1, 0, 1)),
        # non-preemptive policies keep a job in service even if an earlier one would not fit
        ("fcfs", [(2, 0), (0, 1), (0, 0)], (0, 1, 0)),
        ("first-fit", [(2, 0), (1, 1), (0, 0), (1, 0)], (0, 1, 1, 0)),
        # preemptive policies ignore the incoming flags
        ("preemptive-first-fit", [(1, 0), (2, 1), (0, 1), (0, 0)], (1, 0, 1, 1)),
        ("msf", [(1, 0), (2, 0), (0, 0), (0, 0)], (0, 1, 0, 0)),
        ("msf", [(0, 1), (1, 0), (0, 1), (0, 0), (1, 0)], (0, 1, 0, 0, 1)),
        ("msf", [(0, 0), (1, 0), (0, 0)], (1, 1, 1)),
        # server-filling: prefix (1, 2) reaches 6 >= 4 -> need-4 job first, nothing else fits
        ("server-filling", [(1, 0), (2, 0), (0, 0), (0, 0)], (0, 1, 0, 0)),
        # prefix (0, 1, 1) reaches 5 >= 4 -> serve the two need-2 jobs, the need-1 job waits
        ("server-filling", [(0, 0), (1, 0), (1, 0)], (0, 1, 1)),
        ("preemptive-first-fit", [(0, 0), (1, 0), (1, 0)], (1, 1, 0)),
        # prefix (0, 1, 0) sums to exactly 4: all of it; the later need-4 job waits
        ("server-filling", [(0, 0), (1, 0), (0, 0), (2, 0), (0, 0)], (1, 1, 1, 0, 0)),
        ("msf", [(0, 0), (1, 0), (0, 0), (2, 0), (0, 0)], (0, 0, 0, 1, 0)),
        # fewer than s servers needed in all: every job served
        ("server-filling", [(0, 0), (1, 0)], (1, 1)),
        ("server-filling", [], ()),
    ],
)
def test_decide_by_hand(policy, jobs, expected):
    assert decide(policy, 4, CORES, jobs) == tuple(bool(e) for e in expected)


def test_bad_policy_names():
    for bad in ("lifo", "window", "window:0", "window:x"):
        with pytest.raises(ValueError):
            ctmc_policy(bad, 2, (1,), (1.0,), (1.0,), 0.5, 3)


# --------------------------------------------------------------------------- Erlang C


def _erlang_c_response(s, lam, mu):
    a = lam / mu
    rho = a / s
    top = a**s / math.factorial(s) / (1.0 - rho)
    c = top / (sum(a**k / math.factorial(k) for k in range(s)) + top)
    return c / (s * mu - lam) + 1.0 / mu, c / (s * mu - lam)


@pytest.mark.parametrize("policy", POLICIES)
def test_erlang_c_one_class(policy):
    s, lam, mu = 3, 1.8, 1.0  # rho = 0.6; P(N >= 80) ~ 0.6^77 ~ 1e-17
    res = ctmc_policy(policy, s, (1,), (1.0,), (mu,), lam, 80)
    t, w = _erlang_c_response(s, lam, mu)
    assert res["states"] == 81
    assert res["p_full"] < 1e-15
    assert abs(res["response_mean"] - t) < 1e-8 * t
    assert abs(res["response_mean_class"][0] - t) < 1e-8 * t
    assert abs(res["jobs_mean"] - lam * t) < 1e-8 * lam * t
    assert abs(res["idle_servers_mean"] - (s - lam / mu)) < 1e-10
    if policy in NONPRE:
        assert abs(res["wait_mean"] - w) < 1e-8 * w
    else:
        assert "wait_mean" not in res


# --------------------------------------------------------------------------- s = 1


def _lumped_s1(probs, mus, lam, max_jobs):
    """fcfs at s = 1 over (n, class in service) with the same loss at ``max_jobs``: waiting
    classes are i.i.d. ``probs`` given (n, j), so E[N_k] = P(j = k) + p_k E[(N - 1)^+]."""
    K = len(probs)
    idx = {(0, -1): 0}
    for n in range(1, max_jobs + 1):
        for j in range(K):
            idx[(n, j)] = len(idx)
    m = len(idx)
    Q = np.zeros((m, m))
    for (n, j), i in idx.items():
        if n < max_jobs and n:
            Q[i, idx[(n + 1, j)]] += lam
        elif n < max_jobs:
            for k in range(K):
                Q[i, idx[(1, k)]] += lam * probs[k]
        if n:
            if n == 1:
                Q[i, 0] += mus[j]
            else:
                for k in range(K):
                    Q[i, idx[(n - 1, k)]] += mus[j] * probs[k]
    Q -= np.diag(Q.sum(axis=1))
    A = np.vstack([Q.T[1:], np.ones(m)])
    b = np.zeros(m)
    b[-1] = 1.0
    pi = np.linalg.solve(A, b)
    p_full = sum(pi[idx[(max_jobs, j)]] for j in range(K))
    jobs = np.zeros(K)
    for (n, j), i in idx.items():
        if n:
            jobs[j] += pi[i]
            jobs += pi[i] * (n - 1) * np.asarray(probs)
    lam_eff = lam * np.asarray(probs) * (1.0 - p_full)
    return jobs / lam_eff, jobs.sum() / lam_eff.sum(), p_full


S1 = dict(probs=(0.4, 0.6), mus=(2.0, 0.7), lam=0.2)  # rho = 0.2 * (0.2 + 0.857) = 0.211


@pytest.mark.parametrize("policy", POLICIES)
def test_s1_equals_lumped_chain_same_truncation(policy):
    """s = 1, every job needs the whole server: every policy is fcfs; exact at equal truncation."""
    N = 9
    res = ctmc_policy(policy, 1, (1, 1), S1["probs"], S1["mus"], S1["lam"], N)
    t_k, t, p_full = _lumped_s1(S1["probs"], S1["mus"], S1["lam"], N)
    assert res["states"] == 2 ** (N + 1) - 1
    assert abs(res["p_full"] - p_full) < 1e-13
    np.testing.assert_allclose(res["response_mean_class"], t_k, rtol=1e-10)
    assert abs(res["response_mean"] - t) < 1e-10 * t


def test_s1_pollaczek_khinchine():
    p, mu, lam = np.asarray(S1["probs"]), np.asarray(S1["mus"]), S1["lam"]
    es, es2 = float(p @ (1 / mu)), float(p @ (2 / mu**2))
    rho = lam * es
    w = lam * es2 / (2 * (1 - rho))
    # the lumped chain, untruncated in effect, against the formula
    t_k, t, p_full = _lumped_s1(p, mu, lam, 80)
    assert p_full < 1e-30
    np.testing.assert_allclose(t_k, w + 1 / mu, rtol=1e-12)
    # the brute-force chain itself, at a truncation mass ~ 1e-7
    res = ctmc_policy("fcfs", 1, (1, 1), p, mu, lam, 12)
    assert res["p_full"] < 1e-7
    np.testing.assert_allclose(res["response_mean_class"], w + 1 / mu, rtol=5e-6)
    np.testing.assert_allclose(res["wait_mean_class"], [w, w], rtol=5e-6)
    for policy in ("msf", "server-filling", "window:2"):
        _same(res, ctmc_policy(policy, 1, (1, 1), p, mu, lam, 12), rtol=1e-9,
              keys=["jobs_mean_class", "response_mean", "p_full", "states"])  # fmt: skip


# --------------------------------------------------------------------------- window


@pytest.mark.parametrize("cfg", [(4, (1, 2, 3)), (3, (1, 2, 3))])
def test_window_limits(cfg):
    s, cores = cfg
    args = (s, cores, (0.4, 0.35, 0.25), (1.0, 0.8, 1.5), 0.9, 6)
    fcfs = ctmc_policy("fcfs", *args)
    ff = ctmc_policy("first-fit", *args)
    _same(ctmc_policy("window:1", *args), fcfs, rtol=1e-12)
    _same(ctmc_policy("window:6", *args), ff, rtol=1e-12)
    _same(ctmc_policy("window:50", *args), ff, rtol=1e-12)
    # and the three are genuinely different policies here
    w2 = ctmc_policy("window:2", *args)
    assert fcfs["states"] < w2["states"] < ff["states"]
    assert abs(w2["response_mean"] - fcfs["response_mean"]) > 1e-3
    assert abs(w2["response_mean"] - ff["response_mean"]) > 1e-4


# --------------------------------------------------------------------------- busy servers


@pytest.mark.parametrize("s", [2, 3])
@pytest.mark.parametrize("policy", POLICIES)
def test_busy_server_identity(policy, s):
    cores, probs, mus, lam = (1, s), (0.7, 0.3), (1.0, 0.6), 0.8 * (s - 0.5)
    res = ctmc_policy(policy, s, cores, probs, mus, lam, 8)
    lhs = res["lam_eff"] * sum(p * c / m for p, c, m in zip(probs, cores, mus, strict=True))
    assert abs(lhs - (s - res["idle_servers_mean"])) < 1e-10
    # per class too: throughput_k = lam_eff_k
    np.testing.assert_allclose(res["lam_eff_class"], lam * np.asarray(probs) * (1 - res["p_full"]))
    assert res["p_full"] > 1e-4  # the truncation is felt, the identity still exact


def test_state_counts():
    """Preemptive chains (and fcfs) are over all ordered class strings up to max_jobs."""
    args = (4, (1, 2, 4), (0.5, 0.3, 0.2), (1.0, 1.0, 1.0), 1.0, 5)
    for policy in ("fcfs", "preemptive-first-fit", "msf", "server-filling"):
        assert ctmc_policy(policy, *args)["states"] == sum(3**n for n in range(6))
    assert ctmc_policy("first-fit", *args)["states"] > sum(3**n for n in range(6))


def test_policies_differ():
    args = (4, (1, 2, 4), (0.5, 0.3, 0.2), (1.0, 1.0, 1.0), 0.8, 6)
    vals = [ctmc_policy(p, *args)["response_mean"] for p in ALL_POLICIES]
    assert min(np.diff(np.sort(vals))) > 1e-3


# --------------------------------------------------------------------------- solvers, truncation


def test_iterative_matches_direct():
    args = ("first-fit", 4, (1, 2, 4), (0.5, 0.3, 0.2), (1.0, 0.7, 1.3), 0.8, 7)
    d = ctmc_policy(*args, solver="direct")
    i = ctmc_policy(*args, solver="iterative")
    assert d["states"] > 5000
    _same(d, i, rtol=1e-9, keys=["jobs_mean_class", "wait_mean_class", "idle_servers_mean"])
    assert abs(d["p_full"] - i["p_full"]) < 1e-12


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_truncation_converges(policy):
    # s = 3, needs (1, 2): load 0.07 * (0.6 + 1.6) / 3 = 0.05 (fcfs: 6% of its stability limit)
    args = (3, (1, 2), (0.6, 0.4), (1.0, 0.5), 0.07)
    a = ctmc_policy(policy, *args, 8)
    b = ctmc_policy(policy, *args, 12)
    keys = ["jobs_mean_class", "response_mean_class", "response_mean", "idle_servers_mean"]
    _same(a, b, rtol=1e-6, keys=keys)
    assert b["p_full"] < a["p_full"] < 1e-7
    if policy in NONPRE:
        # mean waits are tiny at this load (~ 0.002 for class 0 under first-fit), so they are
        # held to 1e-6 of the class's mean response, not of themselves
        np.testing.assert_allclose(
            a["wait_mean_class"], b["wait_mean_class"], rtol=0, atol=1e-6 * b["response_mean"]
        )


# --------------------------------------------------------------------------- saturated fcfs


def test_saturated_throughput():
    assert abs(fcfs_saturated_throughput(3, (1,), (1.0,), (0.7,)) - 2.1) < 1e-12
    # s = 1 (or all jobs need s): one job at a time, X = 1 / E[S]
    p, mu = (0.3, 0.7), (2.0, 0.5)
    x = 1 / (p[0] / mu[0] + p[1] / mu[1])
    assert abs(fcfs_saturated_throughput(1, (1, 1), p, mu) - x) < 1e-12
    assert abs(fcfs_saturated_throughput(2, (2, 2), p, mu) - x) < 1e-12
    # s = 2, needs (1, 2), unit rates, probs (1/2, 1/2), worked by hand: states (in service,
    # blocked head) a1 = (11, 1), a2 = (11, 2), b = (1, 2), c1 = (2, 1), c2 = (2, 2); balance
    # gives a1 = a2 = c1 / 4, b = c2 = c1, so c1 = 2/7 and X = 2 (a1 + a2) + b + c1 + c2 = 8/7
    assert abs(fcfs_saturated_throughput(2, (1, 2), (0.5, 0.5), (1.0, 1.0)) - 8 / 7) < 1e-12
    # a rougher bound: X * E[need / mu] = E[busy] <= s
    x = fcfs_saturated_throughput(4, (1, 2, 4), (0.5, 0.3, 0.2), (1.0, 1.0, 1.0))
    assert 1.0 < x < 4 / (0.5 + 0.6 + 0.8)


def test_fcfs_job_list_chain_matches_the_lumped_fcfs_chain():
    """The two FCFS chains of the reference describe one law: the ordered job list with arrivals
    lost at 12 jobs (``ctmc_policy``) and the jobs in service counted per class with the queue
    cut by weight (``solve_mjqm``). At 10% of ``lambda_c`` the job-list chain loses 7e-11 of
    the arrivals; measured: waits agree to 5e-8, idle servers to 7e-12, jobs to 5e-10."""
    s, cores, probs, mus = 4, (1, 2), (0.6, 0.4), (1.0, 0.5)
    lam = 0.1 * fcfs_saturated_throughput(s, cores, probs, mus)
    a = ctmc_policy("fcfs", s, cores, probs, mus, lam, 12)
    b = solve_mjqm(s, cores, probs, [1.0 / m for m in mus], lam)
    np.testing.assert_allclose(a["wait_mean_class"], b.wait_mean_class, rtol=1e-6)
    np.testing.assert_allclose(a["idle_servers_mean"], b.idle_servers, rtol=1e-9)
    np.testing.assert_allclose(a["jobs_mean"], b.jobs_mean, rtol=1e-9)
