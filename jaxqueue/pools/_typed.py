"""Typed pools: many servers of few types, solved exactly by aggregation.

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

:func:`jaxqueue.pools.solve` and its kin call the ``_bf_*`` methods of a typed pool, which build
the aggregated pool and run the generic kernel on it. ``tests/pools/test_typed.py`` checks them
against the recursion over count vectors (Theorem 1, eq. (9), over ``m_t`` servers per type).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._memory import memory_budget
from ._pool import Pool, _is_concrete, _normalise_sets
from ._recursion import DEFAULT_MAX_BYTES, MAX_SERVERS, memory_estimate, solve, solve_unchecked
from ._result import BFResult
from ._stability import Stability, check_stable, stability
from .structured._base import StructuredPool

#: Seconds per (type subset x (classes + types) x rate vector x recursion) of a typed solve
#: after compilation, and the fixed cost of one call (a rough model of benchmarks/bench_typed.py).
TYPED_SECONDS_PER_UNIT = 5e-9
TYPED_SECONDS_PER_CALL = 1e-3


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
        rho, lam = self._loads(rho, lam, batched=False)
        return solve(self, self._lam(rho, lam), **options)

    def count_vectors(self) -> int:
        """``prod_t (counts[t] + 1)``: the states of a recursion over count vectors."""
        return math.prod(c + 1 for c in self.counts)

    # ------------------------------------------------------------------ the exact kernel
    # :func:`jaxqueue.pools.solve`, :func:`~jaxqueue.pools.solve_unchecked`,
    # :func:`~jaxqueue.pools.log_inv_psi` and :func:`~jaxqueue.pools.stability` call these on a
    # typed pool: each builds the aggregated pool and calls the generic kernel on it.
    def _type_mu(self, mu) -> Array:
        """``mu`` per type (the pool's own where ``None``), its shape checked and, where
        concrete, its values."""
        mu = self.mu if mu is None else jnp.asarray(mu)
        if mu.shape != (self.num_types,):
            raise ValueError(
                f"mu must have shape ({self.num_types},), one per type; got {mu.shape}"
            )
        if _is_concrete(mu):
            check_type_mu(mu)
        return mu

    def _bf_kernel_pool(self, mu=None) -> tuple[Pool, Array]:
        """``(aggregated pool, its capacities)`` for the generic kernels (``mu`` per type)."""
        mu = self._type_mu(mu)
        _check_typed_size(self, jnp.dtype(jnp.result_type(mu.dtype, float)).itemsize, None, 1)
        caps = self.capacities(mu)
        return Pool(self.type_sets, caps), caps

    def _bf_solve(self, lam, mu, check: bool, class_idle, max_bytes) -> BFResult:
        """:func:`jaxqueue.pools.solve`: the generic kernel on the aggregated pool (eq. (1))."""
        lam = self.rates(lam)
        mu = self._type_mu(mu)
        dtype = jnp.result_type(lam.dtype, mu.dtype, float)
        batch = math.prod(lam.shape[:-1])
        _check_typed_size(self, jnp.dtype(dtype).itemsize, max_bytes, batch)
        concrete = _is_concrete(lam) and _is_concrete(mu)
        caps = self.capacities(mu.astype(dtype))
        res = solve(
            Pool(self.type_sets, caps),
            lam,
            mu=caps,
            check=bool(check and not concrete),
            class_idle=class_idle,
            max_bytes=max_bytes,
        )
        if check and concrete:
            margins = np.asarray(res.stability_margin).reshape(-1)
            bad = np.flatnonzero(~(margins > 1))
            if bad.size:  # the LP over types names the bottleneck types
                typed = TypedPool(self.counts, self.type_sets, mu)
                check_stable(typed, np.asarray(lam).reshape(-1, self.num_classes)[bad[0]])
                raise ValueError(
                    f"unstable arrival rates (rate vector {int(bad[0])}): stability margin "
                    f"{float(margins[bad[0]]):.6g} <= 1"
                )
        counts = jnp.asarray(self.counts, res.psi_server.dtype)
        busy = jnp.sum(counts * (1.0 - res.psi_server), axis=-1)
        return eqx.tree_at(lambda r: r.busy_servers, res, busy)

    def _bf_unchecked(self, lam, mu, max_bytes) -> dict:
        """:func:`jaxqueue.pools.solve_unchecked` on the aggregated pool, ``busy_servers``
        counting servers, not types: ``sum_t counts[t] (1 - psi_server[t])``."""
        pool, caps = self._bf_kernel_pool(mu)
        out = solve_unchecked(pool, lam, mu=caps, max_bytes=max_bytes)
        c = jnp.asarray(self.counts, out["psi_server"].dtype)
        out["busy_servers"] = jnp.sum(c * (1.0 - out["psi_server"]), axis=-1)
        return out

    def _bf_stability(self, lam) -> Stability:
        """:func:`jaxqueue.pools.stability`: the LP over the types (the aggregated pool)."""
        st = stability(self.aggregate(), lam)
        first = np.concatenate([[0], np.cumsum(self.counts)])
        servers = tuple(k for t in st.bottleneck_servers for k in range(first[t], first[t + 1]))
        return dataclasses.replace(
            st, bottleneck_servers=servers, bottleneck_types=st.bottleneck_servers
        )


def check_type_mu(mu) -> None:
    """Refuse concrete per-type capacities that are not finite and ``> 0`` (naming types)."""
    a = np.asarray(mu)
    bad = np.flatnonzero(~(np.isfinite(a) & (a > 0)))
    if bad.size:
        raise ValueError(
            f"mu must be finite and > 0; types {bad.tolist()} (0-based) have {a[bad].tolist()}"
        )


def typed_estimate(
    pool: TypedPool, *, batch: int = 1, itemsize: int = 8, class_idle: bool | None = None
) -> dict:
    """What :func:`solve` will cost on a typed pool, predicted before the run.

    Args:
        pool: the typed pool. batch: rate vectors in one call. itemsize: bytes per float.
        class_idle: as in :func:`solve` (``I`` more recursions; default ``I 2^T <= 2^18``).

    Returns:
        dict with ``states`` (``2^T`` type subsets of the recursion), ``count_vectors``
        (``prod_t (counts[t] + 1)``, the states of a recursion over count vectors, for
        comparison), ``servers`` (``K``), ``bytes`` (peak memory, :func:`memory_estimate` on
        ``T`` servers) and ``seconds`` (run time of one call after compilation, a rough model
        of the measured times).
    """
    T, I = pool.num_types, pool.num_classes
    if class_idle is None:
        class_idle = I * 2**T <= 2**18
    runs = 1 + I if class_idle else 1
    return {
        "states": 2**T,
        "count_vectors": pool.count_vectors(),
        "servers": pool.num_servers,
        "bytes": memory_estimate(T, I, itemsize, batch=batch),
        "seconds": TYPED_SECONDS_PER_CALL + TYPED_SECONDS_PER_UNIT * 2**T * (I + T) * batch * runs,
    }


def _check_typed_size(pool: TypedPool, itemsize: int, max_bytes, batch: int) -> None:
    est = typed_estimate(pool, batch=batch, itemsize=itemsize)
    if max_bytes is None:
        limit, label = memory_budget(DEFAULT_MAX_BYTES)
    else:
        limit, label = max_bytes, f"{max_bytes / 1e9:.3g} GB"
    T = pool.num_types
    if T > MAX_SERVERS or est["bytes"] > limit:
        why = (
            f"more than the {MAX_SERVERS} types the int32 subset masks allow"
            if T > MAX_SERVERS
            else f"above the memory limit of {label}"
        )
        raise ValueError(
            f"typed pool too large: T={T} types ({pool.num_servers} servers, {batch} rate "
            f"vector(s)) means 2^{T} = {2**T:,} type subsets and about "
            f"{est['bytes'] / 1e9:.3g} GB of memory, {why}; merge types, split the batch or "
            "pass max_bytes to raise the limit"
        )
