"""Randomized assignment (``bf-recursive`` Section 4): homogeneous pools, heterogeneous degrees,
heterogeneous server groups.

Every job of type ``u`` (arrival rate ``Lambda p_u``) is assigned ``d_u`` servers chosen uniformly
at random (Section 4.1-4.2), or ``d_{u,s}`` servers of each group ``s`` (Section 4.3). By the
exchangeability of the servers, the recursion of Theorems 1-2 over server subsets collapses to a
recursion over the *number* of servers left (per group), with the load of the pool restricted to
``l`` servers ``rho_{|l} = rho * c(l)``. The ratios ``c(l)`` depend on the structure only, so a
load sweep of ``R`` points costs ``O((N + R) K)``: precompute :meth:`RandomAssignment.ratios`
once and call :func:`random_assignment_kernel` (vmappable) per load.
"""

import abc
import functools
import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from equinox import AbstractVar
from jaxtyping import Array, Float

from .._pool import Pool
from .._result import BFResult
from ._base import ServerSets, StructuredPool
from ._common import (
    assemble,
    check_capacities,
    check_num_servers,
    float_dtype,
    is_concrete,
    masked_logsumexp,
)

_MAX_ENUMERATED_CLASSES = 20000


def _as_int_tuple(x, name: str) -> tuple[int, ...]:
    vals = np.atleast_1d(np.asarray(x))
    if vals.ndim != 1 or vals.size == 0:
        raise ValueError(f"{name} must be an int or a non-empty 1-d sequence of ints, got {x!r}")
    if not np.all(np.equal(np.mod(vals, 1), 0)):
        raise ValueError(f"{name} must hold integers, got {x!r}")
    return tuple(int(v) for v in vals)


def _check_probs(p, n: int, name: str = "p") -> None:
    if p.ndim != 1 or p.shape[0] != n:
        raise ValueError(f"{name} must have one probability per type ({n}), got shape {p.shape}")
    if is_concrete(p):
        a = np.asarray(p, dtype=float)
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ValueError(f"{name} must be finite and >= 0, got {a.tolist()}")
        if abs(a.sum() - 1.0) > 1e-6:
            raise ValueError(f"{name} must sum to 1 (type mix), got sum {a.sum()!r}")


def _log_binom_ratio_down(n_max: int, d: Array, dtype) -> Array:
    """``log( C(n, d) / C(n_max, d) )`` for ``n = 0..n_max`` (``-inf`` for ``n < d``).

    Uses ``C(n-1, d) / C(n, d) = 1 - d / n`` and a reverse cumulative sum of ``log1p(-d / m)``
    (stable for ``n_max`` of 10^5 and more; no factorials). ``d`` may be an array (broadcast on a
    leading axis).
    """
    d = jnp.asarray(d)[..., None].astype(dtype)
    m = jnp.arange(n_max + 1, dtype=dtype)
    ok = m > d
    t = jnp.where(ok, jnp.log1p(-d / jnp.where(ok, m, 1.0)), 0.0)
    tail = jnp.flip(jnp.cumsum(jnp.flip(t, -1), axis=-1), -1) - t  # sum_{m' > n} t(m')
    return jnp.where(m >= d, tail, -jnp.inf)


@functools.partial(jax.jit, static_argnames=("K", "dtype"))
def random_load_ratios(d: Array, *, K: int, dtype=jnp.float64) -> Array:
    """Per-type load ratios ``c_u(l) = C(l-1, d_u-1) / C(K-1, d_u-1)``, ``l = 1..K`` (eq. (17)).

    ``rho_{|l} = rho * sum_u p_u c_u(l)`` is the load of the pool restricted to ``l`` servers
    (Sections 4.1-4.2); ``c_u(l) = 0`` for ``l < d_u`` and ``c_u(K) = 1``.

    Args:
        d: degrees, int array of shape ``(N,)``.
        K: number of servers (static).
        dtype: floating dtype of the result (static).

    Returns:
        Array ``(N, K)``; column ``l - 1`` holds ``c_u(l)``.
    """
    # C(l-1, d-1) / C(K-1, d-1) = ratio "down" from K-1 to l-1 with degree d-1.
    lr = _log_binom_ratio_down(K - 1, jnp.asarray(d) - 1, dtype)
    return jnp.exp(lr)


@functools.partial(jax.jit, static_argnames=("with_servers",))
def random_assignment_kernel(
    rho: Float[Array, ""],
    ratios: Float[Array, "N K"],
    p: Float[Array, " N"],
    mu: Float[Array, ""] | float = 1.0,
    *,
    with_servers: bool = False,
) -> tuple[BFResult, Array]:
    """Jittable, vmappable core of the randomized assignment with heterogeneous degrees.

    Implements eq. (17) and Section 4.2: with ``rho_{|l} = rho sum_u p_u c_u(l)``,
    ``psi = prod_l (1 - rho_{|l})``, ``L = sum_l rho_{|l} / (1 - rho_{|l})`` and per type
    ``L_u = sum_l rho_{u|l} / (1 - rho_{u|l}) = sum_l rho p_u c_u(l) / (1 - rho_{|l})``
    (ERRATA item 3 for the intermediate step). The response time per type is computed without
    dividing by the type's rate: ``T_u = sum_l c_u(l) / (K mu (1 - rho_{|l}))``.

    Args:
        rho: total load (total arrival rate over ``K mu``).
        ratios: :func:`random_load_ratios` output ``(N, K)``.
        p: type mix ``(N,)`` (shares of the arrival rate).
        mu: capacity of each server.
        with_servers: also return ``psi_server`` (``1 - rho`` for each of the ``K`` servers).

    Returns:
        ``(BFResult per type, stable)``; ``stable = rho < 1`` (the pool is stable iff ``rho < 1``,
        Section 4.2). Unstable points get ``psi = 0`` and infinite ``L``, ``T``.
    """
    dtype = ratios.dtype
    rho = jnp.asarray(rho, dtype)
    mu = jnp.asarray(mu, dtype)
    K = ratios.shape[-1]
    stable = rho < 1
    rho_s = jnp.where(stable, rho, 0.0)
    c = p @ ratios
    rl = rho_s * c
    one_m = 1.0 - rl
    log_inv_psi = -jnp.sum(jnp.log1p(-rl))
    L_total = jnp.sum(rl / one_m)
    T = jnp.sum(ratios / one_m, axis=-1) / (K * mu)
    lam = rho * K * mu * p
    T_mean = p @ T
    psi_server = jnp.full((K,), 1.0 - rho_s, dtype) if with_servers else None
    return assemble(stable, log_inv_psi, T, lam, L_total, rho, T_mean=T_mean, psi_server=psi_server)


@functools.partial(jax.jit, static_argnames=("K_max",))
def random_assignment_vs_K(
    rho: Float[Array, ""], d, Ks: Array, *, K_max: int
) -> tuple[Array, Array, Array]:
    """Homogeneous randomized assignment (eq. (17)) for several pool sizes, one compilation.

    ``c_K(l) = C(l-1, d-1) / C(K-1, d-1)`` is read off one table up to ``K_max``.

    Args:
        rho: total load. d: degree. Ks: sizes ``d <= K <= K_max`` (may be traced).
        K_max: static bound on ``Ks``.

    Returns:
        ``(log_inv_psi, L_total, T_mean)`` per size (mu = 1); ``inf`` where ``rho >= 1``.
    """
    dtype = jnp.result_type(rho, float)
    rho = jnp.asarray(rho, dtype)
    lr = _log_binom_ratio_down(K_max - 1, jnp.asarray(d) - 1, dtype)  # index l-1, l = 1..K_max
    stable = rho < 1
    rho_s = jnp.where(stable, rho, 0.0)
    ell = jnp.arange(1, K_max + 1)

    def one(K):
        keep = (ell <= K) & jnp.isfinite(lr)
        c = jnp.where(keep, jnp.exp(jnp.where(keep, lr - lr[K - 1], 0.0)), 0.0)
        rl = rho_s * c
        A = -jnp.sum(jnp.log1p(-rl))
        L = jnp.sum(rl / (1.0 - rl))
        T = jnp.sum(c / (1.0 - rl)) / K.astype(dtype)
        inf = jnp.asarray(jnp.inf, dtype)
        return jnp.where(stable, A, inf), jnp.where(stable, L, inf), jnp.where(stable, T, inf)

    return jax.vmap(one)(jnp.asarray(Ks))


@jax.jit
def random_assignment_sweep(
    rhos: Float[Array, " R"], ratios: Float[Array, "N K"], p: Float[Array, " N"], mu
) -> tuple[BFResult, Array]:
    """:func:`random_assignment_kernel` vmapped over loads: ``O(R K)`` given the ratios.

    Returns:
        ``(BFResult batched over rhos, stable flags)`` (one compilation per shape).
    """
    return jax.vmap(lambda r: random_assignment_kernel(r, ratios, p, mu))(rhos)


class _Randomized(StructuredPool):
    """The randomized pools (Section 4): job types of mix ``p`` and degrees ``d``; results per
    type; each type's rate split equally among its classes of the equivalent pool."""

    d: AbstractVar[tuple]
    p: AbstractVar[Array]

    @property
    def num_types(self) -> int:
        """Number of job types ``N``."""
        return len(self.d)

    @property
    def num_classes(self) -> int:
        """Number of classes of the equivalent pool, ``sum`` of :meth:`type_counts` (not
        enumerated)."""
        return sum(self.type_counts())

    @abc.abstractmethod
    def type_counts(self) -> list[int]:
        """Number of classes of each type."""

    @abc.abstractmethod
    def _kernel(self, rho, p, with_servers: bool):
        """The jitted kernel at total load ``rho`` and type mix ``p``."""

    @abc.abstractmethod
    def _sets_per_type(self) -> list[list[tuple[int, ...]]]:
        """Each type's server sets."""

    def result_size(self) -> int:
        """Results are per type."""
        return self.num_types

    def kernel(self, rho=None, *, lam=None, with_servers: bool = False):
        """The kernel at total load ``rho``, or for the rates ``lam`` (the total, or one rate
        per type: their shares override ``p``)."""
        return self._kernel(self._rho(rho, lam), _type_mix(self.p, lam), with_servers)

    def type_rates(self, rho) -> Array:
        """Arrival rate of each type, ``rho M p_u`` (``M``: :meth:`capacity`)."""
        return rho * self.capacity() * self.p

    @property
    def server_sets(self) -> ServerSets:
        """The classes of the equivalent pool, type by type (:attr:`class_types`).

        Raises:
            ValueError: more than 20000 classes.
        """
        n = self.num_classes
        if n > _MAX_ENUMERATED_CLASSES:
            raise ValueError(f"the equivalent pool has {n} classes (> {_MAX_ENUMERATED_CLASSES})")
        sets = [s for sets in self._sets_per_type() for s in sets]
        return ServerSets(sets, legacy=(sets, self.class_types))

    @property
    def class_types(self) -> np.ndarray:
        """The type of each class of :attr:`server_sets`."""
        return np.repeat(np.arange(self.num_types), self.type_counts())

    def class_rates(self, rho) -> Array:
        """Arrival rate of each class of the equivalent pool (type rate split equally)."""
        rates = self.type_rates(rho)
        return (rates / jnp.asarray(self.type_counts(), rates.dtype))[self.class_types]


class RandomAssignment(_Randomized):
    """Homogeneous pool with randomized assignment (``bf-recursive`` Sections 4.1-4.2).

    ``K`` servers of capacity ``mu``; a job of type ``u`` (share ``p[u]`` of the arrivals) is
    assigned ``d[u]`` servers chosen uniformly at random. One type gives eq. (17). Results are
    per type; ``lam=`` gives the rates per type (overriding ``p``) or the total rate.

    Args:
        K: number of servers.
        d: degree (int) or degrees per type.
        p: type mix (defaults to ``[1]`` for one type), ``>= 0`` and summing to 1.
        mu: capacity of each server (``> 0``).

    Raises:
        ValueError: ``K < 1``, a degree outside ``[1, K]``, a bad type mix or capacity.

    Examples:
        >>> res = RandomAssignment(100, (6, 12), p=[0.5, 0.5]).solve(0.9)
        >>> res.gamma  # mean service rate per type (regular, premium)
    """

    K: int = eqx.field(static=True)
    d: tuple[int, ...] = eqx.field(static=True)
    p: Float[Array, " N"]
    mu: Float[Array, ""]

    def __init__(self, K: int, d, p=None, mu=1.0):
        self.K = check_num_servers(K)
        self.d = _as_int_tuple(d, "d")
        dtype = float_dtype(p if p is not None else 1.0, mu)
        self.p = jnp.ones((1,), dtype) if p is None and len(self.d) == 1 else jnp.asarray(p, dtype)
        self.mu = jnp.asarray(mu, dtype)

    def __check_init__(self):
        bad = [x for x in self.d if not 1 <= x <= self.K]
        if bad:
            raise ValueError(f"d: degrees must lie in [1, K={self.K}], got {list(self.d)}")
        _check_probs(self.p, len(self.d))
        check_capacities(self.mu, ())

    def capacity(self):
        """Total capacity ``K mu``."""
        return self.K * self.mu

    def ratios(self) -> Array:
        """Load ratios ``c_u(l)``, shape ``(N, K)`` (precompute once for a load sweep)."""
        return random_load_ratios(jnp.asarray(self.d), K=self.K, dtype=self.p.dtype)

    def sweep(self, rho=None, *, lam=None) -> tuple[BFResult, Array]:
        """Load sweep with the ratios computed once, ``O((N + R) K)`` (Section 4.2), by
        :func:`random_assignment_sweep` (one compilation per shape); as
        :meth:`StructuredPool.sweep`."""
        if lam is not None:
            return super().sweep(lam=lam)
        rho, _ = self._loads(rho, None, batched=True)
        rhos = jnp.asarray(rho, self.p.dtype)
        return random_assignment_sweep(rhos, self.ratios(), self.p, self.mu)

    def type_rates(self, rho) -> Array:
        """Arrival rate of each type, ``rho K mu p_u``."""
        return rho * self.K * self.mu * self.p

    def type_counts(self) -> list[int]:
        """Number of classes of each type, ``C(K, d_u)``."""
        return [math.comb(self.K, x) for x in self.d]

    def _kernel(self, rho, p, with_servers: bool):
        ratios = self.ratios()
        return random_assignment_kernel(rho, ratios, p, self.mu, with_servers=with_servers)

    def _sets_per_type(self) -> list[list[tuple[int, ...]]]:
        return [_combinations(self.K, x) for x in self.d]

    def to_pool(self):
        """The equivalent generic :class:`jaxqueue.pools.Pool` (use with :meth:`class_rates`)."""
        return Pool(self.server_sets, jnp.full((self.K,), self.mu))


def _type_mix(p, lam):
    """The type mix of a kernel call: ``p``, or the shares of the per-type rates ``lam``."""
    if lam is None or jnp.ndim(lam) == 0:
        return p
    lam = jnp.asarray(lam, p.dtype)
    total = jnp.sum(lam)
    return jnp.where(total > 0, lam / jnp.where(total > 0, total, 1.0), p)


def _combinations(K: int, d: int, first: int = 0) -> list[tuple[int, ...]]:
    return [tuple(first + j for j in c) for c in itertools.combinations(range(K), d)]


def _group_grid(sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    grid = np.stack(np.meshgrid(*[np.arange(k + 1) for k in sizes], indexing="ij"), -1)
    grid = grid.reshape(-1, len(sizes))
    strides = np.ones(len(sizes), dtype=np.int64)
    for s in range(len(sizes) - 2, -1, -1):
        strides[s] = strides[s + 1] * (sizes[s + 1] + 1)
    return grid, strides


@functools.partial(jax.jit, static_argnames=("sizes",))
def random_groups_kernel(
    rho: Float[Array, ""],
    logf: Float[Array, "N G"],
    p: Float[Array, " N"],
    mu: Float[Array, " S"],
    *,
    sizes: tuple[int, ...],
) -> tuple[BFResult, Array]:
    """Jittable, vmappable core of the heterogeneous-server randomized assignment (Section 4.3).

    Over the grid ``l = (l_1..l_S)``, ``0 <= l_s <= K_s`` (lexicographic order), with
    ``rho_{|l} = rho (sum_u p_u prod_s C(l_s, d_us)/C(K_s, d_us)) M(K) / M(l)``::

        psi_{|l} = (1 - rho_{|l}) M(l) / sum_s l_s mu_s / psi_{|l - e_s}
        L_{|l} = rho_{|l}/(1 - rho_{|l}) + sum_s (l_s mu_s / M(l)) (psi_{|l}/psi_{|l-e_s})
                 L_{|l-e_s} / (1 - rho_{|l})

    and per type the same with ``rho_{u|l}/(1-rho_{u|l})`` as first term (ERRATA item 3:
    ``psi_{|l} / psi_{|l-e_s}``), computed in log space as ``T_u = L_u / Lambda_u``.

    Args:
        rho: total load.
        logf: ``log prod_s C(l_s, d_us)/C(K_s, d_us)`` on the flattened grid, ``(N, G)``.
        p: type mix. mu: capacity per group ``(S,)``. sizes: ``K_s`` (static).

    Returns:
        ``(BFResult per type with psi_server per server, stable)``; ``stable`` iff
        ``rho_{|l} < 1`` for every ``l``.
    """
    dtype = logf.dtype
    grid_np, strides_np = _group_grid(sizes)
    grid = jnp.asarray(grid_np)
    strides = jnp.asarray(strides_np)
    rho = jnp.asarray(rho, dtype)
    sizes_a = jnp.asarray(sizes, dtype)
    M_tot = sizes_a @ mu
    M = grid.astype(dtype) @ mu
    F = jnp.exp(logf)
    pos = M > 0
    M_safe = jnp.where(pos, M, 1.0)
    rl_all = jnp.where(pos, rho * (p @ F) * M_tot / M_safe, 0.0)
    worst = jnp.argmax(rl_all)
    stable = rl_all[worst] < 1
    rl = jnp.where(stable, rl_all, 0.0)
    G, N = grid_np.shape[0], p.shape[0]

    def step(carry, n):
        A, Lt, T = carry
        ell = grid[n]
        has = ell > 0
        prev = jnp.where(has, n - strides, 0)
        w = ell.astype(dtype) * mu
        logw = jnp.log(jnp.where(has, w, 1.0))
        Ap = A[prev]
        A_n = -jnp.log1p(-rl[n]) + masked_logsumexp(logw + Ap, has) - jnp.log(M_safe[n])
        term = jnp.where(has, w * jnp.exp(Ap - A_n), 0.0) / M_safe[n]
        one_m = 1.0 - rl[n]
        Lt_n = (rl[n] + term @ Lt[prev]) / one_m
        T_n = (F[:, n] / M_safe[n] + T[:, prev] @ term) / one_m
        return (A.at[n].set(A_n), Lt.at[n].set(Lt_n), T.at[:, n].set(T_n)), None

    init = (jnp.zeros((G,), dtype), jnp.zeros((G,), dtype), jnp.zeros((N, G), dtype))
    (A, Lt, T), _ = jax.lax.scan(step, init, jnp.arange(1, G))
    full = G - 1
    lam = rho * M_tot * p
    psi_group = jnp.exp(A[full - strides] - A[full])
    psi_server = jnp.repeat(psi_group, np.asarray(sizes), total_repeat_length=sum(sizes))
    A, Lt, T, worst_load = A[full], Lt[full], T[:, full], rl_all[worst]
    return assemble(stable, A, T, lam, Lt, worst_load, T_mean=p @ T, psi_server=psi_server)


class RandomGroups(_Randomized):
    """Randomized assignment over heterogeneous server groups (``bf-recursive`` Section 4.3).

    Group ``s`` has ``sizes[s]`` servers of capacity ``mu[s]``; a type-``u`` job (share ``p[u]``)
    is assigned ``d[u][s]`` servers chosen uniformly at random in each group ``s``. Cost
    ``O(N S prod_s (K_s + 1))`` per load. Results are per type, as for
    :class:`RandomAssignment`.

    Raises:
        ValueError: sizes not positive, a degree outside ``[0, K_s]``, a type with no server,
            a bad mix or capacities.
    """

    sizes: tuple[int, ...] = eqx.field(static=True)
    d: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    p: Float[Array, " N"]
    mu: Float[Array, " S"]

    def __init__(self, sizes, d, p, mu):
        self.sizes = _as_int_tuple(sizes, "sizes")
        dd = np.asarray(d)
        if dd.ndim != 2 or dd.shape[1] != len(self.sizes):
            raise ValueError(
                f"d must be a (types x groups) = (N, {len(self.sizes)}) table of degrees, "
                f"got shape {dd.shape}"
            )
        self.d = tuple(_as_int_tuple(row, "d row") for row in dd)
        dtype = float_dtype(p, mu)
        self.p = jnp.asarray(p, dtype)
        self.mu = jnp.asarray(mu, dtype)

    def __check_init__(self):
        if any(k < 1 for k in self.sizes):
            raise ValueError(f"sizes must be >= 1, got {list(self.sizes)}")
        for u, row in enumerate(self.d):
            for s, x in enumerate(row):
                if not 0 <= x <= self.sizes[s]:
                    raise ValueError(f"d[{u}][{s}]={x} outside [0, K_s={self.sizes[s]}]")
            if sum(row) == 0:
                raise ValueError(f"d[{u}] is all zeros: type {u} would have no server")
        _check_probs(self.p, len(self.d))
        check_capacities(self.mu, (len(self.sizes),), "groups")

    @property
    def K(self) -> int:
        """Total number of servers."""
        return sum(self.sizes)

    def type_counts(self) -> list[int]:
        """Number of classes of each type, ``prod_s C(K_s, d_us)``."""
        return [math.prod(map(math.comb, self.sizes, row)) for row in self.d]

    def log_fractions(self) -> Array:
        """``log prod_s C(l_s, d_us) / C(K_s, d_us)`` on the flattened grid, ``(N, G)``."""
        grid, _ = _group_grid(self.sizes)
        dtype = self.p.dtype
        out = jnp.zeros((len(self.d), grid.shape[0]), dtype)
        for s, ks in enumerate(self.sizes):
            lr = _log_binom_ratio_down(ks, jnp.asarray([row[s] for row in self.d]), dtype)
            out = out + lr[:, grid[:, s]]
        return out

    def bottleneck(self, rho, lam) -> str:
        """The set of servers that receives more than its capacity (by group counts)."""
        rho = rho if lam is None else self.total_load(lam)
        p = _type_mix(self.p, lam)
        if not is_concrete(self.mu, p, rho):
            return (
                f"unstable at rho={rho}: some set of servers receives more than its capacity "
                "(call solve with concrete values to name the bottleneck)"
            )
        grid, _ = _group_grid(self.sizes)
        M = grid @ np.asarray(self.mu, float)
        F = np.exp(np.asarray(self.log_fractions(), float))
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(M > 0, float(rho) * (np.asarray(p) @ F) * self.K_mu() / M, 0.0)
        w = int(np.argmax(r))
        parts = ", ".join(f"{int(x)} of group {s}" for s, x in enumerate(grid[w]))
        return (
            f"unstable at rho={float(rho)}: the servers ({parts}) receive the jobs assigned only "
            f"to them at load {r[w]:.6g} >= 1 (bottleneck)"
        )

    def K_mu(self) -> float:
        """Total capacity ``sum_s K_s mu_s`` (concrete)."""
        return float(np.asarray(self.sizes) @ np.asarray(self.mu, float))

    def capacity(self):
        """Total capacity ``sum_s K_s mu_s``."""
        return jnp.asarray(self.sizes, self.mu.dtype) @ self.mu

    def _kernel(self, rho, p, with_servers: bool):
        """:func:`random_groups_kernel` (it always gives ``psi_server``)."""
        return random_groups_kernel(rho, self.log_fractions(), p, self.mu, sizes=self.sizes)

    def _sets_per_type(self) -> list[list[tuple[int, ...]]]:
        """Servers of group ``s`` numbered after those of group ``s-1``."""
        offs = [int(o) for o in np.concatenate([[0], np.cumsum(self.sizes)[:-1]])]
        return [
            [
                tuple(sorted(sum(combo, ())))
                for combo in itertools.product(*map(_combinations, self.sizes, row, offs))
            ]
            for row in self.d
        ]

    def to_pool(self):
        """The equivalent generic :class:`jaxqueue.pools.Pool` (use with :meth:`class_rates`)."""
        return Pool(self.server_sets, jnp.repeat(self.mu, np.asarray(self.sizes)))
