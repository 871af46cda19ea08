"""The step formulas of the recurrence engine: one job of the multiserver-job stochastic
recurrence (MJSRE) and its variants, once each.

State: the ordered workload vector ``W`` (ascending, length ``s``) seen by an arriving job,
``mjsre`` eq. (2)::

    W_{n+1} = R( S(alpha_n, W_n) + sigma_n L(alpha_n) - tau_n U )^+,
    S(alpha, W)^i = W^alpha v W^i,  L(alpha)^i = 1{i <= alpha}.

After ``S + sigma L`` the vector is sorted except for the block of ``alpha`` equal values
``v = W^alpha + sigma`` in front, so ``R`` is an O(s) merge instead of a sort: with ``X = W``
shifted left by ``alpha`` and padded with ``+inf``,

    R(S(alpha, W) + sigma L(alpha)) = min(X, max(v, W))      (elementwise).

``alpha`` counts servers (1-based: the job waits ``W[alpha - 1]`` in 0-based indexing).

Per-job metrics (Section 6, with ``docs/errata.md`` item 1): the waiting time
``W^alpha``; the HOL idle server-time reserved by the job, ``sum_{i <= alpha} (W^alpha - W^i)``
(untruncated: these servers idle from ``W^i`` to ``W^alpha`` while the job is blocked); and the
free idle server-time before the next arrival, ``sum_i (tau - X^i)^+`` with ``X`` the merged
vector before subtracting ``tau`` (idle with an empty queue). Their sum over jobs divided by
elapsed time is the mean number of idle servers, which equals ``s - lam E[alpha sigma]``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int
from numpy import cumsum as np_cumsum

__all__ = [
    "StepInfo",
    "mjsre_advance",
    "mmjsre_advance",
    "smjsre_advance",
    "mjsre_merge",
    "mjsre_step",
    "mjsre_step_info",
    "wait_time",
    "mmjsre_step",
    "mmjsre_step_info",
    "random_subset",
    "smjsre_step",
    "smjsre_step_info",
    "ra_step",
    "ra_step_info",
    "core_groups",
    "type_rows",
    "fcfs_rows_wait",
    "fcfs_rows_step",
    "fcfs_rows_next_wait",
]


class StepInfo(NamedTuple):
    """Per-job quantities produced by a step.

    Attributes:
        wait: waiting time of the job (``W^alpha``; eq. (14)'s ``W-hat`` for specific servers).
        hol: HOL idle server-time reserved by the job (per resource type for eq. (15)).
        free: idle server-time with an empty queue until the next arrival (per type).
    """

    wait: Float[Array, ""]
    hol: Float[Array, "..."]
    free: Float[Array, "..."]


def wait_time(W: Float[Array, " s"], alpha: Int[ArrayLike, ""]) -> Float[Array, ""]:
    """Waiting time ``W^alpha`` (``W[alpha - 1]``) of a job asking ``alpha >= 1`` servers."""
    return jax.lax.dynamic_index_in_dim(W, jnp.asarray(alpha) - 1, keepdims=False)


def _shift_left(W, alpha):
    pad = jnp.full_like(W, jnp.inf)
    return jax.lax.dynamic_slice_in_dim(jnp.concatenate([W, pad]), jnp.asarray(alpha), W.shape[0])


def mjsre_merge(
    W: Float[Array, " s"], alpha: Int[ArrayLike, ""], sigma: Float[ArrayLike, ""]
) -> Float[Array, " s"]:
    """``R(S(alpha, W) + sigma L(alpha))`` in O(s): the pile step of eq. (7) (tau = 0).

    Args:
        W: ascending workload vector.
        alpha: servers asked, ``1 <= alpha <= s``.
        sigma: service time.

    Returns:
        The ascending vector after the job took the ``alpha`` least loaded servers.
    """
    return _merge(W, alpha, wait_time(W, alpha) + sigma)


def _merge(W, alpha, v):
    """``min(X, max(v, W))`` (module docstring): the ``alpha`` least loaded servers of the
    ascending ``W`` all become ``v`` (``v >= W^alpha``), the result ascending, in O(s)."""
    return jnp.minimum(_shift_left(W, alpha), jnp.maximum(v, W))


def mjsre_step(
    W: Float[Array, " s"],
    alpha: Int[ArrayLike, ""],
    sigma: Float[ArrayLike, ""],
    tau: Float[ArrayLike, ""],
) -> Float[Array, " s"]:
    """One MJSRE step, eq. (2): ``R(S(alpha, W) + sigma L(alpha) - tau U)^+`` in O(s).

    Args:
        W: ascending workload vector found by job n.
        alpha: servers asked by job n (``1 <= alpha <= s``).
        sigma: its service time.
        tau: time to the next arrival.

    Returns:
        The ascending workload vector found by job n + 1.
    """
    return jnp.maximum(mjsre_merge(W, alpha, sigma) - tau, 0)


def mjsre_advance(W, alpha, sigma, tau):
    """Eq. (2) before the positive part, with the job's wait and HOL vector: ``(X, w, hol)``,
    ``X = R(S(alpha, W) + sigma L(alpha)) - tau`` (``W_{n+1} = X^+``, free idle time
    ``sum (-X)^+``), ``w = W^alpha``, ``hol^i = (W^alpha - W^i) 1{i <= alpha} = (w - W^i)^+``
    (``W`` ascending). The one FCFS step every driver builds on."""
    w = wait_time(W, alpha)
    return mjsre_merge(W, alpha, sigma) - tau, w, jnp.maximum(w - W, 0)


def _info(X, w, hol) -> tuple[Float[Array, " s"], StepInfo]:
    return jnp.maximum(X, 0), StepInfo(w, jnp.sum(hol), jnp.sum(jnp.maximum(-X, 0)))


def mjsre_step_info(W, alpha, sigma, tau) -> tuple[Float[Array, " s"], StepInfo]:
    """:func:`mjsre_step` plus the job's :class:`StepInfo` (wait, HOL and free idle time)."""
    return _info(*mjsre_advance(W, alpha, sigma, tau))


# ---------------------------------------------------------------- multiple resource types
def mmjsre_advance(W, alphas, sigma, tau, sizes: tuple[int, ...]):
    """Eq. (15) before the positive part on the concatenation ``W`` of ``T`` ascending vectors
    of lengths ``sizes``: ``(X, w, hol)`` as :func:`mjsre_advance` (``X`` and ``hol``
    concatenated over the types).

    The job waits ``w = max_t W_t^{alpha_t}`` (types with ``alpha_t = 0`` ignored), then takes
    the ``alpha_t`` least loaded servers of every type until ``w + sigma``.
    """
    alphas = jnp.asarray(alphas)
    parts = jnp.split(W, tuple(np_cumsum(sizes)[:-1]))
    w = jnp.zeros((), W.dtype)
    for t, Wt in enumerate(parts):
        w = jnp.maximum(w, jnp.where(alphas[t] > 0, wait_time(Wt, jnp.maximum(alphas[t], 1)), 0))
    hol = jnp.concatenate(
        [jnp.where(jnp.arange(Wt.shape[0]) < alphas[t], w - Wt, 0) for t, Wt in enumerate(parts)]
    )
    X = jnp.concatenate([_merge(Wt, alphas[t], w + sigma) for t, Wt in enumerate(parts)])
    return X - tau, w, hol


def mmjsre_step_info(Ws: tuple, alphas, sigma, tau) -> tuple[tuple, StepInfo]:
    """Multi-resource step, eq. (15) (:func:`mmjsre_advance`), with per-type HOL and free idle
    time.

    Args:
        Ws: tuple of ``T`` ascending vectors (lengths ``s_t``).
        alphas: ``(T,)`` ints, ``0 <= alphas[t] <= s_t``, not all zero.
        sigma, tau: service and inter-arrival times.

    Returns:
        ``(Ws_next, StepInfo(wait, hol (T,), free (T,)))``.
    """
    sizes = tuple(int(W.shape[0]) for W in Ws)
    X, w, hol = mmjsre_advance(jnp.concatenate(Ws), alphas, sigma, tau, sizes)
    cut = tuple(np_cumsum(sizes)[:-1])
    Xs, hols = jnp.split(X, cut), jnp.split(hol, cut)
    out = tuple(jnp.maximum(x, 0) for x in Xs)
    frees = jnp.stack([jnp.sum(jnp.maximum(-x, 0)) for x in Xs])
    return out, StepInfo(w, jnp.stack([jnp.sum(h) for h in hols]), frees)


def mmjsre_step(Ws: tuple, alphas, sigma, tau) -> tuple:
    """Multi-resource MJSRE step, eq. (15) (see :func:`mmjsre_step_info`)."""
    return mmjsre_step_info(Ws, alphas, sigma, tau)[0]


# ---------------------------------------------------------------- specific servers / RA
def random_subset(u: Float[Array, " s"], beta: Int[ArrayLike, ""]) -> Array:
    """Boolean mask of a uniformly random subset of size ``beta`` of ``s`` positions.

    The ``beta`` positions with the smallest uniforms ``u`` (ties have probability 0).
    """
    rank = jnp.sum(u[None, :] < u[:, None], axis=1)
    return rank < beta


def smjsre_advance(W, alpha, beta, sigma, tau, u):
    """Eq. (14) before the positive part: ``(X, w, hol)`` as :func:`mjsre_advance`.

    The job asks ``alpha`` arbitrary servers plus ``beta`` specific ones, the specific set
    ``S`` being uniformly random (drawn from the ``s`` uniforms ``u``): it takes ``S`` and the
    ``alpha`` least loaded servers outside ``S``, waits ``W-hat = max(max_S W, W^{i*})`` and
    holds all of them until ``W-hat + sigma``. The vector is re-sorted (O(s log s); this variant
    is not on the fast path).
    """
    spec = random_subset(u, beta)
    k = jnp.cumsum(~spec)
    chosen = spec | (~spec & (k <= alpha))
    w = jnp.max(jnp.where(chosen, W, 0))
    hol = jnp.where(chosen, w - W, 0)
    return jnp.sort(jnp.where(chosen, w + sigma, W)) - tau, w, hol


def smjsre_step_info(W, alpha, beta, sigma, tau, u) -> tuple[Float[Array, " s"], StepInfo]:
    """Specific-server step, eq. (14) (:func:`smjsre_advance`), with the job's
    :class:`StepInfo`.

    Args:
        W: ascending workload vector.
        alpha: arbitrary servers asked (``>= 0``).
        beta: specific servers asked (``alpha + beta >= 1``, ``<= s``).
        sigma, tau: service and inter-arrival times.
        u: ``(s,)`` uniforms choosing the specific set.

    Returns:
        ``(W_next, StepInfo)``.
    """
    return _info(*smjsre_advance(W, alpha, beta, sigma, tau, u))


def smjsre_step(W, alpha, beta, sigma, tau, u) -> Float[Array, " s"]:
    """Specific-server MJSRE step, eq. (14) (see :func:`smjsre_step_info`)."""
    return smjsre_step_info(W, alpha, beta, sigma, tau, u)[0]


def ra_step_info(W, alpha, sigma, tau, u) -> tuple[Float[Array, " s"], StepInfo]:
    """Random-assignment step (``mjsre`` Appendix A) with its :class:`StepInfo`.

    The job takes ``alpha`` servers chosen uniformly at random (not the least loaded ones),
    i.e. eq. (14) with ``alpha`` specific and no arbitrary servers.
    """
    return smjsre_step_info(W, 0, alpha, sigma, tau, u)


def ra_step(W, alpha, sigma, tau, u) -> Float[Array, " s"]:
    """Random-assignment MJSRE step (Appendix A)."""
    return ra_step_info(W, alpha, sigma, tau, u)[0]


# ---------------------------------------------------------------- the FCFS step on rows
# The forward scan's form of eq. (2) / (15): a batch of workload vectors is ``(s, R)``, row i
# holding coordinate i of every replication, so a job is elementwise work on rows of R lanes
# and the shift of the merge is a select among the few shifts the classes' server counts
# allow (static slices: no gather, no sort).


def core_groups(workload) -> tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]:
    """Per resource type, the distinct server counts ``d`` the classes ask for, each with
    the classes that ask for it: ``((d, classes), ...)`` (static)."""
    c = np.asarray(workload.cores, np.int64)
    return tuple(
        tuple((int(d), tuple(np.nonzero(c[:, t] == d)[0].tolist())) for d in np.unique(c[:, t]))
        for t in range(c.shape[1])
    )


def _masks(cls, groups):
    """``[cls asks for d servers]`` for the ``(d, classes)`` of ``groups``."""
    out = []
    for _, classes in groups:
        m = cls == classes[0]
        for c in classes[1:]:
            m = m | (cls == c)
        out.append(m)
    return out


def _choose(eqs, options):
    """``options[k]`` where ``eqs[k]`` (the first option where none holds): a select chain."""
    out = options[0]
    for e, o in zip(eqs[1:], options[1:], strict=True):
        out = jnp.where(e, o, out)
    return out


def _merge_rows(X, W, v, tau):
    """``max(min(X, max(v, W)) - tau, 0)`` elementwise (eq. (2) with the merge
    :func:`_merge` above), with compare-and-select for min and max: the same values here (no NaN;
    no negative zero: ``X, W, v >= 0`` and ``a - tau = 0`` is ``+0``), without the NaN and
    signed-zero handling of XLA's min/max (3 instructions more each on XLA:CPU)."""
    m = jnp.where(v > W, v, W)
    x = jnp.where(X < m, X, m) - tau
    return jnp.where(x > 0, x, 0)


def type_rows(W, sizes):
    """The row blocks of the resource types of ``(s, R)`` states."""
    return jnp.split(W, tuple(int(i) for i in np.cumsum(sizes)[:-1]), axis=0)


def fcfs_rows_wait(W, cls, *, sizes, groups):
    """Waits ``w = max_t W_t^{alpha_t}`` (eq. (15); ``W^alpha`` for one type) of jobs of
    classes ``cls`` ``(R,)`` on the states ``W`` ``(s, R)``: the ascending vectors of the
    types stacked as row blocks of ``sizes``; ``groups``: :func:`core_groups`. A select
    among the few rows ``alpha`` can name, no gather."""
    w = None
    for Wt, grp in zip(type_rows(W, sizes), groups, strict=True):
        eq, vals = _masks(cls, grp), [d for d, _ in grp]
        wt = _choose(eq, [Wt[d - 1] if d > 0 else jnp.zeros_like(W[0]) for d in vals])
        w = wt if w is None else jnp.maximum(w, wt)
    return w if len(sizes) == 1 else jnp.maximum(w, 0)


def fcfs_rows_step(W, w, cls, sigma, tau, *, sizes, groups):
    """One FCFS job on all replications at once (eq. (2); eq. (15) for several types), its
    wait ``w`` (:func:`fcfs_rows_wait`) given.

    With ``d = alpha_t`` and ``v = w + sigma``, the merge :func:`_merge` is
    ``min(X, max(v, W_t))`` with ``X`` the rows of ``W_t`` shifted up by ``d`` (padded with
    ``+inf``): a select among the ``len(groups[t])`` static shifts. The HOL idle server-time
    of the job (Section 6, ``docs/errata.md`` item 1), ``sum_{i <= d} (w - W_t^i)``, is a
    select among partial sums of non-negative terms.

    Returns:
        ``(W_next (s, R), hol (T, R))``.
    """
    v = w + sigma
    new, hol = [], []
    for Wt, grp in zip(type_rows(W, sizes), groups, strict=True):
        eq, vals = _masks(cls, grp), [d for d, _ in grp]
        pad = jnp.full_like(Wt, jnp.inf)
        X = _choose(eq, [jnp.concatenate([Wt[d:], pad[:d]]) for d in vals])
        new.append(_merge_rows(X, Wt, v, tau))
        partial, acc = [], jnp.zeros_like(w)
        for i in range(max(vals) + 1):
            if i in vals:
                partial.append(acc)
            if i < Wt.shape[0]:
                acc = acc + (w - Wt[i])
        hol.append(_choose(eq, partial))
    return jnp.concatenate(new), jnp.stack(hol)


def fcfs_rows_next_wait(W, w, cls, sigma, tau, cls_next, *, sizes, groups):
    """``fcfs_rows_wait(fcfs_rows_step(W, w, cls, sigma, tau)[0], cls_next)`` (bit for
    bit), written on the rows of ``W`` so that XLA:CPU fuses it without storing the shifted
    copies of ``W`` the step builds: only the rows the next job can name are merged."""
    v = w + sigma
    wn = None
    for Wt, grp in zip(type_rows(W, sizes), groups, strict=True):
        eq, vals = _masks(cls, grp), [d for d, _ in grp]
        n = Wt.shape[0]

        def row(r, Wt=Wt, eq=eq, vals=vals, n=n):
            x = _choose(eq, [Wt[r + d] if r + d < n else jnp.full_like(w, jnp.inf) for d in vals])
            return _merge_rows(x, Wt[r], v, tau)

        rows = [row(d - 1) if d > 0 else jnp.zeros_like(w) for d in vals]
        wt = _choose(_masks(cls_next, grp), rows)
        wn = wt if wn is None else jnp.maximum(wn, wt)
    return wn if len(sizes) == 1 else jnp.maximum(wn, 0)
