"""Stationary metrics of open, closed, mixed and truncated networks of pools.

The stationary law of the aggregate state ``x = (x_1, .., x_K)`` (one vector per pool) is
(``bf-networks`` Theorems 3-4, Proposition 4, see ``docs/errata.md`` item 5)

    pi(x) = (1 / Z) prod_k Phi_k(x_k) lam^x

restricted to the closed chain holding ``N`` jobs (closed and mixed networks), or to at most
``N`` jobs in total (open network whose external arrivals are blocked at ``N`` jobs), with
``lam`` the solution of the traffic equations. ``Z`` is obtained by convolving, in log space,
the per-pool population sums ``G_k(n)`` (see :mod:`._lattice`). Then

    L_i = lam_i d log Z / d lam_i,        X_i = lam_i Z^{(-i)} / Z,

where ``Z^{(-i)} = Z`` for a class not counted by the population constraint and otherwise the
same sum with one job fewer (``N - 1``), since ``phi_i(x) = Phi(x - e_i) / Phi(x)``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import pools
from .._jit import refused
from .._tables import per_class
from ..pools import check_size
from ._lattice import (
    check_cells,
    lattice_elements,
    lattice_tables,
    log_convolve,
    population_sums,
)
from ._model import Network, _is_concrete
from ._traffic import check_stability, traffic

# Up to this many classes, d log Z / d lam is taken in forward mode (one tangent per class).
FORWARD_MODE_CLASSES = 16


class NetworkResult(eqx.Module):
    """Stationary metrics of a network.

    Attributes:
        visits: solution of the traffic equations (open classes: arrival rates; closed chain:
            visit ratios summing to 1).
        lam: actual arrival rate of each class (equal to ``throughput`` in steady state).
        throughput: completion rate of each class.
        L: mean number of jobs per class.
        T: mean sojourn per visit, ``L / throughput``.
        L_pool: mean number of jobs per pool.
        psi_pool: probability that each pool is empty.
        psi_server: probability that each server is idle.
        L_total: mean number of jobs in the network.
        sojourn: mean end-to-end time of an open job in the network (``sum_open L / accepted
            external rate``; NaN without open classes).
        blocking: probability that an external arrival is blocked (truncated networks; else 0).
        log_norm: ``log Z``.
    """

    visits: Float[Array, " C"]
    lam: Float[Array, " C"]
    throughput: Float[Array, " C"]
    L: Float[Array, " C"]
    T: Float[Array, " C"]
    L_pool: Float[Array, " P"]
    psi_pool: Float[Array, " P"]
    psi_server: Float[Array, " K"]
    L_total: Float[Array, ""]
    sojourn: Float[Array, ""]
    blocking: Float[Array, ""]
    log_norm: Float[Array, ""]

    def to_frame(self):
        """One row per class: ``class``, ``visits``, ``lam``, ``throughput``, ``L``, ``T``.
        Needs pandas (``pip install 'jaxqueue[tables]'``)."""
        names = ("visits", "lam", "throughput", "L", "T")
        return per_class({k: getattr(self, k) for k in names})


def _local_sets(net: Network, k: int) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    servers = net.pool_servers[k]
    where = {s: j for j, s in enumerate(servers)}
    sets = tuple(tuple(where[s] for s in net.server_sets[i]) for i in net.pool_classes[k])
    return sets, servers


def _product_form(net: Network, marked: np.ndarray, n_max: int, upto: bool) -> NetworkResult:
    visits = traffic(net)
    mu = net.mu
    dtype = visits.dtype
    n_pools = net.n_pools
    locs = [_local_sets(net, k) for k in range(n_pools)]
    tables = tuple(lattice_tables(sets, len(servers)) for sets, servers in locs)
    cls = [np.array(c) for c in net.pool_classes]
    srv = [np.array(servers) for _, servers in locs]

    def reduce(total, n):
        if n < 0:
            return jnp.full(total.shape[:-1], -jnp.inf, dtype)
        return jax.nn.logsumexp(total[..., : n + 1], axis=-1) if upto else total[..., n]

    def pieces(lam):
        gs, idles, slacks = population_sums(
            tables,
            tuple(lam[c] for c in cls),
            tuple(mu[s] for s in srv),
            tuple(marked[c] for c in cls),
            n_max,
        )
        total = gs[0]
        for k in range(1, n_pools):
            total = log_convolve(total, gs[k])
        log_z = reduce(total, n_max)
        return log_z, (log_z, total, gs, idles, slacks)

    # L_i = lam_i d log Z / d lam_i: forward mode for few classes (cheaper to compile).
    diff = jax.jacfwd if net.n_classes <= FORWARD_MODE_CLASSES else jax.grad
    grad, (log_z, total, gs, idles, slacks) = diff(pieces, has_aux=True)(visits)
    L = visits * grad
    mk = jnp.asarray(marked)
    ratio = jnp.exp(reduce(total, n_max - 1) - log_z)
    thr = visits * jnp.where(mk, ratio, 1.0)
    T = jnp.where(thr > 0, L / jnp.where(thr > 0, thr, 1.0), 0.0)
    # Convolution of all pools but k, from prefix and suffix products.
    unit = jnp.full(n_max + 1, -1e30, dtype).at[0].set(0.0)
    prefix, suffix = [unit], [unit]
    for k in range(n_pools - 1):
        prefix.append(log_convolve(prefix[-1], gs[k]))
        suffix.append(log_convolve(suffix[-1], gs[n_pools - 1 - k]))
    others = jnp.stack([log_convolve(prefix[k], suffix[n_pools - 1 - k]) for k in range(n_pools)])
    psi_pool = jnp.exp(reduce(others, n_max) - log_z)
    idle = jax.vmap(jax.vmap(log_convolve, in_axes=(0, None)))(idles, others)  # (P, K, N1)
    psi_idle = jnp.exp(reduce(idle, n_max) - log_z)
    psi_server = jnp.zeros(net.n_servers, dtype)
    for k in range(n_pools):
        psi_server = psi_server.at[srv[k]].set(psi_idle[k, : srv[k].size])
    L_pool = jnp.stack([jnp.sum(L[c]) for c in cls])
    opn = ~np.asarray(net.closed, bool)
    blocking = jnp.exp(total[n_max] - log_z) if upto else jnp.zeros((), dtype)
    accepted = jnp.sum(net.nu) * (1 - blocking)
    sojourn = (
        jnp.sum(L[np.flatnonzero(opn)]) / accepted if opn.any() else jnp.asarray(jnp.nan, dtype)
    )
    result = NetworkResult(
        visits=visits,
        lam=thr,
        throughput=thr,
        L=L,
        T=T,
        L_pool=L_pool,
        psi_pool=psi_pool,
        psi_server=psi_server,
        L_total=jnp.sum(L),
        sojourn=sojourn,
        blocking=blocking,
        log_norm=log_z,
    )
    return eqx.error_if(
        result,
        jnp.any(slacks <= 0),
        refused(
            "unstable network: some pool's open classes exceed the capacity of their servers "
            "(call check_stability on concrete inputs to name the bottleneck)"
        ),
    )


def _open_by_pools(net: Network) -> NetworkResult:
    """Open network: each pool solved by :func:`jaxqueue.pools.solve` at its effective rates."""
    visits = traffic(net)
    dtype = visits.dtype
    L = jnp.zeros(net.n_classes, dtype)
    T = jnp.zeros(net.n_classes, dtype)
    psi_server = jnp.zeros(net.n_servers, dtype)
    psi_pool, log_norm = [], []
    for k in range(net.n_pools):
        sets, servers = _local_sets(net, k)
        cls, srv = np.array(net.pool_classes[k]), np.array(servers)
        with jax.ensure_compile_time_eval():
            # pools caches its subset tables with lru_cache: build them concrete, not traced.
            pools.subset_layers(len(servers))
        res = pools.solve(pools.Pool(sets, net.mu[srv]), visits[cls], check=True)
        L = L.at[cls].set(res.L)
        T = T.at[cls].set(res.T)
        psi_server = psi_server.at[srv].set(res.psi_server)
        psi_pool.append(res.psi)
        log_norm.append(res.log_inv_psi)
    return NetworkResult(
        visits=visits,
        lam=visits,
        throughput=visits,
        L=L,
        T=T,
        L_pool=jnp.stack([jnp.sum(L[np.array(c)]) for c in net.pool_classes]),
        psi_pool=jnp.stack(psi_pool),
        psi_server=psi_server,
        L_total=jnp.sum(L),
        sojourn=jnp.sum(L) / jnp.sum(net.nu),
        blocking=jnp.zeros((), dtype),
        log_norm=jnp.sum(jnp.stack(log_norm)),
    )


@eqx.filter_jit
def _solve_jit(net: Network, engine: str) -> NetworkResult:
    if engine == "pools":
        return _open_by_pools(net)
    marked = np.asarray(net.closed, bool)
    return _product_form(net, marked, net.population or 0, upto=False)


@eqx.filter_jit
def _solve_truncated_jit(net: Network, n_max: int) -> NetworkResult:
    marked = np.ones(net.n_classes, bool)
    return _product_form(net, marked, n_max, upto=True)


def _concrete(net: Network) -> bool:
    return all(_is_concrete(x) for x in (net.mu, net.routing, net.nu))


def solve(net: Network, *, engine: str = "auto") -> NetworkResult:
    """Exact stationary metrics of an open, closed or mixed network of pools.

    Open network: product of the pools' balanced-fairness laws at the effective rates ``lam``
    (``bf-networks`` Theorem 3), each pool solved by :func:`jaxqueue.pools.solve` (engine
    ``"pools"``, the default for open networks) or by the population-sum recursion of this
    module with no closed class (engine ``"lattice"``). Closed / mixed network: the product
    form restricted to the closed chain holding ``population`` jobs (Theorem 4, Proposition
    4), normalised by
    ``Z = (G_1 * .. * G_K)(N)`` where ``G_k(n)`` sums ``Phi_k(x) lam^x`` over the pool-``k``
    states with ``n`` closed jobs (open classes summed out). Differentiable in ``mu``,
    ``routing`` and ``nu``; jit-compiled once per network structure and population.

    Args:
        net: the network.
        engine: ``"auto"``, ``"pools"`` (open networks) or ``"lattice"``.

    Returns:
        :class:`NetworkResult`.

    Raises:
        ValueError: for an unknown engine, or if the open part is unstable, naming the pool,
            classes and servers (on traced inputs an ``eqx.error_if`` run-time error is raised
            instead).

    Examples:
        >>> net = Network([[[0, 1]], [[2]]], mu=[1.0, 1.0, 2.0],
        ...               routing=[[0.0, 1.0], [0.3, 0.0]], nu=[0.5, 0.0])
        >>> res = solve(net)  # res.L, res.throughput, res.sojourn
    """
    if engine not in ("auto", "pools", "lattice"):
        raise ValueError(f"engine: expected 'auto', 'pools' or 'lattice', got {engine!r}")
    if engine == "pools" and not net.is_open:
        raise ValueError("engine: 'pools' solves open networks only (use 'lattice' or 'auto')")
    if engine == "auto":
        engine = "pools" if net.is_open else "lattice"
    _check_size(net, engine, net.population or 0)
    if _concrete(net) and not all(net.closed):
        check_stability(net)
    return _solve_jit(net, engine)


def solve_truncated(net: Network, n_max: int) -> NetworkResult:
    """Open network whose external arrivals are blocked while ``n_max`` jobs are present.

    Internal routing is never blocked; the stationary law is the product form of
    :func:`solve` restricted to at most ``n_max`` jobs in total (``docs/errata.md`` item 5), so it
    exists for any rates. ``throughput`` counts accepted jobs, ``blocking`` is the probability
    that an external arrival is refused.

    Args:
        net: an open network.
        n_max: the blocking threshold (>= 1).

    Returns:
        :class:`NetworkResult`.

    Raises:
        ValueError: for a closed or mixed network or ``n_max < 1``.
    """
    if not net.is_open:
        raise ValueError("solve_truncated: the network has a closed chain; use solve")
    if isinstance(n_max, bool) or not isinstance(n_max, (int, np.integer)) or n_max < 1:
        raise ValueError(f"n_max: expected an integer >= 1, got {n_max!r}")
    _check_size(net, "lattice", int(n_max))
    return _solve_truncated_jit(net, int(n_max))


def _check_size(net: Network, engine: str, n_max: int) -> None:
    """Refuse, before anything is allocated, a network whose pools or lattice do not fit:
    each pool's subset recursion for the ``"pools"`` engine (``jaxqueue.pools`` limits),
    else the lattice (``MAX_LATTICE_BITS`` elements per pool, ``MAX_LATTICE_CELLS`` cells)."""
    sizes = [tuple(len(x) for x in _local_sets(net, k)) for k in range(net.n_pools)]
    if engine == "pools":
        for C, K in sizes:
            check_size(K, C, 8, None)
        return
    E = max(lattice_elements(C, K) for C, K in sizes)
    check_cells(E, net.n_pools, n_max, max(K for _, K in sizes))
