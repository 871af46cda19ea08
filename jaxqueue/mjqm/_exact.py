"""The exact FCFS multiserver-job queue for exponential services: a level-dependent QBD.

Poisson arrivals of rate ``lam``, class ``i`` with probability ``p_i`` holding ``a_i`` of ``s``
servers for an exponential time of mean ``m_i``, strict FCFS with head-of-line blocking
(``mjsre`` Section 2, the model of its Table 1; here any number of classes).

The chain: level ``N`` = jobs in the system; phase ``(n, h)``, ``n`` the jobs in service per
class and ``h`` the class of the blocked head (or *none*). The classes behind the head are
revealed only when they reach it, so a departure starts a *cascade* whose outcomes are
transitions between global phases: every block is a sub-block of two global matrices (down
``D``, up ``U``) cut by the valid phases of a level. From ``N* = max |n| + 1`` on the chain is
level-independent and its tail matrix-geometric (``R`` from ``G`` by cyclic reduction, Bini
and Meini 1996); the boundary levels are reduced from the top and the metrics accumulated as
linear functionals in the same pass (no level stored). The stability limit is the saturated
departure rate ``lambda_c = phi . d`` (``phi`` stationary for ``D_HH - diag(d)``).

Differentiable in ``lam``, the service means and the class probabilities: ``R`` has a custom
adjoint (the implicit function theorem on ``A0 + R A1 + R^2 A2 = 0``, a Stein equation summed
by doubling), the rest is a fixed-length scan. The derivation, with the cascade
probabilities, is in ``docs/concepts/exact.md``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float

from .._memory import memory_budget
from .._tables import per_class
from ..dist import Exponential
from ..stats import Result, Status
from ._workload import Workload

__all__ = ["ExactResult", "exact", "exact_lambda_c", "exact_size"]

# Refuse structures beyond these (the dense repeating block and the global matrices); the
# memory limit is MAX_BYTES or half the machine's memory, whichever is less.
MAX_PHASES = 4000
MAX_BYTES = 6 * 2**30


# ---------------------------------------------------------------------------------- structure
def _count_by_used(s: int, cores: tuple[int, ...]) -> list[int]:
    """``c[u]`` = number of service vectors ``n`` with ``a . n = u`` (exact Python ints)."""
    c = [1] + [0] * s
    for a in cores:
        for u in range(a, s + 1):
            c[u] += c[u - a]
    return c


def exact_size(workload: Workload) -> dict:
    """Sizes of the QBD of ``workload`` before anything is built: ``phases`` (head phases, the
    repeating block), ``service_vectors``, ``levels`` (boundary levels ``N*``), ``bytes``
    (peak memory estimate in float64) and ``seconds`` (a rough time estimate on one CPU core)."""
    s, cores = _shape(workload)
    c = _count_by_used(s, cores)
    phases = sum(sum(c[max(0, s - a + 1) :]) for a in cores)
    vectors = sum(c)
    levels = s // min(cores) + 1
    glob = phases + vectors + 1
    p = phases + vectors
    return {
        "phases": phases,
        "service_vectors": vectors,
        "levels": levels,
        "bytes": 8 * (2 * glob**2 + 24 * p**2),
        "seconds": 3.0e-11 * (levels + 30) * p**3,
    }


def _shape(workload: Workload) -> tuple[int, tuple[int, ...]]:
    if workload.n_types != 1 or workload.specific is not None:
        raise ValueError(
            "exact: one pool of identical servers only (no resource vectors, no specific "
            "servers); use `mjqm simulate` or `mjqm sample`"
        )
    return workload.servers[0], tuple(int(r[0]) for r in workload.cores)


@dataclass(frozen=True)
class _Structure:
    """Index maps of the QBD of one ``(s, cores)``: no numbers, only who goes where.

    Global phases: ``0 .. nh-1`` the head phases sorted by ``|n|``, ``nh .. nh+nv-1`` the none
    phases (one per service vector), ``nh + nv`` an inert padding phase.
    """

    s: int
    cores: np.ndarray  # (K,)
    nvec: np.ndarray  # (nv, K) service vectors
    head_n: np.ndarray  # (nh,) index into nvec
    head_h: np.ndarray  # (nh,) class of the head
    n_star: int  # first level holding exactly the head phases
    n_global: int  # nh + nv + 1
    # down transitions: src, dst (global), departing class j, coef (multinomial * n_j), expo (T, K)
    d_src: np.ndarray
    d_dst: np.ndarray
    d_cls: np.ndarray
    d_coef: np.ndarray
    d_expo: np.ndarray
    # levels 0 .. n_star + 2: global index of each slot (padding -> n_global - 1)
    slots: np.ndarray  # (n_star + 3, P)
    # arrivals from level N (< n_star): target slot at level N + 1 and weight class per slot
    up_slot: np.ndarray  # (n_star, P, K)
    up_cls: np.ndarray  # (n_star, P, K): k -> p_k, K -> 1, K + 1 -> 0
    max_expo: int

    @property
    def nh(self) -> int:
        return len(self.head_n)

    @property
    def nv(self) -> int:
        return len(self.nvec)


def _service_vectors(s: int, a: np.ndarray) -> np.ndarray:
    rows: list[tuple[int, ...]] = []

    def rec(i: int, rem: int, cur: tuple[int, ...]) -> None:
        if i == len(a):
            rows.append(cur)
            return
        for k in range(rem // a[i] + 1):
            rec(i + 1, rem - k * int(a[i]), cur + (k,))

    rec(0, s, ())
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), len(a))


def _log_multinomial(m: np.ndarray) -> np.ndarray:
    lg = np.vectorize(math.lgamma)
    return lg(m.sum(-1) + 1.0) - lg(m + 1.0).sum(-1)


def _indexer(s: int, a: np.ndarray, nvec: np.ndarray):
    """``index_of(vecs)``: the rows of ``nvec`` equal to the service vectors ``vecs``."""
    radix = np.asarray([s // int(x) + 1 for x in a], dtype=np.int64)
    stride = np.concatenate([[1], np.cumprod(radix[:-1])]).astype(np.int64)
    keys = nvec @ stride
    order = np.argsort(keys)
    sorted_keys = keys[order]
    return lambda vecs: order[np.searchsorted(sorted_keys, vecs @ stride)]


class _Transitions:
    """Down transitions collected as arrays: source, target (global phases), departing class,
    log coefficient and exponents of the class probabilities (``p^expo``)."""

    def __init__(self, K: int):
        self.K = K
        self.parts: list[tuple] = []

    def add(self, src, dst, j, logcoef, expo=None):
        expo = np.zeros((len(src), self.K), dtype=np.int64) if expo is None else expo
        self.parts.append((src, dst, np.full(len(src), j), logcoef, expo))

    def arrays(self):
        return [np.concatenate(x) for x in zip(*self.parts, strict=True)]


def _cascades(tr, s, a, nvec, used, logmult, index_of, head_index, none0, j, x_, base, lr_):
    """Head phases ``x_`` whose head entered after a class-``j`` departure (service vectors
    ``base``, log rates ``lr_``): the cascade admits a multiset ``m`` of revealed jobs and
    stops at a class ``k`` that does not fit, or empties the queue (a none phase)."""
    K = len(a)
    f = int(s - base[0] @ a)
    ms = np.nonzero(used <= f)[0]
    tgt_idx = index_of((base[:, None, :] + nvec[ms][None, :, :]).reshape(-1, K))
    tgt_idx = tgt_idx.reshape(len(x_), len(ms))
    lc = lr_[:, None] + logmult[ms][None, :]
    xx = np.broadcast_to(x_[:, None], tgt_idx.shape)
    # all revealed jobs fit and the queue is empty: none phase (valid iff |m| = b)
    expo = np.broadcast_to(nvec[ms][None], (len(x_), len(ms), K)).reshape(-1, K)
    tr.add(xx.ravel(), (none0 + tgt_idx).ravel(), j, lc.ravel(), expo)
    for k in range(K):
        stop = used[ms] + a[k] > f  # the next revealed job, of class k, does not fit
        if stop.any():
            ti = tgt_idx[:, stop]
            expo = np.broadcast_to(
                (nvec[ms][stop] + np.eye(K, dtype=np.int64)[k])[None], ti.shape + (K,)
            ).reshape(-1, K)
            tr.add(xx[:, stop].ravel(), head_index[ti.ravel(), k], j, lc[:, stop].ravel(), expo)


def _down(s, a, nvec, head_n, head_h, head_index, none0, index_of) -> _Transitions:
    """Every departure-and-cascade transition between global phases (module docstring)."""
    K = len(a)
    used = nvec @ a
    logmult = _log_multinomial(nvec.astype(float))
    tr = _Transitions(K)
    for j in range(K):  # none phase n: departure j -> none phase n - e_j
        rows = np.nonzero(nvec[:, j] > 0)[0]
        tgt = nvec[rows] - np.eye(K, dtype=np.int64)[j]
        tr.add(none0 + rows, none0 + index_of(tgt), j, np.log(nvec[rows, j].astype(float)))
    hv = nvec[head_n]
    for j in range(K):  # head phase x = (n, h): departure j
        xs = np.nonzero(hv[:, j] > 0)[0]
        n1 = hv[xs] - np.eye(K, dtype=np.int64)[j]
        lrate = np.log(hv[xs, j].astype(float))
        h = head_h[xs]
        fits = n1 @ a + a[h] <= s
        # the head still does not fit: phase (n - e_j, h), probability 1
        tr.add(xs[~fits], head_index[index_of(n1[~fits]), h[~fits]], j, lrate[~fits])
        # the head enters: cascades, grouped by the servers then free
        n2 = n1[fits] + np.eye(K, dtype=np.int64)[h[fits]]
        free = s - n2 @ a
        for f in np.unique(free):
            sel = free == f
            _cascades(
                tr,
                s,
                a,
                nvec,
                used,
                logmult,
                index_of,
                head_index,
                none0,
                j,
                xs[fits][sel],
                n2[sel],
                lrate[fits][sel],
            )
    return tr


def _level_slots(size, head_n, none0, n_global):
    """Levels ``0 .. N* + 2``: their global phases (heads with ``|n| <= N - 1``, then nones
    with ``|n| = N``), and the ``(levels, P)`` slot table padded with the inert phase."""
    n_star = int(size.max()) + 1
    head_size = size[head_n]
    levels = [
        np.concatenate([np.nonzero(head_size <= N - 1)[0], none0 + np.nonzero(size == N)[0]])
        for N in range(n_star + 3)
    ]
    P = max(len(x) for x in levels)
    slots = np.full((len(levels), P), n_global - 1, dtype=np.int64)
    for N, x in enumerate(levels):
        slots[N, : len(x)] = x
    return n_star, levels, slots


def _arrivals(s, a, nvec, head_index, nh, levels, n_star, P, index_of):
    """Arrivals, as (target slot one level up, weight class) per slot: a head phase stays
    (weight class ``K``: ``lam``), a none phase ``n`` reveals class ``k`` (weight ``p_k``):
    none ``n + e_k`` if it fits, else head ``(n, k)``; unused entries have weight class
    ``K + 1`` (zero)."""
    K = len(a)
    none0 = nh
    n_global = nh + len(nvec) + 1
    used = nvec @ a
    arrive = np.empty((len(nvec), K), dtype=np.int64)
    for k in range(K):
        fit = used + a[k] <= s
        arrive[fit, k] = none0 + index_of(nvec[fit] + np.eye(K, dtype=np.int64)[k])
        arrive[~fit, k] = head_index[np.nonzero(~fit)[0], k]
    up_slot = np.zeros((n_star, P, K), dtype=np.int64)
    up_cls = np.full((n_star, P, K), K + 1, dtype=np.int64)
    for N in range(n_star):
        slot_of = np.full(n_global, -1, dtype=np.int64)
        slot_of[levels[N + 1]] = np.arange(len(levels[N + 1]))
        x = levels[N]
        heads = np.nonzero(x < nh)[0]
        up_slot[N, heads, 0] = slot_of[x[heads]]
        up_cls[N, heads, 0] = K
        rows = np.nonzero(x >= nh)[0]
        up_slot[N, rows] = slot_of[arrive[x[rows] - none0]]
        up_cls[N, rows] = np.arange(K)[None, :]
    assert np.all(up_slot >= 0)
    return up_slot, up_cls


@functools.lru_cache(maxsize=32)
def _structure(s: int, cores: tuple[int, ...]) -> _Structure:
    """The index tables of the QBD for ``s`` servers and class sizes ``cores``: a pure function
    of its arguments, memoised by them (the 32 most recent; rates are not part of it)."""
    a = np.asarray(cores, dtype=np.int64)
    K = len(a)
    nvec = _service_vectors(s, a)
    nv = len(nvec)
    size = nvec.sum(1)
    index_of = _indexer(s, a, nvec)
    # head phases (n, h): n + e_h does not fit; sorted by |n| so a level's heads are a prefix
    hn, hh = np.nonzero((nvec @ a)[:, None] + a[None, :] > s)
    perm = np.lexsort((hh, hn, size[hn]))
    head_n, head_h = hn[perm], hh[perm]
    nh = len(head_n)
    head_index = -np.ones((nv, K), dtype=np.int64)
    head_index[head_n, head_h] = np.arange(nh)
    n_global = nh + nv + 1
    d_src, d_dst, d_cls, lcoef, d_expo = _down(
        s, a, nvec, head_n, head_h, head_index, nh, index_of
    ).arrays()
    assert np.all(d_dst >= 0)
    n_star, levels, slots = _level_slots(size, head_n, nh, n_global)
    up_slot, up_cls = _arrivals(
        s, a, nvec, head_index, nh, levels, n_star, slots.shape[1], index_of
    )
    return _Structure(
        s=s,
        cores=a,
        nvec=nvec,
        head_n=head_n,
        head_h=head_h,
        n_star=n_star,
        n_global=n_global,
        d_src=d_src.astype(np.int32),
        d_dst=d_dst.astype(np.int32),
        d_cls=d_cls.astype(np.int32),
        d_coef=np.exp(lcoef),
        d_expo=d_expo.astype(np.int32),
        slots=slots,
        up_slot=up_slot.astype(np.int32),
        up_cls=up_cls.astype(np.int32),
        max_expo=int(d_expo.max(initial=0)) + 1,
    )


# ------------------------------------------------------------------------------------ numbers
def _powers(p: Array, n: int) -> Array:
    """``(K, n + 1)`` table of ``p_i^e`` by repeated products (exact gradients at ``p_i = 0``)."""
    ones = jnp.ones_like(p)
    return jnp.stack([ones] + [p] * n, axis=1).cumprod(axis=1)


def _global_down(st: _Structure, mu: Array, p: Array) -> Array:
    """Dense ``(G, G)`` matrix of all departure-and-cascade rates between global phases."""
    pw = _powers(p, st.max_expo)
    mono = jnp.prod(pw[jnp.arange(len(st.cores))[None, :], st.d_expo], axis=1)
    val = jnp.asarray(st.d_coef, p.dtype) * mu[st.d_cls] * mono
    G = st.n_global
    return jnp.zeros((G, G), p.dtype).at[st.d_src, st.d_dst].add(val)


def _functionals(st: _Structure, p: Array) -> tuple[Array, Array]:
    """Per global phase: the values ``f = base + N * slope`` of the quantities averaged.

    Columns: 0 one (normalisation), 1 jobs behind the head ``N - |n| - 1``, 2 someone waits,
    3 idle servers ``s - a.n``, 4 idle servers while someone waits, 5 an arrival waits (PASTA),
    then ``K`` columns ``1{h = i}`` and ``K`` columns ``n_i``.
    """
    dt = p.dtype
    a = st.cores
    K = len(a)
    nvec = st.nvec
    idle = (st.s - nvec @ a).astype(float)
    nofit = (nvec @ a)[:, None] + a[None, :] > st.s  # (nv, K): class k would wait
    hv = nvec[st.head_n]
    head_cols = np.zeros((st.nh, 6 + 2 * K))
    head_cols[:, 0] = 1.0
    head_cols[:, 1] = -hv.sum(1) - 1.0
    head_cols[:, 2] = 1.0
    head_cols[:, 3] = idle[st.head_n]
    head_cols[:, 4] = idle[st.head_n]
    head_cols[:, 5] = 1.0
    head_cols[np.arange(st.nh), 6 + st.head_h] = 1.0
    head_cols[:, 6 + K :] = hv
    none_cols = np.zeros((st.nv, 6 + 2 * K))
    none_cols[:, 0] = 1.0
    none_cols[:, 3] = idle
    none_cols[:, 6 + K :] = nvec
    base = jnp.asarray(np.concatenate([head_cols, none_cols, np.zeros((1, 6 + 2 * K))]), dt)
    pwait_none = jnp.asarray(nofit, dt) @ p
    base = base.at[st.nh : st.nh + st.nv, 5].set(pwait_none)
    slope = np.zeros((st.n_global, 6 + 2 * K))
    slope[: st.nh, 1] = 1.0
    return base, jnp.asarray(slope, dt)


# ------------------------------------------------------------------------ linear solves
def _one_at_a_time(f):
    """``f``, run one batch element at a time under ``vmap`` on the CPU. XLA:CPU's batched LU
    and triangular solve (jaxlib 0.10.2) split a batch over the intra-op thread pool; two of
    them running at once (the thunk executor runs independent ops concurrently) each hold a
    pool thread while waiting for the other's tasks, and on a 2-core machine
    ``jax.vmap(exact)`` hung for good. Other backends keep the batched calls. Never
    differentiated (:func:`_linsolve` factors ``stop_gradient(a)``; the reduction for ``G``
    has its own adjoint)."""
    sequential = jax.custom_batching.sequential_vmap(f)
    return functools.wraps(f)(
        lambda *args: (sequential if jax.default_backend() == "cpu" else f)(*args)
    )


@_one_at_a_time
def _lu(a: Array):
    """LU factors ``a[perm] = L U`` of ``a``."""
    lu, _, perm = lax.linalg.lu(a)
    return lu, perm


def _triangular(lu, bt, **kw):
    return lax.linalg.triangular_solve(lu, bt, left_side=False, **kw)


@_one_at_a_time
def _lu_solve(factors, b: Array) -> Array:
    """``a^-1 b`` from ``a[perm] = L U``, as triangular solves on the right of ``b^T``:
    ``x^T = b[perm]^T U^-T L^-T`` read backwards. XLA:CPU's LAPACK call takes column-major
    operands, and ``b^T`` column-major is ``b`` as stored, so nothing is copied (unlike
    ``jax.scipy.linalg.lu_solve``)."""
    lu, perm = factors
    bt = (b[:, None] if b.ndim == 1 else b).T
    y = _triangular(lu, bt[:, perm], lower=True, transpose_a=True, unit_diagonal=True)
    x = _triangular(lu, y, lower=False, transpose_a=True).T
    return x[:, 0] if b.ndim == 1 else x


@_one_at_a_time
def _lu_solve_t(factors, b: Array) -> Array:
    """``a^-T b`` from ``a[perm] = L U``: ``(x[perm])^T = b^T U^-1 L^-1``."""
    lu, perm = factors
    bt = (b[:, None] if b.ndim == 1 else b).T
    z = _triangular(lu, _triangular(lu, bt, lower=False), lower=True, unit_diagonal=True).T
    x = jnp.zeros_like(z).at[perm].set(z)
    return x[:, 0] if b.ndim == 1 else x


def _linsolve(a: Array, b: Array) -> Array:
    """``a^-1 b``, as ``jnp.linalg.solve`` (an LU of ``stop_gradient(a)`` inside
    ``lax.custom_linear_solve``, so ``jvp``, ``grad`` and ``vmap`` of ``grad`` work) with the
    factorisation of :func:`_lu` and the solves of :func:`_lu_solve`, :func:`_lu_solve_t`."""
    factors = _lu(lax.stop_gradient(a))

    return lax.custom_linear_solve(
        lambda x: a @ x,
        b,
        lambda _, x: _lu_solve(factors, x),
        lambda _, x: _lu_solve_t(factors, x),
    )


# ------------------------------------------------------------------------------ the tail: G
def _norm(x: Array) -> Array:
    return jnp.max(jnp.sum(jnp.abs(x), axis=-1))


def _g_cyclic_reduction(lam, q, D):
    """``G``, the minimal solution of ``A2 + A1 G + A0 G^2 = 0`` with ``A0 = lam I`` (up),
    ``A1 = -diag(q)`` (local), ``A2 = D`` (down), by cyclic reduction (Bini and Meini 1996) on
    the *shifted* equation (He, Meini and Rhee 2001): with ``u = 1 / P`` and ``d = D 1``,
    ``Gs = G - 1 u^T`` is the minimal solution of ``A2s + A1s Gs + A0 Gs^2 = 0``,
    ``A2s = D - d u^T``, ``A1s = A1 + lam 1 u^T``; it has the eigenvalues of ``G`` with the
    unit one moved to 0.

    One reduction step, with ``K = (-A1^(k))^-1``: ``A0' = A0 K A0``, ``A2' = A2 K A2``,
    ``A1' = A1 + A0 K A2 + A2 K A0``, ``Ahat' = Ahat + A0 K A2``; then ``Gs = -Ahat^-1 A2s``
    (the loop carries ``-A1`` and ``-Ahat``, so that no product is negated). The error falls
    like ``(xi rho(R))^(2^k)``, ``xi`` the second eigenvalue of ``G``, where without the
    shift it falls like ``rho(R)^(2^k)``: on five-class-exp 7 steps at any load instead of 9
    at 0.5 lambda_c and 18 at 0.999 (the tail decays like ``rho(R)^N``, slowly near
    saturation; ``xi`` is about 0.74 at any load). The first step is written out
    (``A1s^-1`` by Sherman-Morrison). The loop stops when the next increment of ``Ahat``,
    predicted from the last two as for quadratic convergence
    (``r_(k+1) = r_k (r_k / r_(k-1))^2``), is below machine precision relative to ``Ahat``;
    that last step only updates ``Ahat``."""
    P = D.shape[0]
    eps = jnp.finfo(D.dtype).eps
    u = jnp.full(P, 1.0 / P, D.dtype)
    iq = 1.0 / q
    a2s = D - D.sum(1)[:, None] * u[None, :]
    nloc = jnp.diag(q) - lam * u[None, :]  # -A1s
    # K = nloc^-1 = diag(iq) + c iq (u iq)^T, c = lam / (1 - lam u.iq) (Sherman-Morrison)
    c = lam / (1.0 - lam * (u @ iq))
    ui = u * iq
    K_down = iq[:, None] * a2s + c * iq[:, None] * (ui @ a2s)[None, :]
    down_K = a2s * iq[None, :] + c * (a2s @ iq)[:, None] * ui[None, :]
    one = jnp.ones((), D.dtype)
    state = (
        lam**2 * (jnp.diag(iq) + c * iq[:, None] * ui[None, :]),  # A0 K A0
        a2s @ K_down,
        nloc - lam * (K_down + down_K),
        nloc - lam * K_down,
        one,  # r_(k-1): relative increment of Ahat one step back
        one,  # r_k
        0,
    )

    def done(r_prev, r, it):
        predicted = jnp.where(it >= 2, r * jnp.minimum(1.0, (r / r_prev) ** 2), r)
        return (predicted <= eps) | (it >= 64)

    def step(c, up_times):
        up, down, nloc, nhat, _, r, it = c
        factors = _lu(nloc)
        K_down = _lu_solve(factors, down)
        cross = up_times(K_down)
        nhat = nhat - cross
        r_next = _norm(cross) / _norm(nhat)

        def reduce(_):
            K_up = _lu_solve(factors, up)
            return up_times(K_up), down @ K_down, nloc - cross - down @ K_up

        up, down, nloc = lax.cond(done(r, r_next, it + 1), lambda _: (up, down, nloc), reduce, None)
        return up, down, nloc, nhat, r, r_next, it + 1

    # the second step with A0 K A0 = lam^2 (diag(iq) + c iq (u iq)^T) applied in O(P^2)
    state = step(state, lambda x: lam**2 * iq[:, None] * (x + c * (ui @ x)[None, :]))
    nhat = lax.while_loop(lambda c: ~done(*c[4:]), lambda c: step(c, c[0].__matmul__), state)[3]
    return _linsolve(nhat, a2s) + u[None, :]


def _doubling(X, S, Y):
    """``sum_k X^k S Y^k`` for ``rho(X) < 1 = rho(Y)`` (``Y`` stochastic), by doubling."""
    eps = jnp.finfo(S.dtype).eps

    def cond(c):
        X, _, _, it = c
        return (_norm(X) > eps) & (it < 64)

    def body(c):
        X, S, Y, it = c
        return X @ X, S + X @ S @ Y, Y @ Y, it + 1

    return lax.while_loop(cond, body, (X, S, Y, 0))[1]


@jax.custom_vjp
def _g_matrix(lam, q, D):
    """``G`` of the repeating blocks (:func:`_g_cyclic_reduction`) with an implicit adjoint."""
    return _g_cyclic_reduction(lam, q, D)


def _g_matrix_fwd(lam, q, D):
    G = _g_cyclic_reduction(lam, q, D)
    return G, (G, lam, q)


def _g_matrix_bwd(res, Gbar):
    """Implicit function theorem on ``A2 + A1 G + A0 G^2 = 0``: with ``W = A1 + A0 G`` and
    ``C = dA2 + dA1 G + dA0 G^2``, ``dG = E + R dG G`` where ``E = -W^-1 C`` and
    ``R = -A0 W^-1`` (the rate matrix); so ``dG = sum_k R^k E G^k`` and its adjoint is
    ``Ebar = sum_k (R^T)^k Gbar (G^T)^k`` (summed by doubling), ``Cbar = -W^-T Ebar``."""
    G, lam, q = res
    W = -jnp.diag(q) + lam * G
    R = -lam * _linsolve(W, jnp.eye(W.shape[0], dtype=W.dtype))
    Ebar = _doubling(R.T, Gbar, G.T)
    Cbar = -_linsolve(W.T, Ebar)
    lam_bar = jnp.sum(Cbar * (G @ G))
    q_bar = -jnp.sum(Cbar * G, axis=1)
    return lam_bar, q_bar, Cbar


_g_matrix.defvjp(_g_matrix_fwd, _g_matrix_bwd)


# ------------------------------------------------------------------------------- the solver
class ExactResult(Result):
    """The exact stationary metrics of an FCFS MJQM with exponential services.

    Attributes:
        lam: the arrival rate. lambda_c: the exact stability limit.
        wait_mean: mean waiting time of all jobs ``E[number waiting] / lam`` (Little).
        wait_mean_class: ``(K,)`` mean wait per class ``Lq_i / (lam p_i)`` with
            ``Lq_i = P(head is class i) + p_i E[jobs behind the head]``.
        jobs_mean: mean number in system. jobs_waiting_mean: mean number waiting.
        jobs_waiting_class: ``(K,)`` ``Lq_i``. jobs_service_class: ``(K,)`` mean ``n_i``.
        p_wait: probability that an arriving job waits (PASTA).
        idle_servers: mean idle servers ``E[s - a.n]`` (equals ``s - lam sum p_i a_i m_i``).
        hol_idle_servers: mean idle servers while someone waits (HOL waste).
        stable: ``lam < lambda_c (1 - 100 sqrt(eps))``; when not, every metric is ``inf``
            (or 1 for ``p_wait``): beyond the limit the means are infinite, and within that
            relative gap the QBD cannot be solved accurately in the dtype.
        phases: size of the repeating block. levels: boundary levels ``N*``.
    """

    lam: Float[Array, ""]
    lambda_c: Float[Array, ""]
    wait_mean: Float[Array, ""]
    wait_mean_class: Float[Array, " classes"]
    jobs_mean: Float[Array, ""]
    jobs_waiting_mean: Float[Array, ""]
    jobs_waiting_class: Float[Array, " classes"]
    jobs_service_class: Float[Array, " classes"]
    p_wait: Float[Array, ""]
    idle_servers: Float[Array, ""]
    hol_idle_servers: Float[Array, ""]
    stable: Array
    phases: int = eqx.field(static=True)
    levels: int = eqx.field(static=True)

    @property
    def status(self) -> Status:
        """``ok``, or ``unstable`` when some load is at or beyond ``lambda_c``."""
        return Status.ok if bool(np.all(np.asarray(self.stable))) else Status.unstable

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        return "a load is at or beyond lambda_c: the means are infinite"

    def to_frame(self, workload: Workload | None = None):
        """One row per class: ``class``, ``lam``, ``lambda_c``, ``wait_mean``, ``jobs_waiting``,
        ``jobs_in_service`` and, given the ``workload``, ``cores``, ``prob``, ``mean_service``,
        ``response_mean``; a batched result (``jax.vmap`` over loads) gets a ``point`` column.
        Needs pandas (``pip install 'jaxqueue[tables]'``)."""

        wait = np.asarray(self.wait_mean_class, dtype=float)
        cols = {"wait_mean": wait}
        if workload is not None:
            means = np.asarray(workload.mean_service(), dtype=float)
            cols = {
                "cores": np.broadcast_to([c[0] for c in workload.cores], wait.shape),
                "prob": np.broadcast_to(np.asarray(workload.probs, dtype=float), wait.shape),
                "mean_service": np.broadcast_to(means, wait.shape),
                "wait_mean": wait,
                "response_mean": wait + means,
            }
        cols |= {
            "jobs_waiting": self.jobs_waiting_class,
            "jobs_in_service": self.jobs_service_class,
        }
        return per_class(cols, point={"lam": self.lam, "lambda_c": self.lambda_c})


def _check_exponential(workload: Workload, arrivals: bool = True) -> tuple[int, tuple[int, ...]]:
    """``(s, cores)`` of a workload the QBD solves, else a one-line ``ValueError``. The stability
    limit does not depend on the arrival law (``mjsre`` Remark 4): ``arrivals=False`` skips
    the Poisson check."""
    s_c = _shape(workload)
    for i, law in enumerate(workload.services):
        if not isinstance(law, Exponential):
            raise ValueError(
                f"exact: class {i} has service law {type(law).__name__}; the exact solver needs "
                "exponential services (use `mjqm simulate` or `mjqm sample`)"
            )
    if arrivals and not workload.is_poisson:
        raise ValueError(
            f"exact: arrivals are {type(workload.arrival).__name__}, not Poisson; use "
            "`mjqm simulate` or `mjqm sample`"
        )
    size = exact_size(workload)
    budget, label = memory_budget(MAX_BYTES)
    if size["phases"] > MAX_PHASES or size["bytes"] > budget:
        raise ValueError(
            f"exact: the QBD of this workload has {size['phases']:,} phases per level and needs "
            f"about {size['bytes'] / 1e9:.3g} GB (limits: {MAX_PHASES} phases, {label}); use "
            "`mjqm simulate` or `mjqm sample`"
        )
    return s_c


def _numbers(workload: Workload, dtype=None):
    mean = workload.mean_service()
    p = jnp.asarray(workload.probs)
    dt = dtype or jnp.result_type(mean, p, float)
    return 1.0 / mean.astype(dt), p.astype(dt)


def _departure_rates(st: _Structure, Dg: Array) -> Array:
    """Total departure rate ``sum_j n_j mu_j`` of every global phase: the rows of ``Dg``
    restricted to the targets one level down, which are the head phases for a head phase
    (in the repeating levels) and the none phases for a none phase."""
    heads = Dg[: st.nh, : st.nh].sum(1)
    nones = Dg[st.nh : st.nh + st.nv, st.nh : st.nh + st.nv].sum(1)
    return jnp.concatenate([heads, nones, jnp.zeros(1, Dg.dtype)])


def _lambda_c(st: _Structure, Dg: Array) -> Array:
    """``phi . d`` with ``phi`` the stationary law of the saturated phase process."""
    nh = st.nh
    D = Dg[:nh, :nh]
    d = D.sum(1)
    Q = D - jnp.diag(d)
    A = Q.at[:, 0].set(1.0)
    rhs = jnp.zeros(nh, Dg.dtype).at[0].set(1.0)
    phi = _linsolve(A.T, rhs)
    return phi @ d


def exact_lambda_c(workload: Workload) -> Float[Array, ""]:
    """The exact stability limit ``lambda_c`` of an FCFS MJQM with exponential services.

    ``lambda_c = phi . d`` where ``phi`` is the stationary law of the saturated phase process
    (generator ``D_HH - diag(d)``, the queue never empties) and ``d`` the departure rate of a
    phase: the long-run departure rate of the saturated queue (``mjsre`` Theorem 5.1
    gives the same limit as ``1 / gamma``; eq. (8) in closed form for one-or-all workloads).
    Differentiable in the service means and class probabilities.

    Examples:
        >>> from jaxqueue import scenarios
        >>> round(float(exact_lambda_c(scenarios.get("five-class-exp"))), 3)  # doctest: +SKIP
        1.795
    """
    s, cores = _check_exponential(workload, arrivals=False)
    mu, p = _numbers(workload)
    return _lambda_c_jit(s, cores, mu, p)


def exact_lambda_c_or_none(workload) -> float | None:
    """:func:`exact_lambda_c` as a float where the QBD applies (one pool of identical servers,
    exponential services, within ``MAX_PHASES`` and ``MAX_BYTES``; any arrival law), else
    ``None``."""
    try:
        return float(exact_lambda_c(workload))
    except ValueError:
        return None


def exact(workload: Workload, lam) -> ExactResult:
    """Exact stationary metrics of the FCFS MJQM with Poisson arrivals and exponential services.

    The level-dependent QBD of the module docstring: the tail by cyclic reduction, the
    boundary levels by linear level reduction, the metrics as linear functionals of the
    stationary law. ``jit``, ``vmap`` over ``lam`` and ``grad`` in ``lam``, the service means
    and the class probabilities work. Classes with probability 0 get ``nan`` class waits.

    Args:
        workload: one pool of ``s`` servers, exponential service laws, Poisson arrivals.
        lam: arrival rate (scalar; ``vmap`` for a sweep).

    Returns:
        :class:`ExactResult`.

    Raises:
        ValueError: a non-exponential service law, non-Poisson arrivals, resource vectors or
            specific servers, a phase count beyond :data:`MAX_PHASES` (with the memory it
            would need), ``lam <= 0`` or ``lam >= lambda_c`` (with ``lambda_c``) for a
            concrete ``lam``. A traced ``lam`` at or beyond ``lambda_c`` gives ``stable =
            False`` and infinite waits instead (a sweep may cross the limit; an optimiser
            sees ``inf``); a traced ``lam <= 0`` or ``nan`` raises at run time
            (``eqx.error_if``).

    Examples:
        >>> import jax; jax.config.update("jax_enable_x64", True)
        >>> from jaxqueue import scenarios
        >>> res = exact(scenarios.get("five-class-exp"), 1.0)
        >>> str(res.status), res.phases
        ('ok', 842)
    """
    s, cores = _check_exponential(workload)
    mu, p = _numbers(workload)
    lam = jnp.asarray(lam, p.dtype) if not isinstance(lam, jax.Array) else lam.astype(p.dtype)
    if lam.ndim != 0:
        raise ValueError(f"exact: lam must be a scalar (vmap for a sweep), got shape {lam.shape}")
    if not isinstance(lam, jax.core.Tracer):
        if not (float(lam) > 0 and math.isfinite(float(lam))):
            raise ValueError(f"exact: lam must be positive and finite, got {float(lam)!r}")
    else:
        lam = eqx.error_if(lam, ~(lam > 0), "exact: lam must be positive (got <= 0 or nan)")
    lam_c = _lambda_c_jit(s, cores, mu, p)
    if not isinstance(lam, jax.core.Tracer) and not isinstance(lam_c, jax.core.Tracer):
        if float(lam) >= float(lam_c):
            raise ValueError(
                f"exact: lam = {float(lam):.6g} is at or beyond the stability limit lambda_c = "
                f"{float(lam_c):.6g} of this workload (the queue grows without bound)"
            )
        if float(lam) >= float(lam_c) * (1.0 - _gap(p.dtype)):
            raise ValueError(
                f"exact: lam = {float(lam):.10g} is within a relative {_gap(p.dtype):.1e} of the "
                f"stability limit lambda_c = {float(lam_c):.10g}: too close to solve accurately "
                f"in {p.dtype}"
            )
    return _exact_jit(s, cores, mu, p, lam)


def _gap(dtype) -> float:
    """Smallest relative distance to ``lambda_c`` solved (closer, the QBD loses its digits:
    measured in float64, the wait stops growing like ``1 / (lambda_c - lam)`` near 1e-8)."""
    return float(100 * np.sqrt(np.finfo(dtype).eps))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _lambda_c_jit(s: int, cores: tuple[int, ...], mu: Array, p: Array) -> Array:
    st = _structure(s, cores)
    return _lambda_c(st, _global_down(st, mu, p))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _exact_jit(s: int, cores: tuple[int, ...], mu: Array, p: Array, lam: Array) -> ExactResult:
    """The numbers of :func:`exact`, compiled once per structure ``(s, cores)`` and dtype."""
    st = _structure(s, cores)
    Dg = _global_down(st, mu, p)
    lam_c = _lambda_c(st, Dg)
    stable = lam < lam_c * (1.0 - _gap(p.dtype))
    lam_safe = jnp.where(stable, lam, 0.5 * lam_c)
    m = _solve(st, Dg, p, *_functionals(st, p), lam_safe)
    K = len(cores)
    inf = jnp.asarray(jnp.inf, p.dtype)

    def cap(x):
        return jnp.where(stable, x, inf)

    waiting = m[6 : 6 + K] + p * m[1]
    return ExactResult(
        lam=lam,
        lambda_c=lam_c,
        wait_mean=cap(waiting.sum() / lam_safe),
        wait_mean_class=cap(waiting / (lam_safe * p)),
        jobs_mean=cap(m[2] + m[1] + m[6 + K :].sum()),
        jobs_waiting_mean=cap(waiting.sum()),
        jobs_waiting_class=cap(waiting),
        jobs_service_class=jnp.where(stable, m[6 + K :], lam * p / mu),
        p_wait=jnp.where(stable, m[5], 1.0),
        idle_servers=jnp.where(stable, m[3], 0.0),
        hol_idle_servers=jnp.where(stable, m[4], inf),
        stable=stable,
        phases=st.nh,
        levels=st.n_star,
    )


def _solve(st: _Structure, Dg, p, base, slope, lam) -> Array:
    """``E[f]`` under the stationary law, for every column of ``f = base + N * slope``.

    With ``K_N = -(L_N + R_N D_{N+1})`` (``R_N`` such that ``pi_{N+1} = pi_N R_N``), the
    level reduction reads ``R_{N-1} = U_{N-1} K_N^-1`` and
    ``K_{N-1} = -L_{N-1} - U_{N-1} K_N^-1 D_N``; in the repeating levels ``R D = lam G`` gives
    ``K = diag(q) - lam G`` and ``R = lam K^-1``. The functionals run along in Horner form,
    ``v_{N-1} = f_{N-1} + U_{N-1} K_N^-1 v_N``, from the tail sum
    ``v_{N*} = sum_k R^k f_{N*+k} = (I - R)^-1 g + R (I - R)^-2 h`` (``f_{N*+k} = g + k h``).
    One LU of ``K_N`` per level serves both; ``U`` has at most ``K`` entries per row. The
    top boundary level needs none: ``K*^-1 D_{N*} = G S`` (see below).
    """
    dt = Dg.dtype
    nh, n_star = st.nh, st.n_star
    d = _departure_rates(st, Dg)
    q = lam + d[:nh]
    G = _g_matrix(lam, q, Dg[:nh, :nh])
    # with K* = diag(q) - lam G: (I - R)^-1 = K* Km^-1, Km = K* - lam I, R = lam K*^-1
    Km = jnp.diag(q - lam) - lam * G
    g = base[:nh] + n_star * slope[:nh]
    # R (I - R)^-1 1 = lam Km^-1 1 (the slope columns are 0 or 1 on the head phases), and
    # v_{N*} = K* z is needed only as K*^-1 v_{N*} = z
    z = _linsolve(Km, g + lam * _linsolve(Km, jnp.ones(nh, dt))[:, None] * slope[:nh])

    slots = jnp.asarray(st.slots)
    up_slot, up_cls = jnp.asarray(st.up_slot), jnp.asarray(st.up_cls)
    pad_index = st.n_global - 1
    p_ext = jnp.concatenate([p, jnp.ones(1, dt), jnp.zeros(1, dt)])  # weight classes
    n_heads = jnp.asarray((st.slots < nh).sum(1))

    def level(P, M, X, N):
        """``K_N = diag(lam + d) - U_N X_D`` and ``v_N = f_N + U_N X_v`` from
        ``X = K_{N+1}^-1 [D_{N+1}, v_{N+1}]``. ``U_N X``: one target per head row; the (at most
        ``M``) none rows after the heads reveal a class, one target each (rows of other
        weights in that window weigh 0)."""
        s0 = lax.dynamic_index_in_dim(slots, N, keepdims=False)[:P]
        idx = jnp.minimum(lax.dynamic_index_in_dim(up_slot, N, keepdims=False)[:P], P - 1)
        wgt = lam * p_ext[lax.dynamic_index_in_dim(up_cls, N, keepdims=False)[:P]]
        Y = wgt[:, :1] * X[idx[:, 0]]
        start = n_heads[N]
        i, w = (lax.dynamic_slice_in_dim(x[:, 1:], start, M) for x in (idx, wgt))
        rows = lax.dynamic_slice_in_dim(Y, start, M) + jnp.einsum("ik,ikj->ij", w, X[i])
        Y = lax.dynamic_update_slice_in_dim(Y, rows, start, axis=0)
        valid = s0 != pad_index
        K_N = jnp.diag(jnp.where(valid, lam + d[s0], 1.0)) - Y[:, :P]
        f_N = jnp.where(valid[:, None], base[s0] + N * slope[s0], 0.0)
        return K_N, f_N + Y[:, P:]

    def step(P, M, carry, N):
        K_next, v_next = carry  # K_{N+1}, v_{N+1} in the slots of level N + 1
        s0, s1 = (lax.dynamic_index_in_dim(slots, N + i, keepdims=False)[:P] for i in range(2))
        down = Dg[s1[:, None], s0[None, :]]  # D_{N+1}: level N + 1 -> level N
        return level(P, M, _linsolve(K_next, jnp.concatenate([down, v_next], axis=1)), N), None

    # Level N* - 1 without a solve: D_{N*} = D_HH S, where S merges the head phases (n, k)
    # with |n| = N* - 1 (nothing fits after them) into the none phase n, so
    # K*^-1 D_{N*} = G S (K* G = D_HH), and K*^-1 v_{N*} = z.
    (top, *rest), P, M = _level_groups(st)[0]
    GS = jnp.zeros((nh, P), dt).at[:, _top_columns(st)].add(G)
    X = jnp.concatenate([GS, z], axis=1)
    carry = level(P, M, _resize(X, P), top)
    groups = [(np.asarray(rest, dtype=int), P, M)] + _level_groups(st)[1:]
    for group, P, M in groups:
        carry = (_resize(carry[0], P, eye=True), _resize(carry[1], P))
        carry, _ = lax.scan(functools.partial(step, P, M), carry, jnp.asarray(group))
    v0 = carry[1]
    # level 0 has one phase (the empty system) in slot 0
    return v0[0] / v0[0, 0]


def _top_columns(st: _Structure) -> np.ndarray:
    """For each head phase ``(n, k)`` (a column of ``D_HH``), its slot at level ``N* - 1``: its
    own if ``|n| <= N* - 2``, else that of the none phase ``n``."""
    top = st.slots[st.n_star - 1]
    slot_of = np.full(st.n_global, -1, dtype=np.int64)
    slot_of[top] = np.arange(len(top))
    own = slot_of[np.arange(st.nh)]
    return np.where(own >= 0, own, slot_of[st.nh + st.head_n])


def _resize(x: Array, P: int, eye: bool = False) -> Array:
    """Cut or pad the slot axes of ``x`` (a level's valid slots come first, so only padding
    is cut); a matrix (``eye``) gets identity rows for new padding slots, keeping it regular."""
    n = x.shape[0]
    if n >= P:
        return x[:P, :P] if eye else x[:P]
    if not eye:
        return jnp.pad(x, ((0, P - n), (0, 0)))
    out = jnp.eye(P, dtype=x.dtype)
    return out.at[:n, :n].set(x)


def _level_groups(st: _Structure, n_groups: int = 8) -> list[tuple[np.ndarray, int, int]]:
    """Boundary levels ``N* - 1, ..., 0`` in at most ``n_groups`` runs, each with the slot count
    its steps need (levels ``N`` and ``N + 1``), so that small low levels are not padded to the
    size of the repeating block, and the largest number of none phases of its levels."""
    sizes = (st.slots != st.n_global - 1).sum(1)
    nones = sizes - (st.slots < st.nh).sum(1)
    levels = np.arange(st.n_star - 1, -1, -1)
    out = []
    for g in np.array_split(levels, min(n_groups, len(levels))):
        lo, hi = int(g.min()), int(g.max())
        out.append((g, int(sizes[lo : hi + 2].max()), int(nones[g].max())))
    return out
