"""Stability of a pool under balanced fairness, by linear programming (polynomial time)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ._pool import Pool


@dataclasses.dataclass(frozen=True)
class Stability:
    """Outcome of :func:`stability`.

    Attributes:
        margin: the largest factor ``t`` such that ``t * lam`` is still in the closure of the
            capacity region, ``min_A mu(K(A)) / lam(A)`` over class sets ``A`` with
            ``lam(A) > 0`` (``inf`` when all rates are 0). The pool is stable iff ``margin > 1``.
        stable: ``margin > 1``.
        bottleneck_classes: 0-based classes ``A`` attaining the margin.
        bottleneck_servers: 0-based servers ``K(A)``, the union of their server sets.
        demand: ``lam(A)``, the arrival rate of the bottleneck classes.
        capacity: ``mu(K(A))``, the capacity of the bottleneck servers.
        bottleneck_types: for a :class:`~jaxqueue.pools.TypedPool`, the 0-based server types
            of ``K(A)`` (``bottleneck_servers`` then lists their servers, numbered type by
            type as in :meth:`TypedPool.to_pool`); ``None`` for a :class:`Pool`.
    """

    margin: float
    stable: bool
    bottleneck_classes: tuple[int, ...]
    bottleneck_servers: tuple[int, ...]
    demand: float
    capacity: float
    bottleneck_types: tuple[int, ...] | None = None

    @property
    def load(self) -> float:
        """``1 / margin``: the load of the most loaded set of classes."""
        return 0.0 if np.isinf(self.margin) else 1.0 / self.margin


def stability(pool: Pool, lam) -> Stability:
    """Stability margin and bottleneck of ``pool`` under arrival rates ``lam``.

    Balanced fairness is stable iff ``lam(A) < mu(K(A))`` for every non-empty class set ``A``
    (``bf-clusters`` Theorem 1, ``bf-recursive`` eq. (5)). The margin
    ``min_A mu(K(A)) / lam(A)`` is the optimum of the linear program (dual of the max-flow
    feasibility problem ``t * lam`` routed from classes to servers)::

        minimise   sum_k mu_k y_k
        subject to z_i <= y_k  for every edge (i, k),   sum_i lam_i z_i = 1,   y, z >= 0,

    solved with HiGHS (``scipy.optimize.linprog``) in polynomial time, with
    ``sum_i |K_i| + 1`` constraints. A bottleneck set is recovered from the optimal ``z`` by
    taking the best level set ``{i : z_i >= t}`` (the LP value is an average of level-set
    ratios, so one of them attains it).

    A :class:`~jaxqueue.pools.TypedPool` has the capacity region of its aggregated pool (one
    server per type of capacity ``counts[t] mu[t]``: the capacity of a union of class server
    sets is a sum over whole types), so its LP runs over the ``T`` types, with
    ``sum_i |type_sets[i]| + 1`` constraints, and names the bottleneck types.

    Args:
        pool: the pool (a :class:`Pool` or a :class:`~jaxqueue.pools.TypedPool`).
        lam: arrival rates, shape ``(I,)``, finite and ``>= 0`` (concrete values, not traced).

    Returns:
        a :class:`Stability` record (0-based indices).

    Raises:
        ValueError: malformed rates, or the LP solver failed.
    """
    if not isinstance(pool, Pool):  # a typed pool: the LP over its aggregated pool
        return pool._bf_stability(lam)
    lam = np.asarray(pool.rates(lam), dtype=np.float64)
    if lam.ndim != 1:
        raise ValueError(f"stability takes one rate vector, got shape {lam.shape}")
    mu = np.asarray(pool.mu, dtype=np.float64)
    K = pool.num_servers
    active = np.flatnonzero(lam > 0)
    if active.size == 0:
        return Stability(float("inf"), True, (), (), 0.0, 0.0)
    import scipy.optimize  # scipy loads when an LP runs, not with the package
    import scipy.sparse  # (as scipy.optimize)

    sets = pool.server_sets
    # variables: z (active classes, n), then y (servers, K)
    n = active.size
    rows, cols, vals = [], [], []
    r = 0
    for j, i in enumerate(active):
        for k in sets[i]:
            rows += [r, r]
            cols += [j, n + k]
            vals += [1.0, -1.0]
            r += 1
    A_ub = scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(r, n + K))
    b_ub = np.zeros(r)
    # the LP in rates relative to their sum (the margin scales as 1 / sum): rates of 1e-12
    # would otherwise make the equality row too small for the solver's tolerances
    A_eq = scipy.sparse.csr_matrix(
        (lam[active] / lam[active].sum(), (np.zeros(n, dtype=int), np.arange(n))),
        shape=(1, n + K),
    )
    c = np.concatenate([np.zeros(n), mu])
    res = scipy.optimize.linprog(
        c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=[1.0], bounds=(0, None), method="highs"
    )
    if res.status != 0:
        raise ValueError(f"stability LP failed: {res.message}")
    z = res.x[:n]
    # best level set of z
    order = np.argsort(-z, kind="stable")
    zs = z[order]
    breaks = np.flatnonzero(np.r_[zs[1:] < zs[:-1] - 1e-12 * max(zs[0], 1e-300), True])
    breaks = breaks[zs[breaks] > 1e-12 * zs[0]] if zs[0] > 0 else breaks[:1]
    if breaks.size == 0:
        breaks = np.array([n - 1])
    inc = pool.incidence[active[order]]
    covered = np.logical_or.accumulate(inc, axis=0)
    demand = np.cumsum(lam[active[order]])
    best = None
    for b in breaks:
        cap = float(mu[covered[b]].sum())
        ratio = cap / demand[b]
        if best is None or ratio < best[0]:
            best = (ratio, b, cap)
    ratio, b, cap = best
    classes = tuple(sorted(int(i) for i in active[order[: b + 1]]))
    servers = tuple(int(k) for k in np.flatnonzero(covered[b]))
    return Stability(float(ratio), bool(ratio > 1.0), classes, servers, float(demand[b]), cap)


def check_stable(pool: Pool, lam) -> Stability:
    """Raise if ``lam`` is outside the stability region of ``pool``; else return the record.

    Raises:
        ValueError: naming the bottleneck classes and servers (0-based indices), their demand
            and capacity, and the stability margin.
    """
    st = stability(pool, lam)
    if not st.stable and st.bottleneck_types is not None:
        n = sum(pool.counts[t] for t in st.bottleneck_types)
        raise ValueError(
            "unstable arrival rates (balanced fairness needs lam(A) < mu(K(A)) for every class "
            f"set A): bottleneck classes {list(st.bottleneck_classes)} (0-based) bring "
            f"{st.demand:.6g} but their server types {list(st.bottleneck_types)} (0-based, {n} "
            f"servers) have capacity {st.capacity:.6g}; stability margin {st.margin:.6g} <= 1 "
            f"(scale lam by less than {st.margin:.6g})"
        )
    if not st.stable:
        raise ValueError(
            "unstable arrival rates (balanced fairness needs lam(A) < mu(K(A)) for every class "
            f"set A): bottleneck classes {list(st.bottleneck_classes)} (0-based) bring "
            f"{st.demand:.6g} but their servers {list(st.bottleneck_servers)} (0-based) have "
            f"capacity {st.capacity:.6g}; stability margin {st.margin:.6g} <= 1 "
            f"(scale lam by less than {st.margin:.6g})"
        )
    return st
