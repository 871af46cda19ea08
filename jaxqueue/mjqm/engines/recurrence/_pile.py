"""The pile-growth driver of the recurrence engine (``mjsre`` Theorem 5.1, eq. (7),
Algorithm 2): the pile ``H_{n+1} = R(S(alpha_n, H_n) + sigma_n L(alpha_n))``, the recurrence
with all inter-arrival times zero, grown by the engine's step (FCFS, or random assignment of
Appendix A) and renormalised after every chunk of 256 jobs (its minimum subtracted and summed
apart), so it never overflows and float32 is safe. Replication ``r`` draws job ``n`` from
``(key, r, n)`` (``_bspec.py``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...._sharding import batch_devices, batch_mesh, shard_batch, to_host
from ....stats import t_quantile
from ..._bspec import CHUNK, check_plain, chunk_inputs
from ..._stability import StabilityResult, _moments
from ..._workload import Workload
from ...policies import FCFS
from ._steps import FCFSStep, RandomStep, Step, step_for

__all__ = ["pile_growth", "pile_step", "pile_chunks", "pile_batch"]


def pile_step(policy, workload) -> Step:
    """The engine's step of ``policy`` for pile growth: ``FCFS()`` (the default, ``None``) or
    ``RandomAssignment()`` on one resource type.

    Raises:
        ValueError: in one line, a policy with no recurrence form or no pile form here.
    """
    step = step_for(FCFS() if policy is None else policy, workload)
    if not isinstance(step, (FCFSStep, RandomStep)):
        raise ValueError(f"pile_growth: policy {policy.label} has no pile form here")
    return step


def pile_chunks(workload: Workload, H, key, i, c0, n_chunks, step: Step):
    """Grow the pile by chunks ``c0, ..., c0 + n_chunks - 1``; subtract its minimum after each.
    Returns ``(H, sum of the subtracted minima)``."""
    dtype = H.dtype
    n_extra = step.n_extra(workload)

    def chunk_body(j, carry):
        H, acc = carry
        c = c0 + j
        alpha, sigma, _, extra = chunk_inputs(workload, key, i, c, 1.0, dtype, n_extra=n_extra)

        def one(H, x):
            return step.merge(H, *x), None

        H, _ = lax.scan(one, H, (alpha, sigma, extra) if n_extra else (alpha, sigma))
        off = H[0]
        return H - off, acc + off

    return lax.fori_loop(0, n_chunks, chunk_body, (H, jnp.zeros((), dtype)))


@functools.partial(jax.jit, static_argnames="step")
def pile_batch(workload: Workload, H, key, ids, c0, n_chunks, step: Step):
    """:func:`pile_chunks` of the replications ``ids`` from their piles ``H`` ``(R, s)``."""

    def one(H, i):
        return pile_chunks(workload, H, key, i, c0, n_chunks, step)

    return jax.vmap(one)(H, ids)


def pile_growth(
    workload,
    *,
    key,
    replications: int = 32,
    rel_tol: float = 0.01,
    level: float = 0.95,
    jobs0: int = 1 << 14,
    max_jobs: int = 1 << 24,
    dtype=None,
    progress: Callable[[int, float, float], None] | None = None,
    throw: bool = False,
    policy=None,
) -> StabilityResult:
    """Estimate ``gamma`` and ``lambda_c = 1 / gamma`` by Algorithm 2 (Theorem 5.1, eq. (6)).

    Args:
        workload: the workload (servers, cores, probabilities, service laws); the limit does
            not depend on the inter-arrival law (Remark 4).
        key: PRNG key (replication ``r`` uses ``fold_in(key, r)``).
        replications: independent piles (>= 2) for the confidence interval.
        rel_tol: target relative half-width of the ``lambda_c`` interval.
        level: confidence level of the interval.
        jobs0: warm-up jobs and first measurement window (rounded to chunks of 256).
        max_jobs: cap on the measured jobs per replication (then ``converged`` is False).
        policy: ``FCFS()`` (the default) or ``RandomAssignment()``: grow the pile of the
            random-assignment system of Appendix A
            (each job takes ``alpha`` servers chosen uniformly at random) instead of FCFS.
            Where that pile has no stationary shape (e.g. one-core jobs only: the servers'
            heights drift apart like independent random walks) the finite-horizon estimate
            converges slowly (bias ~ 1 / sqrt(jobs)); with jobs needing all servers it
            regenerates and the estimate is as good as for FCFS.
        dtype: float dtype of the pile (float32 is safe thanks to renormalisation).
        progress: optional callback ``(jobs, gamma, rel_half_width)``.
        throw: raise :class:`~jaxqueue.stats.EstimateError` when ``rel_tol`` is not met
            (status ``unconverged``; default: return the result with its status).

    Returns:
        :class:`StabilityResult`.
    """
    if replications < 2:
        raise ValueError(f"replications must be >= 2, got {replications}")
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol must lie in (0, 1), got {rel_tol}")
    check_plain(workload)
    step = pile_step(policy, workload)
    dtype = jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)
    # replications are spread over the devices (same numbers on any device count)
    ids, H = shard_batch(
        batch_mesh(batch_devices(replications)),
        jnp.arange(replications, dtype=jnp.int32),
        jnp.zeros((replications, workload.s), dtype),
    )
    chunks0 = max(1, -(-jobs0 // CHUNK))
    max_chunks = max(chunks0, max_jobs // CHUNK)
    split = 1 << 10
    q = t_quantile(replications, level)

    kernel_wl = workload.unnamed()

    def advance(H, c0, n):
        total = np.zeros(replications)
        while n > 0:
            m = min(split, n)
            H, acc = pile_batch(kernel_wl, H, key, ids, jnp.int32(c0), jnp.int32(m), step)
            total += to_host(acc).astype(np.float64)
            c0 += m
            n -= m
        return H, total

    H, off = advance(H, 0, chunks0)
    h_w = off + to_host(H).astype(np.float64).max(axis=1)
    c = chunks0
    m = chunks0
    offset = off
    g_prev = -np.inf
    while True:
        H, off = advance(H, c, m - (c - chunks0))
        c = chunks0 + m
        offset = offset + off
        h = offset + to_host(H).astype(np.float64).max(axis=1)
        g = (h - h_w) / (m * CHUNK)
        gm = float(g.mean())
        hw = q * float(g.std(ddof=1)) / math.sqrt(replications)
        rel = hw / gm
        if progress is not None:
            progress(m * CHUNK, gm, rel)
        ok = rel <= rel_tol and abs(gm - g_prev) <= rel_tol * gm
        if ok or m >= max_chunks:
            break
        g_prev = gm
        # Algorithm 2 doubles the horizon; here the next horizon is predicted from the
        # half-width (which shrinks like 1 / sqrt(m)), between 1.25x and 8x the current one.
        grow = min(8.0, max(1.25, 1.1 * (rel / rel_tol) ** 2)) if rel > rel_tol else 2.0
        m = min(max_chunks, int(math.ceil(m * grow)))
    s, cores, probs, laws, means = _moments(workload)
    lo_g, hi_g = gm - hw, gm + hw
    res = StabilityResult(
        lambda_c=1.0 / gm,
        lambda_c_ci=(1.0 / hi_g, 1.0 / lo_g if lo_g > 0 else math.inf),
        gamma=gm,
        gamma_ci=(lo_g, hi_g),
        lambda_ideal=float(workload.lambda_ideal()),
        lambda_lower=float(1.0 / np.sum(probs * means)),
        jobs=int(m * CHUNK),
        replications=replications,
        rel_half_width=float(0.5 * (1 / lo_g - 1 / hi_g) * gm) if lo_g > 0 else math.inf,
        converged=bool(ok),
        method="pile-random-assignment" if isinstance(step, RandomStep) else "pile",
        level=level,
    )
    return res.raise_for_status() if throw else res
