"""Replicated simulation of the interruption scheduler with confidence intervals.

``simulate_sweep`` runs the kernel of ``_kernel.py`` for several sweep points (arrival rates
and mean numbers of interruptions m) times independent replications in one jitted call,
``vmap`` over both, the replication axis sharded over ``jax.devices()``. The estimators are
those of ``bf-clusters`` Section 5, eq. (9): the mean delay of class i is
``delta_i = L_i / lam_i`` (Little's law on time-averaged numbers, warm-up discarded) and the
mean service rate ``gamma_i = sigma / delta_i`` (sigma the mean job size), with Student-t
intervals across replications on the log scale (never below 0).

Status (one vocabulary with the rest of the package): ``overflow`` (a buffer overflowed),
``nonstationary`` (the number of jobs grows between the two halves of the measured jumps, or a
replication spans fewer than ``MIN_EFFECTIVE`` = 5 effective observations, i.e. the run is
not much longer than its own correlation time, too short to tell), ``unconverged`` (fewer than
``MIN_REPLICATIONS`` = 8 replications), else ``ok``.
"""

from __future__ import annotations

import functools
import itertools
import math
import time as _time

import jax
import jax.numpy as jnp
import numpy as np

from .._sharding import batch_mesh, shard_batch, to_host
from .._tables import per_class
from ..dist import Law, PhaseMixture, phase_mixture
from ..stats import Result, Status, StatusRules, drift, judge, log_mean_ci
from ._kernel import KernelParams, KernelSpec, chain_start, run_blocks, run_chain
from ._model import RandomModel, as_assignment, check_stability

__all__ = ["SchedResult", "simulate", "simulate_sweep", "MIN_REPLICATIONS", "MIN_EFFECTIVE"]

RULES = StatusRules(min_replications=8, min_effective=5.0)
"""The scheduler's status rules (:func:`jaxqueue.stats.judge`); their parameters below."""

MIN_REPLICATIONS = RULES.min_replications
"""Fewest replications for status ``ok``. With R = 8 the 95% t quantile is 2.36 (1.96 for
R = infinity), the sample standard deviation is within about +-27% (1 / sqrt(2 (R - 1))), and the
one-sided 99% drift test needs an increase of 3.0 standard errors; with R = 4 these are 3.18,
+-41% and 4.54: the interval's width is itself a guess and the drift test sees almost nothing."""

MIN_EFFECTIVE = RULES.min_effective
"""Fewest effective observations per replication (``SchedResult.n_eff``) for status ``ok``.
``n_eff = T / (2 tau_int)`` is the run length T in units of ``2 tau_int``; near saturation the
relaxation time of the queue is about ``2 tau_int`` (M/M/1: ``tau_int = (1 + rho) / (1 - rho)^2``,
Whitt 1989, and relaxation time ``1 / (1 - sqrt(rho))^2``), so with the default warm-up (as long
as the run) ``n_eff >= 5`` means a warm-up of >= 5 relaxation times (start-empty bias
<= e^-5 of the initial deficit) and halves of >= 5 tau_int each, nearly independent, for the
drift test to compare. Below, the run is too short to tell."""

PARTS = 20
"""Calls a run with ``progress`` is split into (the fraction done is told after each)."""


class SchedResult(Result):
    """Estimates for P sweep points (leading axis P; ``simulate`` drops it).

    ``estimate(name)`` gives the :class:`~jaxqueue.stats.Estimate` of ``delay``,
    ``service_rate`` and ``delay_all``.

    Attributes:
        delay, delay_low, delay_high: per-class mean delay ``delta_i`` and CI, shape (P, N).
        service_rate, service_rate_low, service_rate_high: ``gamma_i = sigma / delta_i``.
        delay_all, delay_all_low, delay_all_high: mean delay over all jobs,
            ``sum_i L_i / sum_i lam_i``, shape (P,).
        L: per-class mean number of jobs, shape (P, N); ``L_reps``: per replication (P, R, N).
        busy: mean total service capacity in use, shape (P,).
        interruptions_per_job: measured interruptions / departures, shape (P,).
        jumps_per_s: measured jumps per second of wall time (all replications, compile apart).
        compile_s: total compilation time (0 when cached).
        queue_size: buffer length finally used for each point, shape (P,).
        overflow: arrivals dropped on a full buffer (must be 0 for valid results), shape (P,).
        n_max: largest number of jobs seen, shape (P,).
        replications, jumps, warmup, level: the run's settings.
        drift: per point, mean over replications of (number of jobs in the second half of
            the measured jumps) - (in the first half), relative to the mean number, shape (P,).
        n_eff: per point, effective independent observations of the number of jobs per
            replication, ``T / (2 tau_int)`` (see ``_effective_observations``), shape (P,).
        stationary: per point, False when that increase is significant (one-sided, family-wise
            99% over the points) and above 5%, or when ``n_eff < MIN_EFFECTIVE`` (too short to
            tell): a warm-up too short or a load too close to saturation, shape (P,).
        status: a :class:`~jaxqueue.stats.Status`: ``overflow`` when some buffer overflowed
            at the largest size allowed, else ``nonstationary`` when some point is not
            stationary, else ``unconverged`` with fewer than ``MIN_REPLICATIONS``
            replications, else ``ok``.
    """

    delay: np.ndarray
    delay_low: np.ndarray
    delay_high: np.ndarray
    service_rate: np.ndarray
    service_rate_low: np.ndarray
    service_rate_high: np.ndarray
    delay_all: np.ndarray
    delay_all_low: np.ndarray
    delay_all_high: np.ndarray
    L: np.ndarray
    L_reps: np.ndarray
    busy: np.ndarray
    interruptions_per_job: np.ndarray
    jumps_per_s: float
    compile_s: float
    overflow: np.ndarray
    n_max: np.ndarray
    queue_size: np.ndarray
    replications: int
    jumps: int
    warmup: int
    level: float
    drift: np.ndarray
    n_eff: np.ndarray
    stationary: np.ndarray
    status: Status

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        if self.status == Status.overflow:
            return (
                f"a job buffer overflowed at queue size {np.max(self.queue_size)} "
                f"({int(np.sum(self.overflow))} arrivals dropped); raise max_queue_size"
            )
        return (
            f"the number of jobs changed by up to {np.max(self.drift):+.1%} between the halves "
            f"of the run, {np.min(self.n_eff):.3g} effective observations per replication, "
            f"{self.replications} replications (ok needs no significant growth above 5%, "
            f">= {MIN_EFFECTIVE:g} effective observations, >= {MIN_REPLICATIONS} replications)"
        )

    def point(self, p: int) -> SchedResult:
        """The result of sweep point ``p`` (arrays without the leading axis)."""
        return jax.tree_util.tree_map(lambda x: x[p] if isinstance(x, np.ndarray) else x, self)

    def to_frame(self):
        """One row per class (per sweep point and class, with a ``point`` column): ``class``,
        ``delay``, ``delay_low``, ``delay_high``, ``service_rate`` (with its interval), ``L``.
        Needs pandas (``pip install 'jaxqueue[tables]'``)."""
        names = ("delay", "delay_low", "delay_high", "service_rate", "service_rate_low")
        names += ("service_rate_high", "L")
        return per_class({k: getattr(self, k) for k in names})


def _law_arrays(law) -> tuple[PhaseMixture, float]:
    mix = law if isinstance(law, PhaseMixture) else phase_mixture(law)
    if not isinstance(law, (Law, PhaseMixture)):
        raise ValueError(f"law must be a jaxqueue.dist law, got {type(law).__name__}")
    return mix, mix.mean()


@functools.partial(jax.jit, static_argnums=0)
def _run_batch(spec: KernelSpec, params: KernelParams, key, reps, n_warm, n_chunks):
    """``run_chain`` for every point (P) and replication r in ``reps`` (R, key ``fold_in(key,
    r)``): one ``vmap`` over the R P pairs, replication-major (each device's replications keep
    every point), stats shaped (P, R, ...). One map, not one per axis: each map batches the
    kernel's loops again."""
    flat, keys = _pairs(params, key, reps)
    out = jax.vmap(run_chain, in_axes=(None, 0, 0, None, None))(spec, flat, keys, n_warm, n_chunks)
    return _points_first(out, reps.shape[0], params.lam.shape[0])


def _points_first(stats, R, P):
    """Stats of the R P pairs (replication-major) shaped (P, R, ...)."""
    return jax.tree_util.tree_map(
        lambda x: jnp.swapaxes(x.reshape(R, P, *x.shape[1:]), 0, 1), stats
    )


def _pairs(params, key, reps):
    """The parameters and keys of the R P pairs of :func:`_run_batch`."""
    R = reps.shape[0]
    keys = jax.vmap(lambda r: jax.random.fold_in(key, r))(reps)
    flat = jax.tree_util.tree_map(lambda x: jnp.tile(x, (R,) + (1,) * (x.ndim - 1)), params)
    return flat, jnp.repeat(keys, params.lam.shape[0])


@functools.partial(jax.jit, static_argnums=0)
def _start_blocks(spec: KernelSpec, params: KernelParams, key, reps, n_warm, n_chunks):
    """The state of every pair of :func:`_run_batch` before its first block."""
    flat, keys = _pairs(params, key, reps)
    return jax.vmap(chain_start, in_axes=(None, 0, 0, None, None))(
        spec, flat, keys, n_warm, n_chunks
    )


@functools.partial(jax.jit, static_argnums=0)
def _run_blocks(spec: KernelSpec, params: KernelParams, key, reps, n_warm, n_chunks, state, lo, hi):
    """Blocks ``lo`` to ``hi - 1`` of :func:`_run_batch` from ``state``: ``(state after them,
    stats shaped (P, R, ...) so far)`` (one program for every ``lo``, ``hi``)."""
    flat, keys = _pairs(params, key, reps)
    state, out = jax.vmap(run_blocks, in_axes=(None, 0, 0, None, None, 0, None, None))(
        spec, flat, keys, n_warm, n_chunks, state, lo, hi
    )
    return state, _points_first(out, reps.shape[0], params.lam.shape[0])


def _abstract(x, sharded: bool = False):
    """The shape and dtype of an array (and its sharding where ``sharded``): what its
    compilation depends on. The parameters follow the keys' devices, so they stay unplaced."""
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding if sharded else None)


@functools.lru_cache(maxsize=16)  # the most recently used executables, one per signature
def _executable(fn, spec: KernelSpec, abstract_args: tuple):
    return fn.lower(spec, *abstract_args).compile()


def _compiled(fn, spec, args, placed=(2,)):
    """The ahead-of-time compiled ``fn(spec, *args)`` (so that the timed call excludes
    compilation); it depends on the sharding of the arguments numbered in ``placed`` (the
    replications, the state of the pairs). Returns ``(executable, seconds spent compiling or
    looking up)``."""
    abstract = tuple(
        jax.tree_util.tree_map(functools.partial(_abstract, sharded=i in placed), a)
        for i, a in enumerate(args)
    )
    t0 = _time.perf_counter()
    return _executable(fn, spec, abstract), _time.perf_counter() - t0


def _run_in_parts(spec, args, progress, label):
    """``_run_batch(spec, *args)`` as :data:`PARTS` calls of one program (:func:`_run_blocks`),
    the state handed from call to call, telling ``progress`` the blocks done after each.
    Returns ``(stats, compile s, run s)``."""
    start, c_start = _compiled(_start_blocks, spec, args)
    state = jax.device_put(start(*args), args[2].sharding)  # the replications' devices
    n = int(args[3]) + int(args[4])
    bounds = [*range(0, n, -(-n // PARTS)), n]
    lo = jnp.asarray(0, jnp.int32)
    run, c_run = _compiled(_run_blocks, spec, (*args, state, lo, lo), placed=(2, 5))
    t0 = _time.perf_counter()
    for lo, hi in itertools.pairwise(bounds):
        state, stats = run(*args, state, jnp.asarray(lo, jnp.int32), jnp.asarray(hi, jnp.int32))
        jax.block_until_ready(stats)
        progress(f"{label}{hi}/{n} blocks of {spec.chunk} jumps ({hi / n:.0%})")
    return stats, c_start + c_run, _time.perf_counter() - t0


def _replications(replications: int):
    """The replication indices ``0 .. R - 1`` (replication r runs on ``fold_in(key, r)``),
    padded to a multiple of the device count and sharded over ``jax.devices()`` (the extra
    replications are dropped afterwards). Placed, not computed: no compilation per R."""
    devices = jax.devices()
    padded = -(-replications // len(devices)) * len(devices)
    reps = jax.device_put(np.arange(padded, dtype=jnp.result_type(int)))
    return shard_batch(batch_mesh(devices), reps)[0]


def simulate_sweep(
    pool,
    lam,
    law,
    m,
    *,
    key,
    replications: int = 100,
    jumps: int = 100_000,
    warmup: int = 100_000,
    queue_size: int = 128,
    max_queue_size: int = 8192,
    chunk: int = 1000,
    level: float = 0.95,
    dtype=None,
    throw: bool = False,
    progress=None,
) -> SchedResult:
    """Simulate the scheduler at P sweep points, R replications each.

    Args:
        pool: ``ClassAssignment``, ``RandomAssignment`` or an object with ``server_sets`` and
            ``mu`` (e.g. ``jaxqueue.pools.Pool``).
        lam: arrival rates, shape (P, N) for class pools, shape (P,) (total rate) for random
            assignment; one point may be given without the leading axis.
        law: job-size law, a mixture of sums of exponential phases (``jaxqueue.dist``
            Exponential, Erlang, HyperExponential, PhaseCount) or a ``PhaseMixture``.
        m: mean number of interruptions per job ``sigma / theta``, shape (P,) or scalar;
            0 is FCFS (theta = infinity); each server interrupts at rate ``C_s m / sigma``.
        key: PRNG key; replication r uses ``fold_in(key, r)`` (same answer on any device count).
        replications: R >= 2; fewer than ``MIN_REPLICATIONS`` (8) give status "unconverged".
        jumps: measured jumps per replication (rounded up to a multiple of ``chunk``).
        warmup: jumps simulated first and discarded (rounded up likewise).
        queue_size: initial buffer length; the points whose buffer overflowed are rerun with
            a doubled length (recompiling), up to ``max_queue_size``; ``status`` reports any
            overflow left.
        chunk: jumps per block of random numbers.
        level: confidence level of the intervals.
        dtype: float dtype of the simulation (default: JAX's default float).
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the status is not ``ok``
            (default: return the result with its status).
        progress: optional ``callable(str)``, told the blocks of ``chunk`` jumps done (warm-up
            included) out of all, in :data:`PARTS` steps; the numbers are those without it.

    Returns:
        ``SchedResult`` with a leading sweep axis.

    Raises:
        ValueError: bad arguments, or an unstable load (naming the bottleneck).
        EstimateError: with ``throw``, a status other than ``ok``.
    """
    pool = as_assignment(pool)
    mix, sigma = _law_arrays(law)
    lam, m = _check_sweep(pool, lam, m, replications, jumps, warmup, chunk)
    _check_queue_sizes(queue_size, max_queue_size)
    dtype = jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)
    params, shape = _kernel_params(pool, lam, m / sigma, mix, dtype)
    chunk = int(min(chunk, jumps))
    n_chunks = math.ceil(jumps / chunk)
    n_warm = math.ceil(warmup / chunk)
    reps = _replications(replications)
    counts = (jnp.asarray(n_warm, jnp.int32), jnp.asarray(n_chunks, jnp.int32))
    stats, q_used, compile_s, elapsed, runs = _run_points(
        params,
        shape,
        chunk,
        (key, reps),
        counts,
        replications,
        queue_size,
        max_queue_size,
        progress,
    )
    res = _summary(
        stats,
        lam,
        sigma,
        level=level,
        jumps=n_chunks * chunk,
        warmup=n_warm * chunk,
        jumps_per_s=runs * reps.shape[0] * (n_warm + n_chunks) * chunk / elapsed,
        compile_s=compile_s,
        queue_size=q_used,
    )
    return res.raise_for_status() if throw else res


def _check_sweep(pool, lam, m, replications, jumps, warmup, chunk):
    """``(lam (P, N), m (P,))`` checked: finite positive rates, one per class, a stable load
    at every point (naming the bottleneck), ``m >= 0``, sizes in range."""
    lam = np.asarray(lam, dtype=float)
    if isinstance(pool, RandomModel):
        lam = lam.reshape(-1, 1) if lam.ndim <= 1 else lam
    elif lam.ndim == 1:
        lam = lam[None, :]
    P, N = lam.shape
    if N != pool.n_classes:
        raise ValueError(f"lam has {N} rates per point but the pool has {pool.n_classes} classes")
    if not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError("lam must be finite and > 0 for every class")
    m = np.broadcast_to(np.asarray(m, dtype=float), (P,)).copy()
    if not np.all(np.isfinite(m)) or np.any(m < 0):
        raise ValueError(f"m (mean interruptions per job) must be finite and >= 0, got {m}")
    if replications < 2:
        raise ValueError(f"replications must be >= 2 for a confidence interval, got {replications}")
    if jumps < 1 or warmup < 0 or chunk < 1:
        raise ValueError("jumps must be >= 1, warmup >= 0 and chunk >= 1")
    for p in range(P):
        check_stability(pool, lam[p])
    if jumps + warmup + 2 * chunk >= 2**31 - 1:
        raise ValueError("jumps + warmup must stay below 2**31 (int32 queue-order stamps)")
    return lam, m


def _check_queue_sizes(queue_size, max_queue_size) -> None:
    for name, v in (("queue_size", queue_size), ("max_queue_size", max_queue_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if max_queue_size < queue_size:
        raise ValueError(f"max_queue_size ({max_queue_size}) < queue_size ({queue_size})")


def _kernel_params(pool, lam, alpha, mix, dtype):
    """The kernel's per-point arrays (``KernelParams``, leading axis P) and its static shape
    ``(servers, width of a server list, classes, d of random assignment or 0, single phase)``."""
    P, N = lam.shape
    S = pool.n_servers
    mu_ext = np.concatenate([pool.mu, [0.0]])
    if isinstance(pool, RandomModel):
        width, random_d = pool.d, pool.d
        class_servers = np.full((1, width), S, np.int32)
    else:
        width, random_d = max(len(ss) for ss in pool.server_sets), 0
        class_servers = np.full((N, width), S, np.int32)
        for i, ss in enumerate(pool.server_sets):
            class_servers[i, : len(ss)] = ss
    rate_table, rate_idx = np.unique(np.asarray(mix.rates, dtype=float), return_inverse=True)

    def per_point(x, dt, P=P):  # built by numpy and placed: eager jax ops compile per shape
        x = np.asarray(x, jax.dtypes.canonicalize_dtype(dt))
        return jax.device_put(np.broadcast_to(x, (P, *x.shape)) if P else x)

    params = KernelParams(
        lam=per_point(lam, dtype, None),
        mu_ext=per_point(mu_ext, dtype),
        class_servers=per_point(class_servers, jnp.int32),
        alpha=per_point(alpha, dtype, None),
        comp_counts=per_point(mix.counts, jnp.int32),
        comp_rate_idx=per_point(rate_idx, jnp.int32),
        rate_table=per_point(rate_table, dtype),
        comp_cdf=per_point(np.cumsum(mix.probs) / np.sum(mix.probs), dtype),
    )
    single = bool(np.all(np.asarray(mix.counts) == 1) and rate_table.size == 1)
    return params, (S, width, N, random_d, single)


def _run_points(
    params, shape, chunk, keys, counts, replications, queue_size, max_queue_size, progress
):
    """Run every point at the initial buffer size; rerun only the points whose buffer
    overflowed with a doubled size (same ``keys``, the key and the replication indices: a run
    that does not overflow does not depend on the size). With ``progress``, each run goes in
    parts (:func:`_run_in_parts`). Returns ``(stats (P, R, ...), buffer size used per point,
    compile s, run s, points run)``."""
    P = params.lam.shape[0]
    pending = np.arange(P)
    q = int(queue_size)
    merged = None
    q_used = np.zeros(P, dtype=int)
    compile_s = elapsed = 0.0
    runs = 0
    while pending.size:
        # the points rerun, selected on the host (a gather would compile per shape)
        sub = jax.tree_util.tree_map(lambda x, i=pending: jax.device_put(np.asarray(x)[i]), params)
        spec, args = KernelSpec(q, *shape, chunk), (sub, *keys, *counts)
        if progress is None:
            compiled, c_s = _compiled(_run_batch, spec, args)
            t0 = _time.perf_counter()
            part = jax.block_until_ready(compiled(*args))
            run_s = _time.perf_counter() - t0
        else:
            again = f"{pending.size} of {P} points again with a buffer of {q}: " if runs else ""
            part, c_s, run_s = _run_in_parts(spec, args, progress, again)
        elapsed += run_s
        compile_s += c_s
        runs += pending.size
        part = jax.tree_util.tree_map(lambda x: to_host(x)[:, :replications], part)
        if merged is None:
            merged = jax.tree_util.tree_map(lambda x: np.zeros((P, *x.shape[1:]), x.dtype), part)
        for leaf_all, leaf in zip(
            jax.tree_util.tree_leaves(merged), jax.tree_util.tree_leaves(part), strict=True
        ):
            leaf_all[pending] = leaf
        q_used[pending] = q
        over = part.overflow.sum(axis=1) > 0
        if not np.any(over) or q >= max_queue_size:
            break
        pending = pending[over]
        q = min(2 * q, int(max_queue_size))
    return merged, q_used, compile_s, elapsed, runs


def _summary(stats, lam, sigma, *, level, jumps, warmup, jumps_per_s, compile_s, queue_size):
    """The :class:`SchedResult` of the per-replication statistics ``stats`` (P, R, ...)."""
    replications = stats.time.shape[1]
    overflow = stats.overflow.sum(axis=1)
    time = np.asarray(stats.time)  # (P, R)
    L_reps = np.asarray(stats.area) / time[..., None]  # (P, R, N)
    delay_reps = L_reps / lam[:, None, :]
    est = log_mean_ci(delay_reps, axis=1, level=level)
    est_all = log_mean_ci(L_reps.sum(-1) / lam.sum(-1)[:, None], axis=1, level=level)
    delay, lo, hi = (np.asarray(v) for v in (est.mean, est.low, est.high))
    deps = np.asarray(stats.departures).sum(axis=1)
    drift, no_growth = _drift(stats)
    n_eff = _effective_observations(stats)
    stationary = no_growth & (n_eff >= MIN_EFFECTIVE)
    return SchedResult(
        delay=delay,
        delay_low=lo,
        delay_high=hi,
        service_rate=sigma / delay,
        service_rate_low=sigma / hi,
        service_rate_high=sigma / np.maximum(lo, np.finfo(float).tiny),
        delay_all=np.asarray(est_all.mean),
        delay_all_low=np.asarray(est_all.low),
        delay_all_high=np.asarray(est_all.high),
        L=L_reps.mean(axis=1),
        L_reps=L_reps,
        busy=(np.asarray(stats.busy) / time).mean(axis=1),
        interruptions_per_job=np.asarray(stats.interruptions).sum(axis=1) / np.maximum(deps, 1),
        jumps_per_s=jumps_per_s,
        compile_s=compile_s,
        overflow=overflow,
        n_max=np.asarray(stats.n_max).max(axis=1),
        queue_size=queue_size,
        replications=int(replications),
        jumps=jumps,
        warmup=warmup,
        level=float(level),
        drift=drift,
        n_eff=n_eff,
        stationary=stationary,
        status=_status(overflow, no_growth, n_eff, replications),
    )


def _status(overflow, no_growth, n_eff, replications: int) -> Status:
    """The first that applies of ``overflow``, ``nonstationary``, ``unconverged`` (fewer than
    ``MIN_REPLICATIONS`` replications), ``ok`` (:func:`jaxqueue.stats.judge`, over all points)."""
    return judge(
        RULES,
        replications=replications,
        n_eff=float(np.min(n_eff)),
        growing=not np.all(no_growth),
        overflow=bool(np.any(overflow > 0)),
    )[0]


def _effective_observations(stats) -> np.ndarray:
    """Effective independent observations of the total number of jobs per replication.

    ``n_eff = s_w^2 / s_b^2``: ``s_w^2`` the time-averaged variance of the number of jobs within
    a run (mean over replications of ``area_sq / time - L_r^2``), ``s_b^2`` the variance of the
    run means ``L_r`` across replications. For a stationary run of length T,
    ``Var(L_r) = s_w^2 * 2 tau_int / T`` (tau_int the integrated autocorrelation time; the
    variance of a time average, e.g. Sokal, "Monte Carlo methods in statistical mechanics",
    1997, Section 2), so
    ``n_eff = T / (2 tau_int)``: the run's length in correlation times. A run started empty and
    still far from steady state has run means spread far more than the values within a run,
    hence ``n_eff`` of order 1. Shape (P,); infinite when the run means do not vary.
    """
    t = np.asarray(stats.time)
    L = np.asarray(stats.area).sum(-1) / t  # (P, R)
    within = np.maximum(np.asarray(stats.area_sq) / t - L**2, 0.0).mean(axis=1)
    between = L.var(axis=1, ddof=1)
    return np.divide(within, between, out=np.full_like(within, np.inf), where=between > 0)


def _drift(stats) -> tuple[np.ndarray, np.ndarray]:
    """Second half against first half of the measured jumps (the first ``floor(J / 2)`` jumps
    against the rest, whatever the chunking), paired by replication: the mean increase of the
    total number of jobs relative to its mean, and whether it is significant (one-sided at
    1 - 0.01 / P, so a stationary sweep is flagged with probability <= 1%) and above 5%
    (:func:`jaxqueue.stats.drift`, the rule of the MJQM forward simulator). Returns the
    relative increase and, per point, True when no such growth is seen."""
    t, a = np.asarray(stats.time), np.asarray(stats.area).sum(-1)  # (P, R)
    t1, a1 = np.asarray(stats.time_first), np.asarray(stats.area_first).sum(-1)
    t2, a2 = t - t1, a - a1
    ok = (t1 > 0) & (t2 > 0)
    L1 = np.where(ok, a1 / np.where(ok, t1, 1.0), 0.0)
    L2 = np.where(ok, a2 / np.where(ok, t2, 1.0), 0.0)
    mean_L = np.maximum((a / t).mean(axis=1), np.finfo(float).tiny)
    inc, growing = drift(L1, L2, mean_L, axis=1, level=1 - 0.01 / t.shape[0])
    return inc / mean_L, ~growing


def simulate(pool, lam, law, *, m: float = 0.0, key, throw: bool = False, **kwargs) -> SchedResult:
    """Simulate the scheduler at one load; ``simulate_sweep`` with one point.

    Examples:
        >>> from jaxqueue.sched import ClassAssignment, simulate
        >>> from jaxqueue.dist import get_law
        >>> pool = ClassAssignment([[0, 2], [1, 2]], [1.0, 1.0, 1.0])
        >>> res = simulate(pool, [0.9, 0.9], get_law("bimodal"), m=1.0,
        ...                key=jax.random.key(0), replications=8, jumps=20_000)
        >>> res.delay, res.delay_low, res.delay_high  # per class, 95% CI

    See ``simulate_sweep`` for the arguments.
    """
    lam = np.asarray(lam, dtype=float)
    if isinstance(as_assignment(pool), RandomModel):
        lam = lam.reshape(1)
    res = simulate_sweep(pool, lam[None], law, np.asarray([m]), key=key, **kwargs).point(0)
    return res.raise_for_status() if throw else res
