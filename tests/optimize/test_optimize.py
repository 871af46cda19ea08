"""jaxqueue.optimize: BF objectives and the dimensioning cases against independent references.

References: the M-model closed forms vs a numpy recursion written independently
(``tests/references/optimize_numpy.py``), the generic engine ``jaxqueue.pools.solve``, the
structured engine ``jaxqueue.pools.structured``, scipy SLSQP optima, fine grid searches and brute
force over integer degrees.
"""

import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.optimize import (
    Positive,
    Problem,
    SubsetBF,
    Target,
    m_model_metrics,
    minimize,
    random_degree_metrics,
)
from jaxqueue.optimize import cases as C
from tests.helpers import assert_close
from tests.references.optimize_numpy import bf_numpy, slsqp_capacity


# ----------------------------------------------------------------------------- objectives
def test_m_model_closed_form_matches_recursions():
    rng = np.random.default_rng(0)
    pool = SubsetBF([[0, 2], [1, 2]])
    for _ in range(5):
        mu = rng.uniform(0.5, 2.0, 3)
        lam = rng.uniform(0.1, 0.9, 2) * min(mu[0] + mu[2], mu[1] + mu[2]) * 0.6
        ref = bf_numpy([[0, 2], [1, 2]], mu, lam)
        assert_close(m_model_metrics(jnp.asarray(mu), jnp.asarray(lam))["T"], ref, rtol=1e-10)
        m = pool.metrics(jnp.asarray(mu), jnp.asarray(lam))
        assert_close(m["T"], ref, rtol=1e-10)
        # the relative margin: closed-form constraints of the M model vs the engine's subsets
        mm = m_model_metrics(jnp.asarray(mu), jnp.asarray(lam))["margin"]
        assert_close(m["margin"], mm, rtol=1e-12)


def test_subset_bf_matches_pools_solve_and_numpy():
    from jaxqueue.pools import Pool, solve

    sets, lam, _, _ = C.random_graph(6, 5)
    mu = np.random.default_rng(1).uniform(0.8, 2.0, 6)
    m = SubsetBF(sets, 6).metrics(jnp.asarray(mu), jnp.asarray(lam))
    assert_close(m["T"], solve(Pool(sets, mu), lam).T, rtol=1e-10)
    assert_close(m["T"], bf_numpy(sets, mu, lam), rtol=1e-10)


def test_subset_bf_gradient_matches_finite_differences():
    sets, lam, _, _ = C.random_graph(4, 3)
    eng = SubsetBF(sets, 4)
    mu = np.random.default_rng(2).uniform(0.8, 2.0, 4)
    f = jax.jit(lambda m: eng.metrics(m, jnp.asarray(lam))["T"][1])  # one compile for the quotients
    g = jax.jit(jax.grad(f))(jnp.asarray(mu))
    h = 1e-6
    e = np.eye(4) * h
    fd = np.array([(f(mu + e[k]) - f(mu - e[k])) / (2 * h) for k in range(4)])
    assert_close(g, fd, rtol=1e-6, atol=1e-9)


def test_unstable_rates_give_inf_delays_and_finite_gradients():
    pool = SubsetBF([[0, 2], [1, 2]])
    mu = jnp.array([0.1, 0.1, 0.1])
    lam = jnp.array([1.0, 1.0])
    m = pool.metrics(mu, lam)
    assert float(m["margin"]) < 0 and np.all(np.isinf(np.asarray(m["T"])))
    g = jax.grad(lambda x: pool.metrics(x, lam)["T"].sum())(mu)
    assert np.all(np.isfinite(np.asarray(g)))
    # the barrier needs the margin's gradient, also where unstable: d(1 - 2/M)/d mu_k = 2/M^2
    gm = jax.grad(lambda x: pool.metrics(x, lam)["margin"])(mu)
    assert_close(gm, np.full(3, 2.0 / 0.3**2), rtol=1e-10)
    g2 = jax.grad(lambda x: m_model_metrics(x, lam)["T"].sum())(mu)
    assert np.all(np.isfinite(np.asarray(g2)))


def test_solve_unchecked_batch_flags_unstable_rows():
    """The engine kernel behind SubsetBF: stable rows match numpy, unstable ones are inf with
    finite forward- and reverse-mode derivatives, and ``stable`` / ``stability_margin`` agree
    with the max-flow LP of ``jaxqueue.pools.stability``."""
    from jaxqueue.pools import Pool, solve_unchecked, stability

    sets, lam = [[0, 1], [1, 2, 3], [0, 3]], np.array([0.9, 1.1, 0.5])
    mu = np.array([0.6, 1.3, 0.8, 1.1])
    pool = Pool(sets, mu)
    lams = np.stack([lam, 10.0 * lam])
    out = solve_unchecked(pool, lams)
    lp = [stability(pool, row) for row in lams]
    assert np.asarray(out["stable"]).tolist() == [s.stable for s in lp] == [True, False]
    assert_close(out["stability_margin"], np.array([s.margin for s in lp]), rtol=1e-9)
    assert_close(out["T"][0], bf_numpy(sets, mu, lam), rtol=1e-10)
    assert np.all(np.isinf(np.asarray(out["T"][1]))) and float(out["psi"][1]) == 0.0
    f = lambda m: solve_unchecked(pool, jnp.asarray(lams[1]), mu=m)["T"]
    for jac in (jax.jacrev, jax.jacfwd):  # jitted: one compile each
        assert np.all(np.isfinite(np.asarray(jax.jit(jac(f))(jnp.asarray(mu)))))


def test_random_degree_mixture_matches_subset_recursion():
    """A type with a random degree (mixture) = explicit classes, one per server subset."""
    K, rho = 5, 0.75
    type_probs = np.array([0.4, 0.6])
    w = np.array([[0.0, 0.3, 0.7, 0.0], [0.5, 0.0, 0.0, 0.5]])  # degrees 1..4
    sets, lams, typ = [], [], []
    for u in range(2):
        for d in range(1, 5):
            if w[u, d - 1] == 0:
                continue
            subsets = list(itertools.combinations(range(K), d))
            for s in subsets:
                sets.append(list(s))
                lams.append(K * rho * type_probs[u] * w[u, d - 1] / len(subsets))
                typ.append(u)
    ref = bf_numpy(sets, np.ones(K), np.array(lams)) * np.array(lams)  # L per class
    typ = np.array(typ)
    L_ref = np.array([ref[typ == u].sum() for u in range(2)])
    m = random_degree_metrics(jnp.asarray(rho), type_probs, jnp.asarray(w), n_servers=K)
    assert_close(m["L"], L_ref, rtol=1e-9)
    exact = C.degree_mix_exact({"K": K, "rho": rho, "type_probs": type_probs}, w)
    assert_close(exact["gamma"], m["gamma"], rtol=1e-9)


# ----------------------------------------------------------------------------- framework
def test_problem_and_target_validation():
    with pytest.raises(ValueError, match="sense"):
        Target("T", 1.0, sense="below")
    with pytest.raises(ValueError, match="bound"):
        Target("T", 0.0)
    with pytest.raises(ValueError, match="transforms"):
        Problem(params0={"mu": 1.0}, transforms={}, cost=lambda p: 0.0, metrics=lambda p: {})
    unstable = Problem(
        params0={"mu": jnp.array([0.1, 0.1, 0.1])},
        transforms={"mu": Positive()},
        cost=lambda p: jnp.sum(p["mu"]),
        metrics=lambda p: m_model_metrics(p["mu"], jnp.array([1.0, 1.0])),
        targets=[Target("T", 1.0, index=0)],
    )
    with pytest.raises(ValueError, match="unstable"):
        minimize(unstable, steps=2, rounds=1)


def test_mm1_capacity_closed_form():
    """Single server (M/M/1 under PS): least mu with T = 1/(mu - lam) <= t is lam + 1/t."""
    lam, t = 0.7, 2.0
    problem = Problem(
        params0={"mu": jnp.array([3.0])},
        transforms={"mu": Positive()},
        cost=lambda p: p["mu"][0],
        metrics=lambda p: SubsetBF([[0]]).metrics(p["mu"], jnp.array([lam])),
        targets=[Target("T", t, index=0)],
        polish=lambda p, s: {"mu": p["mu"] * s},
    )
    res = minimize(problem, steps=150, rounds=4)
    assert res.targets_met and res.status == "ok"
    assert abs(res.cost - (lam + 1 / t)) < 1e-6 * (lam + 1 / t) + 1e-9
    assert res.history["cost"].shape == (600,)


# ----------------------------------------------------------------------------- case studies
def _check_capacity(out, weights_fn=None):
    sets, lam = out["server_sets"], np.asarray(out["lam"])
    mu = np.asarray(out["params"]["mu"])
    targets = np.asarray(out["targets"]["T"])
    T = bf_numpy(sets, mu, lam)  # independent re-evaluation
    assert out["targets_met"] and np.all(T <= targets)
    assert np.all(np.asarray(out["slack"]) >= 0)
    assert abs(np.dot(out["cost_weights"], mu) - out["cost"]) < 1e-9 * out["cost"]
    K = len(mu)
    ref = slsqp_capacity(
        lambda m: bf_numpy(sets, m, lam),
        out["cost_weights"],
        targets,
        [2.0 * np.ones(K), 1.5 * np.ones(K)],
    )
    assert ref is not None
    assert out["cost"] <= 1.01 * ref.fun, (out["cost"], ref.fun)


@pytest.fixture(scope="module")
def m_model_cli_output():
    """One run of ``jaxqueue optimize --case capacity-m-model --fast --json``."""
    import contextlib
    import io

    from jaxqueue.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["optimize", "--case", "capacity-m-model", "--fast", "--json"]) == 0
    return json.loads(buf.getvalue())


def test_capacity_m_model_case_vs_slsqp(m_model_cli_output):
    _check_capacity(m_model_cli_output)


@pytest.mark.slow
def test_capacity_random_case_vs_slsqp_fast():
    """Slow (about 12 CPU-s, the compile of the optimiser's loop on 64 server subsets). The
    default suite keeps the same path on smaller engines: ``test_capacity_m_model_case_vs_slsqp``
    (the capacity case, its polish and the SLSQP reference), ``test_mm1_capacity_closed_form``
    (``SubsetBF`` inside ``minimize``) and ``test_subset_bf_matches_pools_solve_and_numpy`` (this
    case's graph)."""
    out = C.run_case("capacity-random-10", fast=True)
    assert len(out["params"]["mu"]) == 6
    _check_capacity(out)


@pytest.mark.slow
def test_capacity_random_10_case_vs_slsqp_full():
    out = C.run_case("capacity-random-10", fast=False)
    assert len(out["params"]["mu"]) == 10
    _check_capacity(out)


def test_traffic_split_vs_grid_search():
    from jaxqueue.pools import Pool, solve

    out = C.run_case("traffic-split", fast=True)
    c = C.TRAFFIC_SPLIT
    sets = [g for groups in c["groups"] for g in groups]
    grid = np.linspace(0.0, 1.0, 151)
    a, b = np.meshgrid(grid, grid, indexing="ij")
    lam = np.stack(
        [c["rates"][0] * a, c["rates"][0] * (1 - a), c["rates"][1] * b, c["rates"][1] * (1 - b)],
        axis=-1,
    ).reshape(-1, 4)
    # the reported split is the last row of the same batched solve (one compilation)
    split = np.asarray(out["params"]["split"])
    lam_opt = (np.asarray(c["rates"])[:, None] * split).reshape(-1)
    res = solve(Pool(sets, c["mu"]), np.vstack([lam, lam_opt]), check=False, class_idle=False)
    T_grid = np.asarray(res.T_mean)[:-1]
    best = float(np.nanmin(np.where(np.isfinite(T_grid), T_grid, np.nan)))
    assert out["cost"] <= 1.01 * best
    # the reported delay is the exact one at the reported split
    assert_close(out["cost"], float(np.asarray(res.T_mean)[-1]), rtol=1e-9)


def test_degree_mix_case_meets_targets_and_is_best_integer():
    out = C.run_case("degree-mix", fast=True)
    c = dict(C.DEGREE_MIX, K=40, max_degree=16, gamma_regular=1.5)
    dp, dr = out["params"]["degrees"]
    D = c["max_degree"]

    def exact(a, b):
        w = np.zeros((2, D))
        w[0, a - 1] = w[1, b - 1] = 1.0
        return C.degree_mix_exact(c, w)

    m = exact(dp, dr)
    assert out["targets_met"]
    assert m["ratio"] >= c["ratio"] and m["gamma"][1] >= c["gamma_regular"]
    p = np.asarray(c["type_probs"])
    best = min(
        p[0] * a + p[1] * b
        for a in range(1, D + 1)
        for b in range(1, D + 1)
        if (e := exact(a, b))["ratio"] >= c["ratio"] and e["gamma"][1] >= c["gamma_regular"]
    )
    assert abs(out["cost"] - best) < 1e-9


def test_cli_optimize_json(m_model_cli_output):
    out = m_model_cli_output
    for key in ("case", "cost", "targets_met", "slack", "params", "server_sets", "lam"):
        assert key in out
    assert out["case"] == "capacity-m-model" and out["targets_met"] is True
    assert len(out["params"]["mu"]) == 3 and len(out["targets"]["T"]) == 2
    assert len(out["cost_weights"]) == 3
    assert out["server_sets"] == [[0, 2], [1, 2]]
