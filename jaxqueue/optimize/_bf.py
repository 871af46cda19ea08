"""Differentiable balanced-fairness objectives used by the dimensioning layer.

Three engines, each a pure JAX function of the rates (jittable, differentiable
in every rate, dtype preserving):

* :func:`m_model_metrics`: the closed forms (10)-(11) of ``bf-clusters`` Section 5 for the
  M model (servers 1, 2 dedicated to classes 1, 2; server 3 shared).
* :class:`SubsetBF`: any pool, by the generic engine of :mod:`jaxqueue.pools` (the recursion
  over server subsets of ``bf-recursive`` Theorems 1-2) through its unchecked kernel
  :func:`jaxqueue.pools.solve_unchecked`; this class only adapts it to the optimiser.
* :func:`random_degree_metrics`: randomized assignment with heterogeneous degrees
  (``bf-recursive`` Section 4.2, per-type ``L_u``), where each job type may draw its degree
  from a distribution over integers (the relaxation used to optimise integer degrees: a type
  with a random degree is exactly a mixture of fixed-degree sub-types).

Every function returns a dict of metrics with a ``"margin"`` entry (relative distance to the
stability boundary, > 0 iff stable); unstable inputs give ``inf`` delays with finite
(zero) gradients thanks to the double-``where`` trick, never a silent NaN.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln

from ..pools import Pool, solve_unchecked

__all__ = ["SubsetBF", "m_model_metrics", "random_degree_metrics"]


def _safe_pos(x, ok):
    """Double-where: ``x`` where ``ok`` else 1 (keeps gradients finite on the bad branch)."""
    return jnp.where(ok, x, jnp.ones_like(x))


@jax.jit
def m_model_metrics(mu, lam) -> dict:
    """Mean service rates and delays of the M model under balanced fairness.

    Implements ``bf-clusters`` eqs. (10)-(11) with ``delta_i = 1 / gamma_i`` (eq. (9),
    unit mean sizes). Stability: ``lam1 < mu1 + mu3``, ``lam2 < mu2 + mu3``,
    ``lam1 + lam2 < mu1 + mu2 + mu3``.

    Args:
        mu: server capacities ``(mu1, mu2, mu3)``.
        lam: arrival rates ``(lam1, lam2)``.

    Returns:
        dict with ``T`` (mean response times, shape (2,)), ``gamma`` (mean service rates),
        ``L`` (mean numbers, ``lam * T``), ``T_mean`` and ``margin`` (the smallest relative gap
        ``1 - load`` of the three stability constraints). ``T`` is ``inf`` when unstable.

    Examples:
        >>> m = m_model_metrics(jnp.array([1.0, 1.0, 1.0]), jnp.array([1.0, 1.0]))
    """
    mu = jnp.asarray(mu)
    lam = jnp.asarray(lam, dtype=mu.dtype)
    m1, m2, m3 = mu[0], mu[1], mu[2]
    l1, l2 = lam[0], lam[1]
    mtot = m1 + m2 + m3
    c1, c2 = m1 + m3, m2 + m3
    margin = jnp.minimum(jnp.minimum(1 - l1 / c1, 1 - l2 / c2), 1 - (l1 + l2) / mtot)
    ok = margin > 0
    r1 = _safe_pos(l1 / c1, ok)
    r2 = _safe_pos(l2 / c2, ok)
    r = _safe_pos((l1 + l2) / mtot, ok)
    r1 = jnp.where(ok, r1, 0.5)
    r2 = jnp.where(ok, r2, 0.5)
    r = jnp.where(ok, r, 0.5)
    den = mtot - c1 * r1 - c2 * r2 + m3 * r1 * r2
    base = 1.0 / (mtot * (1 - r))
    inv_g1 = base + (m2 / c1) * ((1 - r2) / (1 - r1)) / den
    inv_g2 = base + (m1 / c2) * ((1 - r1) / (1 - r2)) / den
    T = jnp.stack([inv_g1, inv_g2])
    T = jnp.where(ok, T, jnp.inf)
    L = lam * T
    return {
        "T": T,
        "gamma": 1.0 / T,
        "L": L,
        "T_mean": jnp.sum(L) / jnp.sum(lam),
        "margin": margin,
    }


class SubsetBF:
    """Balanced fairness on a small pool, as a differentiable objective for :func:`minimize`.

    A thin adapter over the generic engine :func:`jaxqueue.pools.solve_unchecked` (the
    recursion over server subsets of ``bf-recursive`` Theorem 1, eq. (9), with the mean
    numbers ``L_i = lam_i d log(1/psi) / d lam_i`` of eq. (6), equal to Theorem 2, eq. (13)).
    It fixes the compatibility graph once and exposes the optimiser's conventions: a jitted
    ``metrics(mu, lam)`` with traced capacities and rates, and a relative ``margin`` that is
    ``> 0`` iff stable, with ``inf`` delays and finite gradients when unstable.

    Args:
        server_sets: ``server_sets[i]`` lists the servers (0-based) of class ``i``.
        n_servers: number of servers ``K`` (default: one more than the largest index).

    Raises:
        ValueError: empty class, server index out of range, or a server with no class.

    Examples:
        >>> pool = SubsetBF([[0, 2], [1, 2]])
        >>> m = pool.metrics(jnp.array([1.0, 1.0, 1.0]), jnp.array([0.8, 0.8]))
    """

    def __init__(self, server_sets: Sequence[Sequence[int]], n_servers: int | None = None):
        sets = tuple(tuple(sorted({int(k) for k in s})) for s in server_sets)
        if not sets or any(len(s) == 0 for s in sets):
            raise ValueError("server_sets: every class needs at least one server")
        K = int(n_servers) if n_servers is not None else 1 + max(max(s) for s in sets)
        if any(k < 0 or k >= K for s in sets for k in s):
            raise ValueError(f"server_sets: server indices must lie in [0, {K})")
        used = {k for s in sets for k in s}
        if len(used) != K:
            raise ValueError(f"server_sets: servers {sorted(set(range(K)) - used)} serve no class")
        self.server_sets = sets
        self.n_servers = K

    def metrics(self, mu, lam) -> dict:
        """Exact BF metrics at capacities ``mu`` (K,) and arrival rates ``lam`` (I,).

        Returns:
            dict with ``psi``, ``L`` (I,), ``T`` (I,), ``gamma`` (I,), ``L_total``, ``T_mean``,
            ``psi_server`` (K,) and ``margin = min_S (M(S) - Lambda(S)) / M(S)`` (eq. (5),
            ``= 1 - 1 / stability_margin`` of the engine); delays are ``inf`` when
            ``margin <= 0``.
        """
        return _subset_metrics(jnp.asarray(mu), jnp.asarray(lam), server_sets=self.server_sets)


# One compiled program per graph, shared by every SubsetBF of that graph.
@functools.partial(jax.jit, static_argnames=("server_sets",))
def _subset_metrics(mu, lam, *, server_sets) -> dict:
    lam = jnp.asarray(lam, dtype=mu.dtype)
    out = solve_unchecked(Pool(server_sets, mu), lam)
    keys = ("psi", "L", "T", "gamma", "L_total", "T_mean", "psi_server")
    return {k: out[k] for k in keys} | {"margin": 1.0 - 1.0 / out["stability_margin"]}


def _log_comb(n, k):
    return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


@functools.partial(jax.jit, static_argnames=("n_servers",))
def random_degree_metrics(rho, type_probs, degree_probs, *, n_servers: int) -> dict:
    """Randomized assignment with random degrees, per job type (``bf-recursive`` §4.2).

    ``K`` servers of unit rate, total arrival rate ``K rho``; a job is of type ``u`` with
    probability ``type_probs[u]`` and then draws its degree ``d`` with probability
    ``degree_probs[u, d-1]`` (d = 1..D). Each (type, degree) pair is a sub-type of §4.2 with
    share ``p_{u,d} = type_probs[u] degree_probs[u, d-1]``; with ``a_{d,l} = C(l-1, d-1) /
    C(K-1, d-1)`` (0 if l < d) the sub-type load with ``l`` servers left is::

        rho_{ud|l} = rho a_{d,l} p_{u,d} / (1 - rho sum_{(v,e) != (u,d)} a_{e,l} p_{v,e})

    and ``L_{u,d} = sum_{l=d}^K rho_{ud|l} / (1 - rho_{ud|l})``. Per type, ``L_u`` sums over
    degrees, ``T_u = L_u / (K rho type_probs[u])`` and ``gamma_u = 1 / T_u`` (mean service
    rate, §6.1). Stable iff ``rho < 1``. With one-hot ``degree_probs`` this is exactly §4.2.

    Args:
        rho: load of each server (scalar).
        type_probs: (N,) type shares, summing to 1.
        degree_probs: (N, D) degree distribution of each type (rows sum to 1).
        n_servers: K (static).

    Returns:
        dict with ``L``, ``T``, ``gamma`` (per type), ``mean_degree`` (per type),
        ``mean_degree_all`` and ``margin = 1 - rho``.
    """
    rho = jnp.asarray(rho)
    dtype = rho.dtype
    p = jnp.asarray(type_probs, dtype)
    w = jnp.asarray(degree_probs, dtype)
    K = int(n_servers)
    D = w.shape[1]
    if D > K:
        raise ValueError(f"degree_probs: at most n_servers={K} degrees")
    d = jnp.arange(1, D + 1, dtype=dtype)
    ell = jnp.arange(1, K + 1, dtype=dtype)
    # a[d, l] = C(l-1, d-1)/C(K-1, d-1) for l >= d
    valid = ell[None, :] >= d[:, None]
    la = _log_comb(ell[None, :] - 1, d[:, None] - 1) - _log_comb(K - 1.0, d[:, None] - 1)
    a = jnp.where(valid, jnp.exp(jnp.where(valid, la, 0.0)), 0.0)  # (D, K)
    share = p[:, None] * w  # (N, D)
    tot = jnp.einsum("ud,dl->l", share, a)  # (K,) sum over all sub-types
    own = share[:, :, None] * a[None, :, :]  # (N, D, K)
    margin = 1 - rho
    ok = margin > 0
    r = jnp.where(ok, rho, 0.5)
    num = r * own
    den = 1 - r * (tot[None, None, :] - own)
    x = num / den
    term = jnp.where(valid[None], x / (1 - x), 0.0)
    Lud = jnp.sum(term, axis=2)  # (N, D)
    L = jnp.sum(Lud, axis=1)
    lam_u = K * r * p
    T = jnp.where(ok, L / lam_u, jnp.inf)
    mean_deg = w @ d
    return {
        "L": jnp.where(ok, L, jnp.inf),
        "T": T,
        "gamma": 1.0 / T,
        "mean_degree": mean_deg,
        "mean_degree_all": jnp.sum(p * mean_deg),
        "margin": margin,
    }
