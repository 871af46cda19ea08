"""Networks of pools against a brute-force CTMC of the DETAILED state (ordered queues).

The CTMC below is written from the model's definition only (``bf-networks`` Sections 2 and 4):
per pool, the job in position l is served at rate mu(S_c1 u .. u S_cl) - mu(S_c1 u .. u
S_c(l-1)); after service a class-i job joins class j w.p. P[i, j] at the END of j's pool, or
leaves; external arrivals are Poisson (blocked while the open jobs number ``open_cap``). The
stationary law is obtained by a sparse linear solve; nothing from ``jaxqueue.networks`` is used.
"""

from collections import deque

import jax
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from jaxqueue.networks import (
    Network,
    lattice_tables,
    log_convolve,
    population_sums,
    solve,
    solve_truncated,
    traffic,
)


def detailed_ctmc(queues, mu, routing, nu, *, population=0, closed=(), open_cap=None):
    """Stationary law of the detailed state; returns metrics and the aggregate law."""
    sets = [frozenset(s) for pool in queues for s in pool]
    pool_of = [k for k, pool in enumerate(queues) for _ in pool]
    C, K = len(sets), len(mu)
    mu = np.asarray(mu, float)
    P = np.asarray(routing, float)
    nu = np.asarray(nu, float)
    closed = set(closed)
    init = [() for _ in queues]
    if population:
        c0 = min(closed)
        init[pool_of[c0]] = (c0,) * population
    init = tuple(init)
    index = {init: 0}
    states = [init]
    rows, cols, vals = [], [], []
    serv_rate = []  # per state, per-class total service rate
    queue = deque([init])
    mu_of = [float(v) for v in mu]
    leave_of = [1.0 - P[c].sum() for c in range(C)]
    moves_of = [[(int(j), float(P[c, j])) for j in np.flatnonzero(P[c] > 0)] for c in range(C)]
    served: dict = {}  # per queue sequence: (position, class, service rate) of its served jobs

    def service(seq):
        if seq not in served:
            out, used = [], frozenset()
            for l, c in enumerate(seq):
                grown = used | sets[c]
                r = sum(mu_of[s] for s in grown) - sum(mu_of[s] for s in used)
                used = grown
                if r > 0:
                    out.append((l, c, r))
            served[seq] = out
        return served[seq]

    def add(src, dst, rate):
        if dst not in index:
            index[dst] = len(states)
            states.append(dst)
            queue.append(dst)
        rows.append(src)
        cols.append(index[dst])
        vals.append(rate)

    while queue:
        st = queue.popleft()
        a = index[st]
        n_open = sum(1 for seq in st for c in seq if c not in closed)
        for i in range(C):
            if nu[i] > 0 and (open_cap is None or n_open < open_cap):
                new = list(st)
                new[pool_of[i]] = st[pool_of[i]] + (i,)
                add(a, tuple(new), nu[i])
        rates = np.zeros(C)
        for k, seq in enumerate(st):
            for l, c, r in service(seq):
                rates[c] += r
                base = list(st)
                base[k] = seq[:l] + seq[l + 1 :]
                if leave_of[c] > 1e-14:
                    add(a, tuple(base), r * leave_of[c])
                for j, p in moves_of[c]:
                    new = list(base)
                    new[pool_of[j]] = new[pool_of[j]] + (j,)
                    add(a, tuple(new), r * p)
        serv_rate.append(rates)
    n = len(states)
    Q = sp.coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
    Q = Q - sp.diags(np.asarray(Q.sum(axis=1)).ravel())
    # pi Q = 0 with pi(state 0) = 1, then normalised (fixing one entry keeps the system
    # sparse; a row of ones in it makes the LU factor dense)
    A = Q.T.tocsc()
    if n == 1:
        pi = np.ones(1)
    else:
        rest = spla.spsolve(A[1:, 1:].tocsc(), -A[1:, 0].toarray().ravel())
        pi = np.concatenate([[1.0], rest])
        pi /= pi.sum()
    counts = np.zeros((n, C), int)
    server_busy = np.zeros((n, K), bool)
    for a, st in enumerate(states):
        jobs = [c for seq in st for c in seq]
        np.add.at(counts[a], jobs, 1)
        server_busy[a, list(frozenset().union(*(sets[c] for c in jobs)))] = True
    pool_empty = np.array([[len(seq) == 0 for seq in st] for st in states])
    aggregate: dict = {}
    for a in range(n):
        key = tuple(counts[a])
        aggregate[key] = aggregate.get(key, 0.0) + pi[a]
    return {
        "n_states": n,
        "L": pi @ counts,
        "throughput": pi @ np.array(serv_rate),
        "psi_server": pi @ (~server_busy),
        "psi_pool": pi @ pool_empty,
        "aggregate": aggregate,
        "blocking": float(pi[counts.sum(axis=1) == open_cap].sum()) if open_cap else 0.0,
    }


def _assert_close(a, b, tol, what):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol, err_msg=what)


# Two pools, cross routing and feedback. Pool 0: classes 0, 1 on servers {0,1}, {1, 2};
# pool 1: class 2 on {3}, class 3 on {3, 4}.
QUEUES = [[[0, 1], [1, 2]], [[3], [3, 4]]]
MU = [1.0, 0.7, 1.3, 0.9, 1.6]

CLOSED_ROUTING = [
    [0.2, 0.0, 0.5, 0.3],  # feedback to itself, cross to pool 1
    [0.0, 0.0, 0.4, 0.6],
    [0.3, 0.5, 0.0, 0.2],
    [0.6, 0.3, 0.0, 0.1],  # feedback inside pool 1
]


@pytest.mark.parametrize("population", [4])
def test_closed_network_matches_detailed_ctmc(population):
    bf = detailed_ctmc(
        QUEUES, MU, CLOSED_ROUTING, np.zeros(4), population=population, closed=range(4)
    )
    net = Network(QUEUES, MU, CLOSED_ROUTING, population=population)
    res = solve(net)
    for key in ("L", "throughput", "psi_server", "psi_pool"):
        _assert_close(getattr(res, key), bf[key], 1e-8, key)
    _assert_close(res.lam, bf["throughput"], 1e-8, "lam")


@pytest.mark.slow
def test_closed_three_classes_one_queue_reentrant_pool():
    """Slow (a compile of its own). Default guard: test_closed_network_matches_detailed_ctmc,
    the same comparison (L, throughput, psi_server, psi_pool at 1e-8) on a closed network with
    moves inside a pool to another class (2 -> 3) and to the same class (0 -> 0, 3 -> 3)."""
    # Pool 0 with 3 classes (re-entrant moves inside the pool), pool 1 with 1 class.
    queues = [[[0], [0, 1], [1, 2]], [[3, 4]]]
    routing = [
        [0.0, 0.7, 0.0, 0.3],
        [0.1, 0.0, 0.6, 0.3],
        [0.0, 0.2, 0.3, 0.5],
        [0.5, 0.2, 0.3, 0.0],
    ]
    mu = [1.1, 0.6, 0.8, 0.5, 1.2]
    bf = detailed_ctmc(queues, mu, routing, np.zeros(4), population=5, closed=range(4))
    res = solve(Network(queues, mu, routing, population=5))
    for key in ("L", "throughput", "psi_server", "psi_pool"):
        _assert_close(getattr(res, key), bf[key], 1e-8, key)


OPEN_QUEUES = [[[0, 1], [1]], [[2, 3]]]
OPEN_MU = [1.0, 1.2, 0.8, 1.5]
OPEN_ROUTING = [
    [0.1, 0.0, 0.5],  # feedback, then pool 1
    [0.0, 0.2, 0.3],
    [0.2, 0.1, 0.0],  # some return from pool 1 to pool 0
]
OPEN_NU = [0.25, 0.2, 0.1]


def test_truncated_open_network_matches_truncated_ctmc():
    n_max = 7
    bf = detailed_ctmc(OPEN_QUEUES, OPEN_MU, OPEN_ROUTING, OPEN_NU, open_cap=n_max)
    net = Network(OPEN_QUEUES, OPEN_MU, OPEN_ROUTING, OPEN_NU)
    res = solve_truncated(net, n_max)
    for key in ("L", "throughput", "psi_server", "psi_pool", "blocking"):
        _assert_close(getattr(res, key), bf[key], 1e-8, key)


def _total_law(net, n_far):
    """P(T = n), n <= n_far, for the total T under the untruncated product form."""

    def law(lam, mu):
        tabs, lams, mus, marks = [], [], [], []
        for classes, servers in zip(net.pool_classes, net.pool_servers, strict=True):
            where = {v: j for j, v in enumerate(servers)}
            sets = tuple(tuple(where[v] for v in net.server_sets[i]) for i in classes)
            tabs.append(lattice_tables(sets, len(servers)))
            lams.append(lam[np.array(classes)])
            mus.append(mu[np.array(servers)])
            marks.append(np.ones(len(classes), bool))
        g = population_sums(tuple(tabs), tuple(lams), tuple(mus), tuple(marks), n_far)[0]
        total = g[0]
        for k in range(1, g.shape[0]):
            total = log_convolve(total, g[k])
        return jax.nn.softmax(total)

    return np.asarray(jax.jit(law)(traffic(net), net.mu))


def test_open_network_within_truncation_error():
    n_max = 9
    nu = [0.12, 0.1, 0.05]
    bf = detailed_ctmc(OPEN_QUEUES, OPEN_MU, OPEN_ROUTING, nu, open_cap=n_max)
    net = Network(OPEN_QUEUES, OPEN_MU, OPEN_ROUTING, nu)
    exact = solve(net)  # each pool by jaxqueue.pools.solve
    lattice = solve(net, engine="lattice")  # this package's population-sum recursion
    for key in ("L", "psi_server", "psi_pool", "sojourn"):
        _assert_close(getattr(lattice, key), getattr(exact, key), 1e-10, f"engines: {key}")
    # Truncation error bound from the law of the total T under the exact product form:
    # |E[x_i] - E[x_i | T <= N]| <= E[T; T > N] + E[x_i] P(T > N) / P(T <= N).
    p_n = _total_law(net, 60)
    assert p_n[-1] < 1e-15  # 60 stands for infinity
    n = np.arange(p_n.size)
    tail_p = p_n[n > n_max].sum()
    tail_ge = p_n[n >= n_max].sum()
    bound = (n * p_n)[n > n_max].sum() + float(np.max(exact.L)) * tail_p / (1 - tail_p)
    assert 0 < bound < 1e-2
    err = np.max(np.abs(np.asarray(exact.L) - bf["L"]))
    assert err <= bound, (err, bound)
    thr_err = np.max(np.abs(np.asarray(exact.throughput) - bf["throughput"]))
    assert thr_err <= float(np.max(exact.throughput)) * tail_ge / (1 - tail_ge)


def test_reentrant_routing_leaves_aggregate_law_unchanged():
    # One M-model pool; class i re-enters itself w.p. 1 - p (at the end of the queue), external
    # rate lam_i * p: the aggregate law equals that without re-entry at rate lam_i.
    queues = [[[0, 2], [1, 2]]]
    mu = [1.0, 0.8, 1.1]
    lam = np.array([0.6, 0.5])
    p = 0.35
    n_max = 8
    base = detailed_ctmc(queues, mu, np.zeros((2, 2)), lam, open_cap=n_max)
    reent = detailed_ctmc(queues, mu, np.diag([1 - p, 1 - p]), lam * p, open_cap=n_max)
    keys = sorted(set(base["aggregate"]) | set(reent["aggregate"]))
    a = np.array([base["aggregate"].get(k, 0.0) for k in keys])
    b = np.array([reent["aggregate"].get(k, 0.0) for k in keys])
    _assert_close(a, b, 1e-10, "aggregate law")
    # The same holds with a class-dependent re-entry probability (only lam matters).
    skew = detailed_ctmc(queues, mu, np.diag([0.0, 1 - p]), lam * [1.0, p], open_cap=n_max)
    c = np.array([skew["aggregate"].get(k, 0.0) for k in keys])
    _assert_close(a, c, 1e-10, "aggregate law (class-dependent re-entry)")
    net_a = Network(queues, mu, np.zeros((2, 2)), lam)
    net_b = Network(queues, mu, np.diag([1 - p, 1 - p]), lam * p)
    ra, rb = solve(net_a), solve(net_b)
    _assert_close(rb.visits, lam, 1e-12, "effective rates")
    _assert_close(rb.L, ra.L, 1e-12, "L")
    _assert_close(rb.psi_server, ra.psi_server, 1e-12, "psi_server")


def test_mixed_network_matches_ctmc():
    # Open class 0 (pool 0) -> class 2 (pool 1) -> leaves; closed chain 1 <-> 3 (+ feedback).
    queues = [[[0, 1], [1]], [[2], [2, 3]]]
    mu = [1.2, 0.9, 1.0, 0.8]
    routing = [
        [0.0, 0.0, 0.6, 0.0],
        [0.0, 0.3, 0.0, 0.7],
        [0.2, 0.0, 0.0, 0.0],
        [0.0, 0.8, 0.0, 0.2],
    ]
    nu = [0.1, 0.0, 0.0, 0.0]
    net = Network(queues, mu, routing, nu, population=3)
    assert net.kind == "mixed"
    res = solve(net)
    caps = (6, 8)
    bfs = [
        detailed_ctmc(queues, mu, routing, nu, population=3, closed=(1, 3), open_cap=c)
        for c in caps
    ]
    # Truncation (open jobs blocked at the cap) converges geometrically: the gap between two
    # caps bounds the remaining error of the larger one.
    gap = np.max(np.abs(bfs[0]["L"] - bfs[1]["L"]))
    assert gap < 1e-3
    for key in ("L", "throughput", "psi_server"):
        _assert_close(getattr(res, key), bfs[1][key], 10 * gap + 1e-9, key)
