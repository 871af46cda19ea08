"""Networks of pools: a closed network of 3 pools x 20 servers at population 200 (issue 8).

Target: solve (compile included) in under 5 s on a 2-core CPU. Baseline, timed in the same
run: a numpy recursion on the aggregate state (``bf-recursive`` eq. (1), level by level in
``|x|``, vectorised over the states of a level) giving the same population sums ``G_k(n)``,
at a smaller population (it enumerates every state); its throughputs are compared with ours.
"""

from __future__ import annotations

import itertools
import time

import equinox as eqx
import jax
import numpy as np

from benchmarks._timing import time_jit


def _network(population: int):
    """The closed 3 x 20-server network timed by ``tests/networks/test_networks.py``
    (acceptance case)."""
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from tests.networks.test_networks import three_pool_closed_network

    return three_pool_closed_network(population)


def _compositions(n: int, C: int) -> np.ndarray:
    """All x in N^C with |x| = n (stars and bars)."""
    out = []
    for bars in itertools.combinations(range(n + C - 1), C - 1):
        b = (-1, *bars, n + C - 1)
        out.append([b[j + 1] - b[j] - 1 for j in range(C)])
    return np.array(out, dtype=np.int64).reshape(-1, C)


def _aggregate_log_sums(sets, mu, lam, n_max):
    """log sum_{|x| = n} Phi(x) lam^x by the aggregate-state recursion (numpy)."""
    C = len(sets)
    inc = np.zeros((C, mu.size), bool)
    for i, s in enumerate(sets):
        inc[i, list(s)] = True
    radix = (n_max + 1) ** np.arange(C)
    prev_keys, prev_w, log_scale = np.zeros(1, np.int64), np.ones(1), 0.0
    out = [0.0]
    for n in range(1, n_max + 1):
        x = _compositions(n, C)
        cap = ((x > 0).astype(np.int64) @ inc.astype(np.int64) > 0) @ mu
        w = np.zeros(len(x))
        order = np.argsort(prev_keys)
        for i in range(C):
            has = x[:, i] > 0
            keys = (x[has] - np.eye(C, dtype=np.int64)[i]) @ radix
            pos = order[np.searchsorted(prev_keys[order], keys)]
            w[has] += lam[i] * prev_w[pos]
        w /= cap
        m = w.max()
        w /= m
        log_scale += np.log(m)
        out.append(log_scale + np.log(w.sum()))
        prev_keys, prev_w = x @ radix, w
    return np.array(out)


def _baseline_throughput(net, n_max):
    from jaxqueue.networks import traffic

    v = np.asarray(traffic(net))
    mu = np.asarray(net.mu)
    total = None
    for classes, servers in zip(net.pool_classes, net.pool_servers, strict=True):
        where = {s: j for j, s in enumerate(servers)}
        sets = [[where[s] for s in net.server_sets[i]] for i in classes]
        g = _aggregate_log_sums(sets, mu[list(servers)], v[list(classes)], n_max)
        if total is None:
            total = g
        else:
            n = np.arange(n_max + 1)
            idx = n[:, None] - n[None, :]
            terms = np.where(idx >= 0, total[None, :] + g[np.clip(idx, 0, None)], -np.inf)
            mx = terms.max(axis=1)
            total = mx + np.log(np.exp(terms - mx[:, None]).sum(axis=1))
    return v * np.exp(total[n_max - 1] - total[n_max])


def run(fast: bool) -> str:
    from jaxqueue.networks import solve

    pop = 60 if fast else 200
    base_pop = 12 if fast else 40
    net = _network(pop)

    # 1. First call as a user makes it (trace + compile + run), CPU and wall clock.
    c0, t0 = time.process_time(), time.perf_counter()
    res = jax.block_until_ready(solve(net))
    first_wall, first_cpu = time.perf_counter() - t0, time.process_time() - c0

    # 2. Compile and run apart, as a function of (mu, routing).
    def f(mu, routing):
        return solve(eqx.tree_at(lambda m: (m.mu, m.routing), net, (mu, routing))).throughput

    compile_s, run_s = time_jit(f, net.mu, net.routing)

    # 3. Baseline: the aggregate-state numpy recursion, at a smaller population.
    small = _network(base_pop)
    t0 = time.perf_counter()
    thr_base = _baseline_throughput(small, base_pop)
    base_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    thr_ours = np.asarray(jax.block_until_ready(solve(small).throughput))
    ours_small_s = time.perf_counter() - t0
    err = float(np.max(np.abs(thr_ours - thr_base) / thr_base))

    ok = first_wall < 5.0
    dev = jax.devices()[0]
    lines = [
        "## Networks of pools (issue 8)",
        "",
        f"Closed network, 3 pools x 20 servers, 4 classes per pool, population {pop}; device "
        f"`{dev.platform}`. Target (population 200): first solve, compile included, < 5 s.",
        "",
        "| what | population | compile s | run s | total s | note |",
        "|---|---|---|---|---|---|",
        f"| `networks.solve` first call | {pop} | | | {first_wall:.2f} (CPU {first_cpu:.2f}) "
        f"| {'PASS' if ok else 'FAIL'} (< 5 s) |",
        f"| jitted throughput(mu, routing) | {pop} | {compile_s:.2f} | {run_s * 1e3:.1f} ms | | "
        f"L_total = {float(res.L_total):.6g} |",
        f"| baseline: numpy aggregate-state recursion | {base_pop} | | {base_s:.2f} | | "
        f"every state enumerated |",
        f"| `networks.solve` (compiled again for this population) | {base_pop} | | | "
        f"{ours_small_s:.2f} | max rel. diff. of throughputs vs baseline {err:.1e} |",
        "",
    ]
    return "\n".join(lines)
