"""Generic BF engine: closed forms, routes, gradients, stability, validation, compilation."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.pools import (
    Pool,
    check_stable,
    log_inv_psi,
    m_model,
    m_model_pool,
    m_model_total_L,
    mean_numbers_recursive,
    solve,
    stability,
    subset_log_inv_psi,
)
from jaxqueue.pools._recursion import _solve_jit, _sweep, subset_layers
from tests.helpers import assert_close


def random_pool(K, I, seed, dmax=3):
    rng = np.random.default_rng(seed)
    sets = [
        sorted(rng.choice(K, size=int(rng.integers(1, dmax + 1)), replace=False).tolist())
        for _ in range(I)
    ]
    return Pool(sets, rng.uniform(0.5, 2.0, K)), rng.uniform(0.2, 1.0, I)


def at_load(pool, w, frac):
    return frac * stability(pool, w).margin * np.asarray(w)


# ---------------------------------------------------------------- closed forms (M model)

# jitted: one compile each for every load (eagerly, each op compiles on its own)
m_model_jit, m_model_total_L_jit = jax.jit(m_model), jax.jit(m_model_total_L)


@pytest.mark.parametrize("rho", [0.3, 0.8, 0.97])
def test_m_model_symmetric_closed_forms(rho):
    lam = np.array([0.6, 0.4]) * rho * 3 / 1.0
    res = solve(m_model_pool(), lam)
    ref = m_model_jit(*lam)
    for f in ("psi", "L", "T", "gamma", "psi_server", "psi_class", "busy_servers"):
        assert_close(getattr(res, f), getattr(ref, f), rtol=1e-11, what=f)
    assert_close(res.L_total, m_model_total_L_jit(*lam), rtol=1e-11)


@pytest.mark.parametrize("rho", [0.5, 0.95])
def test_m_model_asymmetric_closed_forms(rho):
    # paper mu = (1, 0, 1): class 1 on servers {1, 3}, class 2 on server {3}; here 2 servers
    lam = np.full(2, rho)  # total capacity 2, split equally
    res = solve(m_model_pool(asymmetric=True), lam)
    ref = m_model_jit(lam[0], lam[1], 1.0, 0.0, 1.0)
    for f in ("psi", "L", "T", "gamma", "psi_class"):
        assert_close(getattr(res, f), getattr(ref, f), rtol=1e-11, what=f)
    assert_close(res.psi_server, np.asarray(ref.psi_server)[[0, 2]], rtol=1e-11)
    assert_close(res.L_total, m_model_total_L_jit(lam[0], lam[1], 1.0, 0.0, 1.0), rtol=1e-11)


def test_dedicated_servers_product_form_float32():
    """K disjoint M/M/1 queues: psi = prod (1 - rho_k); log(1/psi) > 88 (float32 limit)."""
    K = 12
    pool32 = Pool([[k] for k in range(K)], jnp.ones(K, jnp.float32))
    lam = jnp.full(K, 0.9999, jnp.float32)
    res = solve(pool32, lam, class_idle=False)
    assert res.psi.dtype == jnp.float32 and res.L.dtype == jnp.float32
    expected = -K * np.log(1 - 0.9999)
    assert expected > 88
    assert_close(res.log_inv_psi, expected, rtol=2e-3)
    assert_close(res.L, 0.9999 / 0.0001, rtol=2e-2)
    assert np.all(np.isfinite(np.asarray(res.psi_server)))


# ---------------------------------------------------------------- routes and gradients


def test_three_routes_for_L_agree():
    """solve (hand-written reverse pass), jax.grad of log(1/psi), Theorem 2 recursion."""
    pool, w = random_pool(6, 5, seed=3)
    lam = at_load(pool, w, 0.93)
    res = solve(pool, lam)
    lam_j = jnp.asarray(lam)
    L_grad = lam_j * jax.jit(jax.grad(lambda l: log_inv_psi(pool, l)))(lam_j)
    L_thm2 = mean_numbers_recursive(pool, lam)
    assert_close(res.L, L_grad, rtol=1e-10, atol=1e-12, what="adjoint vs jax.grad")
    assert_close(L_thm2, L_grad, rtol=1e-10, atol=1e-12, what="Theorem 2 vs jax.grad")
    assert_close(res.T * lam, res.L, rtol=1e-12)
    assert_close(res.L_total, np.sum(np.asarray(L_thm2)), rtol=1e-10)


def test_psi_gradients_match_finite_differences():
    pool, w = random_pool(6, 5, seed=4)
    lam = at_load(pool, w, 0.8)
    mu = np.asarray(pool.mu)

    @jax.jit  # one compile for the difference quotients
    def psi_of(mu_, lam_):
        return solve(pool, lam_, mu=mu_, class_idle=False).psi

    g_mu, g_lam = jax.jit(jax.grad(psi_of, argnums=(0, 1)))(jnp.asarray(mu), jnp.asarray(lam))
    h = 1e-6
    fd_mu = np.array(
        [(psi_of(mu + h * e, lam) - psi_of(mu - h * e, lam)) / (2 * h) for e in np.eye(len(mu))]
    )
    fd_lam = np.array(
        [(psi_of(mu, lam + h * e) - psi_of(mu, lam - h * e)) / (2 * h) for e in np.eye(len(lam))]
    )
    assert np.all(np.isfinite(np.asarray(g_mu)))
    assert_close(g_mu, fd_mu, rtol=1e-6, atol=1e-10, what="d psi / d mu")
    assert_close(g_lam, fd_lam, rtol=1e-6, atol=1e-10, what="d psi / d lam")
    # eq. (6): d log(1/psi) / d lam = T
    assert_close(-np.asarray(g_lam) / np.asarray(solve(pool, lam).psi), solve(pool, lam).T)


def test_gradient_of_response_time_in_mu():
    """Second-order route: d T_0 / d mu through the reverse pass, against central differences."""
    pool, lam = m_model_pool(), np.array([0.9, 1.2])

    @jax.jit  # one compile for the difference quotients
    def t0(mu_):
        return solve(pool, lam, mu=mu_, class_idle=False).T[0]

    mu = np.ones(3)
    g = jax.jit(jax.grad(t0))(jnp.asarray(mu))
    h = 1e-6
    fd = np.array([(t0(mu + h * e) - t0(mu - h * e)) / (2 * h) for e in np.eye(3)])
    assert_close(g, fd, rtol=1e-6, atol=1e-10)
    ref = jax.jit(jax.grad(lambda m: m_model(lam[0], lam[1], m[0], m[1], m[2]).T[0]))(
        jnp.asarray(mu)
    )
    assert_close(g, ref, rtol=1e-9)


@pytest.mark.slow
def test_vmap_and_batch_match_single_calls():
    pool, w = random_pool(4, 3, seed=5)
    lams = np.stack([at_load(pool, w * (1 + 0.1 * j), f) for j, f in enumerate([0.2, 0.6, 0.9])])
    batch = solve(pool, lams)
    vm = jax.vmap(lambda l: solve(pool, l).L)(jnp.asarray(lams))
    for j in range(3):
        one = solve(pool, lams[j])
        assert_close(batch.L[j], one.L, rtol=1e-12)
        assert_close(vm[j], one.L, rtol=1e-12)
        assert_close(batch.psi_server[j], one.psi_server, rtol=1e-12)


def test_vmap_gradients_and_batched_sweep_underflow_fallback_internal():
    """vmap of grad equals per-vector grads; the batched sweep survives float32 underflow."""
    pool, w = random_pool(5, 4, seed=8)
    lams = np.stack([at_load(pool, w, f) for f in (0.3, 0.6, 0.9)])

    def g(lam):
        return jnp.sum(solve(pool, lam, check=False).L ** 2)

    # jitted: one compilation each (eager grad and vmap compile their pieces one by one)
    grad = jax.jit(jax.grad(g))
    per = np.stack([np.asarray(grad(jnp.asarray(row))) for row in lams])
    assert_close(jax.jit(jax.vmap(jax.grad(g)))(jnp.asarray(lams)), per, rtol=1e-10)
    # the linear-space sweep of a batch loses terms below tiny / eps: log(M - Lambda) spread
    # over +-90 makes F span hundreds in float32, so the log-sum-exp fallback must take over
    K = 6
    rng = np.random.default_rng(0)
    log_den = rng.uniform(-90.0, 90.0, (1 << K, 2))
    mu = rng.uniform(0.5, 2.0, K)
    ref = np.zeros(1 << K)
    for L in sorted(range(1, 1 << K), key=lambda m: bin(m).count("1")):
        terms = [np.log(mu[k]) + ref[L ^ (1 << k)] for k in range(K) if L >> k & 1]
        ref[L] = np.logaddexp.reduce(terms) - log_den[L, 0]
    assert np.ptp(ref) > 300
    layers = subset_layers(K)
    # under jit, as the library runs it: one compilation (eagerly, each lax.cond compiled anew)
    sweep = jax.jit(lambda V, d, m: _sweep(V, d, m, layers, forward=True))
    got = sweep(
        jnp.zeros((1 << K, 2), jnp.float32),
        jnp.asarray(log_den, jnp.float32),
        jnp.asarray(mu, jnp.float32),
    )
    assert got.dtype == jnp.float32
    assert_close(got[:, 0], ref, rtol=1e-5, atol=1e-3)


def test_second_graph_same_K_does_not_recompile_internal():
    p1, w1 = random_pool(6, 5, seed=6)
    p2, w2 = random_pool(6, 5, seed=7)
    assert p1.server_sets != p2.server_sets
    solve(p1, at_load(p1, w1, 0.5))
    n = _solve_jit._cache_size()
    r2 = solve(p2, at_load(p2, w2, 0.5))
    solve(p1, at_load(p1, w1, 0.7))
    assert _solve_jit._cache_size() == n
    assert np.isfinite(float(r2.psi))


def test_subset_array_gives_server_idle_probabilities():
    pool, w = random_pool(6, 5, seed=3)  # the solve of test_three_routes_for_L_agree
    lam = at_load(pool, w, 0.7)
    F = np.asarray(subset_log_inv_psi(pool, lam))
    full = 2**6 - 1
    res = solve(pool, lam)
    assert_close(res.psi_server, np.exp([F[full ^ (1 << k)] - F[full] for k in range(6)]))
    # conservation (eq. (11)): sum_k mu_k psi_k = M(K) - Lambda(I)
    mu = np.asarray(pool.mu)
    assert_close(np.sum(mu * np.asarray(res.psi_server)), mu.sum() - lam.sum(), rtol=1e-11)
    assert_close(res.busy_servers, np.sum(1 - np.asarray(res.psi_server)))


# ---------------------------------------------------------------- stability


def brute_margin(pool, lam):
    mu = np.asarray(pool.mu)
    best = np.inf
    I = pool.num_classes
    for r in range(1, I + 1):
        for A in itertools.combinations(range(I), r):
            dem = sum(lam[i] for i in A)
            if dem > 0:
                servers = set().union(*(pool.server_sets[i] for i in A))
                best = min(best, mu[sorted(servers)].sum() / dem)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_stability_margin_matches_enumeration(seed):
    pool, w = random_pool(6, 7, seed=seed + 20)
    w[seed % 7] = 0.0
    st = stability(pool, w)
    assert_close(st.margin, brute_margin(pool, w), rtol=1e-9)
    mu = np.asarray(pool.mu)
    servers = set().union(*(pool.server_sets[i] for i in st.bottleneck_classes))
    assert tuple(sorted(servers)) == st.bottleneck_servers
    assert_close(st.margin, mu[list(servers)].sum() / w[list(st.bottleneck_classes)].sum())


@pytest.mark.parametrize("scale", [1e-12, 1e-200, 1e12])
def test_stability_margin_at_any_scale(scale):
    """The margin scales as 1 / scale (the LP runs on relative rates: ``--rho 1e-12`` was
    refused as 'LP infeasible')."""
    pool, w = random_pool(6, 7, seed=3)
    st = stability(pool, w * scale)
    assert_close(st.margin, brute_margin(pool, w) / scale, rtol=1e-9)


def test_stability_thousands_of_classes():
    rng = np.random.default_rng(0)
    K, I = 300, 2000
    sets = [sorted(rng.choice(K, size=3, replace=False).tolist()) for _ in range(I)]
    # a hot spot: 40 classes confined to servers {0, 1}
    sets += [[0, 1]] * 40
    pool = Pool(sets, np.ones(K))
    lam = np.full(I + 40, 0.1)
    lam[I:] = 0.06  # 2.4 on capacity 2
    st = stability(pool, lam)
    assert not st.stable
    assert set(range(I, I + 40)) <= set(st.bottleneck_classes)
    assert_close(st.margin, pool.mu[np.array(st.bottleneck_servers)].sum() / st.demand)
    assert st.margin <= 2 / 2.4 + 1e-12
    with pytest.raises(ValueError, match=r"bottleneck classes .*servers \[0, 1"):
        check_stable(pool, lam)
    # the equal-load network alone is stable with margin <= K / (0.1 I)
    st2 = stability(Pool(sets[:I], np.ones(K)), lam[:I])
    assert st2.stable and st2.margin <= K / (0.1 * I) + 1e-9


def test_unstable_rates_raise_naming_bottleneck():
    pool = m_model_pool()
    with pytest.raises(ValueError, match=r"classes \[0\] .*servers \[0, 2\]"):
        solve(pool, [2.1, 0.1])
    with pytest.raises(ValueError, match=r"classes \[0, 1\] .*servers \[0, 1, 2\]"):
        solve(pool, [1.5, 1.5])
    with pytest.raises(ValueError, match="unstable"):
        mean_numbers_recursive(pool, [0.1, 2.5])
    with pytest.raises(ValueError, match=r"classes \[1\] .*servers \[1, 2\]"):
        solve(pool, [[0.5, 0.5], [0.1, 2.2]])  # second row of a batch


def test_unstable_rates_raise_under_jit():
    pool = m_model_pool()
    f = jax.jit(lambda l: solve(pool, l).psi)
    assert np.isfinite(float(f(jnp.array([0.5, 0.5]))))
    with pytest.raises(Exception, match="unstable"):
        jax.block_until_ready(f(jnp.array([2.5, 0.1])))


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "sets, mu, match",
    [
        ([[0], []], [1.0], r"server_sets\[1\] is empty"),
        ([[0, 3]], [1.0, 1.0], r"server_sets\[0\] has server indices \[3\]"),
        ([[0, -1]], [1.0, 1.0], r"outside"),
        ([[0, 0]], [1.0], "repeats"),
        ([], [1.0], "at least one job class"),
        ([[0]], [0.0], "mu must be finite and > 0"),
        ([[0]], [np.nan], "mu must be finite and > 0"),
        ([[0]], [[1.0]], "1-d"),
        ("ab", [1.0], "sequence"),
    ],
)
def test_malformed_pools_raise(sets, mu, match):
    with pytest.raises(ValueError, match=match):
        Pool(sets, mu)


def test_malformed_rates_and_incidence():
    pool = m_model_pool()
    with pytest.raises(ValueError, match="length I=2"):
        solve(pool, [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=">= 0"):
        solve(pool, [-0.1, 0.2])
    with pytest.raises(ValueError, match=">= 0"):
        stability(pool, [np.inf, 0.2])
    p = Pool.from_incidence([[1, 0, 1], [0, 1, 1]], [1.0, 1.0, 1.0])
    assert p.server_sets == pool.server_sets
    assert p.incidence.tolist() == [[True, False, True], [False, True, True]]
    with pytest.raises(ValueError, match="0/1"):
        Pool.from_incidence([[2, 0]], [1.0, 1.0])
    with pytest.raises(ValueError, match="server columns"):
        Pool.from_incidence([[1, 0]], [1.0])


def test_too_large_pool_refused_with_size():
    K = 40
    pool = Pool([[k] for k in range(K)], np.ones(K))
    with pytest.raises(ValueError, match=r"K=40 .*GB.*structured"):
        solve(pool, np.full(K, 0.1))
    # stability still works (polynomial)
    assert stability(pool, np.full(K, 0.1)).stable


def test_too_large_pools_and_batches_are_refused_before_running():
    from jaxqueue.pools import memory_estimate

    # one class per server pair on a ring: K = 27 needs ~10 GB (> the 8 GB default), K = 31 > 30
    # the message names the limit that is hit (issue 16: "at most 30 servers" refused 27)
    for K, what in ((27, "above the memory limit of 8 GB"), (31, "more than the 30 servers")):
        ring = Pool([[k, (k + 1) % K] for k in range(K)], np.ones(K))
        with pytest.raises(ValueError, match=what) as err:
            solve(ring, np.full(K, 0.1))
        assert f"K={K}" in str(err.value) and "structured" in str(err.value)
        assert (K <= 30) == ("30 servers" not in str(err.value))
    # a batch of rate vectors is budgeted too, for direct and vmapped calls alike (K = 4,
    # 3 classes, 3 vectors)
    K, n_classes = 4, 3
    pool = Pool([[k, k + 1] for k in range(n_classes)], np.ones(K))
    lam = np.full((40, n_classes), 0.2)
    one, forty = (memory_estimate(K, n_classes, 8, batch=b) for b in (1, 40))
    assert forty > 20 * one
    budget = (one + forty) / 2
    with pytest.raises(ValueError, match="40 rate vectors"):
        solve(pool, lam, max_bytes=budget)
    with pytest.raises(ValueError, match="40 rate vectors"):
        jax.vmap(lambda x: solve(pool, x, max_bytes=budget).psi)(jnp.asarray(lam))
    ok = solve(pool, lam[:3], max_bytes=budget)
    assert ok.psi.shape == (3,) and np.isfinite(np.asarray(ok.psi)).all()


def test_capacity_override_is_validated():
    pool = Pool([[0, 1], [1]], [1.0, 1.0])
    for mu, shown in (([np.inf, 1.0], "inf"), ([0.0, 1.0], "0.0"), ([1.0, np.nan], "nan")):
        with pytest.raises(ValueError, match="mu must be finite and > 0") as err:
            solve(pool, [0.2, 0.5], mu=jnp.asarray(mu))
        assert shown in str(err.value)
    # a valid override equals the pool built with those capacities
    res = solve(pool, [0.2, 0.5], mu=jnp.asarray([2.0, 1.0]))
    assert_close(res.psi, solve(Pool([[0, 1], [1]], [2.0, 1.0]), [0.2, 0.5]).psi)
