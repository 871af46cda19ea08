"""Forward simulation that knows when it is stationary (``mjqm simulate``'s driver).

A forward run started empty near ``lambda_c``, or with a rare heavy class, spends most of its
jobs relaxing; its status says so (``nonstationary``) but gives no answer. This driver

1. **starts near the stationary law**: each replication from an independent sub-perfect
   backward sample (:func:`sample_backward`, Algorithm 1 with the batch bias control), the
   workload seen by an arrival that eq. (2) carries; plain workloads only (one resource type,
   no specific servers), else empty. The samples are lower bounds of stationary ones, so a
   warm-up (``n_jobs // 10``) is still run;
2. **checks** each run with :func:`simulate`'s status: the drift of the mean wait between the
   two halves, the idle-server identity ``E[idle servers] = s - lam E[alpha sigma]`` and,
   unless the backward sampler said ok and its bias bound stays within a quarter of the
   forward interval's half-width, ``MIN_EFFECTIVE`` effective waits per replication;
3. **extends** a run that fails: the next round continues every replication from its final
   state with twice as many jobs, while the round is expected to end within ``max_seconds``
   (a failed round also ends the exemption above); the answer is the last round, ``ok`` only
   if it passed every check, else ``nonstationary`` (or ``unconverged`` with fewer than
   ``MIN_REPLICATIONS`` replications, which more jobs do not mend). The doubling makes each
   round mostly warm-up for the next; the checks are at 99.9%. A large first round is cut to
   what the budget holds at the rate of a short pilot (:func:`_first_round`).

The load is checked once (``limit=``, :func:`~jaxqueue.mjqm.stability_limit`); intervals are
Student t over the independent replications (ratio estimators, delta method).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from ..stats import Status
from ._estimators import MIN_EFFECTIVE, MIN_REPLICATIONS
from ._stability import check_load
from ._workload import Workload
from .engines.recurrence import ForwardResult, sample_backward, simulate
from .options import Budget, InitialState

__all__ = ["simulate_steady"]


_START_RATE = 1e9
"""Sample-jobs per second times ``s`` that the backward start is budgeted for, above what a
CPU reaches: its ``max_work`` is half of ``max_seconds`` at that rate, so the start cannot
eat the forward budget."""


def _initial(state, offset: int, stationary: bool) -> InitialState | None:
    """The start of a round: empty (``state`` None, the first round) or ``state``."""
    return None if state is None else InitialState(state, offset, stationary)


def _backward_start(workload: Workload, lam: float, n: int, key, limit, seconds):
    """``(n, s)`` sub-perfect samples as initial states and their bias bound (``inf`` when
    their sampler did not say ok), or ``(None, inf)`` for a workload the backward sampler does
    not cover. ``lam`` is already checked: the sampler does not judge it again."""
    if workload.n_types != 1 or workload.specific is not None:
        return None, math.inf
    work = max(int(_START_RATE * seconds / 2 / workload.s), 1)
    budget = Budget(max_work=work)
    S = sample_backward(workload, lam, n, key=key, limit=limit, override=True, budget=budget)
    return S.W, (S.bias_bound if S.status == Status.ok else math.inf)


_PILOT_WORK = 1 << 25
"""Job-steps (jobs x replications) above which the first round's cost is measured first."""

_PILOT_STEPS = 1 << 20
"""Job-steps of that pilot (at least 1000 jobs per replication)."""


def _first_round(run, n_jobs: int, n_replications: int, seconds: float, progress) -> int:
    """The jobs of the first round: ``n_jobs``, or, for a large one that the time left
    (``seconds``) cannot hold at the rate of a pilot ``run(n)`` (run twice: the second, without
    compilation, is timed), half of what it can (at least the pilot's), said through
    ``progress``."""
    if n_jobs * n_replications <= _PILOT_WORK:
        return n_jobs
    pilot = max(1000, _PILOT_STEPS // n_replications)
    t0 = time.perf_counter()
    run(pilot)  # compiles: the timed run below measures the scan alone
    t1 = time.perf_counter()
    run(pilot)
    rate = pilot / max(time.perf_counter() - t1, 1e-9)  # jobs per replication per second
    seconds -= time.perf_counter() - t0
    fits = int(rate * max(seconds, 0.0) / 2)
    if n_jobs <= fits:
        return n_jobs
    n = max(pilot, fits)
    if progress is not None:
        progress(
            f"[simulate] warning: {n_jobs} jobs x {n_replications} replications would take "
            f"about {n_jobs / rate:.3g} s at the measured {rate * n_replications:.3g} "
            f"job-steps/s, beyond the budget (--max-seconds): the first round runs {n} jobs"
        )
    return n


def _prefixed(tell: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    """``tell`` with ``prefix`` before each text."""
    return lambda text: tell(prefix + text)


def _start_precise(res: ForwardResult, start_bias: float) -> bool:
    """The backward start's bias bound (on the mean wait of its samples) within a quarter of
    the forward interval's half-width, or the run long enough not to need it (at least
    ``MIN_EFFECTIVE`` effective waits per replication)."""
    lo, hi = res.wait_mean_all_ci
    return start_bias <= 0.25 * (hi - lo) / 2 or res.n_eff >= MIN_EFFECTIVE


def simulate_steady(
    workload: Workload,
    lam: float,
    *,
    key,
    n_jobs: int = 20_000,
    n_replications: int = 256,
    start: str = "backward",
    max_seconds: float = 120.0,
    dtype=jnp.float32,
    level: float = 0.95,
    limit=None,
    override: bool = False,
    progress: Callable[[str], None] | None = None,
    throw: bool = False,
    fraction: Callable[[str], None] | None = None,
) -> ForwardResult:
    """Forward simulation from a (near) stationary start, extended until it passes its
    stationarity checks or the time budget runs out (module docstring).

    Args:
        workload: the model.
        lam: arrival rate, checked once (``lambda_ideal``, eq. (8), ``limit``) unless
            ``override``; the backward start and the rounds do not check it again.
        key: PRNG key (the backward start uses one half, the forward rounds the other).
        n_jobs: jobs per replication in the first round (warm-up ``n_jobs // 10`` included);
            each further round doubles it.
        n_replications: independent replications (>= 2).
        start: ``"backward"`` (sub-perfect samples; plain workloads) or ``"empty"``.
        max_seconds: wall-clock budget for the whole call; the backward start gets a work
            budget of about half of it, and a round is started only if it is expected (twice
            the previous round) to end within it.
        dtype: float dtype of the workload state.
        level: confidence level of the intervals.
        limit: a :class:`~jaxqueue.mjqm.StabilityResult` of
            :func:`~jaxqueue.mjqm.stability_limit`, a number, or ``None`` (the cheap checks
            only; the rounds' statuses catch a load beyond the limit). The backward start's
            first horizon reads it too.
        override: skip the stability checks.
        progress: optional callback receiving one line per round.
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the last round's status is
            not ``ok`` (default: return it with its status).
        fraction: optional ``callable(str)``, told the fraction done of each round
            (``round k: `` and the text of :func:`simulate`'s ``progress``); the numbers are
            those without it.

    Returns:
        The :class:`ForwardResult` of the last round, with ``rounds`` (jobs, warm-up, status,
        seconds per round) and ``start``; ``status`` is ``"ok"`` only if that round passed
        every check.
    """
    if start not in ("backward", "empty"):
        raise ValueError(f"start must be 'backward' or 'empty', got {start!r}")
    if not max_seconds > 0:
        raise ValueError(f"max_seconds must be > 0, got {max_seconds!r}")
    lam = check_load(workload, lam, limit=limit, override=override)
    t0 = time.perf_counter()
    k_start, k_run = jax.random.split(key)
    init, start_bias = None, math.inf
    if start == "backward":
        init, start_bias = _backward_start(
            workload, lam, n_replications, k_start, limit, max_seconds
        )
    stationary = math.isfinite(start_bias)
    started = "backward" if init is not None else "empty"
    if progress is not None:
        progress(f"[simulate] start: {started} ({time.perf_counter() - t0:.1f} s)")
    pilot = lambda n: jax.block_until_ready(
        simulate(
            workload,
            lam,
            key=k_run,
            n_jobs=n,
            n_replications=n_replications,
            warmup=n // 10,
            init=_initial(init, 0, stationary),
            dtype=dtype,
            level=level,
            override=True,
        ).wait_mean_all
    )
    left = max_seconds - (time.perf_counter() - t0)
    n = _first_round(pilot, n_jobs, n_replications, left, progress)
    offset, warmup, rounds = 0, n // 10, []
    while True:
        tell = fraction and _prefixed(fraction, f"round {len(rounds) + 1}: ")
        t1 = time.perf_counter()
        res = simulate(
            workload,
            lam,
            key=k_run,
            n_jobs=n,
            n_replications=n_replications,
            warmup=warmup,
            init=_initial(init, offset, stationary),
            dtype=dtype,
            level=level,
            override=True,
            progress=tell,
        )
        took = time.perf_counter() - t1
        if stationary and res.status == Status.ok and not _start_precise(res, start_bias):
            res = dataclasses.replace(res, status=Status.nonstationary)
        rounds.append((n, warmup, res.status, took))
        if progress is not None:
            progress(
                f"[simulate] round {len(rounds)}: {n} jobs x {n_replications}, status "
                f"{res.status} (wait growth {res.wait_growth:.3g}, idle z {res.idle_z:.2f}), "
                f"{took:.1f} s"
            )
        more_reps = res.status == Status.unconverged and n_replications < MIN_REPLICATIONS
        out_of_time = time.perf_counter() - t0 + 2 * took > max_seconds
        if res.status == Status.ok or more_reps or out_of_time:
            break
        # a failed round shows the start was not stationary enough: no exemption any more
        init, offset, warmup, n, stationary = res.final_state, offset + n, 0, 2 * n, False
        if offset + n >= 2**31:  # job indices are int32
            break
    res = dataclasses.replace(res, rounds=tuple(rounds), start=started)
    return res.raise_for_status() if throw else res
