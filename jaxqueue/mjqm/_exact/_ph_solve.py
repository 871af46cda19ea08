"""The numbers of the phase-type QBD of :mod:`._ph_levels`: dense global matrices (down ``D``,
local ``L``, up ``U``) from the phase forms and the class probabilities, the stationary law of
every level, and the metrics of :class:`ExactResult`.

The repeating blocks are ``A0 = lam I``, ``A1 = L_HH - diag(lam + o)`` (``o`` the total rate of
completions and phase changes) and ``A2 = D_HH``; ``G`` solves ``A2 + A1 G + A0 G^2 = 0``
(:func:`._linalg._g_matrix_general`). The levels are reduced from the top, ``K_{N*} = -(A1 +
lam G)``, ``R_N = U_N K_{N+1}^-1``, ``K_N = diag(lam + o_N) - L_N - R_N D_{N+1}``, then
``pi_0 = e_0`` and ``pi_{N+1} = pi_N R_N``; the levels from ``N*`` on sum in closed form,
``sum_k pi_{N*} R^k = pi_{N*} (I - R)^-1`` and ``sum_k k pi_{N*} R^k = pi_{N*} R (I - R)^-2``
with ``R = lam K_{N*}^-1``. ``lambda_c = phi . d`` with ``phi`` stationary for
``D_HH + L_HH - diag(o)`` (``mjsre`` Theorem 5.1). Differentiable in ``lam``, the phase forms
and the class probabilities (LU solves with an implicit adjoint, ``G`` by the implicit
function theorem).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array

from ._linalg import _g_matrix_general, _linsolve
from ._ph import phase_forms
from ._ph_levels import PHLevels, Rows
from ._ph_structure import _pairs


class PHNumbers(NamedTuple):
    """The dense global matrices of one phase-type workload."""

    D: Array  # down (completions and cascades)
    L: Array  # local (phase changes), no diagonal
    U: Array  # up, per unit of lam
    out: Array  # per global phase: completion plus phase-change rate
    dep: Array  # per global phase: completion rate


def _row_values(rows: Rows, r, alpha, W, p) -> Array:
    c = jnp.asarray(rows.coef, r.dtype)
    return c * r[rows.rate] * alpha[rows.entry] * W[rows.m] * p[rows.stop]


def _factors(st: PHLevels, forms, p: Array):
    """The factors of the row rates: ``r`` (exits, phase changes, 1), ``alpha`` (entry phases,
    1), ``W`` (the weight of a revealed multiset, per service vector), ``p`` (classes, 1), and
    the per-type exit and total rates."""
    dt = p.dtype
    alpha = jnp.concatenate([a.astype(dt) for a, _ in forms])
    T = jax.scipy.linalg.block_diag(*(T.astype(dt) for _, T in forms))
    exits = -T.sum(1)
    pairs = jnp.asarray(_pairs(st.key).reshape(-1, 2))
    one = jnp.ones(1, dt)
    r = jnp.concatenate([exits, T[pairs[:, 0], pairs[:, 1]], one])
    w = p[jnp.asarray(st.key.type_class)] * alpha
    power = int(st.nvec.max(initial=0))
    pw = jnp.stack([jnp.ones_like(w)] + [w] * power, axis=1).cumprod(axis=1)
    W = jnp.prod(pw[jnp.arange(w.shape[0])[None, :], jnp.asarray(st.nvec)], axis=1)
    ext = (r, jnp.concatenate([alpha, one]), W, jnp.concatenate([p, one]))
    return ext, exits, -jnp.diag(T)


def ph_numbers(st: PHLevels, forms, p: Array) -> PHNumbers:
    """The dense ``(G, G)`` global matrices of ``st`` for the phase forms ``forms`` and the
    class probabilities ``p``."""
    ext, exits, total = _factors(st, forms, p)
    G = st.n_global
    dense = {}
    for name in ("down", "local", "up"):
        rows = getattr(st, name)
        vals = _row_values(rows, *ext)
        dense[name] = jnp.zeros((G, G), p.dtype).at[rows.src, rows.dst].add(vals)
    gn = jnp.asarray(st.global_nvec, p.dtype)
    return PHNumbers(
        D=dense["down"], L=dense["local"], U=dense["up"], out=gn @ total, dep=gn @ exits
    )


def ph_lambda_c_dense(st: PHLevels, num: PHNumbers) -> Array:
    """``phi . d`` with ``phi`` the stationary law of the saturated phase process."""
    nh = st.nh
    Q = num.D[:nh, :nh] + num.L[:nh, :nh]
    Q = Q - jnp.diag(num.out[:nh])
    A = Q.at[:, 0].set(1.0)
    rhs = jnp.zeros(nh, Q.dtype).at[0].set(1.0)
    return _linsolve(A.T, rhs) @ num.dep[:nh]


def ph_stationary(st: PHLevels, num: PHNumbers, lam: Array):
    """``(pis, a, b, G, K*)``: the unnormalised stationary vectors of levels ``0 .. N*``
    (``(N* + 1, P)`` in their slots), ``a = pi_{N*} (I - R)^-1`` and ``b = pi_{N*} R (I -
    R)^-2`` (the sums over the levels from ``N*`` on), ``G`` and ``K_{N*}``."""
    nh, n_star = st.nh, st.n_star
    D, L, U, out, _ = num
    dt = D.dtype
    slots = jnp.asarray(st.slots)
    P = slots.shape[1]
    valid = slots != st.n_global - 1
    A1 = L[:nh, :nh] - jnp.diag(lam + out[:nh])
    G = _g_matrix_general(lam, A1, D[:nh, :nh])
    k_star = -(A1 + lam * G)
    k_top = jnp.eye(P, dtype=dt).at[:nh, :nh].set(k_star)

    def step(k_next, N):
        s0, s1 = slots[N], slots[N + 1]
        R = _linsolve(k_next.T, (lam * U[s0[:, None], s1[None, :]]).T).T
        diag = jnp.diag(jnp.where(valid[N], lam + out[s0], 1.0))
        k_N = diag - L[s0[:, None], s0[None, :]] - R @ D[s1[:, None], s0[None, :]]
        return k_N, R

    _, Rs = lax.scan(step, k_top, jnp.arange(n_star - 1, -1, -1))
    pi0 = jnp.zeros(P, dt).at[0].set(1.0)

    def up(pi, R):
        nxt = pi @ R
        return nxt, nxt

    _, pis = lax.scan(up, pi0, Rs[::-1])
    pis = jnp.concatenate([pi0[None], pis], axis=0)
    Km = k_star - lam * jnp.eye(nh, dtype=dt)
    top = pis[n_star, :nh]
    a = _linsolve(Km.T, k_star.T @ top)
    b = lam * _linsolve(Km.T, a)
    return pis, a, b, G, k_star


def _functionals(st: PHLevels, p: Array) -> tuple[Array, Array]:
    """Per global phase: ``f = base + N * slope`` of the quantities averaged (the columns of
    :func:`._solve._functionals`: one, jobs behind the head, someone waits, idle servers, idle
    while someone waits, an arrival waits, ``K`` head classes, ``K`` jobs in service)."""
    dt = p.dtype
    key = st.key
    a_c = np.asarray(key.cores)
    K, nh, nv = len(a_c), st.nh, st.nv
    gn = st.global_nvec
    used = gn @ key.type_cores
    per_class = gn @ np.eye(K)[key.type_class]
    head = np.zeros(st.n_global)
    head[:nh] = 1.0
    cols = np.zeros((st.n_global, 6 + 2 * K))
    cols[:, 0] = 1.0
    cols[:nh, 1] = -gn[:nh].sum(1) - 1.0
    cols[:, 2] = head
    cols[:, 3] = key.s - used
    cols[:, 4] = head * (key.s - used)
    cols[:nh, 5] = 1.0
    cols[np.arange(nh), 6 + st.head_h] = 1.0
    cols[:, 6 + K :] = per_class
    cols[-1] = 0.0
    nofit = used[nh : nh + nv, None] + a_c[None, :] > key.s
    base = jnp.asarray(cols, dt).at[nh : nh + nv, 5].set(jnp.asarray(nofit, dt) @ p)
    slope = np.zeros((st.n_global, 6 + 2 * K))
    slope[:nh, 1] = 1.0
    return base, jnp.asarray(slope, dt)


def ph_metrics(st: PHLevels, num: PHNumbers, p: Array, lam: Array) -> Array:
    """``E[f]`` under the stationary law for every column of :func:`_functionals`."""
    pis, a, b, _, _ = ph_stationary(st, num, lam)
    base, slope = _functionals(st, p)
    slots = jnp.asarray(st.slots)
    n_star, nh = st.n_star, st.nh
    N = jnp.arange(n_star, dtype=p.dtype)[:, None, None]
    f = base[slots[:n_star]] + N * slope[slots[:n_star]]
    low = jnp.einsum("np,npc->c", pis[:n_star], f)
    tail = a @ (base[:nh] + n_star * slope[:nh]) + b @ slope[:nh]
    m = low + tail
    return m / m[0]


def ph_forms(workload) -> tuple[list, Array]:
    """The phase forms and class probabilities of ``workload`` in one float dtype."""
    forms = phase_forms(workload.services)
    p = jnp.asarray(workload.probs)
    dt = jnp.result_type(p, *(f[1] for f in forms), float)
    return [(a.astype(dt), T.astype(dt)) for a, T in forms], p.astype(dt)
