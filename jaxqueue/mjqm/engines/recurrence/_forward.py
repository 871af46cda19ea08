"""The forward driver of the recurrence engine (F-MJSRE, ``mjsre`` Section 7.4).

A loop over blocks of ``chunk`` jobs, an inner loop over the jobs of a block running the
engine's step on all replications at once (``_jobs.py``: FCFS on rows, eq. (2)
and (15); eq. (14) and Appendix A by the step object), the replication axis split over
``jax.devices()`` with ``shard_map`` and over tiles on the CPU. Each job's inputs are drawn
inside the loop from the counter-based inputs (``jaxqueue._random``), so the numbers do not
depend on ``chunk``, tiles or devices. The warm-up jobs run first without statistics; then
the per-job terms (Section 6) are summed in the loop's carry in the state dtype over at most
``chunk`` jobs, and the block sums accumulated across blocks with compensated (Kahan) sums in
the widest float type enabled; the waits are binned into one histogram per device and
section of the replications (:data:`HIST_SECTIONS`: the intervals of the quantiles). Memory
does not grow with the number of jobs and a float32 state does not bias the means. With
``progress``, the blocks run as a few calls of one program, the carry handed from call to call
(the fraction done told in between, without host callbacks, which would keep the program out
of the persistent compilation cache). The result and its estimators: ``_forward_result.py``.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from jaxtyping import PRNGKeyArray

from ...._jit import jit_per_platform
from ...._random import replication_keypairs
from ...._sharding import BATCH, batch_devices, batch_mesh, shard_batch, to_host
from ..._estimators import wait_histogram
from ..._inputs import draw_jobs, draw_jobs_each
from ..._stability import check_load
from ..._workload import Workload
from ...options import Execution, Histogram, InitialState
from ...policies import FCFS, Policy, parse_policy
from ._forward_result import ForwardResult, summarise
from ._jobs import block_stats, fcfs_jobs, kahan_add, policy_jobs
from ._step import core_groups
from ._steps import FCFSStep, step_for

__all__ = ["simulate"]

HIST_SECTIONS = 32
"""The waiting-time histograms are kept per section, replication ``r`` in section
``r % HIST_SECTIONS``: independent groups of replications over which the quantiles get their
intervals (``stats.quantile_ci``), at a fixed memory (not one histogram per replication)."""

TILE_CPU = 512
"""Most replications one job loop runs at once on XLA:CPU: larger arrays make XLA split each
fused loop of the step over its threads, a synchronisation per fused loop per job
(``benchmarks/RESULTS.md``)."""


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
    the tiles). Returns ``(W (R, s), sums (R, nf), counts (R, C), hist (1, G, C, n_bins))``
    (``G``: :data:`HIST_SECTIONS`)."""
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


def _run_tile(workload, lam, key, reps, W0, lo_code, offset, **static):
    """The forward scan on replications ``reps`` from states ``W0`` ``(R, s)``.

    Blocks of ``chunk`` jobs (the last one shorter): the jobs run in a loop with the
    states ``(s, R)`` and the block's sums in the carry (state dtype, at most ``chunk``
    terms), and the block's sums are added to the run's compensated (Kahan) sums in the
    widest float type enabled; the waits go to the histogram of their replication's section
    (integer counts: their sum over tiles and devices does not depend on how the
    replications are spread). Returns ``(W (R, s), sums (R, nf), counts (R, C), hist
    (1, G, C, n_bins))`` (``G``: :data:`HIST_SECTIONS`).
    """
    static = _traced_sizes(static)
    n_jobs, warmup, chunk = static["n_jobs"], static["warmup"], static["chunk"]
    warm_body, measured_body, start = _tile_loop(workload, lam, key, reps, lo_code, **static)
    W = _blocks(warmup, chunk, warm_body, W0.T, offset)
    W, fsum, _, counts, hist = _blocks(
        n_jobs - warmup, chunk, measured_body, start(W), offset + warmup
    )
    C, n_bins = workload.n_classes, static["n_bins"]
    return W.T, fsum.T, counts.T, hist.reshape(1, HIST_SECTIONS, C, n_bins)


def _tile_loop(
    workload, lam, key, reps, lo_code, *, n_jobs, warmup, chunk, dtype, step, n_bins, shift
):
    """The blocks of :func:`_run_tile` on replications ``reps``: ``(warm_body(W, start,
    length, b) -> W, measured_body(carry, start, length, b) -> carry, start(W) -> carry)``,
    the measured carry ``(W (s, R), sums (nf, R), Kahan compensations (nf, R), counts (C, R),
    hist (G C n_bins,))`` with ``start`` its zero sums after the warm-up."""
    C, T, sizes = workload.n_classes, workload.n_types, workload.servers
    acc_dtype = jax.dtypes.canonicalize_dtype(jnp.float64)
    n_blocks = -(-(n_jobs - warmup) // chunk)
    hist_layout = dict(lo_code=lo_code, n_bins=n_bins, shift=shift)
    jobs = _jobs_runner(
        workload, lam, key, reps, dtype=dtype, step=step, hist=hist_layout, size=chunk
    )
    section = (reps % HIST_SECTIONS).astype(jnp.int32) * (C * n_bins)  # (R,) bin offsets

    def warm_body(W, start, length, b):
        return jobs(W, start, length, stats=False)[0]

    def measured_body(carry, start, length, b):
        W, fsum, fcomp, counts, hist = carry
        W2, (by_class, other), bins = jobs(W, start, length)
        x = block_stats(W, W2, by_class, other, sizes=sizes, second=b >= n_blocks // 2)
        fsum, fcomp = kahan_add(fsum, fcomp, x.astype(acc_dtype))
        one = 1
        if not isinstance(length, int):  # the rows of bins from length on are no jobs
            one = (jnp.arange(chunk, dtype=jnp.int32)[:, None] < length).astype(jnp.int32)
            one = jnp.broadcast_to(one, bins.shape).reshape(-1)
        hist = hist.at[(bins + section).reshape(-1)].add(one, mode="promise_in_bounds")
        return W2, fsum, fcomp, counts + by_class[3].astype(jnp.int32), hist

    def start(W):
        R, nf = W.shape[1], _n_sums(C, T)
        return (
            W,
            jnp.zeros((nf, R), acc_dtype),
            jnp.zeros((nf, R), acc_dtype),
            jnp.zeros((C, R), jnp.int32),
            jnp.zeros((HIST_SECTIONS * C * n_bins,), jnp.int32),
        )

    return warm_body, measured_body, start


def _traced_sizes(static: dict) -> dict:
    """``static`` with ``n_jobs`` and ``warmup`` as int32 scalars: traced arguments of the
    kernel (one program for every run length)."""
    return {**static, "n_jobs": jnp.int32(static["n_jobs"]), "warmup": jnp.int32(static["warmup"])}


def _n_sums(C: int, T: int) -> int:
    """Sums per replication of the measured carry (their order: ``_forward_result``): per
    class waits, squared waits and system times (3 C), the time, per type HOL idle, free
    servers and work (3 T), and the second-half waits and jobs (2)."""
    return 3 * C + 1 + 3 * T + 2


def _jobs_runner(workload, lam, key, reps, *, dtype, step, hist, size):
    """``jobs(W, start, length, stats=True) -> (W, sums, bins)``: the jobs ``start ..
    start + length - 1`` (``length`` traced, at most ``size``) of replications ``reps`` on
    states ``W`` ``(s, R)`` with the engine's ``step``: FCFS (eq. (2), (15)) on the fast path
    :func:`fcfs_jobs` (the step's row form), inputs drawn job by job; specific servers and
    random assignment (eq. (14), Appendix A) with ``step.advance`` (:func:`policy_jobs`),
    inputs drawn for ``size`` jobs."""
    sizes, C = workload.servers, workload.n_classes
    if isinstance(step, FCFSStep):
        keypairs = replication_keypairs(key, reps)
        groups, cores = core_groups(workload), np.asarray(workload.cores, np.int32)

        def draw(j):
            inp = draw_jobs_each(workload, lam, keypairs, jnp.full(reps.shape, j), dtype=dtype)
            return inp.cls, inp.sigma, inp.tau

        def jobs(W, start, length, stats=True):
            kw = dict(sizes=sizes, groups=groups, cores=cores, hist=hist, stats=stats)
            return fcfs_jobs(W, draw, start, length, size=size, **kw)

        return jobs

    def jobs(W, start, length, stats=True):
        ids = jnp.asarray(start, jnp.int32) + jnp.arange(size, dtype=jnp.int32)
        inp = draw_jobs(workload, lam, key, reps, ids, dtype=dtype, n_extra=workload.s)
        held = jnp.moveaxis(inp.alpha, -1, 1)  # (L, T, R) servers held per type
        alpha = step.job_alpha(workload, inp.cls, inp.alpha)
        xs = (inp.cls, held, inp.sigma, inp.tau, alpha, inp.extra)
        kw = dict(sizes=sizes, n_classes=C, hist=hist, stats=stats)
        return policy_jobs(step, W, xs, length, **kw)

    return jobs


def _blocks(n, chunk, body, carry, first):
    """``carry = body(carry, start, length, index)`` over the blocks of ``n`` jobs (traced)
    from job ``first``: the full blocks of ``chunk`` jobs (``length`` the int ``chunk``), then
    the shorter last block (``length`` traced: one program for every ``n``)."""
    return _blocks_between(n, chunk, body, carry, first, 0, _n_blocks(n, chunk))


def _blocks_between(n, chunk, body, carry, first, lo, hi):
    """:func:`_blocks` for the blocks ``lo`` to ``hi - 1`` only (traced bounds, numbered as
    there: the full blocks, then the shorter last one): the same bodies on the same carry."""
    full, rest = n // chunk, n % chunk
    carry = jax.lax.fori_loop(
        jnp.clip(lo, 0, full),
        jnp.clip(hi, 0, full),
        lambda b, c: body(c, first + b * chunk, chunk, b),
        carry,
    )
    return jax.lax.cond(
        (rest > 0) & (lo <= full) & (full < hi),
        lambda c: body(c, first + full * chunk, rest, full),
        lambda c: c,
        carry,
    )


def _n_blocks(n, chunk):
    """Blocks of :func:`_blocks` for ``n`` jobs."""
    return -(-n // chunk)


def _part_tile(workload, lam, key, reps, state, lo, hi, lo_code, offset, **static):
    """Blocks ``lo`` to ``hi - 1`` of :func:`_run_tile` from ``state``, the blocks numbered
    warm-up first, then measured. ``state``: ``(W (R, s), sums (R, nf), Kahan compensations
    (R, nf), counts (R, C))``; returns it after those blocks and the histogram counts of their
    waits ``(1, G C n_bins)``. The blocks in a few calls give the numbers of one call (the
    same bodies on the same carry, in the same order)."""
    static = _traced_sizes(static)
    n_jobs, warmup, chunk = static["n_jobs"], static["warmup"], static["chunk"]
    warm_body, measured_body, start = _tile_loop(workload, lam, key, reps, lo_code, **static)
    W, fsum, fcomp, counts = (x.T for x in state)
    W = _blocks_between(warmup, chunk, warm_body, W, offset, lo, hi)
    n_warm = _n_blocks(warmup, chunk)
    carry = (W, fsum, fcomp, counts, start(W)[4])
    W, fsum, fcomp, counts, hist = _blocks_between(
        n_jobs - warmup, chunk, measured_body, carry, offset + warmup, lo - n_warm, hi - n_warm
    )
    return (W.T, fsum.T, fcomp.T, counts.T), hist[None]


def _part_impl(workload, lam, key, reps, state, hist, lo, hi, lo_code, offset, **static):
    """:func:`_part_tile` on tiles as :func:`_run_impl` (``lax.map``); the histogram counts
    added to ``hist`` ``(1, G C n_bins)`` (integers: the order does not matter)."""
    R = reps.shape[0]
    tile = _replication_tile(R, jax.devices()[0].platform)

    def part(r, x):
        return _part_tile(workload, lam, key, r, x, lo, hi, lo_code, offset, **static)

    if tile == R:
        state, h = part(reps, state)
        return state, hist + h
    tiles = lambda x: x.reshape(-1, tile, *x.shape[1:])  # noqa: E731
    state, h = jax.lax.map(lambda x: part(*x), (tiles(reps), jax.tree.map(tiles, state)))
    merge = lambda x: x.reshape(R, *x.shape[2:])  # noqa: E731
    return jax.tree.map(merge, state), hist + h.sum(axis=0)


def _part_sharded(
    workload, lam, key, reps, state, hist, lo, hi, lo_code, offset, *, mesh=None, **static
):
    """:func:`_part_impl` on each device's share of the replications (as :func:`_run_sharded`;
    the histogram counts one row per device)."""

    def local(reps, state, hist):
        return _part_impl(workload, lam, key, reps, state, hist, lo, hi, lo_code, offset, **static)

    if mesh is None:
        return local(reps, state, hist)
    rows = P(BATCH)
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(rows, rows, rows),
        out_specs=(rows, rows),
        check_vma=False,
    )(reps, state, hist)


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


_RUN_STATIC = ("mesh", "chunk", "dtype", "step", "n_bins", "shift")

_CPU_OPTIONS = {
    "xla_cpu_copy_insertion_use_region_analysis": True,
    "xla_cpu_prefer_vector_width": 512,
}
"""XLA:CPU options of the forward kernel (not passed to other backends). Copy insertion with
region analysis: the job loop then runs without loop-carry copies (9 per pair of jobs
without it: the state, the wait and the inputs). 512-bit vectors where the CPU has them
(AVX-512; LLVM's default is 256). Neither changes the numbers."""

_run_for = jit_per_platform(_run_sharded, _CPU_OPTIONS, static_argnames=_RUN_STATIC)
"""``_run_for(platform)``: the jitted kernel (:func:`_run_sharded`) for devices of
``platform``, with :data:`_CPU_OPTIONS` on the CPU."""

_part_for = jit_per_platform(_part_sharded, _CPU_OPTIONS, static_argnames=_RUN_STATIC)
"""``_part_for(platform)``: :func:`_part_sharded` jitted as :data:`_run_for` (one program for
every range of blocks)."""

PARTS = 20
"""Calls a run with ``progress`` is split into (the fraction done is told after each)."""


def _run_in_parts(run, args, progress, *, n_jobs, warmup, chunk, mesh, **static):
    """The result of ``_run_for``'s kernel as about :data:`PARTS` calls of one program
    (:data:`_part_for`, ``run``), the state handed from call to call, telling ``progress``
    the blocks done (warm-up included) after each. ``args``: the kernel's arguments."""
    workload, lam, key, reps, W0, lo_code, offset = args
    C, T = workload.n_classes, workload.n_types
    R, nf = W0.shape[0], _n_sums(C, T)
    acc_dtype = jax.dtypes.canonicalize_dtype(jnp.float64)
    devices = 1 if mesh is None else mesh.size
    zeros = (np.zeros((R, nf), acc_dtype), np.zeros((R, nf), acc_dtype), np.zeros((R, C), np.int32))
    # the widest integer type enabled: that of the tiles' sum, so every call has one signature
    count_dtype = jax.dtypes.canonicalize_dtype(jnp.int64)
    hist = np.zeros((devices, HIST_SECTIONS * C * static["n_bins"]), count_dtype)
    state = shard_batch(mesh, W0, *zeros)
    (hist,) = shard_batch(mesh, hist)
    n = _n_blocks(warmup, chunk) + _n_blocks(n_jobs - warmup, chunk)
    sizes = dict(n_jobs=n_jobs, warmup=warmup, chunk=chunk, mesh=mesh, **static)
    for lo, hi in itertools.pairwise([*range(0, n, -(-n // PARTS)), n]):
        bounds = jnp.asarray(lo, jnp.int32), jnp.asarray(hi, jnp.int32)
        state, hist = run(workload, lam, key, reps, state, hist, *bounds, lo_code, offset, **sizes)
        jax.block_until_ready(hist)
        progress(f"{hi}/{n} blocks of {chunk} jobs ({hi / n:.0%})")
    W, fsum, _, counts = state
    return W, fsum, counts, hist.reshape(devices, HIST_SECTIONS, C, static["n_bins"])


def simulate(
    workload: Workload,
    lam: float,
    policy: str | Policy | None = None,
    *,
    key: PRNGKeyArray,
    n_jobs: int = 100_000,
    n_replications: int = 256,
    warmup: int | None = None,
    dtype=jnp.float32,
    level: float = 0.95,
    init: InitialState | None = None,
    histogram: Histogram = Histogram(),
    execution: Execution = Execution(),
    limit=None,
    override: bool = False,
    throw: bool = False,
    progress=None,
) -> ForwardResult:
    """Forward MJSRE simulation of ``n_replications`` independent queues (Section 7.4).

    Each replication starts from ``init`` (default: empty) and runs ``n_jobs`` jobs of the
    recurrence eq. (2) (eq. (15) for several resource types, eq. (14) with specific servers,
    random assignment of Appendix A with ``RandomAssignment()``); the first ``warmup`` jobs are
    left out of the statistics. Job ``n`` of replication ``r`` is a pure function of
    ``(key, r, n)``, so the numbers do not depend on ``execution`` (blocks, devices).

    Args:
        workload: the model.
        lam: arrival rate; refused at or beyond ``lambda_ideal``, eq. (8) (FCFS) or ``limit``
            unless ``override``.
        policy: a policy with a recurrence form (or its name): ``FCFS()`` (the default) or
            ``RandomAssignment()`` (Appendix A).
        key: PRNG key.
        n_jobs: jobs per replication (warm-up included).
        n_replications: independent replications (>= 2, for the confidence intervals).
        warmup: jobs discarded at the start (default ``n_jobs // 10``, ``0`` with ``init``).
        dtype: float dtype of the workload state and inputs (float32 or float64).
        level: confidence level of the intervals.
        init: where the run starts, a :class:`~jaxqueue.mjqm.options.InitialState` (the
            workload vectors, the first job's index, whether they are stationary); ``None``:
            empty.
        histogram: the waiting-time histograms (:class:`~jaxqueue.mjqm.options.Histogram`).
        execution: the devices and the jobs per block
            (:class:`~jaxqueue.mjqm.options.Execution`: ``devices``, ``chunk``).
        limit: a :class:`~jaxqueue.mjqm.StabilityResult` of
            :func:`~jaxqueue.mjqm.stability_limit`, a number, or ``None`` (the checks above
            only; the status catches a load beyond the limit).
        override: skip the stability checks.
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the status is not ``ok``
            (default: return the result with its status).
        progress: optional ``callable(str)``, told the blocks of ``chunk`` jobs done (warm-up
            included) out of all, in about :data:`PARTS` steps; the numbers are those
            without it.

    Returns:
        :class:`ForwardResult`. ``status`` is ``"unconverged"`` when a class of positive
        probability has waits in fewer than 2 replications (no interval for it; raise
        ``n_jobs``), and ``"nonstationary"`` when the mean wait grows
        between the two halves of the measured jobs (:func:`jaxqueue.stats.drift`), when the
        idle-server identity fails (``|idle_z|`` beyond the two-sided 99.9% t quantile), or
        (unless ``init.stationary``) when a replication holds fewer than ``MIN_EFFECTIVE``
        effective waits.

    Raises:
        ValueError: bad sizes, dtype, options, init, a policy with no recurrence form, or an
            unstable ``lam``.
        EstimateError: with ``throw``, a status other than ``ok``.
    """
    policy = parse_policy("fcfs" if policy is None else policy)
    InitialState.check("simulate", "init", init, none=True)
    Histogram.check("simulate", "histogram", histogram)
    Execution.check("simulate", "execution", execution).only("recurrence", "chunk")
    fcfs = "fcfs" if isinstance(policy, FCFS) else None  # eq. (8) is the FCFS limit
    lam_f = check_load(workload, lam, limit=limit, policy=fcfs, override=override)
    chunk = 256 if execution.chunk is None else execution.chunk
    _check_sizes(n_jobs, n_replications)
    step = step_for(policy, workload)
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"dtype must be a float dtype, got {dtype}")
    if warmup is None:
        warmup = n_jobs // 10 if init is None else 0
    if not isinstance(warmup, (int, np.integer)) or not 0 <= warmup < n_jobs:
        raise ValueError(f"warmup must be an integer in [0, n_jobs), got {warmup!r}")
    chunk = int(min(chunk, n_jobs))
    W0 = _initial_states(workload, None if init is None else init.state, n_replications)
    n_bins, shift, lo_code, edges = wait_histogram(
        workload, histogram.range, histogram.bins_per_octave
    )

    mesh = batch_mesh(batch_devices(n_replications, execution.devices))
    reps, W0 = shard_batch(
        mesh, jnp.arange(n_replications, dtype=jnp.int32), jnp.asarray(W0, dtype=dtype)
    )
    platform = mesh.devices.flat[0].platform
    args = (
        workload.unnamed(),
        jnp.asarray(lam_f, dtype=dtype),
        key,
        reps,
        W0,
        jnp.asarray(lo_code, dtype=jnp.int32),
        jnp.asarray(0 if init is None else init.job_offset, dtype=jnp.int32),
    )
    static = dict(
        n_jobs=int(n_jobs),
        warmup=int(warmup),
        chunk=chunk,
        dtype=dtype,
        step=step,
        n_bins=n_bins,
        shift=shift,
        mesh=mesh if mesh.size > 1 else None,
    )
    if progress is None:
        W, fsum, counts, hist = _run_for(platform)(*args, **static)
    else:
        W, fsum, counts, hist = _run_in_parts(_part_for(platform), args, progress, **static)
    res = summarise(
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
        stationary_start=init is not None and bool(init.stationary),
    )
    if init is not None:
        res = dataclasses.replace(res, start="init")
    return res.raise_for_status() if throw else res


def _check_sizes(n_jobs, n_replications) -> None:
    for name, v, lo in (("n_jobs", n_jobs, 1), ("n_replications", n_replications, 2)):
        if not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


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
