"""A replay: the event engine on given jobs (arrival times, classes, service times) instead of
drawn ones. One replication (or several side by side, one per column of the given jobs),
every job counted, no random number; each job's first start is logged in the order of the
starts (``_accumulate._record_start``) and named here, so the replay gives every job's start
time, beside the engine's sums.

The log names a start by its job's need, arrival time and work (the size the policy read,
where given; ``nan`` where the layout keeps no work at the start: the prefix rows); jobs
alike in all three are alike to every policy but for their arrival order, which the policy
keeps, so the earlier of them is the one that started earlier.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..._workload import Workload
from ...policies import Policy, parse_policy
from ._layout import first_buffer, layout_of, needs_of
from ._loop import _CHUNK
from ._simulate import _runs, check_workload

__all__ = ["replay", "ReplayRun"]


@dataclasses.dataclass(frozen=True)
class ReplayRun:
    """The engine's replay of given jobs (:func:`replay`).

    Attributes:
        start: each job's first start time (input order; the clock of ``arrivals``).
        cnt, resp, wait: per class: jobs, sums of responses (wait plus service, preemptions
            included) and of waits until the first start.
        area_jobs, area_idle, area_hol: time integrals of the jobs in the system, the idle
            servers and the idle servers while a job waits, over ``time``, from the first
            arrival to the last departure.
        overflow: a job list filled at ``max_buffer`` (the replay stopped there).
        capped: the event cap was reached. buffer: deque entries at the end.
    """

    start: np.ndarray
    cnt: np.ndarray
    resp: np.ndarray
    wait: np.ndarray
    area_jobs: float
    area_idle: float
    area_hol: float
    time: float
    overflow: bool
    capped: bool
    buffer: int


def replay(
    workload: Workload,
    policy: str | Policy,
    arrivals,
    classes,
    works,
    *,
    buffer: int | None = None,
    max_buffer: int = 1 << 20,
    sizes=None,
    progress=None,
) -> ReplayRun:
    """The event engine on the given jobs: job ``j`` of class ``classes[j]`` (its need is the
    class's cores in ``workload``) arrives at ``arrivals[j]`` (nondecreasing) with work
    ``works[j]`` (>= 0), under ``policy`` on the workload's servers; with ``(n, R)`` arrays,
    ``R`` independent replays side by side, one per column (the fields of the result then
    per column). The workload's service
    laws set only the waiting-time histogram's range (their means); its probabilities are
    not used. Computed in float64 (``jax_enable_x64``): a replay keeps the log's absolute
    times, as the heapq reference does.

    Args:
        buffer: deque entries to start with (default: ``_layout.first_buffer``; at least 4096
            where a pick reads only the fronts, not where every job has a row, as a round costs
            its rows); the replay goes on with twice the entries where a job list fills, up to
            ``max_buffer`` (and the layout's own cap).
        sizes: what the policy reads as each job's size (``Jobs.size``) where it is not the
            job's work (a log's requested times as the estimates of EASY backfilling; a
            policy whose layout keeps sizes), shaped as ``works``.

    Raises:
        ValueError: a bad argument or float32 (x64 off).
    """
    pol = parse_policy(policy)
    check_workload(workload)
    if not jax.config.jax_enable_x64:
        raise ValueError(
            "replay: needs float64 (jax.config.update('jax_enable_x64', True)): float32 would "
            "round the log's absolute times"
        )
    a = np.asarray(arrivals, dtype=np.float64)
    c = np.asarray(classes)
    w = np.asarray(works, dtype=np.float64)
    z = w if sizes is None else np.asarray(sizes, dtype=np.float64)
    columns = a.ndim == 2
    alike = c.shape == a.shape and w.shape == a.shape and z.shape == a.shape
    if a.ndim not in (1, 2) or not alike or a.shape[0] < 1:
        raise ValueError(
            "replay: arrivals, classes and works must be 1-d of one length >= 1 (or 2-d of "
            "one shape: a replay per column)"
        )
    if not columns:
        a, c, w, z = a[:, None], c[:, None], w[:, None], z[:, None]
    n, K = a.shape[0], workload.n_classes
    if not np.issubdtype(c.dtype, np.integer) or c.min() < 0 or c.max() >= K:
        raise ValueError(f"replay: classes must be integers in [0, {K})")
    if not (np.all(np.isfinite(a)) and np.all(np.diff(a, axis=0) >= 0)):
        raise ValueError("replay: arrivals must be finite and nondecreasing")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0)):
        raise ValueError("replay: works must be finite and >= 0")
    if not (np.all(np.isfinite(z)) and np.all(z >= 0)):
        raise ValueError("replay: sizes must be finite and >= 0")
    R = a.shape[1]
    cores = np.asarray(workload.cores_array)[:, 0]
    t0 = a[0]
    tau = np.concatenate([np.diff(a, axis=0), np.full((1, R), np.inf)])  # none after the last
    # never-arriving jobs up to a power of 2 (at least 1024), so logs of like sizes share
    # one compiled kernel
    extra = max(1024, 1 << (n - 1).bit_length()) - n + _CHUNK
    pad = lambda x, v: np.concatenate([x, np.full((extra, R), v, x.dtype)])  # noqa: E731
    jobs = (
        jnp.asarray(pad(c.astype(np.int32), 0)),
        jnp.asarray(pad(cores[c].astype(np.int32), int(cores[0]))),
        jnp.asarray(pad(w, 1.0)),
        jnp.asarray(pad(tau, np.inf)),
    )
    tied = bool(np.any(np.diff(a, axis=0) == 0))  # a log's whole seconds
    layout = layout_of(pol, workload.s, needs_of(workload), tied)
    if sizes is not None:
        if not pol.size_aware:
            raise ValueError(f"replay: {pol.label} reads no job sizes (sizes given)")
        jobs = (*jobs, jnp.asarray(pad(z, 1.0)))
    if buffer is None:
        buffer = first_buffer(workload, layout)
        # a short log grows a pairwise all-rows layout past 16 rows: one compile at 32, not two
        floor = 32 if layout.all_rows else 1 if layout.inside else 4096
        buffer = max(buffer, floor)
    dt = jnp.float64
    key = jax.random.key(0)  # unused: the jobs are given
    shape = (R, 0, n)
    one = jax.devices()[:1]  # the given jobs live on one device
    acc, overflow, capped, B = _runs(
        pol, workload, 1.0, key, shape, buffer, max_buffer, dt, one, progress, jobs, tied=tied
    )
    overflow, capped, B = overflow.any(), capped.any(), B.max()
    acc = jax.tree.map(np.asarray, acc)
    start = np.full((n, R), np.nan)
    if not (overflow or capped):
        for r in range(R):
            log = acc.starts[:, r].reshape(-1, 4)[: int(acc.logged[r])]
            # the log names a start by the size the policy read
            start[:, r] = _name_starts(log, a[:, r] - t0[r], z[:, r], cores[c[:, r]]) + t0[r]
    pick = (lambda x: x) if columns else (lambda x: x[..., 0])
    return ReplayRun(
        start=pick(start),
        cnt=pick(acc.cnt),
        resp=pick(acc.resp),
        wait=pick(acc.wait),
        area_jobs=pick(acc.area_jobs) if columns else float(acc.area_jobs[0]),
        area_idle=pick(acc.area_idle) if columns else float(acc.area_idle[0]),
        area_hol=pick(acc.area_hol) if columns else float(acc.area_hol[0]),
        time=pick(acc.time) if columns else float(acc.time[0]),
        overflow=bool(overflow),
        capped=bool(capped),
        buffer=int(B),
    )


def _name_starts(log, arrivals, works, needs):
    """Each job's start time from the log of first starts (module docstring): the log's
    arrival times (the engine's sums, a rounding away from ``arrivals``) snapped to the
    nearest given one, then the log and the jobs sorted alike by need, arrival and work,
    starts and input order breaking the ties."""
    n = arrivals.shape[0]
    if log.shape[0] != n:
        raise RuntimeError(f"replay: {log.shape[0]} first starts logged for {n} jobs")
    uniq = np.unique(arrivals)
    i = np.clip(np.searchsorted(uniq, log[:, 1]), 1, max(len(uniq) - 1, 1))
    lo, hi = uniq[i - 1], uniq[np.minimum(i, len(uniq) - 1)]
    arr = np.where(np.abs(log[:, 1] - lo) <= np.abs(hi - log[:, 1]), lo, hi)
    with_work = not np.isnan(log[:, 2]).any()
    wk_log = log[:, 2] if with_work else np.zeros(n)
    wk_job = works if with_work else np.zeros(n)
    by_log = np.lexsort((log[:, 0], wk_log, arr, log[:, 3]))
    by_job = np.lexsort((np.arange(n), wk_job, arrivals, needs))
    same = (
        np.array_equal(log[by_log, 3], needs[by_job])
        and np.array_equal(arr[by_log], arrivals[by_job])
        and np.array_equal(wk_log[by_log], wk_job[by_job])
    )
    if not same:
        raise RuntimeError("replay: the logged starts do not name the given jobs")
    start = np.empty(n)
    start[by_job] = log[by_log, 0]
    return start
