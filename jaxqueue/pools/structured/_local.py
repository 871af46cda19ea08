"""Local assignment (``bf-recursive`` Section 5): nested, line and ring pools.

* Nested pools (eq. (18)): ``psi = prod_i (1 - rho_{|i})``, per-class ``L_i`` in ``O(I^2)``.
* Line pools (Proposition 5) and ring pools (Proposition 7): classes are intervals (arcs) of
  servers; removing a server splits a line into two independent lines, so ``psi`` and ``L`` follow
  from a table over all ``O(K^2)`` sub-intervals (sub-arcs), each in ``O(K)``: ``O(K^3)``. The
  per-class ``L_{i,j}`` are obtained from the same table by Proposition 3 (eq. (6)),
  ``L_i = lam_i d log(1/psi) / d lam_i``, with one hand-written reverse pass (``O(K^3)`` time
  and ``O(K^2)`` memory for all classes at once, instead of one ``O(K^3)`` recursion (20) per
  class).
* Homogeneous line (Proposition 6, eqs. (22), (24)) and homogeneous ring (eq. (28)):
  ``O(K^2)``, per-class load ratios precomputed once.

All recursions run in log space (``log 1/psi``) so large pools neither overflow nor underflow.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._pool import Pool
from .._result import BFResult
from ._base import ServerSets, StructuredPool
from ._common import (
    assemble,
    check_capacities,
    check_num_servers,
    check_rho,
    float_dtype,
    is_concrete,
    masked_logsumexp,
)

# --------------------------------------------------------------------------------------------
# validation helpers


def _server_sets(server_sets, K: int) -> tuple[tuple[int, ...], ...]:
    """The classes' server sets, sorted, each of distinct servers in ``[0, K)``."""
    try:
        out = tuple(tuple(sorted(int(k) for k in s)) for s in server_sets)
    except (TypeError, ValueError):
        raise ValueError("server_sets must be a sequence of sequences of server indices") from None
    if not out:
        raise ValueError("server_sets: a pool needs at least one job class")
    for i, s in enumerate(out):
        if not s or s[0] < 0 or s[-1] >= K or len(set(s)) != len(s):
            raise ValueError(f"server_sets[{i}]={list(s)} must be distinct servers in [0, {K})")
    return out


class _ClassPool(StructuredPool):
    """A pool given by its classes' server sets and its servers' capacities (nested, line,
    ring): the solver works on per-class rates; ``rho`` is split equally among the classes."""

    server_sets: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    mu: Float[Array, " K"]

    per_class = True

    def __init__(self, server_sets, mu):
        self.mu = jnp.asarray(mu, float_dtype(mu))
        check_capacities(self.mu)
        self.server_sets = _server_sets(server_sets, self.mu.shape[0])

    @property
    def K(self) -> int:
        """Number of servers."""
        return int(self.mu.shape[0])

    def capacity(self):
        """Total capacity ``sum_k mu_k``."""
        return jnp.sum(self.mu)

    def to_pool(self):
        """The equivalent generic :class:`jaxqueue.pools.Pool`."""
        return Pool([list(s) for s in self.server_sets], self.mu)


def _arcs(sets, K: int, periodic: bool) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each class (checked by :func:`_server_sets`); ValueError if a class
    is not an interval (arc)."""
    starts, lengths = [], []
    what = "an arc of consecutive servers (mod K)" if periodic else "an interval of servers"
    for i, s in enumerate(sets):
        n = len(s)
        if s[-1] - s[0] + 1 == n:
            starts.append(s[0])
        elif periodic:
            comp = sorted(set(range(K)) - set(s))
            if comp[-1] - comp[0] + 1 != len(comp):
                raise ValueError(f"server_sets[{i}]={list(s)} is not {what}")
            starts.append((comp[-1] + 1) % K)
        else:
            raise ValueError(f"server_sets[{i}]={list(s)} is not {what}")
        lengths.append(n)
    return np.asarray(starts), np.asarray(lengths)


# --------------------------------------------------------------------------------------------
# arbitrary line / ring pools: the interval (arc) table


def _arc_loads(starts, lengths, lam, mu, *, K: int, n_max: int, periodic: bool):
    """``Lambda(k, n)``, ``M(k, n)`` and validity for every arc of start ``k``, length ``n``.

    Arrival sums by a 2-d suffix/prefix sum over (start, end) in doubled coordinates (each ring
    class also appears shifted by ``K``), so a class is counted once in each arc containing it.
    """
    dtype = lam.dtype
    D = jnp.zeros((2 * K, 2 * K), dtype)
    ends = starts + lengths - 1
    D = D.at[starts, ends].add(lam, mode="drop")
    if periodic:
        D = D.at[starts + K, ends + K].add(lam, mode="drop")
    P = jnp.cumsum(jnp.flip(jnp.cumsum(jnp.flip(D, 0), 0), 0), 1)
    k = jnp.arange(K)[None, :]
    n = jnp.arange(n_max + 1)[:, None]
    end = jnp.clip(k + n - 1, 0, 2 * K - 1)
    valid = (n >= 1) & ((k + n <= K) | periodic)
    Lam = jnp.where(valid, P[k, end], 0.0)
    cm = jnp.concatenate([jnp.zeros((1,), dtype), jnp.cumsum(jnp.tile(mu, 2))])
    M = jnp.where(valid, cm[jnp.clip(k + n, 0, 2 * K)] - cm[k], 0.0)
    return Lam, M, valid


def _arc_terms(A, logmu, n, *, K: int, n_max: int):
    """``X[k, j] = log mu_{k+j} + A[j, k] + A[n-1-j, k+j+1]`` (eq. (19) in log space) and its
    mask ``j < n``: the terms of the arc ``k..k+n-1`` with server ``k+j`` removed."""
    kk = jnp.arange(K)[:, None]
    jj = jnp.arange(K)[None, :]
    mask = jj < n
    jl = jnp.minimum(jj, n_max)
    jr = jnp.clip(n - 1 - jj, 0, n_max)
    return logmu + A[jl, kk] + A[jr, (kk + jj + 1) % K], mask


def _log_table_fwd_impl(mu, den_all, valid, *, K: int, n_max: int):
    """``A[n, k] = log 1/psi`` of the arc ``k..k+n-1`` for every arc (eq. (19)), row 0 = 0."""
    logmu = jnp.log(mu)[(jnp.arange(K)[:, None] + jnp.arange(K)[None, :]) % K]

    def step(A, n):
        X, mask = _arc_terms(A, logmu, n, K=K, n_max=n_max)
        A_n = masked_logsumexp(X, mask, axis=1) - jnp.log(den_all[n])
        return A.at[n].set(jnp.where(valid[n], A_n, 0.0)), None

    A0 = jnp.zeros((n_max + 1, K), mu.dtype)
    return jax.lax.scan(step, A0, jnp.arange(1, n_max + 1))[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _log_table(mu, den_all, valid, K, n_max):
    """:func:`_log_table_fwd_impl` with a hand-written reverse pass in ``O(K^2)`` memory.

    Plain reverse mode through the scan keeps the whole ``(n_max, K)`` table at every step,
    ``O(K^3)`` memory (2 GB at K = 400). The adjoint instead sweeps the arcs from the longest
    down: the cotangent of arc ``(n, k)`` flows to its sub-arcs ``(j, k)`` and
    ``(n-1-j, k+j+1)`` with the softmax weights of eq. (19), to ``log mu_{k+j}`` with the same
    weights and to its ``-log(M - Lambda)`` term. It serves the first reverse pass (the
    ``T_i`` of eq. (6)); derivatives of the kernel's outputs (second order, e.g. ``dT/dmu``)
    differentiate the forward scan by plain autodiff, ``O(K^3)`` memory again.
    """
    return _log_table_fwd_impl(mu, den_all, valid, K=K, n_max=n_max)


def _log_table_fwd(mu, den_all, valid, K, n_max):
    A = _log_table_fwd_impl(mu, den_all, valid, K=K, n_max=n_max)
    return A, (A, mu, den_all, valid)


def _log_table_bwd(K, n_max, res, A_bar):
    A, mu, den_all, valid = res
    logmu = jnp.log(mu)[(jnp.arange(K)[:, None] + jnp.arange(K)[None, :]) % K]
    rows = A.shape[0]

    def step(carry, n):
        G, mu_bar = carry
        g = jnp.where(valid[n], G[n], 0.0)
        X, mask = _arc_terms(A, logmu, n, K=K, n_max=n_max)
        # softmax weights of eq. (19) for the valid arcs only: the exponent is <= 0 there, and
        # outside (A = 0 rows, unused terms) it could overflow float32 and give inf * 0 = NaN
        on = mask & valid[n][:, None]
        lse = A[n] + jnp.log(den_all[n])
        w = jnp.exp(jnp.where(on, X - lse[:, None], -jnp.inf))
        v = w * g[:, None]  # (k, j)
        # sub-arc (j, k): rows j < n, column k
        left = jnp.zeros((rows, K), v.dtype).at[: min(K, rows)].set(v.T[: min(K, rows)])
        # sub-arc (n-1-j, k+j+1): row r = n-1-j, column c = k+j+1 (mod K)
        r = jnp.arange(rows)[:, None]
        c = jnp.arange(K)[None, :]
        j_of_r = n - 1 - r
        k_of = (c - j_of_r - 1) % K
        right = jnp.where((j_of_r >= 0) & (r < n), v[k_of, jnp.clip(j_of_r, 0, K - 1)], 0.0)
        # log mu_m with m = k + j (mod K)
        mu_bar = mu_bar + jnp.sum(v[(c - jnp.arange(K)[:, None]) % K, jnp.arange(K)[:, None]], 0)
        return (G + left + right, mu_bar), -g / den_all[n]

    init = (A_bar, jnp.zeros((K,), A.dtype))
    (_, mu_bar), den_bar = jax.lax.scan(step, init, jnp.arange(n_max, 0, -1))
    den_bar_all = jnp.zeros_like(den_all).at[jnp.arange(n_max, 0, -1)].set(den_bar)
    return mu_bar / mu, den_bar_all, None


_log_table.defvjp(_log_table_fwd, _log_table_bwd)


def _interval_core(lam, mu, starts, lengths, *, K: int, periodic: bool):
    """``(log 1/psi, (psi_server, stable, worst arc))`` of a line or ring pool."""
    n_max = K - 1 if periodic else K
    Lam, M, valid = _arc_loads(starts, lengths, lam, mu, K=K, n_max=n_max, periodic=periodic)
    ratio = jnp.where(valid, Lam / jnp.where(valid, M, 1.0), 0.0)
    lam_tot = jnp.sum(lam)
    M_tot = jnp.sum(mu)
    worst_ratio = jnp.max(ratio)
    if periodic:
        full_ratio = lam_tot / M_tot
        stable = (worst_ratio < 1) & (full_ratio < 1)
    else:
        stable = worst_ratio < 1
    lam_s = jnp.where(stable, lam, 0.0)
    Lam, M, valid = _arc_loads(starts, lengths, lam_s, mu, K=K, n_max=n_max, periodic=periodic)
    # A[n, k] = log 1/psi of the arc k..k+n-1 (eq. (19)) for every arc
    A = _log_table(mu, jnp.where(valid, M - Lam, 1.0), valid, K, n_max)
    k = jnp.arange(K)
    if periodic:
        # eq. (25): removing server k leaves the line k+1..k-1
        sub = A[K - 1, (k + 1) % K]
        A_full = jax.nn.logsumexp(jnp.log(mu) + sub) - jnp.log(M_tot - jnp.sum(lam_s))
        psi_server = jnp.exp(sub - A_full)
    else:
        A_full = A[K, 0]
        psi_server = jnp.exp(A[k, 0] + A[K - 1 - k, (k + 1) % K] - A_full)
    max_load = jnp.maximum(worst_ratio, lam_tot / M_tot)
    return A_full, (psi_server, stable, max_load)


@functools.partial(jax.jit, static_argnames=("K", "periodic"))
def interval_pool_kernel(
    lam: Float[Array, " I"],
    mu: Float[Array, " K"],
    starts: Array,
    lengths: Array,
    *,
    K: int,
    periodic: bool,
) -> tuple[BFResult, Array]:
    """Jittable, vmappable solver of a line pool (Proposition 5) or ring pool (Proposition 7).

    Class ``i`` is served by the servers ``starts[i], ..., starts[i] + lengths[i] - 1`` (mod
    ``K`` for a ring). The table of ``log 1/psi`` over all sub-intervals follows eq. (19)::

        psi_{|k..l} = (M(k..l) - Lambda(k..l)) / sum_{m=k}^{l} mu_m / (psi_{|k..m-1} psi_{|m+1..l})

    (ring: eq. (25), removing server ``k`` leaves the line ``k+1..k-1``). Per class,
    ``T_i = d log(1/psi) / d lam_i`` and ``L_i = lam_i T_i`` (Proposition 3, eq. (6)), by a
    hand-written reverse pass over the table (``O(K^3)`` time, ``O(K^2)`` memory, see
    :func:`_log_table`); ``L = sum_i L_i``.

    Returns:
        ``(BFResult per class with psi_server, stable)``; ``stable`` iff every sub-interval (arc)
        receives less than its capacity.
    """

    def f(lam_):
        return _interval_core(lam_, mu, starts, lengths, K=K, periodic=periodic)

    (A_full, (psi_server, stable, max_load)), T = jax.value_and_grad(f, has_aux=True)(lam)
    return assemble(stable, A_full, T, lam, jnp.sum(lam * T), max_load, psi_server=psi_server)


class _IntervalPool(_ClassPool):
    starts: tuple[int, ...] = eqx.field(static=True)
    lengths: tuple[int, ...] = eqx.field(static=True)

    periodic = False

    def __init__(self, server_sets, mu):
        super().__init__(server_sets, mu)
        st, ln = _arcs(self.server_sets, self.K, self.periodic)
        self.starts = tuple(int(x) for x in st)
        self.lengths = tuple(int(x) for x in ln)

    def kernel(self, rho=None, *, lam=None, with_servers: bool = True):
        """:func:`interval_pool_kernel` at total load ``rho`` (or per-class rates ``lam``); it
        always gives ``psi_server``."""
        return interval_pool_kernel(
            self._lam(rho, lam),
            self.mu,
            jnp.asarray(self.starts),
            jnp.asarray(self.lengths),
            K=self.K,
            periodic=self.periodic,
        )

    def bottleneck(self, rho, lam) -> str:
        """The interval (arc) of servers whose classes bring more than its capacity."""
        lam = np.asarray(self._lam(rho, lam), float)
        mu = np.asarray(self.mu, float)
        K = self.K
        Lam, M, valid = _arc_loads(
            jnp.asarray(self.starts),
            jnp.asarray(self.lengths),
            jnp.asarray(lam),
            jnp.asarray(mu),
            K=K,
            n_max=K - 1 if self.periodic else K,
            periodic=self.periodic,
        )
        Lam, M, valid = np.asarray(Lam), np.asarray(M), np.asarray(valid)
        ratio = np.where(valid, Lam / np.where(valid, M, 1.0), 0.0)
        n, k = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        best, arc = float(ratio[n, k]), [int((k + j) % K) for j in range(n)]
        if self.periodic and lam.sum() / mu.sum() >= best:
            best, arc = float(lam.sum() / mu.sum()), list(range(K))
        return (
            f"unstable: the classes served only by servers {arc} bring load {best:.6g} >= 1 "
            f"(bottleneck servers {arc})"
        )


class LinePool(_IntervalPool):
    """A line pool (``bf-recursive`` Section 5.2): every class is an interval of servers.

    Args:
        server_sets: per class, its servers (0-based), each a set ``{i, i+1, ..., j}``.
        mu: server capacities ``(K,)``.

    Raises:
        ValueError: a class that is not an interval, bad capacities.

    Examples:
        >>> LinePool([[0, 1, 2], [1, 2, 3, 4]], [1.0] * 5).solve(lam=[0.8, 1.2]).L
    """

    periodic = False


class RingPool(_IntervalPool):
    """A ring pool (``bf-recursive`` Section 5.4): every class is an arc of consecutive servers
    modulo ``K`` (e.g. ``[K-1, 0, 1]``).

    Raises:
        ValueError: a class that is not an arc, bad capacities.
    """

    periodic = True


# --------------------------------------------------------------------------------------------
# homogeneous line and ring (Proposition 6, eq. (28))


def _hom_line_table(r, d, *, n_max: int, dtype):
    """``a[l] = log 1/psi_{|1..l}`` and ``Lt[l] = L_{|1..l}``, ``l = 0..n_max`` (eqs. (22), (24)).

    ``r`` is the per-class load ``lam_class / mu`` (every range of ``d`` servers is a class), so
    ``rho_{|1..l} = r max(l - d + 1, 0) / l``.
    """
    j = jnp.arange(n_max)

    def step(carry, ell):
        a, Lt = carry
        ellf = ell.astype(dtype)
        rl = r * jnp.maximum(ellf - d + 1, 0.0) / ellf
        mask = j < ell
        jr = jnp.clip(ell - 1 - j, 0, n_max)
        X = a[j] + a[jr]
        a_l = -jnp.log1p(-rl) + masked_logsumexp(X, mask) - jnp.log(ellf)
        w = jnp.where(mask, jnp.exp(X - a_l), 0.0) / ellf
        Lt_l = (rl + w @ (Lt[j] + Lt[jr])) / (1.0 - rl)
        return (a.at[ell].set(a_l), Lt.at[ell].set(Lt_l)), None

    init = (jnp.zeros((n_max + 1,), dtype), jnp.zeros((n_max + 1,), dtype))
    (a, Lt), _ = jax.lax.scan(step, init, jnp.arange(1, n_max + 1))
    return a, Lt


@functools.partial(jax.jit, static_argnames=("K", "ring", "with_servers"))
def homogeneous_local_kernel(
    rho: Float[Array, ""],
    d,
    mu=1.0,
    *,
    K: int,
    ring: bool,
    with_servers: bool = False,
) -> tuple[BFResult, Array]:
    """Jittable, vmappable homogeneous line (Proposition 6) or ring (eq. (28)), ``O(K^2)``.

    Line: ``K - d + 1`` classes (ranges of ``d`` servers), each of rate ``rho K mu / (K-d+1)``;
    ``psi = psi_{|1..K}`` by (22), ``L = L_{|1..K}`` by (24). Ring: ``K`` classes of rate
    ``rho mu``; ``psi = (1 - rho) psi_{|1..K-1}``, ``L = rho / (1 - rho) + L_{|1..K-1}`` with the
    line ``1..K-1`` of load ``rho (1 - (d-1)/(K-1))`` (eq. (28)). ``d`` may be traced (a sweep
    over degrees compiles once per ``K``).

    Returns:
        ``(BFResult, stable)`` with ``L``, ``T``, ``gamma`` of shape ``(1,)`` (the whole pool:
        ``T = T_mean``); stable iff ``rho < 1``.
    """
    dtype = jnp.result_type(rho, float) if not hasattr(rho, "dtype") else rho.dtype
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    rho = jnp.asarray(rho, dtype)
    mu = jnp.asarray(mu, dtype)
    df = jnp.asarray(d, dtype)
    stable = rho < 1
    rho_s = jnp.where(stable, rho, 0.0)
    lam_tot = rho * K * mu
    if ring:
        a, Lt = _hom_line_table(rho_s, df, n_max=K - 1, dtype=dtype)
        A = -jnp.log1p(-rho_s) + a[K - 1]
        L_total = rho_s / (1.0 - rho_s) + Lt[K - 1]
        psi_server = jnp.full((K,), 1.0 - rho_s, dtype) if with_servers else None
    else:
        r = rho_s * K / (K - df + 1)
        a, Lt = _hom_line_table(r, df, n_max=K, dtype=dtype)
        A = a[K]
        L_total = Lt[K]
        k = jnp.arange(K)
        psi_server = jnp.exp(a[k] + a[K - 1 - k] - a[K]) if with_servers else None
    pos = rho_s > 0
    T_mean = jnp.where(pos, L_total / jnp.where(pos, lam_tot, 1.0), 1.0 / (df * mu))
    T, lam = T_mean[None], lam_tot[None]  # one entry: the whole pool
    return assemble(stable, A, T, lam, L_total, rho, T_mean=T_mean, psi_server=psi_server)


@functools.partial(jax.jit, static_argnames=("K_max", "ring"))
def homogeneous_local_vs_K(
    rho: Float[Array, ""], d, Ks: Array, *, K_max: int, ring: bool
) -> tuple[Array, Array, Array]:
    """Homogeneous line / ring metrics for several pool sizes ``Ks`` with one compilation.

    One table of Proposition 6 up to ``K_max`` per size (sizes may be traced), ``O(K_max^2)``
    each; used for the sweeps in ``K`` (``bf-recursive`` Figure 12c).

    Args:
        rho: total load (``< 1``). d: degree. Ks: pool sizes ``d <= K <= K_max``.
        K_max: static bound on ``Ks``. ring: ring (eq. (28)) or line (Proposition 6).

    Returns:
        ``(log_inv_psi, L_total, T_mean)`` per size (mu = 1); ``inf`` where ``rho >= 1``.
    """
    dtype = jnp.result_type(rho, float)
    rho = jnp.asarray(rho, dtype)
    df = jnp.asarray(d, dtype)
    stable = rho < 1
    rho_s = jnp.where(stable, rho, 0.0)

    def one(K):
        Kf = K.astype(dtype)
        if ring:
            a, Lt = _hom_line_table(rho_s, df, n_max=K_max, dtype=dtype)
            A = -jnp.log1p(-rho_s) + a[K - 1]
            L = rho_s / (1.0 - rho_s) + Lt[K - 1]
        else:
            a, Lt = _hom_line_table(rho_s * Kf / (Kf - df + 1), df, n_max=K_max, dtype=dtype)
            A, L = a[K], Lt[K]
        T = L / (rho_s * Kf)
        inf = jnp.asarray(jnp.inf, dtype)
        return jnp.where(stable, A, inf), jnp.where(stable, L, inf), jnp.where(stable, T, inf)

    return jax.vmap(one)(jnp.asarray(Ks))


class _HomogeneousLocal(StructuredPool):
    K: int = eqx.field(static=True)
    d: int = eqx.field(static=True)
    mu: Float[Array, ""]

    ring = False

    def __init__(self, K: int, d: int, mu=1.0):
        K = check_num_servers(K)
        if int(d) != d or not 1 <= d <= K:
            raise ValueError(f"d must be an integer in [1, K={K}], got {d!r}")
        self.K, self.d = K, int(d)
        self.mu = jnp.asarray(mu, float_dtype(mu))

    def __check_init__(self):
        check_capacities(self.mu, ())

    @property
    def num_classes(self) -> int:
        """Number of classes: ``K`` (ring) or ``K - d + 1`` (line)."""
        return self.K if self.ring else self.K - self.d + 1

    def result_size(self) -> int:
        """Results are for the whole pool (use :meth:`solve_per_class` per class)."""
        return 1

    def capacity(self):
        """Total capacity ``K mu``."""
        return self.K * self.mu

    def kernel(self, rho=None, *, lam=None, with_servers: bool = False):
        """The jittable, vmappable ``O(K^2)`` solver: ``(BFResult for the pool, stable)``."""
        return homogeneous_local_kernel(
            self._rho(rho, lam),
            self.d,
            self.mu,
            K=self.K,
            ring=self.ring,
            with_servers=with_servers,
        )

    @property
    def server_sets(self) -> ServerSets:
        """The classes (ranges of ``d`` consecutive servers)."""
        K, d = self.K, self.d
        starts = range(K) if self.ring else range(K - d + 1)
        return ServerSets([tuple((s + j) % K for j in range(d)) for s in starts])

    def class_rates(self, rho) -> Array:
        """Arrival rate of each class (total ``rho K mu`` split equally)."""
        n = self.num_classes
        return jnp.full((n,), rho * self.K * self.mu / n, self.mu.dtype)

    def interval_pool(self) -> LinePool | RingPool:
        """The same pool as an arbitrary line / ring pool (per-class metrics in ``O(K^3)``)."""
        cls = RingPool if self.ring else LinePool
        return cls(self.server_sets, jnp.full((self.K,), self.mu))

    def solve_per_class(self, rho) -> BFResult:
        """Per-class metrics (``L``, ``T`` of shape ``(num_classes,)``) via Proposition 5/7.

        Raises:
            ValueError: as :meth:`solve`.
        """
        check_rho(rho)
        if is_concrete(rho) and float(np.max(np.asarray(rho))) >= 1:
            self.solve(rho)  # raises, naming the whole pool as the bottleneck
        return self.interval_pool().solve(lam=self.class_rates(rho))

    def to_pool(self):
        """The equivalent generic :class:`jaxqueue.pools.Pool` (use with :meth:`class_rates`)."""
        return Pool([list(s) for s in self.server_sets], jnp.full((self.K,), self.mu))


class HomogeneousLine(_HomogeneousLocal):
    """Homogeneous line pool (``bf-recursive`` Section 5.3, Proposition 6).

    ``K`` servers of capacity ``mu``; each job is assigned a range of ``d`` consecutive servers
    chosen uniformly among the ``K - d + 1`` ranges. ``psi`` and ``L`` in ``O(K^2)``.

    Examples:
        >>> HomogeneousLine(1000, 10).solve(0.9).L_total
    """

    ring = False


class HomogeneousRing(_HomogeneousLocal):
    """Homogeneous ring pool (``bf-recursive`` Section 5.4, eq. (28)): ``K`` arcs of ``d``
    consecutive servers modulo ``K``, one class each; ``psi`` and ``L`` in ``O(K^2)``.
    All classes are equivalent, so per class ``L_i = L / K``."""

    ring = True


# --------------------------------------------------------------------------------------------
# nested pools (eq. (18))


@jax.jit
def nested_pool_kernel(
    lam: Float[Array, " I"], mu: Float[Array, " K"], incidence: Array, strict_sub: Array
) -> tuple[BFResult, Array]:
    """Jittable, vmappable nested pool (``bf-recursive`` Section 5.1, eq. (18)).

    With ``Lambda_<i`` (``Lambda_<=i``) the arrival rate of the classes whose server set is
    strictly inside (inside or equal to) ``K_i`` and ``M_i = mu(K_i)``::

        psi = prod_i (1 - rho_{|i}),  rho_{|i} = lam_i / (M_i - Lambda_<i)
        T_i = 1 / (M_i - Lambda_<=i)
              + sum_{j: K_j > K_i} (1 / (M_j - Lambda_<=j) - 1 / (M_j - Lambda_<j))

    (``L_i = lam_i T_i``, from Proposition 3 applied to (18)); the server idle probabilities are
    ``psi_k = prod_{i: k in K_i} (1 - rho_{|i})``.

    Args:
        incidence: ``(I, K)`` 0/1 matrix. strict_sub: ``(I, I)``, ``[m, j] = 1`` iff
            ``K_m`` is a strict subset of ``K_j``.

    Returns:
        ``(BFResult per class, stable)``; stable iff ``Lambda_<=i < M_i`` for every class.
    """
    dtype = lam.dtype
    inc = incidence.astype(dtype)
    sub = strict_sub.astype(dtype)
    Mi = inc @ mu
    max_load = jnp.max((lam @ sub + lam) / Mi)
    stable = max_load < 1
    lam_s = jnp.where(stable, lam, 0.0)
    lt = lam_s @ sub
    le = lt + lam_s
    log_inv_psi = jnp.sum(jnp.log(Mi - lt) - jnp.log(Mi - le))
    g = 1.0 / (Mi - le) - 1.0 / (Mi - lt)
    T = 1.0 / (Mi - le) + sub @ g
    L_total = lam_s @ T
    psi_server = jnp.exp(inc.T @ (jnp.log(Mi - le) - jnp.log(Mi - lt)))
    return assemble(stable, log_inv_psi, T, lam, L_total, max_load, psi_server=psi_server)


class NestedPool(_ClassPool):
    """A nested pool (``bf-recursive`` Section 5.1): any two server sets are disjoint or nested.

    Args:
        server_sets: per class, its servers (0-based); distinct, laminar sets.
        mu: server capacities ``(K,)``.

    Raises:
        ValueError: two classes overlapping without nesting (named), a repeated set, bad
            capacities or server indices.
    """

    def __init__(self, server_sets, mu):
        super().__init__(server_sets, mu)
        ss = [set(s) for s in self.server_sets]
        for i in range(len(ss)):
            for j in range(i + 1, len(ss)):
                a, b = ss[i], ss[j]
                if a == b:
                    raise ValueError(f"server_sets[{i}] and [{j}] are equal; merge the classes")
                if a & b and not (a <= b or b <= a):
                    raise ValueError(
                        f"not nested: server_sets[{i}]={sorted(a)} and [{j}]={sorted(b)} overlap "
                        "without one containing the other"
                    )

    def _tables(self):
        inc = np.zeros((self.num_classes, self.K), dtype=bool)
        for i, s in enumerate(self.server_sets):
            inc[i, list(s)] = True
        ss = [set(s) for s in self.server_sets]
        sub = np.array([[a < b for b in ss] for a in ss], dtype=bool)
        return jnp.asarray(inc), jnp.asarray(sub)

    def kernel(self, rho=None, *, lam=None, with_servers: bool = True):
        """:func:`nested_pool_kernel` at total load ``rho`` (or per-class rates ``lam``); it
        always gives ``psi_server``."""
        inc, sub = self._tables()
        return nested_pool_kernel(self._lam(rho, lam), self.mu, inc, sub)

    def bottleneck(self, rho, lam) -> str:
        """The class whose server set, with the classes nested in it, is overloaded."""
        lv = np.asarray(self._lam(rho, lam), float)
        inc, sub = (np.asarray(t, float) for t in self._tables())
        r = (lv @ sub + lv) / (inc @ np.asarray(self.mu, float))
        w = int(np.argmax(r))
        return (
            f"unstable: class {w} (servers {list(self.server_sets[w])}) and the classes "
            f"nested in it bring load {r[w]:.6g} >= 1 (bottleneck)"
        )
