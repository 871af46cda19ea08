"""Typed pools (issue 18): many servers of few types, exact, with gradients.

A typed pool is solved as its aggregated pool (one server per type of capacity
``counts[t] mu[t]``, the same balance function, ``bf-recursive`` eq. (1)): ``2^T`` type subsets
whatever the number of servers. Targets of the issue, after compilation on the 2-core CPU:
K = 256 in 4 types (64 each) with gradients under 1 s, K = 1024 in 3 types under 5 s. The
baseline, in the same run: the generic recursion over the ``2^K`` server subsets of the
expanded pool at the largest K its memory budget accepts, on a typed pool of that size (both
answers compared).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._timing import time_call, time_jit

CYCLE = [[0, 1], [1, 2], [2, 3], [0, 3]]
THREE = [[0], [0, 1], [1, 2], [0, 1, 2]]


def _objective(pool):
    from jaxqueue.pools import solve

    def with_grads(lam, mu):
        def f(lam, mu):
            r = solve(pool, lam, mu=mu)
            return r.T_mean, r

        (_, r), g = jax.value_and_grad(f, argnums=(0, 1), has_aux=True)(lam, mu)
        return r.psi, r.L, r.T, r.psi_server, g

    return with_grads


def _typed_row(counts, sets, rho, target):
    from jaxqueue.pools import TypedPool, solve, stability, typed_estimate

    pool = TypedPool(counts, sets, np.linspace(1.0, 2.0, len(counts)))
    # equal rates at ``rho`` times the stability limit
    lam = jnp.full(len(sets), rho * stability(pool, np.ones(len(sets))).margin)
    c_solve, r_solve = time_jit(lambda lam: solve(pool, lam).T, lam, repeats=20)
    solve(pool, lam)
    call = time_call(lambda lam: solve(pool, lam).T, np.asarray(lam), repeats=20)
    c_grad, r_grad = time_jit(_objective(pool), lam, pool.mu, repeats=20)
    sweep = jnp.linspace(0.05, 0.95, 256)[:, None] * lam / rho  # loads up to 95% of the limit
    _, r_sweep = time_jit(lambda x: jax.vmap(lambda l: solve(pool, l).T)(x), sweep, repeats=5)
    est = typed_estimate(pool)
    return (
        f"| {sum(counts)} = {'+'.join(map(str, counts))} | {len(counts)} | {len(sets)} | {rho} | "
        f"{est['states']} | {est['count_vectors']:.3g} | {c_solve + c_grad:.2f} | "
        f"{r_solve * 1e3:.2f} | {r_grad * 1e3:.2f} | {r_sweep * 1e3:.1f} | "
        f"{call * 1e3:.2f} | {est['seconds'] * 1e3:.2f} | "
        f"< {target} s: {'yes' if r_grad < target else 'NO'} |"
    )


def _largest_generic_K(I: int) -> int:
    from jaxqueue._memory import memory_budget
    from jaxqueue.pools import DEFAULT_MAX_BYTES, MAX_SERVERS, memory_estimate

    limit, _ = memory_budget(DEFAULT_MAX_BYTES)
    return max(K for K in range(4, MAX_SERVERS + 1) if memory_estimate(K, I, 8) <= limit)


def _generic_row(K_max: int | None):
    from jaxqueue.pools import TypedPool, solve

    K = K_max or _largest_generic_K(len(CYCLE))
    counts = [K // 4 + (t < K % 4) for t in range(4)]
    pool = TypedPool(counts, CYCLE, np.linspace(1.0, 2.0, 4))
    big = pool.to_pool()
    lam = jnp.full(4, 0.8 * float(np.sum(pool.capacities())) / 4)
    t0 = time.perf_counter()
    ref = jax.block_until_ready(solve(big, lam).T)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = jax.block_until_ready(solve(big, lam).T)
    run_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    typed = jax.block_until_ready(solve(pool, lam).T)
    typed_s = time.perf_counter() - t0
    err = float(np.max(np.abs(np.asarray(ref) / np.asarray(typed) - 1)))
    return K, counts, first - run_s, run_s, typed_s, err


def run(fast: bool) -> str:
    dev = jax.devices()[0]
    rows = [
        _typed_row([16] * 4 if fast else [64] * 4, CYCLE, 0.8, 1.0),
        _typed_row([342, 341, 341] if not fast else [40, 40, 40], THREE, 0.8, 5.0),
        _typed_row([2000, 1500, 500, 100] if not fast else [50, 40, 30, 20], CYCLE, 0.9, 5.0),
    ]
    K, counts, g_compile, g_run, typed_s, err = _generic_row(16 if fast else None)
    lines = [
        "## Typed pools: many servers of few types (`bench_typed`)",
        "",
        f"Device `{dev.platform}`; float64; {'fast sizes' if fast else 'full sizes'}. "
        "`pools.solve` on a `TypedPool` (psi, L_i by the gradient of log(1/psi), T_i, psi per "
        "type), jitted, best of 20 calls after compilation; 'with gradients' adds "
        "`jax.grad` of `T_mean` in lam and mu; '`solve()` call' is an eager call with its "
        "checks, beside the prediction of `typed_estimate`. Equal rates per class at the "
        "stated fraction rho of the stability limit. The exact answer is the aggregated "
        "pool's (one "
        "server per type of capacity counts[t] mu[t]): 2^T type subsets, not the count vectors "
        "prod_t (K_t + 1) of a recursion over counts, nor the 2^K server subsets.",
        "",
        "| servers K | types T | classes | rho | states 2^T | count vectors | compile (s) | "
        "solve (ms) | with gradients (ms) | 256-load vmap sweep (ms) | `solve()` call (ms) | "
        "predicted call (ms) | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Baseline in the same run: the generic recursion over server subsets on the expanded "
        f"pool at K = {K} ({'+'.join(map(str, counts))} servers of 4 types; the largest K its "
        f"memory budget accepts{' (fast: K = 16)' if fast else ''}): compile {g_compile:.2f} s, "
        f"solve {g_run:.2f} s (no gradients); the same pool as a `TypedPool`: "
        f"{typed_s * 1e3:.2f} ms (first call, compilation included), largest relative "
        f"difference of T {err:.1e}.",
    ]
    return "\n".join(lines)
