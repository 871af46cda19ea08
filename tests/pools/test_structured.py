"""Structured pools (bf-recursive Sections 4-5) against the generic engine and a brute force.

Ground truths: the generic recursion over server subsets (``jaxqueue.pools.solve``) on the
equivalent ``Pool``; an independent numpy implementation of Theorems 1-2 written here; a direct
sum of the stationary measure for a tiny pool; finite differences for gradients; and cross-checks
between independent structured code paths (Prop. 6 vs Prop. 5, one group vs Section 4.1).
"""

import itertools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.pools import Pool, solve
from jaxqueue.pools.structured import (
    HomogeneousLine,
    HomogeneousRing,
    LinePool,
    NestedPool,
    RandomAssignment,
    RandomGroups,
    RingPool,
    StructuredPool,
    homogeneous_local_vs_K,
    random_assignment_bf_curve,
    random_assignment_sweep,
    random_assignment_vs_K,
    solve_spec,
)
from tests.helpers import assert_close

RTOL = 1e-9


# ------------------------------------------------------------------ independent references


def subset_reference(server_sets, mu, lam):
    """numpy Theorems 1-2 (eqs. (9), (13)) over all server subsets: (psi, L per class, psi_k)."""
    mu = np.asarray(mu, float)
    lam = np.asarray(lam, float)
    K, I = len(mu), len(server_sets)
    cm = np.array([sum(1 << k for k in s) for s in server_sets])
    n = 1 << K
    A = np.zeros(n)
    Lc = np.zeros((n, I))
    for S in range(1, n):
        inside = (cm & ~S) == 0
        ks = [k for k in range(K) if S >> k & 1]
        den = mu[ks].sum() - lam[inside].sum()
        assert den > 0
        sub = np.array([A[S & ~(1 << k)] for k in ks])
        A[S] = np.log(np.sum(mu[ks] * np.exp(sub))) - np.log(den)
        psik = np.exp(sub - A[S])
        acc = lam * inside
        for j, k in enumerate(ks):
            acc = acc + mu[k] * psik[j] * Lc[S & ~(1 << k)]
        Lc[S] = acc / den
    full = n - 1
    psi_k = np.array([np.exp(A[full & ~(1 << k)] - A[full]) for k in range(K)])
    return np.exp(-A[full]), Lc[full], psi_k


def direct_sum_reference(server_sets, mu, lam, nmax=60):
    """psi and L by summing pi(x) = psi Phi(x) lam^x (eqs. (1)-(2)) over a truncated box."""
    mu = np.asarray(mu, float)
    I = len(server_sets)
    phi = {}
    tot, Ls = 0.0, np.zeros(I)
    for x in itertools.product(range(nmax), repeat=I):
        if sum(x) == 0:
            phi[x] = 1.0
        else:
            act = [i for i in range(I) if x[i] > 0]
            cap = mu[sorted(set().union(*[server_sets[i] for i in act]))].sum()
            phi[x] = sum(phi[tuple(x[j] - (j == i) for j in range(I))] for i in act) / cap
        w = phi[x] * np.prod(np.asarray(lam) ** np.asarray(x))
        tot += w
        Ls += w * np.asarray(x)
    return 1 / tot, Ls / tot


K_GENERIC, I_GENERIC = 6, 24


def generic(sets, mu, lam):
    """The generic engine on the equivalent pool, padded to ``I_GENERIC`` classes of rate 0 (a
    class with no arrivals changes nothing) so that the default suite compiles it once."""
    sets = [list(s) for s in sets]
    K = len(mu)
    assert K == K_GENERIC and len(sets) <= I_GENERIC
    pad = I_GENERIC - len(sets)
    lam_p = jnp.concatenate([jnp.asarray(lam, jnp.float64), jnp.zeros(pad)])
    res = solve(Pool(sets + [list(range(K))] * pad, jnp.asarray(mu, jnp.float64)), lam_p)
    n = len(sets)
    return res, (lambda a: np.asarray(a)[:n])


def by_type(L, types, n):
    return np.bincount(types, weights=np.asarray(L), minlength=n)


def rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300))


# ------------------------------------------------------------------ the references themselves


def test_subset_reference_equals_direct_sum():
    sets, mu, lam = [[0, 2], [1, 2]], [1.0, 0.7, 1.2], [0.5, 0.4]
    psi, L, _ = subset_reference(sets, mu, lam)
    psi_d, L_d = direct_sum_reference(sets, mu, lam)
    assert_close(psi, psi_d, rtol=1e-8)
    assert_close(L, L_d, rtol=1e-6)


# ------------------------------------------------------------------ randomized assignment


@pytest.mark.parametrize(
    "d,p,rho",
    [((1, 4), (0.3, 0.7), 0.9), ((1, 2, 6), (0.2, 0.5, 0.3), 0.6)],
)
def test_random_assignment_equals_generic(d, p, rho):
    ra = RandomAssignment(K_GENERIC, d, p=p)
    res = ra.solve(rho)
    sets, types = ra.server_sets, ra.class_types
    lam = ra.class_rates(rho)
    g, cut = generic(sets, ra.mu * np.ones(K_GENERIC), lam)
    assert rel(res.psi, g.psi) < RTOL
    assert rel(res.L, by_type(cut(g.L), types, len(d))) < RTOL
    assert rel(res.L_total, g.L_total) < RTOL
    assert rel(res.T_mean, g.T_mean) < RTOL
    assert rel(res.psi_server, g.psi_server) < RTOL
    # per-type response times: the class T's of a type are equal by symmetry
    for u in range(len(d)):
        assert rel(res.T[u], cut(g.T)[types == u]) < RTOL


def test_random_groups_equals_generic_and_reference():
    rg = RandomGroups((3, 3), [[1, 1], [2, 0], [0, 2]], p=[0.5, 0.3, 0.2], mu=[1.0, 2.5])
    res = rg.solve(0.7)
    sets, types = rg.server_sets, rg.class_types
    lam = np.asarray(rg.class_rates(0.7))
    mu = np.repeat([1.0, 2.5], [3, 3])
    g, cut = generic(sets, mu, lam)
    psi, L, psik = subset_reference(sets, mu, lam)
    for ref_psi, ref_L, ref_k in [(g.psi, cut(g.L), g.psi_server), (psi, L, psik)]:
        assert rel(res.psi, ref_psi) < RTOL
        assert rel(res.L, by_type(ref_L, types, 3)) < RTOL
        assert rel(res.psi_server, ref_k) < RTOL


def test_one_group_equals_homogeneous_random():
    # independent code paths (grid recursion vs closed product), larger K
    ra = RandomAssignment(12, (3, 5), p=[0.6, 0.4], mu=1.3)
    rg = RandomGroups((12,), [[3], [5]], p=[0.6, 0.4], mu=[1.3])
    a, b = ra.solve(0.93), rg.solve(0.93)
    for f in ("log_inv_psi", "L", "T", "L_total", "T_mean", "psi_server"):
        assert rel(getattr(a, f), getattr(b, f)) < 1e-11, f


def test_random_groups_unstable_names_bottleneck():
    # type 1 uses only the slow group: rho = 0.9 overall but group 0 is overloaded
    rg = RandomGroups((3, 3), [[1, 0], [0, 1], [0, 2]], p=[0.8, 0.1, 0.1], mu=[0.5, 2.0])
    with pytest.raises(ValueError, match="bottleneck"):
        rg.solve(0.9)
    res, stable = rg.sweep(jnp.array([0.1, 0.5, 0.9]))
    assert stable.tolist() == [True, False, False]
    assert float(res.psi[1]) == 0.0 and np.isinf(float(res.L_total[1]))


def test_large_random_assignment_stays_finite():
    res = RandomAssignment(100000, (10, 50), p=[0.5, 0.5]).solve(0.999, with_servers=False)
    assert np.isfinite(float(res.log_inv_psi)) and float(res.log_inv_psi) > 700  # psi underflows
    assert np.all(np.isfinite(np.asarray(res.L)))
    # low load limit: a lone job gets its d servers
    r0 = RandomAssignment(1000, (6, 12), p=[0.5, 0.5]).solve(1e-9)
    assert_close(r0.gamma, [6.0, 12.0], rtol=1e-6)


def test_keeps_float32():
    # the float64 reference is test_bf_curve_limits' pool (one compile)
    ra = RandomAssignment(100, 3, p=jnp.ones(1, jnp.float32), mu=jnp.float32(1.0))
    res = ra.solve(jnp.float32(0.9))
    assert res.L.dtype == jnp.float32 and res.psi.dtype == jnp.float32
    ref = RandomAssignment(100, 3).solve(0.9)
    assert_close(res.L, ref.L, rtol=1e-4)
    h = HomogeneousLine(40, 5, mu=jnp.float32(1.0)).solve(jnp.float32(0.9))
    assert h.L.dtype == jnp.float32


# ------------------------------------------------------------------ line, ring, nested


def _random_intervals(rng, K, I, periodic):
    sets = []
    for _ in range(I):
        a = int(rng.integers(0, K))
        if periodic:
            n = int(rng.integers(1, K + 1))
            sets.append([(a + t) % K for t in range(n)])
        else:
            b = int(rng.integers(a, K))
            sets.append(list(range(a, b + 1)))
    return sets


@pytest.mark.parametrize("periodic", [False, True], ids=["line", "ring"])
def test_interval_pools_equal_generic(periodic):
    rng = np.random.default_rng(5)
    K, I = K_GENERIC, 6
    cls = RingPool if periodic else LinePool
    for _ in range(3):
        sets = _random_intervals(rng, K, I, periodic)
        mu = rng.uniform(0.5, 2.0, K)
        pool = cls(sets, mu)
        lam0 = rng.uniform(0.1, 1.0, I)
        # scale to 90% of the stability limit (given by the solver's own margin, then checked
        # by the generic engine's LP)
        margin = float(pool.kernel(lam=lam0)[0].stability_margin)
        lam = 0.9 * margin * lam0
        res = pool.solve(lam=lam)
        g, cut = generic(sets, mu, lam)
        for f in ("psi", "L_total", "T_mean", "psi_server"):
            assert rel(getattr(res, f), getattr(g, f)) < RTOL, f
        assert rel(res.L, cut(g.L)) < RTOL and rel(res.T, cut(g.T)) < RTOL
        assert_close(res.stability_margin, 1 / 0.9, rtol=1e-9)


LINE_SETS = [[0, 1, 2], [1, 2, 3, 4], [4, 5], [2, 3], [0, 1, 2, 3, 4], [5]]
LINE_MU = [1.0, 0.5, 2.0, 1.0, 0.8, 1.1]
LINE_LAM = [0.8, 0.9, 0.3, 0.4, 1.5, 0.6]
# six arcs on six servers: the ring pool's kernel has the shapes of the random rings above
RING_SETS = [[5, 0, 1], [1, 2], [2, 3, 4], [4, 5], [0], [3, 4, 5, 0]]


def test_line_equals_subset_reference():
    sets, mu, lam = LINE_SETS, LINE_MU, LINE_LAM
    res = LinePool(sets, mu).solve(lam=lam)
    psi, L, psik = subset_reference(sets, mu, lam)
    assert rel(res.psi, psi) < RTOL and rel(res.L, L) < RTOL and rel(res.psi_server, psik) < RTOL


@pytest.mark.parametrize("cls", [HomogeneousLine, HomogeneousRing])
def test_homogeneous_local_equals_generic(cls):
    h = cls(K_GENERIC, 3)
    res = h.solve(0.85)
    lam = h.class_rates(0.85)
    g, cut = generic(h.server_sets, np.ones(K_GENERIC), lam)
    assert rel(res.psi, g.psi) < RTOL
    assert rel(res.L_total, g.L_total) < RTOL
    assert rel(res.T_mean, g.T_mean) < RTOL
    assert rel(res.psi_server, g.psi_server) < RTOL
    pc = h.solve_per_class(0.85)
    assert rel(pc.L, cut(g.L)) < RTOL


@pytest.mark.slow
@pytest.mark.parametrize("cls,K,d", [(HomogeneousLine, 40, 7), (HomogeneousRing, 25, 4)])
def test_homogeneous_local_equals_interval_table(cls, K, d):
    # Proposition 6 / eq. (28), O(K^2), against Proposition 5 / 7, O(K^3): independent paths
    h = cls(K, d)
    a = h.solve(0.95)
    b = h.interval_pool().solve(lam=h.class_rates(0.95))
    for f in ("log_inv_psi", "L_total", "T_mean", "psi_server"):
        assert rel(getattr(a, f), getattr(b, f)) < 1e-11, f
    assert rel(np.sum(np.asarray(b.L)), a.L_total) < 1e-11


def _random_laminar(rng, servers, out):
    out.append(list(servers))
    if len(servers) > 1 and rng.random() < 0.8:
        cut = int(rng.integers(1, len(servers)))
        for part in (servers[:cut], servers[cut:]):
            if rng.random() < 0.8:
                _random_laminar(rng, part, out)


def test_nested_equals_generic():
    rng = np.random.default_rng(11)
    for _ in range(3):
        K = K_GENERIC
        sets = []
        perm = [int(x) for x in rng.permutation(K)]  # laminar, not necessarily intervals
        _random_laminar(rng, perm, sets)
        mu = rng.uniform(0.5, 2.0, K)
        pool = NestedPool(sets, mu)
        lam0 = rng.uniform(0.1, 1.0, len(sets))
        lam = 0.9 * float(pool.kernel(lam=lam0)[0].stability_margin) * lam0
        res = pool.solve(lam=lam)
        g, cut = generic(sets, mu, lam)
        for f in ("psi", "psi_server"):
            assert rel(getattr(res, f), getattr(g, f)) < RTOL, f
        assert rel(res.L, cut(g.L)) < RTOL and rel(res.T, cut(g.T)) < RTOL


def test_nested_and_interval_validation():
    with pytest.raises(ValueError, match="not nested"):
        NestedPool([[0, 1], [1, 2]], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="interval"):
        LinePool([[0, 2]], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="arc"):
        RingPool([[0, 2]], [1.0, 1.0, 1.0, 1.0])
    RingPool([[3, 0, 1]], [1.0] * 4)  # an arc across the end is fine
    with pytest.raises(ValueError, match="d must"):
        HomogeneousLine(10, 11)
    with pytest.raises(ValueError, match="sum to 1"):
        RandomAssignment(10, (2, 3), p=[0.5, 0.6])


def test_unstable_local_pools_name_bottleneck():
    lam = np.array(LINE_LAM)
    lam[3], lam[4] = 3.5, 0.0  # class {2, 3} alone overloads servers 2-3 (capacity 3)
    with pytest.raises(ValueError, match=r"servers \[2, 3\]"):
        LinePool(LINE_SETS, LINE_MU).solve(lam=lam)
    with pytest.raises(ValueError, match="bottleneck"):
        NestedPool([[0, 1, 2], [1, 2]], [1.0, 1.0, 1.0]).solve(lam=[0.1, 2.5])
    with pytest.raises(ValueError, match="bottleneck"):
        HomogeneousRing(K_GENERIC, 3).solve(1.0)
    res, stable = HomogeneousLine(K_GENERIC, 3).sweep(jnp.array([0.5, 1.2, 0.97]))
    assert stable.tolist() == [True, False, True]
    assert np.isinf(float(res.L_total[1])) and float(res.psi[1]) == 0.0
    assert np.isfinite(float(res.L_total[0]))


# ------------------------------------------------------------------ sweeps and gradients


def test_sweep_equals_pointwise():
    rhos = jnp.array([0.1, 0.5, 0.97])
    for pool in (RandomAssignment(K_GENERIC, (1, 4), p=[0.3, 0.7]), HomogeneousLine(K_GENERIC, 3)):
        batch, stable = pool.sweep(rhos)
        assert bool(jnp.all(stable))
        for i, r in enumerate(rhos):
            one = pool.solve(r)
            assert rel(batch.L_total[i], one.L_total) < 1e-12
            assert rel(batch.T[i], one.T) < 1e-12


def _fd(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


def test_gradients_match_finite_differences():
    # load and type mix, randomized assignment
    def gam(rho, q):
        return RandomAssignment(K_GENERIC, (1, 4), p=jnp.stack([q, 1 - q])).solve(rho).gamma[0]

    g_rho, g_q = jax.jit(jax.grad(gam, argnums=(0, 1)))(0.9, 0.4)
    assert_close(g_rho, _fd(lambda r: gam(r, 0.4), 0.9), rtol=1e-6)
    assert_close(g_q, _fd(lambda q: gam(0.9, q), 0.4), rtol=1e-6)

    # load, homogeneous line
    h = HomogeneousLine(K_GENERIC, 3)
    f = lambda r: h.kernel(r)[0].L_total
    assert_close(jax.jit(jax.grad(f))(0.9), _fd(f, 0.9), rtol=1e-6)

    # arrival rates of a line pool (second order: L_i itself comes from a gradient)
    pool = LinePool(LINE_SETS, LINE_MU)
    lam = jnp.asarray(LINE_LAM)
    f = lambda x: pool.kernel(lam=lam.at[1].set(x))[0].L[0]
    assert_close(jax.jit(jax.grad(f))(0.9), _fd(f, 0.9), rtol=1e-6)


@pytest.mark.parametrize("periodic", [False, True], ids=["line", "ring"])
def test_interval_pool_reverse_pass_matches_finite_differences_internal(periodic):
    # the hand-written adjoint of the arc table (O(K^2) memory), called as a first-order
    # reverse pass: d log(1/psi) / d mu_k and d/d lam_i against central differences
    from jaxqueue.pools.structured._local import _interval_core

    if periodic:
        cls, sets = RingPool, RING_SETS
    else:
        cls, sets = LinePool, LINE_SETS
    pool = cls(sets, LINE_MU)
    mu0, lam0 = pool.mu, np.asarray(LINE_LAM)
    lam0 = jnp.asarray(0.8 * float(pool.kernel(lam=lam0)[0].stability_margin) * lam0)
    starts, lengths = jnp.asarray(pool.starts), jnp.asarray(pool.lengths)

    # jitted: one compile for the 24 difference quotients (eager, each one re-dispatched the
    # whole arc table op by op)
    @jax.jit
    def F(lam, mu):
        return _interval_core(lam, mu, starts, lengths, K=6, periodic=periodic)[0]

    g_lam, g_mu = jax.jit(jax.grad(F, argnums=(0, 1)))(lam0, mu0)
    for k in range(6):
        fd = _fd(lambda x, k=k: F(lam0, mu0.at[k].set(x)), float(mu0[k]))
        assert_close(g_mu[k], fd, rtol=1e-6, atol=1e-8, what=f"mu[{k}]")
        fd = _fd(lambda x, k=k: F(lam0.at[k].set(x), mu0), float(lam0[k]))
        assert_close(g_lam[k], fd, rtol=1e-6, atol=1e-8, what=f"lam[{k}]")


@pytest.mark.slow
def test_gradients_ring_and_groups():
    h = HomogeneousRing(30, 5)
    f = lambda r: h.kernel(r)[0].L_total
    assert_close(jax.jit(jax.grad(f))(0.9), _fd(f, 0.9), rtol=1e-6)

    # server groups: capacity of group 1 and type mix
    def t0(mu1, q):
        rg = RandomGroups(
            (3, 2), [[1, 1], [2, 0]], p=jnp.stack([q, 1 - q]), mu=jnp.stack([2.0, mu1])
        )
        return rg.solve(0.8).T[0]

    g_mu, g_q = jax.jit(jax.grad(t0, argnums=(0, 1)))(2.0, 0.3)
    assert_close(g_mu, _fd(lambda m: t0(m, 0.3), 2.0), rtol=1e-6)
    assert_close(g_q, _fd(lambda q: t0(2.0, q), 0.3), rtol=1e-6)


# ------------------------------------------------------------------ spec and reference curves


def test_solve_spec_forms():
    r, info = solve_spec("random:K=100,d=6+12,p=0.5+0.5", rho=0.9)
    assert info["per"] == "type" and info["labels"] == ["d=6", "d=12"] and r.L.shape == (2,)
    direct = RandomAssignment(100, (6, 12), p=[0.5, 0.5]).solve(0.9)
    assert rel(r.L, direct.L) < 1e-12
    r2, _ = solve_spec("random:K=100,d=6+12", lam=[45.0, 45.0])
    assert rel(r2.L, direct.L) < 1e-12
    r3, info3 = solve_spec("ring:K=6,d=3,mu=2", rho=0.8)
    assert info3["per"] == "class" and r3.L.shape == (6,)
    assert rel(r3.L_total, HomogeneousRing(6, 3, mu=2.0).solve(0.8).L_total) < 1e-12
    r4, info4 = solve_spec("line:K=6,d=3", rho=0.8)
    assert r4.L.shape == (4,) and info4["num_classes"] == 4
    assert rel(np.sum(np.asarray(r4.L)), HomogeneousLine(6, 3).solve(0.8).L_total) < 1e-11
    for bad in [
        "random:K=10",
        "grid:K=3,d=1",
        "line:K=5,d=6",
        "random:K=9,d=2,p=1+1",
        "ring:K=x,d=2",
    ]:
        with pytest.raises(ValueError):
            solve_spec(bad, rho=0.5)
    # shares that do not sum to 1 are refused, not rescaled (issue 16)
    with pytest.raises(ValueError, match="summing to 1"):
        solve_spec("random:K=10,d=2+3,p=0.5+0.6", rho=0.5)
    with pytest.raises(ValueError, match="exactly one"):
        solve_spec("ring:K=10,d=2")
    with pytest.raises(ValueError, match="bottleneck"):
        solve_spec("line:K=10,d=2", rho=1.0)


def test_bf_curve_limits():
    rhos = jnp.array([1e-9, 0.5, 0.9, 1.0])
    delay, rate = random_assignment_bf_curve(100, 3, rhos)
    assert_close(rate[0], 3.0, rtol=1e-6)
    assert float(rate[3]) == 0.0 and np.isinf(float(delay[3]))
    assert_close(delay[2], RandomAssignment(100, 3).solve(0.9).T_mean, rtol=1e-12)
    assert np.all(np.diff(np.asarray(rate)) < 0)


# ------------------------------------------------------------------ larger instances (slow)


@pytest.mark.slow
@pytest.mark.parametrize("K", [10, 12])
def test_larger_instances_equal_generic(K):
    rng = np.random.default_rng(K)
    for periodic in (False, True):
        cls = RingPool if periodic else LinePool
        sets = _random_intervals(rng, K, 9, periodic)
        pool = cls(sets, rng.uniform(0.5, 2.0, K))
        lam0 = rng.uniform(0.1, 1.0, 9)
        lam = 0.95 * float(pool.kernel(lam=lam0)[0].stability_margin) * lam0
        res, g = pool.solve(lam=lam), solve(pool.to_pool(), lam)
        assert rel(res.L, g.L) < RTOL and rel(res.psi, g.psi) < RTOL
    ra = RandomAssignment(K, (2, 3), p=[0.5, 0.5])
    types = ra.class_types
    res, g = ra.solve(0.95), solve(ra.to_pool(), ra.class_rates(0.95))
    assert rel(res.L, by_type(g.L, types, 2)) < RTOL
    h = HomogeneousLine(K, 4)
    g = solve(h.to_pool(), h.class_rates(0.95))
    assert rel(h.solve_per_class(0.95).L, g.L) < RTOL


def test_pool_equivalence_builds_generic_pool():
    pool = RandomAssignment(4, 2).to_pool()
    assert isinstance(pool, Pool) and pool.num_classes == 6


def test_size_sweeps_match_pointwise():
    Ks = jnp.array([K_GENERIC, 9])
    _, _, T = random_assignment_vs_K(0.9, 3, Ks, K_max=9)
    for i, k in enumerate((K_GENERIC, 9)):
        assert rel(T[i], RandomAssignment(k, 3).solve(0.9).T_mean) < 1e-12
    for cls, ring in ((HomogeneousLine, False), (HomogeneousRing, True)):
        A, L, T = homogeneous_local_vs_K(0.9, 3, Ks[:1], K_max=9, ring=ring)
        ref = cls(K_GENERIC, 3).solve(0.9)
        assert rel(A[0], ref.log_inv_psi) < 1e-12 and rel(L[0], ref.L_total) < 1e-12


def test_study_qualitative_findings():
    from jaxqueue.studies import bf_recursive as study

    f9 = study.differentiation_vs_load(np.array([0.01, 0.5, 0.999]))
    greg, gprem = f9["mixed"]
    ratio = gprem / greg
    assert abs(ratio[0] - 2.0) < 0.05  # premium about twice the regular rate at low load
    assert ratio[0] > ratio[1] > ratio[2] and ratio[2] < 1.1  # the gap fades near rho = 1
    loc = study.locality_vs_load(np.array([0.3, 0.9, 0.99]))
    assert np.all(loc["global"] > loc["ring"]) and np.all(loc["ring"] > loc["line"])


@pytest.mark.slow
def test_study_runs(tmp_path):
    from jaxqueue.studies import bf_recursive as study

    summary = study.run(tmp_path, fast=True, seed=0)
    assert all(pathlib.Path(f).exists() for f in summary["files"])
    assert summary["hierarchy_global_ring_line_vs_load"]
    assert summary["hierarchy_global_ring_line_vs_degree"]
    assert summary["hierarchy_global_ring_line_vs_size"]
    # bf-recursive Section 6.1: about 25% (rho = 0.9) and 14% (rho = 0.99) rate degradation
    assert 0.2 < summary["premium_loss_rho_0.9"] < 0.3
    assert 0.1 < summary["premium_loss_rho_0.99"] < 0.18


def test_sweeps_do_not_recompile_internal():
    ra = RandomAssignment(K_GENERIC, (1, 4), p=[0.3, 0.7])
    ra.sweep(jnp.array([0.1, 0.5, 0.97]))
    before = random_assignment_sweep._cache_size()
    assert before >= 1
    ra.sweep(jnp.array([0.2, 0.6, 0.9]))
    RandomAssignment(K_GENERIC, (1, 4), p=[0.5, 0.5]).sweep(jnp.array([0.2, 0.6, 0.9]))
    assert random_assignment_sweep._cache_size() == before


def test_line_pool_float32_beyond_exp_range():
    # log(1/psi) = 127 > 88 (exp overflows float32): the table and its reverse pass stay in
    # log space, so float32 per-class T match float64 (no NaN from inf * 0); at 99.9% load the
    # float32 rounding of lam (6e-8) is amplified about 1000-fold, hence the tolerances
    # (before the fix this gave NaN T at K = 400)
    K, d = 100, 3
    sets = [list(range(s, s + d)) for s in range(K - d + 1)]
    lam = np.full(len(sets), 0.999 * K / len(sets))
    r64 = LinePool(sets, np.ones(K)).solve(lam=lam)
    r32 = LinePool(sets, np.ones(K, np.float32)).solve(lam=lam.astype(np.float32))
    assert float(r64.log_inv_psi) > 100
    assert r32.T.dtype == jnp.float32
    assert rel(r32.T, r64.T) < 1e-3 and rel(r32.log_inv_psi, r64.log_inv_psi) < 1e-4


# ------------------------------------------------------------------ one base (issue 15, item 5)


def _every_structure():
    return [
        RandomAssignment(K_GENERIC, (1, 4), p=[0.3, 0.7]),
        RandomGroups((3, 3), [[1, 1], [2, 0], [0, 2]], p=[0.5, 0.3, 0.2], mu=[1.0, 2.5]),
        NestedPool([[0, 1, 2], [1, 2], [3, 4, 5], [5]], np.linspace(0.5, 1.5, K_GENERIC)),
        LinePool(LINE_SETS, LINE_MU),
        RingPool(RING_SETS, LINE_MU),
        HomogeneousLine(K_GENERIC, 3),
        HomogeneousRing(K_GENERIC, 3),
    ]


@pytest.mark.parametrize("pool", _every_structure(), ids=lambda p: type(p).__name__)
def test_every_structure_has_the_same_names(pool):
    """server_sets (a property), rho or lam=, kernel, solve, sweep, class_rates, to_pool."""
    assert isinstance(pool, StructuredPool)
    sets = pool.server_sets
    assert len(sets) == pool.num_classes and all(isinstance(s, tuple) for s in sets)
    rho = 0.5
    res = pool.solve(rho)
    g, _ = generic(sets, np.asarray(pool.to_pool().mu), pool.class_rates(rho))
    assert rel(res.psi, g.psi) < RTOL and rel(res.L_total, g.L_total) < RTOL
    # the same load given as the total arrival rate
    by_lam = pool.solve(lam=rho * float(pool.capacity()))
    assert rel(by_lam.L_total, res.L_total) < 1e-12
    assert rel(pool.kernel(rho)[0].L_total, res.L_total) < 1e-12
    batch, stable = pool.sweep(jnp.array([0.3, rho, 1.5]))
    assert stable.tolist() == [True, True, False]
    assert rel(batch.L_total[1], res.L_total) < 1e-12 and np.isinf(float(batch.L_total[2]))
    with pytest.raises(ValueError, match="exactly one"):
        pool.solve(rho, lam=1.0)
    with pytest.raises(ValueError, match="bottleneck"):
        pool.solve(1.5)
    with pytest.raises(ValueError, match="rho must be finite"):
        pool.solve(-0.1)


def test_per_type_rates_of_the_random_pools():
    # lam= per type is the total load with the mix of the rates (overriding p)
    a = RandomAssignment(K_GENERIC, (1, 4), p=[0.3, 0.7]).solve(lam=[1.0, 2.0])
    b = RandomAssignment(K_GENERIC, (1, 4), p=[1 / 3, 2 / 3]).solve(3.0 / K_GENERIC)
    assert rel(a.L, b.L) < 1e-12 and rel(a.T, b.T) < 1e-12
    degrees = [[1, 1], [2, 0], [0, 2]]  # capacity 3 * 1.0 + 3 * 2.5 = 10.5
    rg = RandomGroups((3, 3), degrees, p=[0.5, 0.3, 0.2], mu=[1.0, 2.5])
    c = rg.solve(lam=[3.0, 1.0, 2.0])
    d = RandomGroups((3, 3), degrees, p=[0.5, 1 / 6, 1 / 3], mu=[1.0, 2.5]).solve(6.0 / 10.5)
    assert rel(c.L, d.L) < 1e-12
    with pytest.raises(ValueError, match="one rate per entry of the result"):
        rg.solve(lam=[1.0, 2.0])


def test_deprecated_forms_still_answer():
    ra = RandomAssignment(K_GENERIC, (1, 4), p=[0.3, 0.7])
    with pytest.warns(DeprecationWarning, match="server_sets is a property"):
        sets, types = ra.server_sets()
    assert sets == list(ra.server_sets) and types.tolist() == ra.class_types.tolist()
    line = HomogeneousLine(K_GENERIC, 3)
    with pytest.warns(DeprecationWarning):
        assert line.server_sets() == list(line.server_sets)
    pool = LinePool(LINE_SETS, LINE_MU)
    with pytest.warns(DeprecationWarning, match="lam="):
        old = pool.solve(np.asarray(LINE_LAM))
    assert rel(old.L, pool.solve(lam=LINE_LAM).L) == 0
