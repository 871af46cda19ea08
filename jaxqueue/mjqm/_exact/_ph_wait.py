"""Waiting-time distributions of the exact FCFS MJQM with phase-type services.

The construction of :mod:`._wait` on the phase-type QBD of :mod:`._ph_levels`: a tagged
arrival's wait is the time until the jobs ahead of it (started from the stationary law, PASTA)
reach a none phase ``n`` with ``a.n + a_c <= s``; between arrivals those jobs move by the down
transitions (completions and cascades) and the local ones (phase changes), both kept here.
The levels from ``N*`` on are summed in closed form as there: ``A0 = lam I`` still commutes
with ``R``, so with ``Y = A1 + lam I + lam G = L_HH - diag(o) + lam G`` the mass at level
``N* + j`` at time ``t`` is ``pi_{N*} e^{tY} R^j``, and at and above ``N*`` it is
``pi_{N*} e^{tY} (I - R)^-1 1``. Uniformised at ``Lambda = max o`` (``o`` the completion plus
phase-change rate); the steps, tails, quantiles and their error bounds are those of
:class:`._wait.WaitDistribution`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array

from ._linalg import _linsolve
from ._ph_levels import ph_levels
from ._ph_solve import _factors, _row_values, ph_numbers, ph_stationary
from ._ph_structure import PHKey
from ._wait import WaitDistribution, _Chain, _check_q, _check_t, drive


@functools.lru_cache(maxsize=8)
def _tables(key: PHKey):
    """The down transitions between the slots of levels ``N`` and ``N - 1`` and the local ones
    within each level ``0 .. N*`` (flat ``level * P + slot``; ``tr`` indexes the down rows,
    then the local rows), and the ``(levels, P, K)`` masks of the states where a class-``c``
    job waits (0 at level ``N*``, counted through ``(I - R)^-1 1``)."""
    st = ph_levels(key)
    L = st.n_star + 1
    slots = st.slots
    P = slots.shape[1]
    pad = st.n_global - 1
    slot_of = np.full((L, st.n_global), -1, dtype=np.int64)
    for N in range(L):
        ok = np.nonzero(slots[N] != pad)[0]
        slot_of[N, slots[N, ok]] = ok
    src, dst, tr = [], [], []
    n_down = len(st.down.src)
    for N in range(L):
        for rows, lo, base in ((st.down, N - 1, 0), (st.local, N, n_down)):
            if lo < 0:
                continue
            i, j = slot_of[N][rows.src], slot_of[lo][rows.dst]
            keep = np.nonzero((i >= 0) & (j >= 0))[0]
            src.append(N * P + i[keep])
            dst.append(lo * P + j[keep])
            tr.append(base + keep)
    a_c = np.asarray(key.cores)
    used = st.global_nvec @ key.type_cores
    waits = (used[:, None] + a_c[None, :] > key.s).astype(float)
    waits[: st.nh] = 1.0
    waits[pad] = 0.0
    mask = waits[slots]
    mask[st.n_star] = 0.0
    cat = [np.concatenate(x).astype(np.int32) for x in (src, dst, tr)]
    return (st, *cat, mask)


@functools.partial(jax.jit, static_argnums=(0,))
def _prepare(key: PHKey, forms, p: Array, lam: Array):
    """The uniformised chain of the jobs ahead and its start (the stationary law)."""
    st, src, dst, tr, mask = _tables(key)
    num = ph_numbers(st, forms, p)
    nh, n_star = st.nh, st.n_star
    pis, a, _, G, k_star = ph_stationary(st, num, lam)
    # (I - R)^-1 1 = (K* - lam I)^-1 K* 1
    h = _linsolve(k_star - lam * jnp.eye(nh, dtype=p.dtype), k_star.sum(1))
    total = pis[:n_star].sum() + a.sum()
    out = num.out
    rate = lax.stop_gradient(jnp.max(out))
    ext = _factors(st, forms, p)[0]
    vals = jnp.concatenate([_row_values(st.down, *ext), _row_values(st.local, *ext)])
    chain = _Chain(
        rate=rate,
        keep=1.0 - out[jnp.asarray(st.slots)] / rate,
        vals=vals / rate,
        lam_g=lam * G / rate,
        h=h,
        mask=jnp.asarray(mask, p.dtype),
        src=jnp.asarray(src),
        dst=jnp.asarray(dst),
        tr=jnp.asarray(tr),
        n_star=n_star,
        nh=nh,
    )
    return chain, pis / total


def ph_wait_distribution(
    key: PHKey, forms, p: Array, lam: Array, *, steps=None, quantiles=(), times=()
) -> WaitDistribution:
    """The :class:`WaitDistribution` of every class for the phase-type workload of structure
    ``key``, phase forms ``forms`` and class probabilities ``p`` at the (stable) arrival rate
    ``lam``; ``steps``, ``quantiles`` and ``times`` as in :func:`._wait.wait_distribution`."""
    quantiles = [_check_q(q) for q in quantiles]
    times = [_check_t(t) for t in times]
    chain, b = _prepare(key, forms, p, lam)
    return drive(chain, b, p, (forms, p, lam), steps=steps, quantiles=quantiles, times=times)
