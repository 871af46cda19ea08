"""The backward driver of the recurrence engine: sub-perfect sampling of the stationary
ordered workload (``mjsre`` Algorithm 1, Section 4.4) with a batch-level bias control.

Sample ``i`` is the Loynes state ``M_ell`` (eq. (4)): the workload found by job 0 when the
system starts empty at job ``-ell``. ``M_ell`` is non-decreasing in ``ell`` (Lemma 4.3), so the
per-sample rule doubles ``ell`` from a first horizon ``F`` until ``M_{2 ell} == M_ell``; the
result ``X(F)`` is a lower bound of a perfect sample. The rule can stop early by chance (a
rare heavy class, a load near ``lambda_c``): a one-sided bias no interval contains. So the
batch horizon ``F`` doubles while a bound ``B = (mean + z se) max(1, r / (1 - r))`` of paired
differences of the mean wait (``r`` the ratio of the last two mean differences, clipped to
0.9) exceeds ``BiasControl.tol`` of the half-width of its interval: first the Loynes increments
``M_{2F} - M_F`` the per-sample rule computed, then ``X(2F) - X(F)``. ``B`` is reported
(``bias_bound``) and ``palm_metrics`` adds it to the upper ends of the intervals. The first
horizon is at least ``8 / p_min`` jobs and 4 M/M/1 relaxation times at ``lam / lambda_c``
(:func:`horizon_floor`). Under a time budget the control runs on a pilot of ``_PILOT``
samples and the others are drawn at the shortest tested horizon whose bound still holds
(:func:`_shortest_horizon`). ``status``: ``unconverged`` (a sample hit ``Budget.max_ell`` or the
work budget), ``biased`` (the bias test failed where the batch could not double any more),
else ``ok``. The kernels: ``_backward_kernel.py``; the result: ``_backward_result.py``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ....stats import Status, t_quantile
from ..._bspec import CHUNK, check_plain, workload_fields
from ..._stability import check_load, lambda_c_closed_form
from ..._workload import Workload
from ...options import Batching, BiasControl, Budget
from ...policies import FCFS
from ._backward_kernel import (
    _MEET_BLOCKS,
    _Batcher,
    _cache_batch,
    _first_doubling,
    _meet_batches,
    _Samples,
    loynes_state,
)
from ._backward_result import BackwardSamples, BiasTest
from ._steps import FCFSStep, step_for

__all__ = [
    "BackwardSamples",
    "BiasTest",
    "sample_backward",
    "backward_step",
    "horizon_floor",
    "loynes_state",
]

_RARE_JOBS = 8
"""Jobs of the rarest class that the horizon floor holds on average."""

_RELAX_TIMES = 4
"""M/M/1 relaxation times that the horizon floor holds."""

_FLOOR_CAP = 1 << 16
"""Largest horizon floor (jobs); the batch test goes further when it must."""

_WORK_BUDGET = 1 << 39
"""Default ``max_work`` times ``s``: sample-jobs of Algorithm 1 and the batch test (the cost of
a sample-job grows with ``s``)."""


_PILOT = 1000
"""Samples of the pilot that runs the bias control when ``sample_backward`` has a time budget;
the others are drawn at the pilot's batch horizon while the budget lasts."""


def _double(run: _Batcher, st: _Samples, active, prev_ell: int, ell: int) -> np.ndarray:
    """One doubling of Algorithm 1 (lines 6-12) for the samples ``active``: ``M_prev -> M_ell``.

    ``st.M[active]`` holds ``M_prev_ell`` (ignored when ``prev_ell == 0``). Returns the samples
    still active (``M_ell != M_prev_ell``).
    """
    na = active.size
    s = st.M.shape[1]
    # Jobs -ell .. -prev_ell - 1 from the empty state: X = M_{ell, prev_ell}(0).
    empty = np.zeros((na, s), st.M.dtype)
    X = run(active, empty, ell // CHUNK, (ell - prev_ell) // CHUNK)
    st.needed[active] += ell - prev_ell
    st.stop_ell[active] = ell
    if prev_ell == 0:
        st.M[active] = X
        return active
    # Jobs -prev_ell .. -1 replayed from X (Remark 2) beside the previous trajectory (from the
    # empty state at -prev_ell, drawn again), until the two meet (then M_ell = M_prev): in
    # segments of 2, 4, 8, ... blocks, the samples that have met leaving the batch after each,
    # so no batch waits for samples that have already coupled.
    met = X[:, -1] == 0
    _, W, met, steps = _meet_batches(
        run, active, np.zeros_like(X), X, met, prev_ell // CHUNK, 0, _MEET_BLOCKS
    )
    st.needed[active] += np.where(met, steps, prev_ell)
    same = met | np.all(W == st.M[active], axis=1)
    new = np.where(met[:, None], st.M[active], W)
    st.record(ell, active, st.M[active], new)
    st.M[active] = new
    st.converged[active[same]] = True
    return active[~same]


def _algorithm1(run, st, active, prev_ell, ell, max_ell, progress, max_work=None) -> None:
    """Algorithm 1 (``mjsre`` 4.4) for the samples ``active`` from horizon ``ell``.

    ``st.M[active]`` holds ``M_prev_ell`` (``prev_ell = 0``: start from scratch). Doubles
    until every sample met ``M_{2 ell} == M_ell``, ``ell`` passed ``max_ell``, or the next
    doubling's new past alone (``ell - prev_ell`` jobs per active sample, a lower bound of its
    cost) would take ``run.work_done`` past ``max_work``; the samples left are not converged.
    """
    n = st.M.shape[0]
    st.converged[active] = False
    whole = prev_ell == 0 and active.size == n and np.array_equal(active, np.arange(n))
    if whole and 2 * ell <= max_ell:
        # the first two horizons in one pass (the inputs of jobs -ell .. -1 drawn once)
        if progress is not None:
            progress(ell, n, 0)
            progress(2 * ell, n, 0)
        active = _first_doubling(run, st, n, ell)
        prev_ell, ell = 2 * ell, 4 * ell
    while active.size and ell <= max_ell:
        if max_work is not None and run.work_done + active.size * (ell - prev_ell) > max_work:
            break
        if progress is not None:
            progress(ell, int(active.size), int(n - active.size))
        active = _double(run, st, active, prev_ell, ell)
        prev_ell, ell = ell, 2 * ell


# ---------------------------------------------------------------------------------------------
# Batch-level bias control (module docstring)
# ---------------------------------------------------------------------------------------------


def _relaxation_jobs(rho: float) -> float:
    """Jobs arriving during ``_RELAX_TIMES`` relaxation times of an M/M/1 queue at load
    ``rho``: ``rho / (1 - sqrt(rho))^2`` each (``1 / (mu (1 - sqrt(rho))^2)`` in time)."""
    return _RELAX_TIMES * rho / (1.0 - math.sqrt(rho)) ** 2


def _lambda_c(workload: Workload, limit) -> float:
    """``lambda_c`` for :func:`horizon_floor`: ``limit``'s where the caller passes one, else
    the closed form eq. (8) or the bound ``lambda_ideal`` (no estimate behind a sampler)."""
    if limit is not None and getattr(limit, "lambda_c", limit) is not None:
        return float(getattr(limit, "lambda_c", limit))
    closed = lambda_c_closed_form(workload)
    return float(workload.lambda_ideal()) if closed is None else closed


def horizon_floor(workload: Workload, lam: float, limit=None) -> int:
    """The first horizon of :func:`sample_backward` by default (module docstring, 3).

    The larger of ``8 / p_min`` jobs and 4 M/M/1 relaxation times at ``rho = lam /
    lambda_c``, rounded up to ``CHUNK * 2^k``, capped at ``2^16``. ``lambda_c`` comes from
    ``limit`` (else a closed form or ``lambda_ideal``); it is only read when the upper bound
    ``rho <= lam E[sigma]`` (``1 / E[sigma]`` is a lower bound of ``lambda_c``) does not
    already put the relaxation term below the rare-class term.
    """
    _, _, probs, laws, _ = workload_fields(workload)
    jobs = _RARE_JOBS / float(np.min(probs))
    rho_up = float(lam) * float(np.sum(probs * np.array([float(x.mean()) for x in laws])))
    if jobs < _FLOOR_CAP and not (rho_up < 1 and _relaxation_jobs(rho_up) <= jobs):
        lc = _lambda_c(workload, limit)
        rho = min(float(lam) / lc, 0.999)
        jobs = max(jobs, _relaxation_jobs(rho))
    floor = CHUNK
    while floor < min(jobs, _FLOOR_CAP):
        floor *= 2
    return floor


def _bias_test(d, waits, F, kind, prev: BiasTest | None, level: float, tol: float):
    """A batch test of the samples ``X(F)`` (mean and class waits ``waits``) from the paired
    differences ``d`` (``(n, 1 + classes)``: the mean wait, then each class).

    The bound is the upper confidence bound of the mean difference times ``max(1, r / (1 -
    r))``, ``r`` its ratio to the previous test of the same kind (clipped to 0.9; 1 without);
    when fewer than 3 differences are nonzero, at least ``3 jump / n`` (rule of three).
    """

    n = d.shape[0]
    z = t_quantile(n, level)
    mean = d.mean(axis=0)
    se = d.std(axis=0, ddof=1) / math.sqrt(n)
    factor = np.ones_like(mean)
    decaying = True
    if prev is not None and prev.kind == kind:
        before = np.concatenate([[prev.diff], prev.diff_class])
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(before > 0, mean / before, np.where(mean > 0, np.inf, 0.0))
        # a significant difference that does not shrink: the geometric tail bounds nothing
        # (a difference that is noise around 0 gives a meaningless ratio)
        decaying = not (r[0] >= 0.9 and mean[0] - z * se[0] > 0)
        r = np.minimum(r, 0.9)
        factor = np.maximum(1.0, r / (1.0 - r))
    # Few samples can move (most coupled long before): all-zero differences give se = 0 and a
    # t bound of 0. Rule of three: no change among n samples puts the share that changes
    # below 3 / n (95%), each by about the mean nonzero difference seen (here or before).
    moved = d != 0
    count = moved.sum(axis=0)
    with np.errstate(invalid="ignore"):
        jump = np.abs(np.where(moved, d, 0.0)).sum(axis=0) / count
    before = prev.jump if prev is not None and prev.jump is not None else np.zeros_like(mean)
    jump = np.where(count > 0, jump, before)
    rare = np.where(count < 3, 3.0 * jump / n, 0.0)
    step = np.maximum(mean + z * se, rare)
    bound = step * factor
    hw = z * float(np.std(waits[:, 0], ddof=1)) / math.sqrt(n)
    return BiasTest(
        ell=int(F),
        kind=kind,
        diff=float(mean[0]),
        diff_se=float(se[0]),
        diff_class=mean[1:],
        half_width=hw,
        bound=float(bound[0]),
        bound_class=bound[1:],
        ok=bool(bound[0] <= tol * hw) and decaying,
        jump=jump,
        step=step,
    )


def _shortest_horizon(tests, tol: float) -> tuple[int, np.ndarray]:
    """The shortest tested batch horizon ``H`` whose samples ``X(H)`` keep the bias bound
    within ``tol`` of the passing test's half-width, and that bound (``(1 + classes,)``: the
    mean wait, then each class).

    ``X(H) <= X(2H)`` on the same inputs (Lemma 4.3), so the bias of ``X(H)`` is the mean
    difference ``X(2H) - X(H)`` plus the bias of ``X(2H)``: walking back from the passing
    test at ``F``, ``B(F / 2) = step(F) + B(F)``, ``B(F / 4) = step(F / 2) + B(F / 2)``, ...,
    over the paired tests (``step``: their upper bounds of the mean differences). The
    samples after the pilot are drawn at ``H``: half the cost per halving (on two-class-256 at
    0.8 ``lambda_c`` the test passed at ``F = 131072`` with a difference of 0.05 +- 0.05
    against a half-width of 12.8, so ``X(65536)``, bounded by 0.30, costs half as much).
    """
    last = tests[-1]
    H, B = last.ell, np.concatenate([[last.bound], last.bound_class])
    for t in reversed(tests):
        if t.kind != "paired" or t.ell != H:  # a Loynes test, or a horizon jumped over
            break
        nxt = B + t.step
        if nxt[0] > tol * last.half_width:
            break
        H, B = H // 2, nxt
    return H, B


def _control_bias(run, st, F, max_ell, max_work, level, tol, progress, on_test):
    """Double the batch horizon ``F`` until the bias test passes (module docstring, 2).

    The first test reads the Loynes increments ``M_{2F} - M_F`` that Algorithm 1 computed;
    each later one the paired differences ``X(F) - X(F / 2)``. ``X(2F)`` differs from ``X(F)``
    only for the samples that stopped at their first comparison (``stop_ell == 2F``): those
    rerun Algorithm 1 from their ``M_{2F}``. Returns ``(F, tests, passed)``; ``passed`` is
    False when the test still failed where the next doubling would pass ``max_ell`` or the
    work budget ``max_work``.
    """
    waits = st.waits(st.M)
    tests = [_bias_test(st.first_increment, waits, F, "loynes", None, level, tol)]
    while True:
        if on_test is not None:
            on_test(tests[-1])
        if tests[-1].ok:
            return F, tests, True
        rerun = np.flatnonzero(st.converged & (st.stop_ell == 2 * F))
        while rerun.size == 0 and 8 * F <= max_ell:
            # Every sample went past 2F: X(2F) = X(F), a paired test would read 0 and prove
            # nothing; the horizon moves on to where some samples stopped.
            F *= 2
            rerun = np.flatnonzero(st.converged & (st.stop_ell == 2 * F))
        if rerun.size == 0 or 4 * F > max_ell or run.work_done + rerun.size * 4 * F > max_work:
            return F, tests, False
        _algorithm1(run, st, rerun, 2 * F, 4 * F, max_ell, progress)
        F *= 2
        old, waits = waits, st.waits(st.M)
        tests.append(_bias_test(waits - old, waits, F, "paired", tests[-1], level, tol))


def backward_step(policy, workload, what: str) -> FCFSStep:
    """The engine's step of ``policy`` on ``workload`` for the drivers that need the FCFS
    recurrence on the vector of one resource type (Algorithm 1; pile growth's eq. (7) also
    takes random assignment): ``FCFS()`` when ``policy`` is ``None``.

    Raises:
        ValueError: in one line, a policy with no recurrence form or one this driver lacks.
    """
    step = step_for(FCFS() if policy is None else policy, workload)
    if not isinstance(step, FCFSStep):
        raise ValueError(f"{what}: policy {policy.label} has no backward form (FCFS only)")
    return step


def sample_backward(
    workload,
    lam: float,
    n_samples: int,
    *,
    key,
    ell0: int | None = None,
    dtype=None,
    limit=None,
    override: bool = False,
    bias_control: BiasControl | None = BiasControl(),
    budget: Budget = Budget(),
    batching: Batching = Batching(),
    progress: Callable[[int, int, int], None] | None = None,
    on_test: Callable[[BiasTest], None] | None = None,
    throw: bool = False,
    policy=None,
) -> BackwardSamples:
    """Draw ``n_samples`` independent sub-perfect samples by Algorithm 1 (``mjsre`` 4.4),
    with the batch-level bias control of the module docstring.

    Args:
        workload: a ``jaxqueue.mjqm.Workload`` (servers, per-class cores, probabilities and
            service laws; Poisson arrivals unless it carries an inter-arrival law).
        lam: arrival rate; must be below the stability limit ``lambda_c``.
        n_samples: number of independent samples.
        key: PRNG key; sample ``i`` depends only on ``(key, i)`` and the batch horizon.
        ell0: first horizon (rounded up to a multiple of ``CHUNK`` = 256 jobs); default
            :func:`horizon_floor` (at most half of ``budget.max_ell``).
        dtype: float dtype of the workload state (default: JAX's default float).
        limit: a :class:`~jaxqueue.mjqm.StabilityResult` of
            :func:`~jaxqueue.mjqm.stability_limit`, a number, or ``None``: ``lam`` is refused
            at or beyond it (below the lower end of an estimate's interval) and the default
            ``ell0`` reads it; without it only ``lambda_ideal`` and eq. (8) are checked.
        override: skip the stability checks (``lam >= lambda_c`` gives unconverged samples).
        bias_control: the batch-level bias test (module docstring, 2), a
            :class:`~jaxqueue.mjqm.options.BiasControl` (its tolerance and level); ``None``:
            Algorithm 1 alone, as printed.
        budget: the caps (:class:`~jaxqueue.mjqm.options.Budget`): ``max_ell`` per sample
            (``unconverged``) and for the batch test (``biased``), ``max_work`` (default
            ``2^39 / s``), ``max_seconds`` (module docstring, 4: a pilot of ``_PILOT``
            samples runs the bias control, more are drawn while the time lasts).
        batching: how the samples are batched over device calls
            (:class:`~jaxqueue.mjqm.options.Batching`; no number depends on it; its default
            ``max_batch`` is :func:`_cache_batch` on a CPU).
        progress: optional callback ``(ell, n_active, n_done)`` called at each doubling.
        on_test: optional callback called with each :class:`BiasTest`.
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the status is not ``ok``
            (default: return the samples with their status).
        policy: the policy (default ``FCFS()``); Algorithm 1 has the FCFS recurrence on one
            resource type only (:func:`backward_step`).

    Returns:
        :class:`BackwardSamples`.

    Raises:
        ValueError: bad arguments, a policy other than FCFS, or ``lam`` at or beyond the
            stability limit (with the
            estimate of ``lambda_c`` and its interval) unless ``override``.
        EstimateError: with ``throw``, a status other than ``ok``.
    """
    if not (isinstance(n_samples, (int, np.integer)) and n_samples >= 1):
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
    lam = float(lam)
    if not (math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be finite and > 0, got {lam}")
    BiasControl.check("sample_backward", "bias_control", bias_control, none=True)
    Budget.check("sample_backward", "budget", budget)
    Batching.check("sample_backward", "batching", batching)
    max_ell, max_seconds = budget.max_ell, budget.max_seconds
    if ell0 is not None and (ell0 < 1 or max_ell < ell0):
        raise ValueError(f"need 1 <= ell0 <= budget.max_ell, got ell0={ell0}, max_ell={max_ell}")
    backward_step(policy, workload, "sample_backward")
    check_plain(workload)
    check_load(workload, lam, limit=limit, override=override)
    dtype = jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)
    if ell0 is None:
        ell0 = min(horizon_floor(workload, lam, limit), max(max_ell // 2, 1))
    ell = CHUNK * max(1, -(-ell0 // CHUNK))
    n = int(n_samples)
    min_batch, max_batch = max(batching.min_batch, jax.device_count()), batching.max_batch
    if max_batch is None:
        cpu = jax.default_backend() == "cpu"
        max_batch = _cache_batch(workload.s, dtype.itemsize, min_batch) if cpu else 4096
    t0 = time.perf_counter()
    pilot = n if max_seconds is None else min(n, _PILOT)
    run = _Batcher(workload.unnamed(), key, lam, dtype, batching.split_chunks, min_batch, max_batch)
    st = _Samples.empty(workload, pilot, dtype, ell)
    work = budget.max_work if budget.max_work is not None else _WORK_BUDGET // workload.s
    _algorithm1(run, st, np.arange(pilot), 0, ell, max_ell, progress, work)
    tests, passed = [], True
    if bias_control is not None and pilot >= 2:
        ell, tests, passed = _control_bias(
            run, st, ell, max_ell, work, bias_control.level, bias_control.tol, progress, on_test
        )
    parts, ell_more = [st], 0
    bound = np.concatenate([[tests[-1].bound], tests[-1].bound_class]) if tests else None
    if pilot < n and st.converged.all() and passed:
        ell_more, b_more = _shortest_horizon(tests, bias_control.tol) if tests else (ell, bound)
        deadline = t0 + max_seconds
        parts += _more_samples(run, workload, ell_more, n - pilot, max_ell, deadline, progress)
        extra = sum(p.M.shape[0] for p in parts[1:])
        if tests:  # the bias of the pooled mean: the samples' bounds, weighted by their counts
            bound = (pilot * bound + extra * b_more) / (pilot + extra)
    st = _Samples.concat(parts)
    if not st.converged.all():
        status = Status.unconverged
    else:  # without the batch test (or with one sample) the bias is not controlled
        status = Status.ok if passed and tests else Status.biased
    res = BackwardSamples(
        W=st.M,
        converged=st.converged,
        ell=st.stop_ell,
        lam=lam,
        status=status,
        work_done=int(run.work_done),
        work_needed=int(st.needed.sum()),
        key=key,
        bias_bound=float(bound[0]) if tests else 0.0,
        bias_bound_class=bound[1:] if tests else None,
        ell_batch=int(ell) if bias_control is not None else 0,
        ell_more=int(ell_more) if len(parts) > 1 else 0,
        bias_tests=tuple(tests),
        elapsed_s=time.perf_counter() - t0,
    )
    return res.raise_for_status() if throw else res


def _more_samples(run, workload, F, want, max_ell, deadline, progress) -> list[_Samples]:
    """Up to ``want`` more samples ``X(F)`` (Algorithm 1 from ``F``) before ``deadline``
    (module docstring, 4), in rounds: the first as large as the pilot, then as many as the
    measured seconds per sample leave time for. Round ``r`` draws its samples with the key
    ``fold_in(key, r)`` (independent of the pilot's). The work goes to ``run.work_done``."""
    out, r, per_sample = [], 1, None
    while want > 0:
        left = deadline - time.perf_counter()
        m = _PILOT if per_sample is None else int(0.9 * left / per_sample)
        m = min(want, m)
        if left <= 0 or m < run.min_batch:
            break
        more = dataclasses.replace(run, key=jax.random.fold_in(run.key, r), work_done=0)
        st = _Samples.empty(workload, m, run.dtype, F)
        t = time.perf_counter()
        _algorithm1(more, st, np.arange(m), 0, F, max_ell, progress)
        per_sample = (time.perf_counter() - t) / m
        run.work_done += more.work_done
        out.append(st)
        want -= m
        r += 1
        if not st.converged.all():
            break
    return out
