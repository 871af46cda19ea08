"""Forward MJSRE simulation (F-MJSRE, ``mjsre`` Section 7.4) with streaming metrics.

``lax.scan`` over chunks of jobs (inputs drawn inside the jit from counter-based keys, see
``_inputs.py``), an inner ``lax.scan`` over the jobs of a chunk running the O(s) step
``vmap``-ed over the replications, and the replication axis split over ``jax.devices()`` with
``shard_map`` (each device runs the same kernel on its own replications). The chunk's inputs
are drawn for all replications at once in the ``(jobs, replications)`` layout the job loop
reads, so XLA:CPU needs no transposes. The warm-up jobs run first with the plain step; then,
per chunk, the per-job waiting times are reduced to per-class sums (in the state dtype, over at
most ``chunk`` jobs; flat scatter-adds) and histogram counts (int32),
and the chunk sums are accumulated across chunks with compensated (Kahan) sums in the widest
float type enabled (float64 under x64). Memory does not grow with the number of jobs and a
float32 state does not bias the means.

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
control variate (:func:`_ratio_ci`): the measured idle servers minus ``s - lam E[alpha sigma]``
has mean 0 and moves against the waits, so the estimate is corrected by the regression of the
waits on it across replications (measured on ``two-class-256`` at 0.1 ``lambda_c``, 256 x 20000
jobs: half-width 0.30 without, 0.15 with). Used from ``MIN_CONTROL_REPS`` replications on.

A stationarity diagnostic compares the mean wait of the second half of the measured jobs with
the first half (``ForwardResult.status``), flagging loads beyond the stability limit
``lambda_c`` that the guard could not know, or runs too short for the warm-up to end.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from jaxtyping import PRNGKeyArray

from .._sharding import BATCH, batch_devices, batch_mesh, shard_batch, to_host
from ..stats import drift, mean_ci, t_quantile
from ._guard import check_load
from ._inputs import draw_jobs_block_reps
from ._policy import SpecificServers, policy_for
from ._workload import Workload

__all__ = ["ForwardResult", "simulate"]

_VARIANTS = ("fcfs", "random")


# ---------------------------------------------------------------------------- jitted kernel
def _kahan_add(acc, comp, x):
    y = x - comp
    t = acc + y
    return t, (t - acc) - y


def _run_impl(
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
    C = workload.n_classes
    T = workload.n_types
    sizes = workload.servers
    acc_dtype = jax.dtypes.canonicalize_dtype(jnp.float64)
    special = variant == "random" or workload.specific is not None
    n_extra = workload.s if special else 0
    spec_beta = jnp.asarray(workload.specific, jnp.int32) if workload.specific is not None else None
    cores = jnp.asarray(np.asarray(workload.cores, np.int32))

    splits = tuple(np.cumsum(sizes)[:-1])

    # the policy: FCFS (eq. (2) or (15)); specific servers and random assignment both as
    # eq. (14) with inputs alpha = (arbitrary, specific) built in chunk_inputs
    policy = SpecificServers() if special else policy_for(workload)

    def advance(W, alpha, sigma, tau, extra):
        """One step: (wait, HOL vector of the job, new state)."""
        X, w, hol = policy.advance(W, alpha, sigma, tau, extra)
        return w, hol, jnp.maximum(X, 0)

    def chunk_inputs(start, stop, masked):
        """Inputs of jobs start .. start+chunk-1 of all replications, ``(chunk, R, ...)``;
        jobs >= stop become identity steps (no server, or one server with sigma = tau = 0).
        ``masked`` (static): whether the chunk can contain such jobs at all."""
        jobs = start + jnp.arange(chunk, dtype=jnp.int32)
        inp = draw_jobs_block_reps(
            workload, lam, key, reps, start, chunk, dtype=dtype, n_extra=n_extra
        )
        shape = inp.cls.shape
        if not masked and not special:
            valid = jnp.ones(shape, bool)
            return valid, inp.cls, inp.alpha, inp.sigma, inp.tau, inp.extra, inp.alpha
        valid = jnp.broadcast_to((jobs < stop)[:, None], shape)
        cls = jnp.where(valid, inp.cls, 0)
        sigma = jnp.where(valid, inp.sigma, 0)
        tau = jnp.where(valid, inp.tau, 0)
        if special:
            a = cores[inp.cls, 0]
            b = spec_beta[inp.cls] if spec_beta is not None else jnp.zeros_like(a)
            if variant == "random":
                a, b = jnp.zeros_like(a), a + b
            alpha = jnp.where(valid[..., None], jnp.stack([a, b], axis=-1), 0)
        else:
            first = jnp.zeros((T,), jnp.int32).at[0].set(1)
            alpha = jnp.where(valid[..., None], inp.alpha, first)
        work = jnp.where(valid[..., None], inp.alpha, 0)  # servers held per type
        return valid, cls, alpha, sigma, tau, inp.extra, work

    def scan_xs(alpha, sigma, tau, extra):
        """Per-job scan inputs; plain FCFS passes scalars only (cheaper scan slices)."""
        if not special and T == 1:
            return (alpha[..., 0], sigma, tau)
        return (alpha, sigma, tau, extra)

    def type_sums(W):
        """Per-type sums of ``(R, s)`` vectors, ``(R, T)`` in acc_dtype."""
        return jnp.stack(
            [p.sum(axis=-1) for p in jnp.split(W.astype(acc_dtype), splits, axis=-1)], axis=-1
        )

    # Layout: the loops run over chunks and jobs for all replications at once, with the
    # replication axis minor (``(chunk, R)`` inputs): the inputs are generated, scanned over
    # and reduced in that layout, with no transposes between them (vmap over replications
    # of a whole-run scan made XLA:CPU generate rep-major inputs and transpose them).
    inputs = chunk_inputs

    def step_all(W, x):
        if len(x) == 3:
            return jax.vmap(lambda w, a, sg, t: advance(w, a, sg, t, None))(W, *x)
        return jax.vmap(advance)(W, *x)

    # warm-up: plain steps, no statistics
    def warm_body(W, c):
        _, _, alpha, sigma, tau, extra, _ = inputs(
            offset + c * chunk, offset + warmup, warmup % chunk != 0
        )

        def body(W, x):
            return step_all(W, x)[2], None

        return jax.lax.scan(body, W, scan_xs(alpha, sigma, tau, extra))[0], None

    W = W0
    if warmup > 0:
        W = jax.lax.scan(warm_body, W, jnp.arange(-(-warmup // chunk), dtype=jnp.int32))[0]

    # measured jobs: the carry holds the state and the elementwise HOL sums
    n_chunks = -(-(n_jobs - warmup) // chunk)

    def job_body(Z, x):
        w, hol, W2 = step_all(Z[0], x)
        return (W2, Z[1] + hol), w

    def metrics(W, W2, holsum, wait, valid, cls, tau, sigma, held, c, fsum, fcomp, hist):
        """Fold a chunk's jobs (``(chunk, R)`` arrays) into the per-replication statistics."""
        # within-chunk sums in the state dtype (short), across chunks compensated in acc_dtype;
        # per (replication, class) sums as flat scatter-adds (cheaper on XLA:CPU than masked
        # reductions over the job axis)
        R = W.shape[0]
        slot = (cls + jnp.arange(R, dtype=jnp.int32) * C).reshape(-1)
        vf = valid.astype(dtype)

        def by_class(x):
            z = jnp.zeros((R * C,), dtype)
            z = z.at[slot].add(x.reshape(-1), mode="promise_in_bounds")
            return z.reshape(R, C)

        S = jnp.stack(
            [by_class(wait * vf), by_class(wait * wait * vf), by_class((wait + sigma) * vf)],
            axis=1,
        ).astype(acc_dtype)

        t64 = jnp.sum(tau, axis=0).astype(acc_dtype)
        work = jnp.sum(held.astype(dtype) * sigma[..., None], axis=0).astype(acc_dtype)
        hol = type_sums(holsum)
        # telescoping identity of eq. (2): sum_i W_{n+1}^i = sum_i W_n^i + alpha sigma
        # + hol_n - s tau_n + free_n, summed over the chunk, gives all idle server-time
        idle = jnp.asarray(sizes, acc_dtype) * t64[:, None] - work
        idle = idle + type_sums(W2) - type_sums(W)
        cls_wait = S[:, 0]
        x_wait = jnp.sum(cls_wait, axis=1)
        second = c >= n_chunks // 2
        x = jnp.concatenate(
            [
                cls_wait,
                S[:, 1],
                S[:, 2],
                t64[:, None],
                hol,
                idle - hol,
                work,
                # second half of the measured jobs (stationarity diagnostic)
                jnp.where(second, x_wait, 0)[:, None],
                jnp.where(second, jnp.sum(valid, axis=0), 0).astype(acc_dtype)[:, None],
            ],
            axis=1,
        )
        fsum, fcomp = _kahan_add(fsum, fcomp, x)
        # log-scale bins from the float32 bit pattern: exponent and the top mantissa bits
        code = jax.lax.bitcast_convert_type(wait.astype(jnp.float32), jnp.int32) >> shift
        b = jnp.clip(code - lo_code + 2, 1, n_bins - 1)
        b = jnp.where(wait > 0, b, 0)
        # indices are in range by construction (clipped bins, classes < C)
        hist = jax.vmap(
            lambda h, i, v: h.at[i].add(v, mode="promise_in_bounds"), in_axes=(0, 1, 1)
        )(hist, cls * n_bins + b, valid.astype(jnp.int32))
        return fsum, fcomp, hist

    def chunk_body(carry, c):
        W, fsum, fcomp, hist = carry
        valid, cls, alpha, sigma, tau, extra, held = inputs(
            offset + warmup + c * chunk, offset + n_jobs, (n_jobs - warmup) % chunk != 0
        )
        (W2, holsum), wait = jax.lax.scan(
            job_body, (W, jnp.zeros_like(W)), scan_xs(alpha, sigma, tau, extra)
        )
        fsum, fcomp, hist = metrics(
            W, W2, holsum, wait, valid, cls, tau, sigma, held, c, fsum, fcomp, hist
        )
        return (W2, fsum, fcomp, hist), None

    R = W0.shape[0]
    nf = 3 * C + 1 + 3 * T + 2
    carry = (
        W,
        jnp.zeros((R, nf), acc_dtype),
        jnp.zeros((R, nf), acc_dtype),
        jnp.zeros((R, C * n_bins), jnp.int32),
    )
    (W, fsum, _, hist), _ = jax.lax.scan(chunk_body, carry, jnp.arange(n_chunks, dtype=jnp.int32))
    # every measured job lies in exactly one bin of its class: the counts are the bin sums
    hist = hist.reshape(R, C, n_bins)
    return W, fsum, jnp.sum(hist, axis=-1), hist


def _run_sharded(workload, lam, key, reps, W0, lo_code, offset, *, mesh=None, **static):
    """:func:`_run_impl` on each device's share of the replications (``shard_map``: every
    device runs the single-device kernel on its own replications; no communication)."""

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


_run = jax.jit(
    _run_sharded,
    static_argnames=(
        "mesh",
        "n_jobs",
        "warmup",
        "chunk",
        "dtype",
        "variant",
        "n_bins",
        "shift",
    ),
)


# ---------------------------------------------------------------------------- host side
def _linearise(num, den):
    """Ratio ``r = sum(num) / sum(den)`` over replications (axis 0) and the per-replication
    delta-method values ``z = r + (num - r den) / mean(den)`` whose mean is ``r``."""
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    tot = den.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = num.sum(axis=0) / tot
        z = r + (num - r * den) / (tot / den.shape[0])
    return np.where(tot > 0, r, np.nan), np.nan_to_num(z)


def _ratio_ci(num, den, level, control=None):
    """Ratio estimator ``sum(num) / sum(den)`` over replications with a delta-method t
    interval, corrected for the skewness and kurtosis of the replications
    (``stats.mean_ci(shape=True)``).

    ``control``: optional ``(R,)`` per-replication values of a control variate with known mean
    0 (the idle-server identity, :func:`_idle_control`). The estimate is then
    ``r - beta mean(control)`` with ``beta = cov(z, control) / var(control)`` per column, and
    the interval that of the residuals ``z - beta control`` (Glasserman, *Monte Carlo Methods
    in Financial Engineering*, 2003, Section 4.1; ``beta`` estimated from the same
    replications, a bias of order ``1 / R``)."""
    r, z = _linearise(num, den)
    if control is not None:
        c = np.asarray(control, float).reshape((-1,) + (1,) * (z.ndim - 1))
        cc = c - c.mean()
        var = float(np.sum(cc**2))
        beta = np.sum((z - z.mean(axis=0)) * cc, axis=0) / var if var > 0 else 0.0
        z = z - beta * c
    est = mean_ci(z, axis=0, level=level, shape=True)
    m, lo, hi = (np.asarray(v, float) for v in (est.mean, est.low, est.high))
    bad = np.isnan(r)
    m, lo, hi = (np.where(bad, np.nan, v) for v in (m, lo, hi))
    return m, np.stack([lo, hi], axis=-1)


def _idle_control(idle_time, time, expected):
    """Per replication, the idle-server control variate: the linearised mean number of idle
    servers minus its stationary value ``s - lam E[alpha sigma]`` (eq. (2) telescoped,
    :func:`_idle_identity_z`). Its mean is 0 for a stationary run; it is strongly correlated
    with the waits (a replication that drew more work has fewer idle servers and longer
    waits), so subtracting it removes much of the replication-to-replication noise."""
    return _linearise(idle_time, time)[1] - expected


def _quantile_from_hist(counts, edges, q):
    """Quantile ``q`` of a histogram with an atom at 0 (bin 0), interpolated log-linearly."""
    n = counts.sum()
    if n == 0:
        return float("nan")
    cum = np.cumsum(counts) / n
    b = int(np.searchsorted(cum, q, side="left"))
    if b == 0:
        return 0.0
    lo, hi = edges[b], edges[b + 1]
    prev = cum[b - 1]
    frac = (q - prev) / max(cum[b] - prev, 1e-300)
    if b == 1:  # (0, lo): linear
        return float(hi * frac)
    if not np.isfinite(hi):
        return float(lo)
    return float(lo * (hi / lo) ** frac)


@dataclasses.dataclass(frozen=True)
class ForwardResult:
    """Metrics of a forward MJSRE run (host-side numpy, float64).

    Class-indexed arrays follow the workload's class order. ``*_ci`` are ``[low, high]``
    intervals across replications at ``level`` (ratio estimators with the delta method).
    Quantiles come from per-class log-spaced histograms (``edges``; bin 0 holds the atom at
    0), interpolated within a bin, so they are accurate to a fraction of a bin width
    (``1 / bins_per_octave`` relative).
    """

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
    status: str  # "ok", "nonstationary" (the mean wait grows, the idle identity fails, a run
    # too short to judge) or "unconverged" (a class seen in < 2 replications, or fewer than
    # MIN_REPLICATIONS replications)
    wait_growth: float  # mean over replications of (2nd-half mean wait - 1st-half mean wait)
    idle_z: float = 0.0  # (idle servers - (s - lam E[alpha sigma])) / se (_idle_identity_z)
    n_eff: float = float("inf")  # effective independent waits per replication (_effective_jobs)
    rounds: tuple = ()  # (jobs, warm-up, status, seconds) per round of simulate_steady
    start: str = "empty"  # "empty", "init", or "backward" (simulate_steady)

    def wait_quantile(self, q: float, cls: int | None = None) -> float:
        """Quantile ``q`` of the waiting time of class ``cls`` (all jobs if ``None``)."""
        if not 0.0 < q < 1.0:
            raise ValueError(f"q must lie in (0, 1), got {q}")
        counts = self.hist.sum(axis=0) if cls is None else self.hist[cls]
        return _quantile_from_hist(counts, self.edges, q)

    def wait_density(self, cls: int | None = None) -> tuple[np.ndarray, np.ndarray, float]:
        """``(bin_centres, density, p0)``: the waiting-time density on the positive bins
        (geometric centres) and the probability of not waiting at all."""
        counts = self.hist.sum(axis=0) if cls is None else self.hist[cls]
        n = max(counts.sum(), 1)
        lo, hi = self.edges[1:-2], self.edges[2:-1]
        centres = np.sqrt(np.maximum(lo, hi * 1e-3) * hi)
        return centres, counts[1:-1] / n / (hi - lo), counts[0] / n

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


def _hist_layout(lo, hi, bins_per_octave):
    """Waiting-time histogram: bin 0 the atom at 0, bin 1 (0, lo), then the float32 codes
    ``bits >> shift`` (``bins_per_octave`` bins per octave) from ``lo`` to ``hi``, and an
    overflow bin. Returns ``(n_bins, shift, lo_code, edges)``."""
    shift = 23 - int(math.log2(bins_per_octave))
    lo_code = int(np.array(lo, np.float32).view(np.int32)) >> shift
    hi_code = (int(np.array(hi, np.float32).view(np.int32)) >> shift) + 1
    codes = np.arange(lo_code, hi_code + 1, dtype=np.int64)
    inner = (codes << shift).astype(np.int32).view(np.float32).astype(float)
    edges = np.concatenate([[0.0, 0.0], inner, [np.inf]])
    return len(edges) - 1, shift, lo_code, edges


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
    override: bool = False,
    stationary_start: bool = False,
) -> ForwardResult:
    """Forward MJSRE simulation of ``n_replications`` independent queues (Section 7.4).

    Each replication starts from ``init`` (default: empty) and runs ``n_jobs`` jobs of the
    recurrence eq. (2) (eq. (15) for several resource types, eq. (14) with specific servers,
    random assignment of Appendix A with ``variant="random"``); the first ``warmup`` jobs are
    left out of the statistics. Job ``n`` of replication ``r`` is a pure function of
    ``(key, r, n)``, so the numbers do not depend on ``chunk`` or on the devices.

    Args:
        workload: the model.
        lam: arrival rate; refused at or beyond a known stability limit
            (:func:`~jaxqueue.mjqm.check_load`) unless ``override``.
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
        override: skip the stability check.
        stationary_start: ``init`` is (nearly) a stationary sample (backward samples whose
            sampler said ok, or the final state of such a run): the rule "at least
            ``MIN_EFFECTIVE`` effective waits per replication" is then not applied.

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
    """
    lam_f = check_load(workload, lam, key=key, override=override)
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
    n_bins, shift, lo_code, edges = _histogram(workload, hist_range, bins_per_octave)

    mesh = batch_mesh(batch_devices(n_replications, devices))
    reps, W0 = shard_batch(
        mesh, jnp.arange(n_replications, dtype=jnp.int32), jnp.asarray(W0, dtype=dtype)
    )
    W, fsum, counts, hist = _run(
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
    return res if init is None else dataclasses.replace(res, start="init")


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


def _histogram(workload, hist_range, bins_per_octave):
    """The log-spaced waiting-time histogram layout (:func:`_hist_layout`) of ``simulate``."""
    mean_service = float(np.sum(np.asarray(workload.probs) * np.asarray(workload.mean_service())))
    lo, hi = hist_range if hist_range is not None else (1e-4 * mean_service, 1e6 * mean_service)
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"hist_range must satisfy 0 < low < high, got {hist_range!r}")
    if bins_per_octave not in (1, 2, 4, 8, 16, 32, 64):
        raise ValueError(f"bins_per_octave must be a power of 2 <= 64, got {bins_per_octave!r}")
    return _hist_layout(lo, hi, bins_per_octave)


def _stationarity(wait_sum, n, wait_sum2, n2, level=0.999):
    """Compare the mean wait of the second half of the measured jobs with the first half,
    paired by replication: a significant increase (one-sided, ``level``) flags a load beyond
    the (unknown) stability limit or a run too short to reach the stationary regime. Returns
    ``(growing, mean increase)``; fewer than 2 replications with both halves: not growing."""
    n1 = n - n2
    ok = (n1 > 0) & (n2 > 0)
    if ok.sum() < 2:
        return False, float("nan")
    first = (wait_sum[ok] - wait_sum2[ok]) / n1[ok]
    inc, growing = drift(
        first, wait_sum2[ok] / n2[ok], float(np.mean(wait_sum[ok] / n[ok])), level=level
    )
    return bool(growing), float(inc)


def _idle_identity_z(idle, idle_ci, expected, level, n_reps) -> float:
    """``(measured - expected) / se`` of the mean number of idle servers.

    Over a run of length ``T``, eq. (2) telescopes to ``idle server-time = s T - sum_n alpha_n
    sigma_n + sum_i (W_end^i - W_start^i)`` (module docstring), so the measured mean equals
    ``s - lam E[alpha sigma]`` only up to the change of the total workload over the run divided
    by ``T``: a workload that grows (warm-up too short, or ``lam`` beyond ``lambda_c``) or
    shrinks (a start above the stationary level) shows as a significant difference. ``se`` is
    read back from the ``level`` interval of the ratio estimator (Student t)."""
    se = (idle_ci[1] - idle_ci[0]) / (2 * t_quantile(n_reps, level))
    return float((idle - expected) / se) if se > 0 else 0.0


def _effective_jobs(wait_sum, wait_sq, n) -> float:
    """Effective independent waiting times per replication, ``n / (2 tau_int)``.

    ``s_w^2 / s_b^2``: the mean within-replication variance of the waits over the variance of
    the replication means across replications. For a stationary run of ``n`` jobs the variance
    of its mean is ``s_w^2 2 tau_int / n`` (``tau_int`` the integrated autocorrelation time of
    the waits; Sokal, "Monte Carlo methods in statistical mechanics", 1997, Section 2), so the
    ratio is the run's length in units of ``2 tau_int``; a run not much longer than its own
    correlation time cannot show that it forgot its start. Infinite when the means are equal.
    """
    ok = n > 0
    if ok.sum() < 2:
        return float("inf")
    m = wait_sum[ok] / n[ok]
    within = float(np.mean(np.maximum(wait_sq[ok] / n[ok] - m**2, 0.0)))
    between = float(np.var(m, ddof=1))
    return within / between if between > 0 else float("inf")


MIN_EFFECTIVE = 10.0
"""Fewest effective waits per replication (:func:`_effective_jobs`) for status ``ok`` when the
start is not (nearly) stationary: the measured jobs then span at least 20 integrated
autocorrelation times. Measured: M/M/1 at rho = 0.98 from empty reached ``ok`` with a mean wait
of 32 against 49 without this rule (the drift and idle tests have no power on such runs)."""

MIN_CONTROL_REPS = 128
"""Fewest replications for the idle-server control variate (its coefficient is estimated
from the replications; with fewer the plain ratio interval is used). Measured coverage of the
95% interval of the mean wait (``simulate_steady``, keys 0, 1, ...), control variate against
plain: rare-8 (1% of jobs need all 8 servers, 20x longer) at 0.5 ``lambda_c``, 4000 jobs, 256
replications 93/100 (half-width 4.3% of the mean) against 96/100 (7.4%), at 0.85 ``lambda_c``
93/100 (7.2%) against 96/100 (11.3%), but with 32 replications 173/200 = 86.5% against
187/200; two-class-256 at 0.1 and 0.5 ``lambda_c``, 256 x 20,000 jobs
39/40 (3.9%) and 38/40 (4.3%). With few replications the estimated coefficient fits their
heavy tails and the interval is too short."""

MIN_REPLICATIONS = 64
"""Fewest replications for status ``ok``: with fewer, the interval of a ratio over
heavy-tailed replications is too short (a run that drew few of the rare long jobs also shows
a small spread; no formula restores a tail the sample did not reach), so the status is
``unconverged``. Measured coverage of the 95% interval of the mean wait (``simulate_steady``,
rare-8, 1% of jobs need all 8 servers for 20x longer, at 0.85 ``lambda_c``, 4000 jobs, keys
1000 ..): 180/200 = 90.0% with 32 replications, 188/200 = 94.0% with 64, 94/100 with 256
(``benchmarks/bench_coverage.py``)."""

IDLE_LEVEL = 0.999
"""Two-sided level of the idle-server identity test (:func:`_idle_identity_z`, a Student t
statistic with ``R - 1`` degrees of freedom; ``|z| <= 3.29`` for many replications): the level
of the drift test."""


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
    idle, idle_ci = _ratio_ci(idle_time, time, level)
    idle_expected = float(np.sum(workload.idle_servers_expected(lam)))
    cv = _idle_control(idle_time, time, idle_expected) if R >= MIN_CONTROL_REPS else None
    wait_mean, wait_ci = _ratio_ci(sw, n, level, cv)
    sys_mean, sys_ci = _ratio_ci(ssys, n, level, cv)
    with np.errstate(invalid="ignore", divide="ignore"):
        raw = sw.sum(axis=0) / ncls
        wait_var = np.maximum(sw2.sum(axis=0) / ncls - raw**2, 0.0)  # >= 0 (rounding)
    ntot = n.sum(axis=1)
    all_mean, all_ci = _ratio_ci(sw.sum(axis=1), ntot, level, cv)
    all_var = max(sw2.sum() / ntot.sum() - (sw.sum() / ntot.sum()) ** 2, 0.0)
    L, L_ci = _ratio_ci(ssys.sum(axis=1), time, level, cv)
    growing, growth = _stationarity(sw.sum(axis=1), ntot, w2, n2)
    idle_z = _idle_identity_z(float(idle), idle_ci, idle_expected, level, R)
    n_eff = _effective_jobs(sw.sum(axis=1), sw2.sum(axis=1), ntot)
    short = not stationary_start and n_eff < MIN_EFFECTIVE
    idle_bad = abs(idle_z) > t_quantile(R, IDLE_LEVEL)
    # a class of positive probability waited in fewer than 2 replications: no interval for it
    thin = np.any(((n > 0).sum(axis=0) < 2) & (np.asarray(workload.probs) > 0))
    few = R < MIN_REPLICATIONS  # too few replications to trust the interval
    status = (
        "nonstationary"
        if growing or idle_bad or short
        else ("unconverged" if thin or few else "ok")
    )
    hol_all, hol_ci = _ratio_ci(hol.sum(axis=1), time, level)
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
        system_time_mean_all=float(_ratio_ci(ssys.sum(axis=1), ntot, level, cv)[0]),
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
