"""Independent references for tests/test_optimize*.py (numpy + scipy, no jaxqueue code).

* ``bf_numpy``: balanced fairness by the recursion of ``bf-recursive`` Theorems 1-2 written
  with a memoised Python recursion over server subsets in linear space.
* ``slsqp_capacity``: least ``sum_k c_k mu_k`` subject to ``T_i(mu) <= t_i`` by scipy SLSQP
  (finite-difference gradients), multistart.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.optimize import minimize


def bf_numpy(server_sets, mu, lam):
    """Mean response times per class (inf if unstable) by Theorems 1-2 of bf-recursive."""
    mu = np.asarray(mu, float)
    lam = np.asarray(lam, float)
    K = len(mu)
    sets = [frozenset(s) for s in server_sets]

    @functools.cache
    def rec(S):
        # returns (psi_{|S}, L_{|S} per class) for the system reduced to server set S
        if not S:
            return 1.0, np.zeros(len(sets))
        inside = np.array([s <= S for s in sets])
        gap = sum(mu[k] for k in S) - lam[inside].sum()
        if gap <= 0:
            return 0.0, np.full(len(sets), np.inf)
        subs = [rec(S - {k})[0] for k in S]
        if min(subs) == 0.0:
            return 0.0, np.full(len(sets), np.inf)
        inv = sum(mu[k] / ps for k, ps in zip(S, subs, strict=True)) / gap
        psi = 1.0 / inv
        L = np.where(inside, lam, 0.0)
        for k in S:
            psi_sub, L_sub = rec(S - {k})
            if psi_sub == 0.0:
                return 0.0, np.full(len(sets), np.inf)
            psi_k = psi / psi_sub
            outside = np.array([k not in s for s in sets])
            L = L + np.where(outside, mu[k] * psi_k * L_sub, 0.0)
        return psi, L / gap

    psi, L = rec(frozenset(range(K)))
    with np.errstate(divide="ignore", invalid="ignore"):
        return L / lam


def slsqp_capacity(T_fn, weights, targets, x0s, lower=1e-6):
    """Best SLSQP optimum of ``min w.mu s.t. T(mu) <= targets`` over several starts."""
    weights = np.asarray(weights, float)
    targets = np.asarray(targets, float)
    best = None
    for x0 in x0s:

        def cons(mu):
            T = T_fn(mu)
            T = np.where(np.isfinite(T), T, 1e6)
            return 1.0 - T / targets

        res = minimize(
            lambda mu: weights @ mu,
            np.asarray(x0, float),
            method="SLSQP",
            jac=lambda mu: weights,
            bounds=[(lower, None)] * len(weights),
            constraints=[{"type": "ineq", "fun": cons}],
            options={"maxiter": 500, "ftol": 1e-12},
        )
        if res.success and np.all(cons(res.x) >= -1e-7):
            if best is None or res.fun < best.fun:
                best = res
    return best
