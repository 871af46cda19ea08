"""The forward scan's job loops on ``(s, R)`` states (replications minor): FCFS on rows
(``mjsre`` eq. (2), (15)) and any step object (eq. (14), Appendix A), with the per-job terms
of the Section 6 metrics summed in the loop's carry.

The per-class sums are accumulated in the job loop's carry (no scatter, no reduction over a
job axis) and the waits go to one histogram per device. The FCFS loop is software-pipelined
(:func:`fcfs_jobs`) so that XLA:CPU stores the wait and the inputs of a job once instead of
recomputing them in every fused consumer, and runs two jobs per step on two sets of carry
slots, so that no job copies the state. The total idle server-time of a block follows from
eq. (2) by telescoping (:func:`block_stats`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ....stats import hist_bins
from ..._inputs import pick_by_class
from ._step import fcfs_rows_next_wait, fcfs_rows_step, fcfs_rows_wait, type_rows

__all__ = [
    "kahan_add",
    "fcfs_jobs",
    "policy_jobs",
    "type_sums",
    "job_terms",
    "zero_terms",
    "block_stats",
]


def kahan_add(acc, comp, x):
    y = x - comp
    t = acc + y
    return t, (t - acc) - y


def fcfs_jobs(W, draw, first, length, *, size, sizes, groups, cores, hist, stats=True):
    """Jobs ``first .. first + length - 1`` on the states ``W`` ``(s, R)``, FCFS;
    ``draw(j)`` gives job ``j``'s ``(cls, sigma, tau)`` for all replications; ``groups``:
    :func:`core_groups`, ``cores``: the ``(C, T)`` servers of the classes. ``length``: the
    int ``size`` (a full block: loops of static length), or traced and at most ``size`` (the
    last block of a run: one program for every length).

    Software-pipelined: the carry holds the next job's inputs and wait, computed in the step
    before (:func:`fcfs_rows_next_wait`). A loop-carried value is stored once; computed in
    the step that uses it, XLA:CPU recomputes it in every fused consumer (the wait's select
    chain in every coordinate of the merge and every statistic, the cipher in every input
    field), and inputs drawn for a block of jobs would cost more than the step itself
    (intermediate arrays of the block, the class recomputed in every field).

    Two jobs per loop step, ping-pong: the first job's results go to a second set of carry
    slots (so they are stored once, as loop outputs, not recomputed in the second job's fused
    loops), the second job's back to the first set. The merge reads the state at shifted
    rows, so it cannot write its input buffer: with one job per step XLA:CPU copied the
    state every job; here each job writes the other slot. The block sums take both jobs'
    terms in one fused loop (in job order: the same sums). An odd last job runs alone, and
    full blocks of fewer than 4 jobs one job per step (a loop of one step is inlined by XLA,
    the two jobs then fused into each other's loops: other roundings).

    Returns:
        ``(W_next, sums, bins (size, R))``: the block's sums of :func:`job_terms` (``None``
        without ``stats``) and the histogram bins of the waits
        (:func:`~jaxqueue.stats.hist_bins`; rows from ``length`` on are 0, not jobs).
    """
    kw = dict(sizes=sizes, groups=groups)

    def one(W, w, x, j):
        c, sg, t = x
        nxt = draw(j + 1)
        W2, hol = fcfs_rows_step(W, w, c, sg, t, **kw)
        w2 = fcfs_rows_next_wait(W, w, c, sg, t, nxt[0], **kw)
        if not stats:
            return (W2, w2, nxt), None, None
        held = pick_by_class(cores, c).T  # (T, R) servers held per type
        terms = job_terms(w, c, sg, t, held, hol, len(cores))
        return (W2, w2, nxt), terms, hist_bins(w, c, **hist)

    def add(sums, *terms):
        for tm in terms:
            sums = jax.tree.map(jnp.add, sums, tm)
        return sums

    def pair(a, sums, j):
        b, ta, ba = one(*a, j)
        a, tb, bb = one(*b, j + 1)
        return a, b, (add(sums, ta, tb) if stats else sums), (ba, bb)

    x = draw(first)
    a = (W, fcfs_rows_wait(W, x[0], **kw), x)
    sums = zero_terms(W, sizes, len(cores)) if stats else None
    fixed = isinstance(length, int)
    if fixed and length < 4:  # a loop of one step would be inlined, and the two jobs fused together

        def single(carry, j):
            a, sums = carry
            a, t, bn = one(*a, j)
            return (a, add(sums, t) if stats else sums), bn

        jobs = first + jnp.arange(length, dtype=jnp.int32)
        (a, sums), bins = jax.lax.scan(single, (a, sums), jobs)
        return a[0], sums, bins
    if fixed:
        n2, odd = divmod(length, 2)

        def step(carry, j):
            a, b, sums, ys = pair(carry[0], carry[2], j)
            return (a, b, sums), ys if stats else None

        jobs = first + 2 * jnp.arange(n2, dtype=jnp.int32)
        (a, b, sums), ys = jax.lax.scan(step, (a, a, sums), jobs)
        bins = jnp.stack(ys, axis=1).reshape(2 * n2, *ys[0].shape[1:]) if stats else None
    else:
        n2 = jnp.asarray(length, jnp.int32) // 2
        odd = jnp.asarray(length, jnp.int32) % 2 == 1

        def step(i, carry):
            a, b, sums, ys = pair(carry[0], carry[2], first + 2 * i)
            if not stats:
                return a, b, sums, None
            bins = jax.lax.dynamic_update_slice_in_dim(carry[3], jnp.stack(ys), 2 * i, 0)
            return a, b, sums, bins

        # rows for whole pairs (an odd size has one more)
        bins = jnp.zeros((size + size % 2, W.shape[1]), jnp.int32) if stats else None
        a, b, sums, bins = jax.lax.fori_loop(0, n2, step, (a, a, sums, bins))
    # The second slots must stay loop outputs: XLA drops a loop output that nothing reads
    # and then fuses the first job into the second (recomputed in every fused loop of the
    # second job). So they are read here, in a select whose condition never holds (the
    # states are >= 0; NaN < 0 is false) but is not known to XLA.
    W_b, w_b, (c_b, sg_b, t_b) = b
    keep = W_b + (w_b + c_b.astype(w_b.dtype) + sg_b + t_b)
    a = (jnp.where(a[0][0, 0] < 0, keep, a[0]), *a[1:])

    def last(carry):
        a, sums, bins = carry
        a, t, bn = one(*a, first + 2 * n2)
        if not stats:
            return a, sums, bins
        if fixed:
            return a, add(sums, t), jnp.concatenate([bins, bn[None]])
        return a, add(sums, t), jax.lax.dynamic_update_slice_in_dim(bins, bn[None], 2 * n2, 0)

    if fixed:
        a, sums, bins = last((a, sums, bins)) if odd else (a, sums, bins)
    else:
        a, sums, bins = jax.lax.cond(odd, last, lambda c: c, (a, sums, bins))
        bins = None if bins is None else bins[:size]
    return a[0], sums, bins


def policy_jobs(step, W, xs, length, *, sizes, n_classes, hist, stats=True):
    """:func:`fcfs_jobs` for any step object (specific servers, random assignment, Appendix A):
    ``step.advance`` mapped over the replication columns of ``W``, on the first ``length`` of a
    block's inputs ``xs = (cls, held (L, T, R), sigma, tau, alpha, extra)`` (an int: all L,
    or traced) with the step's ``alpha`` (``Step.job_alpha``) and uniforms (a slow path: the
    step sorts). The bins come back ``(L, R)``, rows from ``length`` on 0."""
    splits = tuple(int(i) for i in np.cumsum(sizes)[:-1])
    advance = jax.vmap(step.advance, in_axes=(1, 0, 0, 0, 0), out_axes=(1, 0, 1))

    def job(W, sums, x):
        c, held, sg, t, a, u = x
        X, w, hol = advance(W, a, sg, t, u)
        if not stats:
            return jnp.maximum(X, 0), sums, None
        hol = jnp.stack([h.sum(axis=0) for h in jnp.split(hol, splits, axis=0)])
        sums = jax.tree.map(jnp.add, sums, job_terms(w, c, sg, t, held, hol, n_classes))
        return jnp.maximum(X, 0), sums, hist_bins(w, c, **hist)

    sums = zero_terms(W, sizes, n_classes) if stats else None
    if isinstance(length, int):

        def scan_step(carry, x):
            W, sums, bn = job(*carry, x)
            return (W, sums), bn

        (W, sums), bins = jax.lax.scan(scan_step, (W, sums), xs)
        return W, sums, bins

    def loop_step(i, carry):
        W, sums, bins = carry
        W, sums, bn = job(W, sums, tuple(v[i] for v in xs))
        if stats:
            bins = jax.lax.dynamic_update_slice_in_dim(bins, bn[None], i, 0)
        return W, sums, bins

    bins = jnp.zeros(xs[0].shape, jnp.int32) if stats else None
    return jax.lax.fori_loop(0, jnp.asarray(length, jnp.int32), loop_step, (W, sums, bins))


def type_sums(W, sizes):
    """Per-type sums of the rows of ``(s, R)`` states: ``(T, R)``."""
    return jnp.stack([p.sum(axis=0) for p in type_rows(W, sizes)])


def job_terms(wait, cls, sigma, tau, held, hol, n_classes):
    """One job's terms of the block sums (``(R,)`` rows, state dtype): ``(4, C, R)`` by class
    (wait, squared wait, system time, 1; zero in the other classes) and ``(1 + 2 T, R)``
    (inter-arrival time, work ``alpha_t sigma`` and HOL idle time per type). Accumulated in
    the job loop's carry: elementwise over the replications, in job order (a scatter-add or
    a reduction over the job axis costs several times more on XLA:CPU)."""
    q = jnp.stack([wait, wait * wait, wait + sigma, jnp.ones_like(wait)])
    mask = cls == jnp.arange(n_classes, dtype=cls.dtype)[:, None]
    work = held.astype(wait.dtype) * sigma
    return jnp.where(mask[None], q[:, None], 0), jnp.concatenate([tau[None], work, hol])


def zero_terms(W, sizes, n_classes):
    """Zero block sums of :func:`job_terms` for ``(s, R)`` states."""
    R, T = W.shape[1], len(sizes)
    return jnp.zeros((4, n_classes, R), W.dtype), jnp.zeros((1 + 2 * T, R), W.dtype)


def block_stats(W, W2, by_class, other, *, sizes, second):
    """A block's sums ``(3 C + 1 + 3 T + 2, R)`` as ``_summarise`` reads them, from the
    accumulated :func:`job_terms` and the states before and after the block.

    Per class: waits, squared waits, system times; then elapsed time, HOL idle time, free
    idle time, work (per type), and the second-half waits and jobs. The total idle
    server-time follows from eq. (2) by telescoping (module docstring):
    ``sum_n (hol_n + free_n) = sum_n (s tau_n - alpha_n sigma_n) + sum_i (W_end^i - W_start^i)``.
    """
    T = len(sizes)
    t, work, hol = other[0], other[1 : 1 + T], other[1 + T :]
    s = jnp.asarray(sizes, by_class.dtype)[:, None]
    idle = s * t - work + type_sums(W2, sizes) - type_sums(W, sizes)
    tail = jnp.stack([by_class[0].sum(axis=0), by_class[3].sum(axis=0)])
    return jnp.concatenate(
        [
            by_class[0],
            by_class[1],
            by_class[2],
            t[None],
            hol,
            idle - hol,
            work,
            jnp.where(second, tail, 0),
        ]
    )
