"""Typed pools: many servers of few types (issue 18), solved exactly by aggregation.

A typed pool has ``counts[t]`` servers of type ``t``, each of capacity ``mu[t]``; class ``i``
may use every server of the types ``type_sets[i]``. Its exact balanced-fairness metrics are
those of the pool with **one server per type of capacity** ``counts[t] * mu[t]`` (the
*aggregated* pool), so the generic recursion runs over the ``2^T`` sets of types instead of the
``2^K`` sets of servers (or the ``prod_t (K_t + 1)`` count vectors of a recursion that keeps
servers of one type interchangeable).

Why (``bf-recursive`` Section 2.2): the balance function is ``Phi(0) = 1`` and
``Phi(x) = sum_{i: x_i > 0} Phi(x - e_i) / M(U_{i: x_i > 0} K_i)`` (eq. (1)), so the graph
enters only through the capacity ``M`` of unions of class server sets; here such a union is a
union of whole types, whose capacity is ``sum_t counts[t] mu[t]`` over those types in both
pools. Same ``Phi``, same stationary law (eq. (2)), so the same ``psi``, ``L_i``, ``T_i`` and
class idle probabilities. A server of type ``t`` is idle iff no class using type ``t`` has a
job, the event of the aggregated server ``t`` being idle: ``psi_server`` is per type, and the
mean number of busy servers is ``sum_t counts[t] (1 - psi_server[t])``. The stability region
(eq. (5)) is the same too, so the stability LP runs over types.

The same follows from the recursion over count vectors: the reduced system of a server set
``L`` holding ``m_t`` servers of type ``t`` keeps the classes whose types are all *full* in
``L`` (``m_t = counts[t]`` for ``t`` in ``type_sets[i]``), and Theorem 1 (eq. (9)) becomes
``log(1/psi(m)) = logsumexp_t [log(m_t mu_t) + log(1/psi(m - e_t))] - log(M(m) - Lambda(m))``
(the ``m_t`` subsets ``L - k`` with ``k`` of type ``t`` are alike). ``tests/pools/test_typed.py``
runs that recursion as an independent reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._pool import Pool, _is_concrete, _normalise_sets
from ._result import BFResult
from .structured._base import StructuredPool


def _normalise_counts(counts) -> tuple[int, ...]:
    if isinstance(counts, (str, bytes)) or not isinstance(counts, (Sequence, np.ndarray)):
        raise ValueError(f"counts must be a sequence of server counts, got {counts!r}")
    out = []
    for t, c in enumerate(counts):
        if isinstance(c, bool) or not isinstance(c, (int, np.integer, float, np.floating)):
            raise ValueError(f"counts[{t}] must be an integer >= 1, got {c!r}")
        if not (math.isfinite(c) and int(c) == c and c >= 1):
            raise ValueError(f"counts[{t}] must be an integer >= 1, got {c!r}")
        out.append(int(c))
    return tuple(out)


class TypedPool(StructuredPool):
    """A pool of many servers of few types under balanced fairness.

    A :class:`jaxqueue.pools.structured.StructuredPool`: ``server_sets`` (of the expanded pool,
    servers numbered type by type), ``solve(rho, *, lam=...)`` (:func:`jaxqueue.pools.solve`),
    ``kernel``, ``sweep``, ``class_rates`` and ``to_pool`` as for every structured pool.

    Args:
        counts: ``counts[t]`` servers of type ``t`` (integers ``>= 1``).
        type_sets: one sequence of 0-based type indices per job class: class ``i`` may use
            every server of these types.
        mu: capacity of one server of each type, shape ``(T,)`` (default 1 each).

    Raises:
        ValueError: no type or no class, a count that is not an integer ``>= 1``, a class with
            no type, a type index outside ``[0, T)`` or repeated, capacities not finite and
            ``> 0``.

    Examples:
        >>> pool = TypedPool([64, 64, 32, 16], [[0, 1], [1, 2], [2, 3], [0, 3]])
        >>> pool.num_servers, pool.num_types, pool.num_classes
        (176, 4, 4)
    """

    counts: tuple[int, ...] = eqx.field(static=True)
    type_sets: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    mu: Float[Array, " T"]

    per_class = True

    def __init__(self, counts, type_sets, mu=None):
        self.counts = _normalise_counts(counts)
        self.type_sets = _normalise_sets(type_sets, "type_sets")
        self.mu = jnp.ones(len(self.counts)) if mu is None else jnp.asarray(mu)

    def __check_init__(self):
        if not self.counts:
            raise ValueError("counts: a typed pool needs at least one server type")
        T = len(self.counts)
        if self.mu.shape != (T,):
            raise ValueError(
                f"mu must have shape ({T},), one capacity per type; got {self.mu.shape}"
            )
        if not jnp.issubdtype(self.mu.dtype, jnp.floating):
            raise ValueError(f"mu must be a floating array, got dtype {self.mu.dtype}")
        if not self.type_sets:
            raise ValueError("type_sets: a typed pool needs at least one job class")
        for i, s in enumerate(self.type_sets):
            if not s:
                raise ValueError(f"type_sets[{i}] is empty: class {i} has no server type")
            bad = [t for t in s if not 0 <= t < T]
            if bad:
                raise ValueError(
                    f"type_sets[{i}] has type indices {bad} outside [0, {T}) (0-based)"
                )
            if len(set(s)) != len(s):
                raise ValueError(f"type_sets[{i}] repeats a type: {list(s)}")
        if _is_concrete(self.mu):
            check_type_mu(self.mu)

    @property
    def num_types(self) -> int:
        """Number of server types ``T``."""
        return len(self.counts)

    @property
    def server_types(self) -> np.ndarray:
        """Type of each server of the expanded pool (servers numbered type by type)."""
        return np.repeat(np.arange(self.num_types), self.counts)

    @property
    def K(self) -> int:
        """Number of servers ``K = sum_t counts[t]`` (``num_servers``)."""
        return sum(self.counts)

    @property
    def server_sets(self) -> tuple[tuple[int, ...], ...]:
        """The servers of each class in the expanded pool (servers numbered type by type)."""
        first = np.concatenate([[0], np.cumsum(self.counts)])
        return tuple(
            tuple(int(k) for t in s for k in range(first[t], first[t + 1])) for s in self.type_sets
        )

    @property
    def num_classes(self) -> int:
        """Number of job classes ``I`` (``len(server_sets)``, without expanding the sets)."""
        return len(self.type_sets)

    def capacities(self, mu=None) -> Array:
        """Capacity of each type, ``counts[t] * mu[t]`` (``mu`` overrides ``self.mu``)."""
        mu = self.mu if mu is None else jnp.asarray(mu)
        return jnp.asarray(self.counts, mu.dtype) * mu

    def aggregate(self, mu=None) -> Pool:
        """The equivalent pool with one server per type of capacity ``counts[t] * mu[t]``
        (same balanced-fairness metrics; see the module docstring)."""
        return Pool(self.type_sets, self.capacities(mu))

    def to_pool(self, max_servers: int = 30) -> Pool:
        """The expanded generic :class:`Pool` (servers numbered type by type; for checks).

        Raises:
            ValueError: more than ``max_servers`` servers (the generic recursion costs ``2^K``).
        """
        if self.num_servers > max_servers:
            raise ValueError(
                f"to_pool: {self.num_servers} servers is more than max_servers={max_servers} "
                "(the generic recursion costs 2^K); solve the TypedPool itself"
            )
        return Pool(self.server_sets, jnp.repeat(self.mu, np.asarray(self.counts)))

    def rates(self, lam, *, name: str = "lam") -> Array:
        """Validate arrival rates ``(..., I)`` (as :meth:`Pool.rates`)."""
        return Pool(self.type_sets, jnp.ones(self.num_types)).rates(lam, name=name)

    def capacity(self):
        """Total capacity ``sum_t counts[t] mu[t]``."""
        return jnp.sum(self.capacities())

    def kernel(self, rho=None, *, lam=None, with_servers: bool = True):
        """:func:`jaxqueue.pools.solve_unchecked` at total load ``rho`` (split equally among
        the classes) or for the rates ``lam``: ``(BFResult, stable)``, no exception."""
        from ._recursion import solve_unchecked

        out = solve_unchecked(self, self._lam(rho, lam))
        stable = out.pop("stable")
        return BFResult(**out), stable

    def solve(self, rho=None, *, lam=None, with_servers: bool = True, **options) -> BFResult:
        """:func:`jaxqueue.pools.solve` at total load ``rho`` (split equally among the
        classes) or for the rates ``lam``; ``options`` are its keywords (``class_idle``,
        ``mu``, ``max_bytes``).

        Raises:
            ValueError: as :func:`jaxqueue.pools.solve` (an unstable load names the bottleneck
                types).
        """
        from ._recursion import solve

        rho, lam = self._loads(rho, lam, batched=False)
        return solve(self, self._lam(rho, lam), **options)

    def count_vectors(self) -> int:
        """``prod_t (counts[t] + 1)``: the states of a recursion over count vectors."""
        return math.prod(c + 1 for c in self.counts)


def check_type_mu(mu) -> None:
    """Refuse concrete per-type capacities that are not finite and ``> 0`` (naming types)."""
    a = np.asarray(mu)
    bad = np.flatnonzero(~(np.isfinite(a) & (a > 0)))
    if bad.size:
        raise ValueError(
            f"mu must be finite and > 0; types {bad.tolist()} (0-based) have {a[bad].tolist()}"
        )
