"""Forward MJSRE simulation (F-MJSRE, ``mjsre`` Section 7.4) with streaming metrics.

``lax.scan`` over blocks of ``chunk`` jobs, an inner ``lax.scan`` over the jobs of a block
running the O(s) step on all replications at once, and the replication axis split over
``jax.devices()`` with ``shard_map`` (each device runs the same kernel on its own
replications). The states are ``(servers, replications)`` arrays, replications minor, and the
step is written on their rows (a select among the static shifts the class sizes allow, no
gather or sort; :func:`_fcfs_rows_step`). Each job's inputs are drawn inside the loop from
counter-based keys (``jaxqueue._random``), one job ahead (software pipelining, :func:`_fcfs_jobs`).
The warm-up jobs run first without statistics; then the per-job terms (per class: waits,
squared waits, system times, jobs; inter-arrival times, work and HOL idle time per type) are
summed in the loop's carry in the state dtype, over at most ``chunk`` jobs, and the block sums
are accumulated across blocks with compensated (Kahan) sums in the widest float type enabled
(float64 under x64); the waits are binned into one histogram per device (int32). Memory does
not grow with the number of jobs and a float32 state does not bias the means.

Metrics (Section 6, waste corrected per ``docs/errata.md`` item 1), per replication and
pooled with confidence intervals across replications: per class the mean, variance, quantiles
and density of the waiting time ``W^alpha`` and the system time ``W^alpha + sigma``; the mean
number in system (Little: sum of system times over elapsed time); the mean number of idle
servers ``w`` and its HOL part ``w_HOL``; the utilisation. The HOL idle server-time of a job is
``sum_{i <= alpha} (W^alpha - W^i)`` (untruncated, accumulated elementwise in the scan carry);
the total idle server-time of a chunk follows exactly from eq. (2) by telescoping,
``sum_n (hol_n + free_n) = sum_n (s tau_n - alpha_n sigma_n) + sum_i W_end^i - sum_i W_start^i``,
so ``w`` equals ``s - lam E[alpha sigma]`` in expectation
(``ForwardResult.idle_servers_expected``). Both agree with the time integrals of the
event-driven simulator up to the reservations pending at the end of the run (tests).

The means of the waits, system times and number in system use the idle-server identity as a
control variate (``stats.ratio_ci``): the measured idle servers minus ``s - lam E[alpha sigma]``
has mean 0 and moves against the waits, so the estimate is corrected by the regression of the
waits on it across replications (measured on ``two-class-256`` at 0.1 ``lambda_c``, 256 x 20000
jobs: half-width 0.30 without, 0.15 with). Used from ``MIN_CONTROL_REPS`` replications on.

A stationarity diagnostic compares the mean wait of the second half of the measured jobs with
the first half (``ForwardResult.status``), flagging loads beyond the stability limit
``lambda_c`` when no ``limit`` was passed, or runs too short for the warm-up to end.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from jaxtyping import PRNGKeyArray

from .._jit import jit_per_platform
from .._random import replication_keypairs
from .._sharding import BATCH, batch_devices, batch_mesh, shard_batch, to_host
from ..stats import (
    Result,
    Status,
    control_variate,
    density_from_hist,
    effective_samples,
    hist_bins,
    identity_z,
    judge,
    quantile_from_hist,
    ratio_ci,
    stationarity,
    t_quantile,
)
from ._estimators import (
    IDLE_LEVEL,
    MIN_CONTROL_REPS,
    MIN_EFFECTIVE,
    MIN_REPLICATIONS,
    RULES,
    few_replications_reason,
    wait_histogram,
)
from ._inputs import draw_jobs_block_reps, draw_jobs_each, pick_by_class
from ._policy import SpecificServers
from ._stability import check_load
from ._workload import Workload

__all__ = ["ForwardResult", "simulate"]

_VARIANTS = ("fcfs", "random")


# ---------------------------------------------------------------------------- jitted kernel
# Layout: the replications are the minor axis everywhere. A batch of workload vectors is
# ``(s, R)`` (row i holds coordinate i of every replication), so a job step is elementwise
# work on rows of R lanes: the shift of the O(s) merge (``_step.py``) is a select among the
# few shifts the classes' server counts allow (static slices: no gather, no sort), the
# per-class sums are accumulated in the job loop's carry (no scatter, no reduction over a
# job axis) and the waits go to one histogram per device. The loop is software-pipelined
# (:func:`_fcfs_jobs`) so that XLA:CPU stores the wait and the inputs of a job once instead
# of recomputing them in every fused consumer, and runs two jobs per step on two sets of
# carry slots, so that no job copies the state. Where the time goes, per sample-job, before
# and after: ``benchmarks/RESULTS.md`` (forward scan section).


def _kahan_add(acc, comp, x):
    y = x - comp
    t = acc + y
    return t, (t - acc) - y


def _core_groups(workload) -> tuple[tuple[tuple[int, tuple[int, ...]], ...], ...]:
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
    """``max(min(X, max(v, W)) - tau, 0)`` elementwise (eq. (2) with the merge of
    ``_step.py``), with compare-and-select for min and max: the same values here (no NaN;
    no negative zero: ``X, W, v >= 0`` and ``a - tau = 0`` is ``+0``), without the NaN and
    signed-zero handling of XLA's min/max (3 instructions more each on XLA:CPU)."""
    m = jnp.where(v > W, v, W)
    x = jnp.where(X < m, X, m) - tau
    return jnp.where(x > 0, x, 0)


def _fcfs_rows_wait(W, cls, *, sizes, groups):
    """Waits ``w = max_t W_t^{alpha_t}`` (eq. (15); ``W^alpha`` for one type) of jobs of
    classes ``cls`` ``(R,)`` on the states ``W`` ``(s, R)``: the ascending vectors of the
    types stacked as row blocks of ``sizes``; ``groups``: :func:`_core_groups`. A select
    among the few rows ``alpha`` can name, no gather."""
    w = None
    for Wt, grp in zip(_type_rows(W, sizes), groups, strict=True):
        eq, vals = _masks(cls, grp), [d for d, _ in grp]
        wt = _choose(eq, [Wt[d - 1] if d > 0 else jnp.zeros_like(W[0]) for d in vals])
        w = wt if w is None else jnp.maximum(w, wt)
    return w if len(sizes) == 1 else jnp.maximum(w, 0)


def _fcfs_rows_step(W, w, cls, sigma, tau, *, sizes, groups):
    """One FCFS job on all replications at once (eq. (2); eq. (15) for several types), its
    wait ``w`` (:func:`_fcfs_rows_wait`) given.

    With ``d = alpha_t`` and ``v = w + sigma``, the merge of ``_step.py`` is
    ``min(X, max(v, W_t))`` with ``X`` the rows of ``W_t`` shifted up by ``d`` (padded with
    ``+inf``): a select among the ``len(groups[t])`` static shifts. The HOL idle server-time
    of the job (Section 6, ``docs/errata.md`` item 1), ``sum_{i <= d} (w - W_t^i)``, is a
    select among partial sums of non-negative terms.

    Returns:
        ``(W_next (s, R), hol (T, R))``.
    """
    v = w + sigma
    new, hol = [], []
    for Wt, grp in zip(_type_rows(W, sizes), groups, strict=True):
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


def _fcfs_rows_next_wait(W, w, cls, sigma, tau, cls_next, *, sizes, groups):
    """``_fcfs_rows_wait(_fcfs_rows_step(W, w, cls, sigma, tau)[0], cls_next)`` (bit for
    bit), written on the rows of ``W`` so that XLA:CPU fuses it without storing the shifted
    copies of ``W`` the step builds: only the rows the next job can name are merged."""
    v = w + sigma
    wn = None
    for Wt, grp in zip(_type_rows(W, sizes), groups, strict=True):
        eq, vals = _masks(cls, grp), [d for d, _ in grp]
        n = Wt.shape[0]

        def row(r, Wt=Wt, eq=eq, vals=vals, n=n):
            x = _choose(eq, [Wt[r + d] if r + d < n else jnp.full_like(w, jnp.inf) for d in vals])
            return _merge_rows(x, Wt[r], v, tau)

        rows = [row(d - 1) if d > 0 else jnp.zeros_like(w) for d in vals]
        wt = _choose(_masks(cls_next, grp), rows)
        wn = wt if wn is None else jnp.maximum(wn, wt)
    return wn if len(sizes) == 1 else jnp.maximum(wn, 0)


def _fcfs_jobs(W, draw, first, length, *, sizes, groups, cores, hist, stats=True):
    """Jobs ``first .. first + length - 1`` on the states ``W`` ``(s, R)``, FCFS;
    ``draw(j)`` gives job ``j``'s ``(cls, sigma, tau)`` for all replications; ``groups``:
    :func:`_core_groups`, ``cores``: the ``(C, T)`` servers of the classes.

    Software-pipelined: the carry holds the next job's inputs and wait, computed in the step
    before (:func:`_fcfs_rows_next_wait`). A loop-carried value is stored once; computed in
    the step that uses it, XLA:CPU recomputes it in every fused consumer (the wait's select
    chain in every coordinate of the merge and every statistic, the cipher in every input
    field: 3x the cost of the step), and inputs drawn for a block of jobs cost more than the
    step itself (intermediate arrays of the block, the class recomputed in every field).

    Two jobs per loop step, ping-pong: the first job's results go to a second set of carry
    slots (so they are stored once, as loop outputs, not recomputed in the second job's fused
    loops), the second job's back to the first set. The merge reads the state at shifted
    rows, so it cannot write its input buffer: with one job per step XLA:CPU copied the
    state every job; here each job writes the other slot. The block sums take both jobs'
    terms in one fused loop (in job order: the same sums). An odd last job runs alone, and
    blocks of fewer than 4 jobs one job per step (a loop of one step is inlined by XLA, the
    two jobs then fused into each other's loops: other roundings).

    Returns:
        ``(W_next, sums, bins (L, R))``: the block's sums of :func:`_job_terms` (``None``
        without ``stats``) and the histogram bins of the waits (:func:`~jaxqueue.stats.hist_bins`).
    """
    kw = dict(sizes=sizes, groups=groups)

    def one(W, w, x, j):
        c, sg, t = x
        nxt = draw(j + 1)
        W2, hol = _fcfs_rows_step(W, w, c, sg, t, **kw)
        w2 = _fcfs_rows_next_wait(W, w, c, sg, t, nxt[0], **kw)
        if not stats:
            return (W2, w2, nxt), None, None
        held = pick_by_class(cores, c).T  # (T, R) servers held per type
        terms = _job_terms(w, c, sg, t, held, hol, len(cores))
        return (W2, w2, nxt), terms, hist_bins(w, c, **hist)

    def add(sums, *terms):
        for tm in terms:
            sums = jax.tree.map(jnp.add, sums, tm)
        return sums

    def pair(carry, j):
        a, _, sums = carry
        b, ta, ba = one(*a, j)
        a, tb, bb = one(*b, j + 1)
        if not stats:
            return (a, b, sums), None
        return (a, b, add(sums, ta, tb)), (ba, bb)

    x = draw(first)
    a = (W, _fcfs_rows_wait(W, x[0], **kw), x)
    sums = _zero_terms(W, sizes, len(cores)) if stats else None
    n2, odd = divmod(length, 2)
    if n2 < 2:  # a loop of one step would be inlined, and the two jobs fused together

        def single(carry, j):
            a, sums = carry
            a, t, bn = one(*a, j)
            return (a, add(sums, t) if stats else sums), bn

        jobs = first + jnp.arange(length, dtype=jnp.int32)
        (a, sums), bins = jax.lax.scan(single, (a, sums), jobs)
        return a[0], sums, bins
    jobs = first + 2 * jnp.arange(n2, dtype=jnp.int32)
    (a, b, sums), ys = jax.lax.scan(pair, (a, a, sums), jobs)
    # The second slots must stay loop outputs: XLA drops a loop output that nothing reads
    # and then fuses the first job into the second (recomputed in every fused loop of the
    # second job). So they are read here, in a select whose condition never holds (the
    # states are >= 0; NaN < 0 is false) but is not known to XLA.
    W_b, w_b, (c_b, sg_b, t_b) = b
    keep = W_b + (w_b + c_b.astype(w_b.dtype) + sg_b + t_b)
    a = (jnp.where(a[0][0, 0] < 0, keep, a[0]), *a[1:])
    bins = jnp.stack(ys, axis=1).reshape(2 * n2, *ys[0].shape[1:]) if stats else None
    if odd:
        a, t, bn = one(*a, first + 2 * n2)
        if stats:
            sums = add(sums, t)
            bins = jnp.concatenate([bins, bn[None]])
    return a[0], sums, bins


def _policy_jobs(policy, W, xs, *, sizes, n_classes, hist, stats=True):
    """:func:`_fcfs_jobs` for any policy (specific servers, random assignment, Appendix A):
    ``policy.advance`` mapped over the replication columns of ``W``, on a block's inputs
    ``xs = (cls, held (L, T, R), sigma, tau, alpha, extra)`` with the policy's ``alpha`` and
    uniforms (a slow path: the step sorts)."""
    splits = tuple(int(i) for i in np.cumsum(sizes)[:-1])
    advance = jax.vmap(policy.advance, in_axes=(1, 0, 0, 0, 0), out_axes=(1, 0, 1))

    def job(carry, x):
        W, sums = carry
        c, held, sg, t, a, u = x
        X, w, hol = advance(W, a, sg, t, u)
        if not stats:
            return (jnp.maximum(X, 0), sums), None
        hol = jnp.stack([h.sum(axis=0) for h in jnp.split(hol, splits, axis=0)])
        sums = jax.tree.map(jnp.add, sums, _job_terms(w, c, sg, t, held, hol, n_classes))
        return (jnp.maximum(X, 0), sums), hist_bins(w, c, **hist)

    sums = _zero_terms(W, sizes, n_classes) if stats else None
    (W, sums), bins = jax.lax.scan(job, (W, sums), xs)
    return W, sums, bins


def _type_rows(W, sizes):
    """The row blocks of the resource types of ``(s, R)`` states."""
    return jnp.split(W, tuple(int(i) for i in np.cumsum(sizes)[:-1]), axis=0)


def _type_sums(W, sizes):
    """Per-type sums of the rows of ``(s, R)`` states: ``(T, R)``."""
    return jnp.stack([p.sum(axis=0) for p in _type_rows(W, sizes)])


def _job_terms(wait, cls, sigma, tau, held, hol, n_classes):
    """One job's terms of the block sums (``(R,)`` rows, state dtype): ``(4, C, R)`` by class
    (wait, squared wait, system time, 1; zero in the other classes) and ``(1 + 2 T, R)``
    (inter-arrival time, work ``alpha_t sigma`` and HOL idle time per type). Accumulated in
    the job loop's carry: elementwise over the replications, in job order (a scatter-add or
    a reduction over the job axis costs several times more on XLA:CPU)."""
    q = jnp.stack([wait, wait * wait, wait + sigma, jnp.ones_like(wait)])
    mask = cls == jnp.arange(n_classes, dtype=cls.dtype)[:, None]
    work = held.astype(wait.dtype) * sigma
    return jnp.where(mask[None], q[:, None], 0), jnp.concatenate([tau[None], work, hol])


def _zero_terms(W, sizes, n_classes):
    """Zero block sums of :func:`_job_terms` for ``(s, R)`` states."""
    R, T = W.shape[1], len(sizes)
    return jnp.zeros((4, n_classes, R), W.dtype), jnp.zeros((1 + 2 * T, R), W.dtype)


def _block_stats(W, W2, by_class, other, *, sizes, second):
    """A block's sums ``(3 C + 1 + 3 T + 2, R)`` as ``_summarise`` reads them, from the
    accumulated :func:`_job_terms` and the states before and after the block.

    Per class: waits, squared waits, system times; then elapsed time, HOL idle time, free
    idle time, work (per type), and the second-half waits and jobs. The total idle
    server-time follows from eq. (2) by telescoping (module docstring):
    ``sum_n (hol_n + free_n) = sum_n (s tau_n - alpha_n sigma_n) + sum_i (W_end^i - W_start^i)``.
    """
    T = len(sizes)
    t, work, hol = other[0], other[1 : 1 + T], other[1 + T :]
    s = jnp.asarray(sizes, by_class.dtype)[:, None]
    idle = s * t - work + _type_sums(W2, sizes) - _type_sums(W, sizes)
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


TILE_CPU = 512
"""Most replications one job loop runs at once on XLA:CPU. Larger arrays make XLA split each
fused loop of the step over its threads, a synchronisation per fused loop per job: measured
on the five-class scenario, one device, 45 ns per sample-job with 128-512 replications and
87-89 ns with 1024-2048 (loaded 2-core machine, ``benchmarks/RESULTS.md``)."""


def _replication_tile(n: int, platform: str) -> int:
    """Replications per job loop: all of them except on the CPU, where the largest divisor
    of ``n`` from ``TILE_CPU / 4`` to :data:`TILE_CPU` (``n`` if none)."""
    if platform != "cpu" or n <= TILE_CPU:
        return n
    return next((t for t in range(TILE_CPU, TILE_CPU // 4 - 1, -1) if n % t == 0), n)


def _run_impl(workload, lam, key, reps, W0, lo_code, offset, **static):
    """The forward scan on this device's replications ``reps`` from states ``W0`` ``(R, s)``:
    :func:`_run_tile` on tiles of :func:`_replication_tile` replications, one after the
    other (``lax.map``; the replications are independent, so the numbers do not depend on
    the tiles). Returns ``(W (R, s), sums (R, nf), counts (R, C), hist (1, C, n_bins))``."""
    R = reps.shape[0]
    tile = _replication_tile(R, jax.devices()[0].platform)
    if tile == R:
        return _run_tile(workload, lam, key, reps, W0, lo_code, offset, **static)
    W, fsum, counts, hist = jax.lax.map(
        lambda x: _run_tile(workload, lam, key, *x, lo_code, offset, **static),
        (reps.reshape(-1, tile), W0.reshape(-1, tile, W0.shape[1])),
    )
    merge = lambda x: x.reshape(R, *x.shape[2:])  # noqa: E731
    return merge(W), merge(fsum), merge(counts), hist.sum(axis=0)


def _run_tile(
    workload,
    lam,
    key,
    reps,
    W0,
    lo_code,
    offset,
    *,
    n_jobs,
    warmup,
    chunk,
    dtype,
    variant,
    n_bins,
    shift,
):
    """The forward scan on replications ``reps`` from states ``W0`` ``(R, s)``.

    Blocks of ``chunk`` jobs (the last one shorter): the jobs run in a ``lax.scan`` with the
    states ``(s, R)`` and the block's sums in the carry (state dtype, at most ``chunk``
    terms), and the block's sums are added to the run's compensated (Kahan) sums in the
    widest float type enabled; the waits go to a histogram shared by the replications
    (integer counts: their sum over tiles and devices does not depend on how the
    replications are spread). Returns ``(W (R, s), sums (R, nf), counts (R, C), hist
    (1, C, n_bins))``.
    """
    C, T, sizes = workload.n_classes, workload.n_types, workload.servers
    acc_dtype = jax.dtypes.canonicalize_dtype(jnp.float64)
    n_blocks = -(-(n_jobs - warmup) // chunk)
    hist_layout = dict(lo_code=lo_code, n_bins=n_bins, shift=shift)
    jobs = _jobs_runner(workload, lam, key, reps, dtype=dtype, variant=variant, hist=hist_layout)

    def warm_body(W, start, length, b):
        return jobs(W, start, length, stats=False)[0]

    def measured_body(carry, start, length, b):
        W, fsum, fcomp, counts, hist = carry
        W2, (by_class, other), bins = jobs(W, start, length)
        x = _block_stats(W, W2, by_class, other, sizes=sizes, second=b >= n_blocks // 2)
        fsum, fcomp = _kahan_add(fsum, fcomp, x.astype(acc_dtype))
        hist = hist.at[bins.reshape(-1)].add(1, mode="promise_in_bounds")
        return W2, fsum, fcomp, counts + by_class[3].astype(jnp.int32), hist

    W = _blocks(warmup, chunk, warm_body, W0.T, offset)
    R, nf = W0.shape[0], 3 * C + 1 + 3 * T + 2
    carry = (
        W,
        jnp.zeros((nf, R), acc_dtype),
        jnp.zeros((nf, R), acc_dtype),
        jnp.zeros((C, R), jnp.int32),
        jnp.zeros((C * n_bins,), jnp.int32),
    )
    W, fsum, _, counts, hist = _blocks(
        n_jobs - warmup, chunk, measured_body, carry, offset + warmup
    )
    return W.T, fsum.T, counts.T, hist.reshape(1, C, n_bins)


def _jobs_runner(workload, lam, key, reps, *, dtype, variant, hist):
    """``jobs(W, start, length, stats=True) -> (W, sums, bins)``: the jobs ``start ..
    start + length - 1`` of replications ``reps`` on states ``W`` ``(s, R)``, with the
    workload's policy: FCFS (eq. (2), (15)) on the fast path :func:`_fcfs_jobs`, inputs
    drawn job by job; specific servers and random assignment (eq. (14), Appendix A) with
    ``policy.advance`` (:func:`_policy_jobs`), inputs drawn for the block."""
    sizes, C = workload.servers, workload.n_classes
    if variant != "random" and workload.specific is None:
        keypairs = replication_keypairs(key, reps)
        groups, cores = _core_groups(workload), np.asarray(workload.cores, np.int32)

        def draw(j):
            inp = draw_jobs_each(workload, lam, keypairs, jnp.full(reps.shape, j), dtype=dtype)
            return inp.cls, inp.sigma, inp.tau

        def jobs(W, start, length, stats=True):
            kw = dict(sizes=sizes, groups=groups, cores=cores, hist=hist, stats=stats)
            return _fcfs_jobs(W, draw, start, length, **kw)

        return jobs

    def jobs(W, start, length, stats=True):
        inp = draw_jobs_block_reps(
            workload, lam, key, reps, start, length, dtype=dtype, n_extra=workload.s
        )
        held = jnp.moveaxis(inp.alpha, -1, 1)  # (L, T, R) servers held per type
        # eq. (14) with alpha = (arbitrary, specific); random assignment: all specific
        a = jnp.asarray(np.asarray(workload.cores, np.int32))[inp.cls, 0]
        b = jnp.zeros_like(a)
        if workload.specific is not None:
            b = jnp.asarray(workload.specific, jnp.int32)[inp.cls]
        if variant == "random":
            a, b = jnp.zeros_like(a), a + b
        xs = (inp.cls, held, inp.sigma, inp.tau, jnp.stack([a, b], axis=-1), inp.extra)
        kw = dict(sizes=sizes, n_classes=C, hist=hist, stats=stats)
        return _policy_jobs(SpecificServers(), W, xs, **kw)

    return jobs


def _blocks(n, chunk, body, carry, first):
    """``carry = body(carry, start, length, index)`` over the blocks of ``n`` jobs from job
    ``first``: the full blocks of ``chunk`` jobs in a ``lax.scan``, then the shorter last
    block (static lengths: no masked jobs)."""
    full, rest = divmod(n, chunk)
    if full:
        carry = jax.lax.scan(
            lambda c, b: (body(c, first + b * chunk, chunk, b), None),
            carry,
            jnp.arange(full, dtype=jnp.int32),
        )[0]
    if rest:
        carry = body(carry, first + full * chunk, rest, full)
    return carry


def _run_sharded(workload, lam, key, reps, W0, lo_code, offset, *, mesh=None, **static):
    """:func:`_run_impl` on each device's share of the replications (``shard_map``: every
    device runs the single-device kernel on its own replications; no communication; the
    histograms come back one per device)."""

    def local(reps, W0):
        return _run_impl(workload, lam, key, reps, W0, lo_code, offset, **static)

    if mesh is None:
        return local(reps, W0)
    rows = P(BATCH)
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(rows, rows),
        out_specs=(rows, rows, rows, rows),
        check_vma=False,
    )(reps, W0)


_RUN_STATIC = ("mesh", "n_jobs", "warmup", "chunk", "dtype", "variant", "n_bins", "shift")

_CPU_OPTIONS = {
    "xla_cpu_copy_insertion_use_region_analysis": True,
    "xla_cpu_prefer_vector_width": 512,
}
"""XLA:CPU options of the forward kernel (not passed to other backends). Copy insertion with
region analysis: the job loop then runs without loop-carry copies (9 per pair of jobs
without it: the state, the wait and the inputs). 512-bit vectors where the CPU has them
(AVX-512; LLVM's default is 256). Measured in one process against the kernel before
(five-class scenario, 1024 x 50,000 jobs, 2-core AVX-512 machine, ``benchmarks/RESULTS.md``).
Neither changes the numbers: the trajectories, waits and histograms are the same bit for bit."""

_run_for = jit_per_platform(_run_sharded, _CPU_OPTIONS, static_argnames=_RUN_STATIC)
"""``_run_for(platform)``: the jitted kernel (:func:`_run_sharded`) for devices of
``platform``, with :data:`_CPU_OPTIONS` on the CPU."""


# ---------------------------------------------------------------------------- host side
class ForwardResult(Result):
    """Metrics of a forward MJSRE run (host-side numpy, float64).

    Class-indexed arrays follow the workload's class order. ``*_ci`` are ``[low, high]``
    intervals across replications at ``level`` (ratio estimators with the delta method).
    Quantiles come from per-class log-spaced histograms (``edges``; bin 0 holds the atom at
    0), interpolated within a bin, so they are accurate to a fraction of a bin width
    (``1 / bins_per_octave`` relative). ``estimate(name)`` gives the
    :class:`~jaxqueue.stats.Estimate` of ``wait_mean``, ``wait_mean_all``,
    ``system_time_mean``, ``number_in_system``, ``idle_servers``, ``hol_idle_servers``.
    """

    _size_field = "n_replications"

    workload: Workload
    lam: float
    n_jobs: int
    warmup: int
    n_replications: int
    level: float
    counts: np.ndarray  # (classes,) measured jobs per class
    wait_mean: np.ndarray
    wait_mean_ci: np.ndarray
    wait_var: np.ndarray
    system_time_mean: np.ndarray
    system_time_mean_ci: np.ndarray
    wait_mean_all: float
    wait_mean_all_ci: np.ndarray
    wait_var_all: float
    system_time_mean_all: float
    number_in_system: float
    number_in_system_ci: np.ndarray
    idle_servers: float
    idle_servers_ci: np.ndarray
    hol_idle_servers: float
    hol_idle_servers_ci: np.ndarray
    idle_servers_by_type: np.ndarray
    hol_idle_servers_by_type: np.ndarray
    utilisation: np.ndarray  # per resource type
    idle_servers_expected: float
    hist: np.ndarray  # (classes, bins) pooled waiting-time counts
    edges: np.ndarray  # (bins + 1,)
    final_state: np.ndarray  # (replications, s) workload vectors after the last job
    device: str
    status: Status  # ok, nonstationary (the mean wait grows, the idle identity fails, a run
    # too short to judge) or unconverged (a class seen in < 2 replications, or fewer than
    # MIN_REPLICATIONS replications)
    wait_growth: float  # mean over replications of (2nd-half mean wait - 1st-half mean wait)
    idle_z: float = 0.0  # (idle servers - (s - lam E[alpha sigma])) / se (stats.identity_z)
    n_eff: float = float("inf")  # effective waits per replication (stats.effective_samples)
    rounds: tuple = ()  # (jobs, warm-up, status, seconds) per round of simulate_steady
    start: str = "empty"  # "empty", "init", or "backward" (simulate_steady)

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        if self.status == Status.unconverged and self.n_replications < MIN_REPLICATIONS:
            return few_replications_reason(self.n_replications)
        if self.status == Status.unconverged:
            return "a class has waiting times in fewer than 2 replications; raise n_jobs"
        return (
            f"a stationarity check failed (mean wait growth {self.wait_growth:.4g} between "
            f"halves, idle-server identity t = {self.idle_z:.2f}, {self.n_eff:.3g} effective "
            f"waits per replication where a start not known to be stationary needs "
            f"{MIN_EFFECTIVE:g})"
        )

    def wait_quantile(self, q: float, cls: int | None = None) -> float:
        """Quantile ``q`` of the waiting time of class ``cls`` (all jobs if ``None``)."""
        if not 0.0 < q < 1.0:
            raise ValueError(f"q must lie in (0, 1), got {q}")
        counts = self.hist.sum(axis=0) if cls is None else self.hist[cls]
        return quantile_from_hist(counts, self.edges, q)

    def wait_density(self, cls: int | None = None) -> tuple[np.ndarray, np.ndarray, float]:
        """``(bin_centres, density, p0)``: the waiting-time density on the positive bins
        (geometric centres) and the probability of not waiting at all."""
        counts = self.hist.sum(axis=0) if cls is None else self.hist[cls]
        return density_from_hist(counts, self.edges)

    def as_dict(self) -> dict:
        """The JSON object of ``jaxqueue mjqm simulate --json``."""
        wl = self.workload
        cores = np.asarray(wl.cores_array)
        probs = np.asarray(wl.probs, dtype=float)
        classes = []
        for c in range(wl.n_classes):
            classes.append(
                {
                    "cores": int(cores[c, 0]) if wl.n_types == 1 else cores[c].tolist(),
                    "prob": float(probs[c]),
                    "jobs": int(self.counts[c]),
                    "wait_mean": self.wait_mean[c],
                    "wait_mean_ci": self.wait_mean_ci[c],
                    "wait_var": self.wait_var[c],
                    "wait_p50": self.wait_quantile(0.5, c),
                    "wait_p90": self.wait_quantile(0.9, c),
                    "wait_p99": self.wait_quantile(0.99, c),
                    "system_time_mean": self.system_time_mean[c],
                    "system_time_mean_ci": self.system_time_mean_ci[c],
                }
            )
        return {
            "scenario": wl.name,
            "lam": self.lam,
            "lambda_ideal": float(wl.lambda_ideal()),
            "servers": list(wl.servers),
            "classes": classes,
            "wait_mean": self.wait_mean_all,
            "wait_mean_ci": self.wait_mean_all_ci,
            "wait_var": self.wait_var_all,
            "wait_p90": self.wait_quantile(0.9),
            "system_time_mean": self.system_time_mean_all,
            "number_in_system": self.number_in_system,
            "number_in_system_ci": self.number_in_system_ci,
            "idle_servers": self.idle_servers,
            "idle_servers_ci": self.idle_servers_ci,
            "hol_idle_servers": self.hol_idle_servers,
            "hol_idle_servers_ci": self.hol_idle_servers_ci,
            "idle_servers_expected": self.idle_servers_expected,
            "utilisation": self.utilisation,
            "jobs": self.n_jobs,
            "warmup": self.warmup,
            "replications": self.n_replications,
            "level": self.level,
            "device": self.device,
            "status": self.status,
            "wait_growth": self.wait_growth,
            "idle_z": self.idle_z,
            "n_eff": self.n_eff,
            "start": self.start,
            "rounds": [list(r) for r in self.rounds],
        }

    def to_frame(self):
        """One row per class, the ``classes`` of :meth:`as_dict` (intervals as ``_low`` /
        ``_high`` columns). Needs pandas (``pip install 'jaxqueue[tables]'``)."""
        from .._tables import metrics_frame

        return metrics_frame(self.as_dict())


def simulate(
    workload: Workload,
    lam: float,
    *,
    key: PRNGKeyArray,
    n_jobs: int = 100_000,
    n_replications: int = 256,
    warmup: int | None = None,
    chunk: int = 256,
    dtype=jnp.float32,
    init=None,
    job_offset: int = 0,
    variant: str = "fcfs",
    level: float = 0.95,
    bins_per_octave: int = 16,
    hist_range: tuple[float, float] | None = None,
    devices=None,
    limit=None,
    override: bool = False,
    stationary_start: bool = False,
    throw: bool = False,
) -> ForwardResult:
    """Forward MJSRE simulation of ``n_replications`` independent queues (Section 7.4).

    Each replication starts from ``init`` (default: empty) and runs ``n_jobs`` jobs of the
    recurrence eq. (2) (eq. (15) for several resource types, eq. (14) with specific servers,
    random assignment of Appendix A with ``variant="random"``); the first ``warmup`` jobs are
    left out of the statistics. Job ``n`` of replication ``r`` is a pure function of
    ``(key, r, n)``, so the numbers do not depend on ``chunk`` or on the devices.

    Args:
        workload: the model.
        lam: arrival rate; refused at or beyond ``lambda_ideal``, eq. (8) (``variant="fcfs"``)
            or ``limit`` unless ``override``.
        key: PRNG key.
        n_jobs: jobs per replication (warm-up included).
        n_replications: independent replications (>= 2, for the confidence intervals).
        warmup: jobs discarded at the start (default ``n_jobs // 10``, ``0`` with ``init``).
        chunk: jobs drawn at once inside the jit (memory ~ replications x chunk).
        dtype: float dtype of the workload state and inputs (float32 or float64).
        init: optional initial ascending workload vectors, ``(s,)`` or ``(replications, s)``.
        job_offset: index of the first job. Continuing a run ``res`` with
            ``init=res.final_state, job_offset=res.n_jobs, warmup=0`` uses fresh jobs and
            reproduces the longer run exactly.
        variant: ``"fcfs"`` (the MJQM) or ``"random"`` (random assignment, Appendix A).
        level: confidence level of the intervals.
        bins_per_octave: resolution of the waiting-time histograms (a power of 2 up to 64):
            bin edges are the floats ``2^e (1 + j / bins_per_octave)``.
        hist_range: ``(low, high)`` of the log-spaced histogram (default
            ``1e-4`` to ``1e6`` times the mean service time).
        devices: devices to shard the replications over (default ``jax.devices()``; the
            largest count dividing ``n_replications`` is used).
        limit: a :class:`~jaxqueue.mjqm.StabilityResult` of
            :func:`~jaxqueue.mjqm.stability_limit`, a number, or ``None`` (the checks above
            only; the status catches a load beyond the limit).
        override: skip the stability checks.
        stationary_start: ``init`` is (nearly) a stationary sample (backward samples whose
            sampler said ok, or the final state of such a run): the rule "at least
            ``MIN_EFFECTIVE`` effective waits per replication" is then not applied.
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the status is not ``ok``
            (default: return the result with its status).

    Returns:
        :class:`ForwardResult`. ``status`` is ``"unconverged"`` when a class of positive
        probability has waits in fewer than 2 replications (no interval for it; raise
        ``n_jobs``), and ``"nonstationary"`` when the mean wait grows
        between the two halves of the measured jobs (:func:`jaxqueue.stats.drift`), when the
        idle-server identity fails (``|idle_z|`` beyond the two-sided 99.9% t quantile), or
        (without ``stationary_start``) when a replication holds fewer than ``MIN_EFFECTIVE``
        effective waits.

    Raises:
        ValueError: bad sizes, dtype, variant, init, or an unstable ``lam``.
        EstimateError: with ``throw``, a status other than ``ok``.
    """
    policy = "fcfs" if variant == "fcfs" else None
    lam_f = check_load(workload, lam, limit=limit, policy=policy, override=override)
    _check_sizes(workload, n_jobs, n_replications, chunk, variant)
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"dtype must be a float dtype, got {dtype}")
    if warmup is None:
        warmup = n_jobs // 10 if init is None else 0
    if not isinstance(warmup, (int, np.integer)) or not 0 <= warmup < n_jobs:
        raise ValueError(f"warmup must be an integer in [0, n_jobs), got {warmup!r}")
    if not isinstance(job_offset, (int, np.integer)) or job_offset < 0:
        raise ValueError(f"job_offset must be an integer >= 0, got {job_offset!r}")
    chunk = int(min(chunk, n_jobs))
    W0 = _initial_states(workload, init, n_replications)
    n_bins, shift, lo_code, edges = wait_histogram(workload, hist_range, bins_per_octave)

    mesh = batch_mesh(batch_devices(n_replications, devices))
    reps, W0 = shard_batch(
        mesh, jnp.arange(n_replications, dtype=jnp.int32), jnp.asarray(W0, dtype=dtype)
    )
    W, fsum, counts, hist = _run_for(mesh.devices.flat[0].platform)(
        workload,
        jnp.asarray(lam_f, dtype=dtype),
        key,
        reps,
        W0,
        jnp.asarray(lo_code, dtype=jnp.int32),
        jnp.asarray(job_offset, dtype=jnp.int32),
        n_jobs=int(n_jobs),
        warmup=int(warmup),
        chunk=chunk,
        dtype=dtype,
        variant=variant,
        n_bins=n_bins,
        shift=shift,
        mesh=mesh if mesh.size > 1 else None,
    )
    res = _summarise(
        workload,
        lam_f,
        to_host(fsum).astype(float),
        to_host(counts),
        to_host(hist),
        to_host(W),
        edges,
        n_jobs=int(n_jobs),
        warmup=int(warmup),
        level=level,
        device=f"{mesh.devices.flat[0].platform} x{mesh.size}",
        stationary_start=bool(stationary_start and init is not None),
    )
    if init is not None:
        res = dataclasses.replace(res, start="init")
    return res.raise_for_status() if throw else res


def _check_sizes(workload, n_jobs, n_replications, chunk, variant) -> None:
    for name, v, lo in (("n_jobs", n_jobs, 1), ("n_replications", n_replications, 2)):
        if not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer, got {chunk!r}")
    if variant not in _VARIANTS:
        raise ValueError(f"variant must be one of {_VARIANTS}, got {variant!r}")
    if variant == "random" and workload.n_types != 1:
        raise ValueError("variant='random' needs a single resource type")


def _initial_states(workload, init, n_replications: int) -> np.ndarray:
    """``(replications, s)`` initial states: empty, or ``init`` checked and sorted per type."""
    s = workload.s
    if init is None:
        return np.zeros((n_replications, s))
    W0 = np.asarray(init, dtype=float)
    if W0.ndim == 1:
        W0 = np.broadcast_to(W0, (n_replications, W0.shape[0]))
    if W0.shape != (n_replications, s):
        raise ValueError(f"init must have shape ({s},) or ({n_replications}, {s})")
    if not np.all(np.isfinite(W0)) or np.any(W0 < 0):
        raise ValueError("init must be finite and >= 0")
    parts = np.split(W0, np.cumsum(workload.servers)[:-1], axis=1)
    return np.concatenate([np.sort(p, axis=1) for p in parts], axis=1)


def _summarise(
    workload, lam, fsum, counts, hist, W, edges, *, n_jobs, warmup, level, device, stationary_start
):
    C, T = workload.n_classes, workload.n_types
    R = fsum.shape[0]
    sw, sw2, ssys = fsum[:, :C], fsum[:, C : 2 * C], fsum[:, 2 * C : 3 * C]
    time = fsum[:, 3 * C]
    hol = fsum[:, 3 * C + 1 : 3 * C + 1 + T]
    free = fsum[:, 3 * C + 1 + T : 3 * C + 1 + 2 * T]
    work = fsum[:, 3 * C + 1 + 2 * T : 3 * C + 1 + 3 * T]
    w2, n2 = fsum[:, -2], fsum[:, -1]
    if not (np.all(np.isfinite(fsum)) and np.all(np.isfinite(W))):
        raise FloatingPointError(
            "non-finite values in the forward simulation (overflow of the workload: the load "
            "is probably beyond the stability limit)"
        )
    n = counts.astype(float)
    ncls = n.sum(axis=0)
    idle_time = (hol + free).sum(axis=1)
    idle, idle_ci = ratio_ci(idle_time, time, level)
    idle_expected = float(np.sum(workload.idle_servers_expected(lam)))
    cv = control_variate(idle_time, time, idle_expected) if R >= MIN_CONTROL_REPS else None
    wait_mean, wait_ci = ratio_ci(sw, n, level, cv)
    sys_mean, sys_ci = ratio_ci(ssys, n, level, cv)
    with np.errstate(invalid="ignore", divide="ignore"):
        raw = sw.sum(axis=0) / ncls
        wait_var = np.maximum(sw2.sum(axis=0) / ncls - raw**2, 0.0)  # >= 0 (rounding)
    ntot = n.sum(axis=1)
    all_mean, all_ci = ratio_ci(sw.sum(axis=1), ntot, level, cv)
    all_var = max(sw2.sum() / ntot.sum() - (sw.sum() / ntot.sum()) ** 2, 0.0)
    L, L_ci = ratio_ci(ssys.sum(axis=1), time, level, cv)
    growing, growth = stationarity(sw.sum(axis=1), ntot, w2, n2)
    idle_z = identity_z(float(idle), idle_ci, idle_expected, level, R)
    n_eff = effective_samples(sw.sum(axis=1), sw2.sum(axis=1), ntot)
    # a class of positive probability waited in fewer than 2 replications: no interval for it
    thin = np.any(((n > 0).sum(axis=0) < 2) & (np.asarray(workload.probs) > 0))
    status, _ = judge(
        RULES,
        replications=R,
        n_eff=n_eff,
        growing=growing,
        failed=abs(idle_z) > t_quantile(R, IDLE_LEVEL),
        thin=bool(thin),
        stationary_start=stationary_start,
    )
    hol_all, hol_ci = ratio_ci(hol.sum(axis=1), time, level)
    tt = time.sum()
    util = work.sum(axis=0) / (np.asarray(workload.servers, dtype=float) * tt)
    return ForwardResult(
        workload=workload,
        lam=lam,
        n_jobs=n_jobs,
        warmup=warmup,
        n_replications=R,
        level=level,
        counts=ncls.astype(np.int64),
        wait_mean=wait_mean,
        wait_mean_ci=wait_ci,
        wait_var=wait_var,
        system_time_mean=sys_mean,
        system_time_mean_ci=sys_ci,
        wait_mean_all=float(all_mean),
        wait_mean_all_ci=all_ci,
        wait_var_all=float(all_var),
        system_time_mean_all=float(ratio_ci(ssys.sum(axis=1), ntot, level, cv)[0]),
        number_in_system=float(L),
        number_in_system_ci=L_ci,
        idle_servers=float(idle),
        idle_servers_ci=idle_ci,
        hol_idle_servers=float(hol_all),
        hol_idle_servers_ci=hol_ci,
        idle_servers_by_type=(hol + free).sum(axis=0) / tt,
        hol_idle_servers_by_type=hol.sum(axis=0) / tt,
        utilisation=util,
        idle_servers_expected=idle_expected,
        idle_z=idle_z,
        n_eff=n_eff,
        hist=hist.sum(axis=0),
        edges=edges,
        final_state=W,
        device=device,
        status=status,
        wait_growth=growth,
    )
