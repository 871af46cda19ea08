"""Stability limit of the FCFS multiserver-job queue (``mjsre`` Section 5).

Theorem 5.1: the queue is stable iff ``lam < lambda_c = 1 / gamma`` with ``gamma`` the growth
rate ``lim |H_n|_inf / n`` of the pile ``H_{n+1} = R(S(alpha_n, H_n) + sigma_n L(alpha_n))``
(eq. (7): the MJSRE with all inter-arrival times zero). Algorithm 2 estimates the limit by
doubling the horizon. Here:

* the pile is renormalised after every chunk of 256 jobs (its minimum is subtracted and the
  offsets are summed on the host in float64), so it never overflows and float32 is safe;
* ``R`` independent piles (replications) give a Student-t interval for ``gamma``; the growth
  is measured after a warm-up (``(h(n_w + m) - h(n_w)) / m``) to remove the start-up bias of
  ``|H_n| / n``; ``m`` grows (Algorithm 2 doubles it; here the growth factor is predicted
  from the current half-width, between 1.25 and 8) until the interval's half-width is below
  ``rel_tol`` times the estimate and two consecutive estimates differ by less than that;
* ``lambda_c = 1 / gamma`` with the interval ``[1 / gamma_hi, 1 / gamma_lo]``.

Closed forms: one-core jobs only, ``lambda_c = s / E[sigma]``; eq. (8) (a class needs all
servers; :func:`lambda_c_closed_form`); the bounds ``lambda_ideal`` (``Workload.lambda_ideal``,
no HOL blocking, Section 7.5) and ``1 / E[sigma]`` (one job at a time); the random-assignment
pile of Appendix A. For exponential services the QBD gives ``lambda_c`` exactly
(:func:`~jaxqueue.mjqm.exact_lambda_c`).

The load guard (:func:`require_stable`, called by ``check_load`` when the caller passes a key)
needs ``lambda_c``: :func:`lambda_c_estimate` takes it from a closed form or the QBD when one
applies, else runs Algorithm 2 with the caller's key. Its results are memoised in ``_CACHE``,
keyed by the value of every argument (the workload's fingerprint, the key's data, ``rel_tol``,
``max_jobs``): the same call gives the same answer without running again.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._sharding import batch_devices, batch_mesh, shard_batch, to_host
from ..dist import Deterministic, Exponential
from ..stats import Result, Status, t_quantile
from ._bspec import CHUNK, check_plain, chunk_inputs, workload_fields
from ._policy import FCFSRecurrence, RandomServers
from ._workload import Workload

__all__ = [
    "StabilityResult",
    "pile_growth",
    "lambda_c_closed_form",
    "lambda_c_estimate",
    "guard_key",
    "require_stable",
    "UnstableLoadError",
    "pile_growth_numpy",
]


class UnstableLoadError(ValueError):
    """The requested load is at or beyond the stability limit (carries the estimate)."""

    def __init__(self, msg: str, lambda_c: float, lambda_c_ci: tuple[float, float]):
        super().__init__(msg)
        self.lambda_c = lambda_c
        self.lambda_c_ci = lambda_c_ci


class StabilityResult(Result):
    """Estimate of the stability limit (``estimate("lambda_c")``, ``estimate("gamma")``).

    Attributes:
        lambda_c: ``1 / gamma``. lambda_c_ci: its confidence interval ``(lo, hi)``.
        gamma, gamma_ci: the pile growth rate (mean pile height added per job).
        lambda_ideal: ``s / sum p_i alpha_i E[sigma_i]``. lambda_lower: ``1 / E[sigma]``.
        jobs: jobs per replication measured after the warm-up. replications: independent piles.
        rel_half_width: half-width of the ``lambda_c`` interval over ``lambda_c``.
        converged: whether ``rel_tol`` was met before ``max_jobs``.
        method: ``"pile"`` (Algorithm 2), ``"pile-random-assignment"`` or a closed form.
        level: confidence level of the intervals.
        status: ``ok`` when converged, else ``unconverged``.
    """

    lambda_c: float
    lambda_c_ci: tuple[float, float]
    gamma: float
    gamma_ci: tuple[float, float]
    lambda_ideal: float
    lambda_lower: float
    jobs: int
    replications: int
    rel_half_width: float
    converged: bool
    method: str
    level: float = 0.95

    @property
    def status(self) -> Status:
        return Status.ok if self.converged else Status.unconverged

    def status_reason(self) -> str:
        """Why the status is not ``ok``, in one line."""
        return (
            f"the relative half-width {self.rel_half_width:.3g} of lambda_c is above rel_tol "
            f"after {self.jobs} jobs per pile; raise max_jobs"
        )

    def as_dict(self) -> dict:
        return {
            "lambda_c": self.lambda_c,
            "lambda_c_ci": list(self.lambda_c_ci),
            "lambda_ideal": self.lambda_ideal,
            "lambda_lower": self.lambda_lower,
            "gamma": self.gamma,
            "gamma_ci": list(self.gamma_ci),
            "jobs": self.jobs,
            "replications": self.replications,
            "rel_half_width": self.rel_half_width,
            "converged": self.converged,
            "method": self.method,
        }


def _moments(workload):
    s, cores, probs, laws, _ = workload_fields(workload)
    means = np.array([float(law.mean()) for law in laws])
    return s, cores, probs, laws, means


def _pile_chunks(workload: Workload, H, key, i, c0, n_chunks, random_assignment: bool):
    """Grow the pile by chunks ``c0, ..., c0 + n_chunks - 1``; subtract its minimum after each."""
    dtype = H.dtype
    s = workload.s

    def chunk_body(j, carry):
        H, acc = carry
        c = c0 + j
        n_extra = s if random_assignment else 0
        alpha, sigma, _, extra = chunk_inputs(workload, key, i, c, 1.0, dtype, n_extra=n_extra)
        policy = RandomServers() if random_assignment else FCFSRecurrence((s,))

        def step(H, x):
            return policy.merge(H, *x), None

        H, _ = lax.scan(step, H, (alpha, sigma, extra) if random_assignment else (alpha, sigma))
        off = H[0]
        return H - off, acc + off

    return lax.fori_loop(0, n_chunks, chunk_body, (H, jnp.zeros((), dtype)))


@functools.partial(jax.jit, static_argnames="random_assignment")
def _pile_batch(workload: Workload, H, key, ids, c0, n_chunks, random_assignment: bool):
    def one(H, i):
        return _pile_chunks(workload, H, key, i, c0, n_chunks, random_assignment)

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
    random_assignment: bool = False,
    dtype=None,
    progress: Callable[[int, float, float], None] | None = None,
    throw: bool = False,
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
        random_assignment: grow the pile of the random-assignment system of Appendix A
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

    def advance(H, c0, n):
        total = np.zeros(replications)
        while n > 0:
            m = min(split, n)
            H, acc = _pile_batch(
                workload, H, key, ids, jnp.int32(c0), jnp.int32(m), random_assignment
            )
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
        method="pile-random-assignment" if random_assignment else "pile",
        level=level,
    )
    return res.raise_for_status() if throw else res


def lambda_c_closed_form(workload) -> float | None:
    """``lambda_c = 1 / gamma`` from eq. (8) when it has a closed form, else ``None``.

    Applies to one resource type, no specific servers, every class asking for ``1`` or ``s``
    servers, with at least one global class and the one-server classes sharing one exponential
    or one deterministic law. A cycle is a global job followed by ``K ~ Geometric(p_g)``
    one-server jobs (``P(K = k) = (1 - p_g)^k p_g``); the next global job waits for the pile
    ``M_K`` of those ``K`` jobs started together on ``s`` servers, so
    ``gamma = p_g (E[sigma_g] + E[M_K])`` with (``q = 1 - p_g``, small mean ``m``)

    * exponential: ``E[M_K] = m (q^(s+1) / (p_g s) + sum_{j=1}^{s} q^j / j)``
      (``(K - s)^+`` departures at rate ``s / m``, then the maximum of ``min(K, s)``
      exponentials);
    * deterministic: ``E[M_K] = m E[ceil(K / s)] = m q / (1 - q^s)``.

    Returns:
        The limit as a float, or ``None`` when the case does not apply.
    """
    if workload.n_types != 1 or workload.specific is not None:
        return None
    s = workload.servers[0]
    cores = np.asarray(workload.cores)[:, 0]
    probs = np.asarray(workload.probs, dtype=float)
    means = np.asarray(workload.mean_service(), dtype=float)
    glob = cores == s
    if not glob.any() or not np.all(glob | (cores == 1)):
        return None
    pg = float(probs[glob].sum())
    eg = float((probs[glob] * means[glob]).sum() / pg)
    small = [law for law, g in zip(workload.services, glob, strict=True) if not g]
    if pg >= 1.0 - 1e-15 or not small:
        return 1.0 / eg
    q = 1.0 - pg
    types = {type(law) for law in small}
    m_small = {float(law.mean()) for law in small}
    if len(types) != 1 or len(m_small) != 1:
        return None
    m = m_small.pop()
    if types == {Exponential}:
        j = np.arange(1, s + 1)
        e_mk = m * (q ** (s + 1) / (pg * s) + float(np.sum(q**j / j)))
    elif types == {Deterministic}:
        e_mk = m * q / (1.0 - q**s)
    else:
        return None
    return 1.0 / (pg * (eg + e_mk))


def pile_growth_numpy(
    s: int, cores, probs, draw_sigma: Callable, n_jobs: int, replications: int, *, seed: int = 0
) -> np.ndarray:
    """Algorithm 2 in plain numpy (the benchmark baseline): ``|H_n| / n`` per replication.

    The pile is vectorised over replications with a sort per job and renormalised every job;
    inputs are drawn in blocks of 4096 jobs. ``draw_sigma(rng, cls)`` draws service times for
    an array of class indices.
    """
    rng = np.random.default_rng(seed)
    cores = np.asarray(cores)
    H = np.zeros((replications, s))
    off = np.zeros(replications)
    idx = np.arange(s)[None, :]
    R = np.arange(replications)
    done = 0
    while done < n_jobs:
        b = min(4096, n_jobs - done)
        cls = rng.choice(len(cores), size=(b, replications), p=probs)
        A = cores[cls]
        SG = draw_sigma(rng, cls)
        for j in range(b):
            a = A[j]
            Ha = H[R, a - 1][:, None]
            H = np.sort(np.maximum(H, Ha) + SG[j][:, None] * (idx < a[:, None]), axis=1)
            off += H[:, 0]
            H -= H[:, :1]
        done += b
    return (off + H[:, -1]) / n_jobs


# ---------------------------------------------------------------------------------------------
# The load guard: every MJQM metric refuses lam >= lambda_c unless overridden.
# ---------------------------------------------------------------------------------------------

_CACHE: dict[tuple, StabilityResult] = {}


def _fingerprint(workload) -> tuple:
    s, cores, probs, laws, inter = workload_fields(workload)
    parts = [s, tuple(cores.tolist()), tuple(np.round(probs, 15).tolist())]
    for law in (*laws, inter):
        if law is None:
            parts.append(None)
            continue
        leaves = jax.tree_util.tree_leaves(law)
        parts.append(
            (
                type(law).__name__,
                str(jax.tree_util.tree_structure(law)),
                tuple(np.asarray(x, float).tobytes() for x in leaves),
            )
        )
    return tuple(parts)


GUARD_STREAM = 0x5AB1E
"""``fold_in`` stream of a caller's key that the load guard's pile growth uses
(:func:`guard_key`), apart from the caller's own random numbers."""


def guard_key(key):
    """The key of the load guard's Monte Carlo for a caller drawing with ``key``."""
    return jax.random.fold_in(key, GUARD_STREAM)


def lambda_c_estimate(
    workload, *, key=None, rel_tol: float = 0.01, max_jobs: int = 1 << 20, throw: bool = False
) -> StabilityResult:
    """``lambda_c`` of a workload: exact where a closed form or the QBD applies, else
    Algorithm 2 with ``key``.

    Exact, in this order: all jobs one-core (``s / E[sigma]``), all jobs need all servers
    (``1 / E[sigma]``), one-or-all (eq. (8), :func:`lambda_c_closed_form`), exponential
    services (the QBD, :func:`~jaxqueue.mjqm.exact_lambda_c`, when it fits in memory).
    Otherwise :func:`pile_growth` with ``key`` in float32 (renormalised), 32 replications, at
    most ``max_jobs`` jobs each (the interval is reported either way). Memoised by the value of
    every argument (module docstring).

    Raises:
        ValueError: no exact form applies and ``key`` is ``None``.
        EstimateError: with ``throw``, a pile-growth estimate that did not reach ``rel_tol``.
    """
    kd = None if key is None else jax.random.key_data(key).tobytes()
    fp = (_fingerprint(workload), kd, rel_tol, max_jobs)
    if fp not in _CACHE:
        _CACHE[fp] = _lambda_c(workload, key, rel_tol, max_jobs)
    res = _CACHE[fp]
    return res.raise_for_status() if throw else res


def _lambda_c(workload, key, rel_tol: float, max_jobs: int) -> StabilityResult:
    """The :class:`StabilityResult` of :func:`lambda_c_estimate` (not memoised)."""
    from ._exact import exact_lambda_c_or_none

    s, cores, probs, laws, means = _moments(workload)
    lid = float(workload.lambda_ideal())
    llo = float(1.0 / np.sum(probs * means))
    if np.all(cores == 1):
        exact, method = lid, "closed-form: one-core jobs"
    elif np.all(cores == s):
        exact, method = llo, "closed-form: all-core jobs"
    else:
        exact, method = lambda_c_closed_form(workload), "closed-form: eq. (8)"
        if exact is None:
            exact, method = exact_lambda_c_or_none(workload), "exact (QBD)"
    if exact is not None:
        return StabilityResult(
            lambda_c=exact,
            lambda_c_ci=(exact, exact),
            gamma=1.0 / exact,
            gamma_ci=(1.0 / exact, 1.0 / exact),
            lambda_ideal=lid,
            lambda_lower=llo,
            jobs=0,
            replications=0,
            rel_half_width=0.0,
            converged=True,
            method=method,
        )
    if key is None:
        raise ValueError(
            "lambda_c_estimate: no exact stability limit for this workload (services not all "
            "exponential, or the QBD too large); pass key= for the pile-growth estimate"
        )
    return pile_growth(workload, key=key, rel_tol=rel_tol, max_jobs=max_jobs, dtype=jnp.float32)


def require_stable(
    workload, lam: float, *, key=None, override: bool = False
) -> StabilityResult | None:
    """Refuse ``lam`` at or beyond the stability limit.

    ``lam < 1 / E[sigma]`` is always stable (the pile grows by at most ``sigma`` per job);
    ``lam >= lambda_ideal`` never is. In between, :func:`lambda_c_estimate` (exact where it
    can be, else pile growth with ``key``) is run with growing budgets (2^14, 2^17, 2^20 jobs
    per pile, each memoised) until its interval lies clearly on one side of ``lam``: accepted
    when ``lam`` is below the lower end, refused when it is above the upper end, and refused
    when it still lies inside the interval at the last budget (within about 1% of
    ``lambda_c``). Without ``key`` and without an exact limit, nothing is checked (``None``).

    Raises:
        UnstableLoadError: (a ``ValueError``) with the estimate and its interval.
    """
    if override:
        return None
    s, cores, probs, laws, means = _moments(workload)
    llo = float(1.0 / np.sum(probs * means))
    if lam < llo:
        return None
    budgets = (1 << 14, 1 << 17, 1 << 20)
    for b in budgets:
        try:
            res = lambda_c_estimate(workload, key=key, max_jobs=b)
        except ValueError:
            if key is not None:
                raise
            return None  # no key, no exact limit: the caller did not ask for a Monte Carlo
        lo, hi = res.lambda_c_ci
        if lam < lo:
            return res
        if lam >= hi or res.rel_half_width <= 0.01:
            break
    raise UnstableLoadError(
        f"lam = {lam:.6g} is not below the stability limit lambda_c = {res.lambda_c:.6g} "
        f"(interval [{lo:.6g}, {hi:.6g}], {res.method}; lambda_ideal = "
        f"{res.lambda_ideal:.6g}); pass override=True (--override) to run anyway",
        res.lambda_c,
        (lo, hi),
    )
