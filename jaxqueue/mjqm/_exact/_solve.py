"""The numbers of the exponential QBD: the global down matrix, the functionals averaged, the
saturated departure rate ``lambda_c`` and the level reduction from the top
(``docs/concepts/exact.md``)."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array

from ._linalg import _g_matrix, _linsolve
from ._structure import _Structure


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


def _solve(st: _Structure, Dg, p, base, slope, lam, n_groups: int = 8) -> Array:
    """``E[f]`` under the stationary law, for every column of ``f = base + N * slope``
    (the boundary levels in ``n_groups`` runs: :func:`_level_groups`).

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
    (top, *rest), P, M = _level_groups(st, n_groups)[0]
    GS = jnp.zeros((nh, P), dt).at[:, _top_columns(st)].add(G)
    X = jnp.concatenate([GS, z], axis=1)
    carry = level(P, M, _resize(X, P), top)
    groups = [(np.asarray(rest, dtype=int), P, M)] + _level_groups(st, n_groups)[1:]
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


def _level_groups(st: _Structure, n_groups: int) -> list[tuple[np.ndarray, int, int]]:
    """Boundary levels ``N* - 1, ..., 0`` in at most ``n_groups`` runs, each with the slot count
    its steps need (levels ``N`` and ``N + 1``), so that small low levels are not padded to the
    size of the repeating block, and the largest number of none phases of its levels. Each run
    is a scan body compiled (and, under ``grad``, transposed) on its own: more runs pad less
    and compile more."""
    sizes = (st.slots != st.n_global - 1).sum(1)
    nones = sizes - (st.slots < st.nh).sum(1)
    levels = np.arange(st.n_star - 1, -1, -1)
    out = []
    for g in np.array_split(levels, min(n_groups, len(levels))):
        lo, hi = int(g.min()), int(g.max())
        out.append((g, int(sizes[lo : hi + 2].max()), int(nones[g].max())))
    return out
