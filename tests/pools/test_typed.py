"""Typed pools (issue 18): many servers of few types, exact balanced fairness.

References, each independent of the aggregation that ``solve`` uses:
* the generic subset recursion on the expanded pool (``TypedPool.to_pool``, K <= 16);
* a recursion over count vectors written here from Theorems 1-2 of ``bf-recursive`` (numpy):
  for a server set holding ``m_t`` servers of type ``t`` the reduced system keeps the classes
  whose types are all full (``m_t = counts[t]``), and the ``m_t`` subsets ``L - k`` with ``k``
  of type ``t`` are alike, so the sum over servers of eq. (9) becomes a sum over types weighted
  by ``m_t``; it reaches pools far above the generic engine's 2^K;
* closed forms: the nested pool of Section 5.1 on the expanded servers and the M model.
"""

import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.cli import main
from jaxqueue.pools import (
    TypedPool,
    check_stable,
    log_inv_psi,
    m_model,
    parse_typed_spec,
    solve,
    solve_unchecked,
    stability,
    typed_estimate,
)
from jaxqueue.pools.structured import NestedPool
from tests.helpers import assert_close


def count_recursion(pool: TypedPool, lam):
    """``(psi, L, psi_server per type)`` by Theorems 1-2 over count vectors (numpy, log space).

    ``F(m) = log sum_t m_t mu_t e^{F(m - e_t)} - log(M(m) - Lambda(m))`` (eq. (9)),
    ``L_i(m) = (lam_i [i in m] + sum_t m_t mu_t psi_t(m) L_i(m - e_t)) / (M(m) - Lambda(m))``
    (eq. (13) with ``psi_t(m) = e^{F(m - e_t) - F(m)}``, eq. (8)).
    """
    K = np.asarray(pool.counts)
    mu = np.asarray(pool.mu, float)
    lam = np.asarray(lam, float)
    sets = [list(s) for s in pool.type_sets]
    F = np.zeros(tuple(K + 1))
    Lv = np.zeros(tuple(K + 1) + (len(lam),))
    for m in itertools.product(*(range(k + 1) for k in K)):
        if sum(m) == 0:
            continue
        m = np.asarray(m)
        inside = np.array([all(m[t] == K[t] for t in s) for s in sets], float)
        den = float(m @ mu) - float(inside @ lam)
        assert den > 0
        ts = [t for t in range(len(K)) if m[t] > 0]
        prev = [tuple(m - np.eye(len(K), dtype=int)[t]) for t in ts]
        logs = np.array([np.log(m[t] * mu[t]) + F[p] for t, p in zip(ts, prev, strict=True)])
        F[tuple(m)] = np.logaddexp.reduce(logs) - np.log(den)
        w = np.exp(logs - F[tuple(m)] - np.log(den))  # m_t mu_t psi_t(m) / den
        Lv[tuple(m)] = lam * inside / den + sum(wt * Lv[p] for wt, p in zip(w, prev, strict=True))
    full = tuple(K)
    psi_server = [
        np.exp(F[tuple(K - np.eye(len(K), dtype=int)[t])] - F[full]) for t in range(len(K))
    ]
    return np.exp(-F[full]), Lv[full], np.asarray(psi_server)


def random_typed(rng, T, K_max, I):
    while True:
        counts = rng.multinomial(K_max - T, np.ones(T) / T) + 1
        sets = [
            sorted(rng.choice(T, int(rng.integers(1, T + 1)), replace=False).tolist())
            for _ in range(I)
        ]
        if len({t for s in sets for t in s}) == T:
            break
    pool = TypedPool(counts.tolist(), sets, rng.uniform(0.5, 2.0, T))
    base = rng.uniform(0.3, 1.5, I)
    return pool, 0.85 * stability(pool, base).margin * base


# (types, servers, classes): one K and I for most cases, so the generic engine compiles once
CASES = [(2, 10, 5), (3, 10, 5), (4, 10, 5), (5, 10, 5), (3, 10, 5), (4, 16, 5)]
# the default suite keeps 2, 3 and 4 types at K = 10 (each T a compile of the typed engine);
# T = 5 and K = 16 (a second generic compile) are the same paths at larger sizes
_SLOW_CASES = {3, 5}


@pytest.mark.parametrize(
    "seed,case",
    [
        pytest.param(s, c, marks=pytest.mark.slow) if s in _SLOW_CASES else (s, c)
        for s, c in enumerate(CASES)
    ],
)
def test_equals_generic_recursion_on_expanded_pool(seed, case):
    pool, lam = random_typed(np.random.default_rng(seed), *case)
    big = pool.to_pool()
    idle = big.num_servers <= 10
    a = solve(pool, lam, class_idle=idle)
    b = solve(big, lam, class_idle=idle)
    names = ("psi", "log_inv_psi", "L", "T", "gamma", "L_total", "T_mean")
    for name in names + (("psi_class",) if idle else ()):
        assert_close(getattr(a, name), getattr(b, name), rtol=1e-10, atol=1e-13, what=name)
    assert_close(a.psi_server[pool.server_types], b.psi_server, rtol=1e-10, what="psi_server")
    assert_close(a.busy_servers, b.busy_servers, rtol=1e-10, what="busy_servers")
    assert_close(a.stability_margin, b.stability_margin, rtol=1e-10)
    if seed < 2:  # the count-vector recursion agrees with both
        psi, L, ps = count_recursion(pool, lam)
        assert_close(psi, b.psi, rtol=1e-10)
        assert_close(L, b.L, rtol=1e-10)
        assert_close(ps, a.psi_server, rtol=1e-10)


def test_count_recursion_beyond_the_generic_engine():
    """K = 45 servers (2^45 subsets): the count-vector recursion against ``solve``."""
    pool = TypedPool([20, 15, 10], [[0], [0, 1], [1, 2], [0, 1, 2]], [1.0, 1.5, 0.7])
    lam = np.array([9.0, 12.0, 8.0, 6.0])
    psi, L, ps = count_recursion(pool, lam)
    res = solve(pool, lam)
    assert_close(res.psi, psi, rtol=1e-10)
    assert_close(res.L, L, rtol=1e-10)
    assert_close(res.psi_server, ps, rtol=1e-10)


def test_m_model_several_servers_per_type():
    """M model with a, b, c servers of rates mu1, mu2, mu3: the closed form of Section 3.4 /
    ``bf-clusters`` eqs. (10)-(11) at capacities a mu1, b mu2, c mu3."""
    counts, mu = (5, 3, 4), np.array([1.0, 2.0, 0.5])
    pool = TypedPool(counts, [[0, 2], [1, 2]], mu)
    lam = np.array([5.0, 6.5])
    res = solve(pool, lam, class_idle=True)
    ref = m_model(*lam, *(np.asarray(counts) * mu))
    for name in ("psi", "L", "T", "psi_server", "psi_class", "L_total"):
        assert_close(getattr(res, name), getattr(ref, name), rtol=1e-10, what=name)
    assert_close(res.busy_servers, np.sum(np.asarray(counts) * (1 - ref.psi_server)), rtol=1e-10)


def test_nested_pool_closed_form_on_expanded_servers():
    """A nested typed pool (K = 200 servers) against eq. (18) on the 200 servers."""
    counts = (60, 50, 40, 30, 20)
    sets = [[0], [1], [0, 1], [2], [3], [2, 3], [0, 1, 2, 3, 4]]
    pool = TypedPool(counts, sets, [1.0, 1.2, 0.8, 1.5, 2.0])
    lam = np.array([40.0, 45.0, 20.0, 20.0, 30.0, 15.0, 25.0])
    first = np.concatenate([[0], np.cumsum(counts)])
    servers = [[k for t in s for k in range(first[t], first[t + 1])] for s in sets]
    ref = NestedPool(servers, np.repeat(np.asarray(pool.mu), counts)).solve(lam=lam)
    res = solve(pool, lam)
    for name in ("psi", "L", "T", "L_total"):
        assert_close(getattr(res, name), getattr(ref, name), rtol=1e-10, what=name)
    assert_close(res.psi_server[pool.server_types], ref.psi_server, rtol=1e-10)


def _fd(f, x, h):
    x = np.asarray(x, float)
    out = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = h
        out.append((f(x + e) - f(x - e)) / (2 * h))
    return np.asarray(out)


def test_gradients_match_central_differences():
    pool = TypedPool([40, 30, 20, 10], [[0, 1], [1, 2], [2, 3], [0, 3], [3]], [1.0, 1.3, 0.9, 2.0])
    lam = jnp.array([20.0, 25.0, 10.0, 12.0, 8.0])
    mu = pool.mu

    def obj(lam, mu):
        r = solve(pool, lam, mu=mu)
        return r.T_mean + jnp.sum(r.L * jnp.arange(1, 6)) + r.busy_servers / 100

    f = jax.jit(obj)
    g_lam, g_mu = jax.jit(jax.grad(f, argnums=(0, 1)))(lam, mu)
    assert_close(g_lam, _fd(lambda x: float(f(jnp.asarray(x), mu)), lam, 1e-5), rtol=1e-6)
    assert_close(g_mu, _fd(lambda x: float(f(lam, jnp.asarray(x))), mu, 1e-5), rtol=1e-6)
    # L_i = lam_i d log(1/psi) / d lam_i (eq. (6)) through log_inv_psi as well
    gl = jax.jit(jax.grad(lambda x: log_inv_psi(pool, x)))(lam)
    assert_close(lam * gl, solve(pool, lam).L, rtol=1e-10)


def test_jit_vmap_and_traced_checks():
    pool = parse_typed_spec("typed:counts=64+64+32+16,sets=0+1/1+2/2+3/0+3")
    base = jnp.full(4, 176 / 4)
    loads = jnp.linspace(0.1, 0.9, 5)
    batched = jax.vmap(lambda r: solve(pool, r * base).T)(loads)
    direct = solve(pool, loads[:, None] * base)
    assert batched.shape == (5, 4)
    for k, r in enumerate(loads):
        one = solve(pool, r * base)
        assert_close(batched[k], one.T, rtol=1e-12)
        assert_close(direct.T[k], batched[k], rtol=1e-12)
        assert_close(direct.L[k], one.L, rtol=1e-12)
        assert_close(direct.psi_server[k], one.psi_server, rtol=1e-12)
    f = jax.jit(lambda lam, mu: solve(pool, lam, mu=mu).psi)
    assert np.isfinite(float(f(0.5 * base, pool.mu)))
    for lam, mu in ((-0.5 * base, pool.mu), (1.2 * base, pool.mu), (0.5 * base, -pool.mu)):
        with pytest.raises(Exception, match="lam must be|unstable|mu must be"):
            jax.block_until_ready(f(lam, mu))


def test_stability_names_bottleneck_types():
    pool = TypedPool([8, 4, 2], [[0], [0, 1], [2]], [1.0, 1.0, 3.0])
    lam = np.array([5.0, 6.0, 1.0])
    st = stability(pool, lam)
    # brute force over class sets: margin = min_A mu(K(A)) / lam(A)
    caps = np.asarray(pool.capacities())
    best = min(
        caps[sorted({t for i in A for t in pool.type_sets[i]})].sum() / lam[list(A)].sum()
        for n in range(1, 4)
        for A in itertools.combinations(range(3), n)
    )
    assert_close(st.margin, best, rtol=1e-9)
    assert st.bottleneck_classes == (0, 1) and st.bottleneck_types == (0, 1)
    assert st.bottleneck_servers == tuple(range(12))
    with pytest.raises(ValueError, match=r"server types \[0, 1\] \(0-based, 12 servers\)"):
        check_stable(pool, 1.2 * lam)
    with pytest.raises(ValueError, match=r"server types \[0, 1\]"):
        solve(pool, 1.2 * lam)
    out = solve_unchecked(pool, 1.2 * lam)
    assert not bool(out["stable"]) and float(out["busy_servers"]) == 14.0


def test_refusal_and_estimate():
    pool = TypedPool([1000] * 4, [[0, 1], [2, 3]])
    est = typed_estimate(pool)
    assert est["states"] == 16 and est["count_vectors"] == 1001**4 and est["servers"] == 4000
    with pytest.raises(ValueError, match=r"T=31 types .* 2\^31 = 2,147,483,648 type subsets"):
        solve(TypedPool([2] * 31, [[0]]), [0.1])
    with pytest.raises(ValueError, match=r"above the memory limit of 1e-06 GB"):
        solve(pool, [1.0, 1.0], max_bytes=1e3)
    with pytest.raises(ValueError, match="max_servers=30"):
        pool.to_pool()
    for bad, msg in (
        (dict(counts=[2, 0], type_sets=[[0]]), r"counts\[1\] must be an integer >= 1"),
        (dict(counts=[2, 2], type_sets=[[0, 2]]), r"type_sets\[0\] has type indices \[2\]"),
        (dict(counts=[2, 2], type_sets=[[0]], mu=[1.0, -1.0]), r"types \[1\] \(0-based\)"),
        (dict(counts=[2, 2], type_sets=[[]]), "class 0 has no server type"),
    ):
        with pytest.raises(ValueError, match=msg):
            TypedPool(**bad)


KEYS = {"psi", "L", "T", "psi_server", "L_total", "T_mean"}


def test_cli_json_spec_and_files(capsys, tmp_path):
    spec = "typed:counts=64+64+32+16,sets=0+1/1+2/2+3/0+3,mu=1+1+2+2"
    assert main(["bf", "solve", "--pool", spec, "--rho", "0.8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert KEYS <= set(out)
    pool = parse_typed_spec(spec)
    lam = np.full(4, 0.8 * float(np.sum(pool.capacities())) / 4)
    res = solve(pool, lam)
    assert_close(out["T"], res.T, rtol=1e-12)
    assert_close(out["psi_server"], res.psi_server, rtol=1e-12)
    assert_close(out["T_mean"], out["L_total"] / lam.sum(), rtol=1e-12)
    assert out["num_servers"] == 176 and out["states"] == 16
    doc = {"counts": [64, 64, 32, 16], "type_sets": [[0, 1], [1, 2], [2, 3], [0, 3]]}
    doc["mu"] = [1, 1, 2, 2]
    (tmp_path / "p.json").write_text(json.dumps(doc))
    (tmp_path / "p.toml").write_text(
        "counts = [64, 64, 32, 16]\ntype_sets = [[0, 1], [1, 2], [2, 3], [0, 3]]\n"
        "mu = [1.0, 1.0, 2.0, 2.0]\n"
    )
    for name in ("p.json", "p.toml"):
        assert main(["bf", "solve", "--pool", str(tmp_path / name), "--rho", "0.8", "--json"]) == 0
        assert_close(json.loads(capsys.readouterr().out)["T"], res.T, rtol=1e-12)


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("typed:counts=4+x,sets=0", "counts='4+x'"),
        ("typed:counts=4+4", "lacks sets="),
        ("typed:counts=4+4,sets=0/1,foo=1", "unknown key 'foo'"),
        ("typed:counts=4+0,sets=0/1", "counts[1] must be an integer >= 1"),
        ("typed:counts=4+4,sets=0/2", "type_sets[1] has type indices [2]"),
        ("typed:counts=4+4,sets=0/1,mu=1", "one capacity per type"),
        ("typed:counts=4+4,sets=0/1,mu=1+-1", "types [1] (0-based)"),
    ],
)
def test_cli_bad_specs_one_line(capsys, spec, msg):
    assert main(["bf", "solve", "--pool", spec, "--rho", "0.5", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_cli_bad_file_and_unstable(capsys, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"counts": [2, 2], "type_sets": [[0]], "speed": 1}))
    assert main(["bf", "solve", "--pool", str(path), "--rho", "0.5"]) == 1
    assert "unknown key(s) ['speed']" in capsys.readouterr().err
    assert main(["bf", "solve", "--pool", "typed:counts=4+4,sets=0/1", "--rho", "1.2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("jaxqueue: error: unstable") and "server types [0]" in err


def test_optimize_typed_capacity_case(capsys):
    assert main(["optimize", "--case", "typed-capacity", "--fast", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("case", "cost", "targets_met", "slack", "params", "targets", "history"):
        assert key in out
    assert out["case"] == "typed-capacity" and out["targets_met"] is True
    counts = out["params"]["counts"]
    assert all(isinstance(n, int) and n >= 1 for n in counts)
    # re-checked exactly here: the integer counts meet every target
    res = solve(TypedPool(counts, out["type_sets"], out["mu"]), out["lam"])
    assert np.all(np.asarray(res.T) <= np.asarray(out["targets"]["T"]) * (1 + 1e-12))
    w = np.asarray(out["cost_weights"])
    assert_close(out["cost"], w @ np.asarray(counts), rtol=1e-12)
    assert len(out["relaxed_counts"]) == 4 and out["metrics"]["integral"] is True
