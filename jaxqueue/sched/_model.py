"""Server-assignment models for the interruption scheduler.

Two ways of giving each job the set of servers it may use (``bf-clusters`` Section 2
and Section 4, "Large system with random assignment"):

* ``ClassAssignment(server_sets, mu)``: N classes, class i may use the servers
  ``server_sets[i]`` (a compatibility graph), server s has capacity ``mu[s]``;
* ``RandomAssignment(K, d, mu=...)`` (the structured pool :class:`jaxqueue.pools.structured.
  RandomAssignment`, one class for the concept in balanced fairness and in the scheduler): each
  arriving job draws d of the K servers uniformly at random (the C(K, d) classes are never
  enumerated; the simulator stores each job's servers). One degree; ``as_assignment`` turns it
  into the simulator's :class:`RandomModel`.

The command line's ``random:S=100,d=2`` spec is read by :func:`parse_random_spec`.
"""

from __future__ import annotations

import math

import equinox as eqx
import numpy as np

from .._document import spec_items
from ..pools import Pool, check_stable
from ..pools.structured import RandomAssignment

__all__ = [
    "ClassAssignment",
    "RandomAssignment",
    "as_assignment",
    "check_stability",
    "parse_random_spec",
]


def _check_mu(mu) -> np.ndarray:
    arr = np.asarray(mu, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"mu must be a non-empty 1-D vector of server capacities, got {mu!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or not np.any(arr > 0):
        raise ValueError(f"mu must be finite, >= 0 and not all zero, got {mu!r}")
    return arr


class ClassAssignment(eqx.Module):
    """N job classes on S servers: class i may be served by the servers ``server_sets[i]``.

    Attributes:
        server_sets: tuple of tuples of 0-based server indices, one per class.
        mu: capacity of each server (``mu[s] >= 0``; a zero-capacity server never serves).

    Raises:
        ValueError: empty class, server index out of range, or a class with zero capacity.
    """

    server_sets: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    capacities: tuple[float, ...] = eqx.field(static=True)

    def __init__(self, server_sets, mu):
        self.capacities = tuple(float(v) for v in _check_mu(mu))
        self.server_sets = tuple(tuple(int(s) for s in ss) for ss in server_sets)

    @property
    def mu(self) -> np.ndarray:
        """Server capacities as a float64 vector."""
        return np.asarray(self.capacities, dtype=float)

    def __check_init__(self):
        if not self.server_sets:
            raise ValueError("server_sets must list at least one class")
        S = len(self.capacities)
        for i, ss in enumerate(self.server_sets):
            if not ss:
                raise ValueError(f"server_sets[{i}] is empty: every class needs a server")
            if len(set(ss)) != len(ss) or min(ss) < 0 or max(ss) >= S:
                raise ValueError(
                    f"server_sets[{i}] = {ss} must list distinct servers in 0..{S - 1}"
                )
            if not np.any(self.mu[list(ss)] > 0):
                raise ValueError(f"server_sets[{i}] = {ss}: all its servers have capacity 0")

    @property
    def n_classes(self) -> int:
        return len(self.server_sets)

    @property
    def n_servers(self) -> int:
        return len(self.capacities)


class RandomModel(eqx.Module):
    """The simulator's form of a ``RandomAssignment``: each arriving job is assigned ``d`` of
    ``n_servers`` servers uniformly at random.

    Attributes:
        n_servers: S, the number of servers.
        d: the number of servers drawn per job (1 <= d <= S).
        mu: capacities, a scalar (homogeneous pool) or a vector of length S.
    """

    n_servers: int = eqx.field(static=True)
    d: int = eqx.field(static=True)
    capacities: tuple[float, ...] = eqx.field(static=True)

    def __init__(self, n_servers: int, d: int, mu=1.0):
        self.n_servers = int(n_servers)
        self.d = int(d)
        arr = np.asarray(mu, dtype=float)
        arr = np.full(self.n_servers, float(arr)) if arr.ndim == 0 else arr
        self.capacities = tuple(float(v) for v in _check_mu(arr))

    @property
    def mu(self) -> np.ndarray:
        """Server capacities as a float64 vector."""
        return np.asarray(self.capacities, dtype=float)

    def __check_init__(self):
        if self.n_servers < 1:
            raise ValueError(f"n_servers must be >= 1, got {self.n_servers}")
        if not 1 <= self.d <= self.n_servers:
            raise ValueError(f"d must lie in 1..n_servers={self.n_servers}, got {self.d}")
        if len(self.capacities) != self.n_servers:
            raise ValueError(f"mu must have length n_servers={self.n_servers}")

    @property
    def n_classes(self) -> int:
        return 1


def as_assignment(pool) -> ClassAssignment | RandomModel:
    """The simulator's model of a ``ClassAssignment``, a ``RandomAssignment`` (one degree) or
    any object with ``server_sets`` and ``mu`` attributes (for example ``jaxqueue.pools.Pool``)."""
    if isinstance(pool, (ClassAssignment, RandomModel)):
        return pool
    if isinstance(pool, RandomAssignment):
        if pool.num_types != 1:
            raise ValueError(
                f"the scheduler simulates one degree d per pool, got degrees {list(pool.d)}"
            )
        return RandomModel(pool.K, pool.d[0], float(pool.mu))
    if hasattr(pool, "server_sets") and hasattr(pool, "mu"):
        return ClassAssignment(pool.server_sets, np.asarray(pool.mu, dtype=float))
    raise ValueError(
        f"pool must be a ClassAssignment, a RandomAssignment or have server_sets and mu, "
        f"got {type(pool).__name__}"
    )


def check_stability(pool, lam) -> None:
    """Raise ``ValueError`` naming the bottleneck if the load is not stable.

    Class pools: ``sum_{i in A} lam_i < mu(A)`` for every non-empty set of classes A
    (``bf-clusters`` Theorem 1, eq. (5)), by the linear program of
    :func:`jaxqueue.pools.stability` (polynomial in the pool's size).
    Random assignment (total rate ``lam``): every set of l servers, of capacity at least the sum
    of the l smallest capacities, must serve the jobs drawn inside it,
    ``lam C(l, d) / C(S, d) < mu(l smallest)``.
    """
    pool = as_assignment(pool)
    lam = np.asarray(lam, dtype=float)
    if isinstance(pool, RandomModel):
        total = float(np.sum(lam))
        mu_sorted = np.sort(pool.mu)
        S, d = pool.n_servers, pool.d
        for ell in range(d, S + 1):
            load = total * math.comb(ell, d) / math.comb(S, d)
            cap = float(np.sum(mu_sorted[:ell]))
            if not load < cap:
                raise ValueError(
                    f"unstable load: the {ell} slowest servers receive {load:.6g} > "
                    f"their capacity {cap:.6g}"
                )
        return
    N = pool.n_classes
    if lam.shape != (N,):
        raise ValueError(f"lam must have one rate per class ({N}), got shape {lam.shape}")
    check_stable(Pool(pool.server_sets, pool.mu), lam)


def parse_random_spec(spec: str) -> tuple[int, int, float]:
    """``(S, d, mu)`` of the scheduler's ``random:S=100,d=2[,mu=1]`` (``K`` for ``S``): each
    job draws ``d`` of the ``S`` servers (capacity ``mu``) at arrival.

    Raises:
        ValueError: an unknown or repeated key, both or neither of ``S`` and ``K``, no ``d``,
            or values that are not integers (``mu``: a number).
    """
    items = spec_items(spec, "random", ("S", "K", "d", "mu"))
    if ("S" in items) == ("K" in items) or "d" not in items:
        raise ValueError(f"--pool {spec!r}: give exactly one of S or K, and d")
    try:
        return int(items.get("S", items.get("K"))), int(items["d"]), float(items.get("mu", 1.0))
    except ValueError:
        raise ValueError(f"--pool {spec!r}: S/K and d must be integers, mu a number") from None
