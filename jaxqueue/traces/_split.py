"""A long log replayed in sections side by side, exactly.

The event engine's round costs nearly the same for one replication as for a few dozen, so a
long log is cut into ``C`` consecutive own ranges of jobs, each replayed as one column of a
batched replay (:func:`jaxqueue.mjqm.engines.events.replay` with ``(n, C)`` arrays) from an
empty machine, starting ``w`` jobs before its range (a warm-up) and going on ``w`` jobs past
it. A column's starts in its own range are those of the whole replay when (by induction over
the columns, in order, the first starting with the log):

1. every job before the column's first has ended (in the replay) before the range's first
   arrival, and the warm-up jobs still in the system just before it are those of the replay,
   started alike (those that have left may have started otherwise): the jobs in the system,
   and when each started, are then the same at that arrival, and a non-preemptive policy
   without a state of its own decides from these alone;
2. every job of the range starts before the arrival of the first job past the column.

A column that fails either check is replayed again with twice the margin ``w``, until all
pass (at worst from the log's first job to its last: the whole replay). Starts are compared
to a tolerance of ``TOL`` of the log's time span (the engine's clock sums inter-arrival
times: columns and the whole replay round differently). The time integrals (idle servers,
HOL idle servers, jobs in the system) then come from the starts (:func:`timeline`).
"""

from __future__ import annotations

import numpy as np

from ..mjqm.engines.events import replay as engine_replay

__all__ = ["replay_in_sections", "timeline", "TOL", "WAVE"]

TOL = 1e-10
WAVE = 16  # columns per call: a round of 16 costs about one of 1 (64: 3x), and the calls
# between them tell the progress


def replay_in_sections(
    workload, policy, submit, cls, runtime, sizes, *, sections, margin, max_buffer, progress
):
    """Each job's start by :func:`engine_replay` on ``sections`` columns (module docstring;
    ``sizes``: the estimates a policy reads, or ``None``),
    or ``None`` where a job list overflowed or the event cap was reached (the caller replays
    the log whole, whose status says so)."""
    n = submit.shape[0]
    m = -(-n // sections)
    own = [(o, min(o + m, n)) for o in range(0, n, m)]
    warm = [margin] * len(own)
    cols: dict[int, tuple[int, np.ndarray]] = {}
    tol = TOL * max(1.0, float(submit[-1] - submit[0] + runtime.max()))
    todo = list(range(len(own)))
    done = 0
    while todo:
        by_length: dict[int, list[int]] = {}
        for k in todo:
            by_length.setdefault(min(n, m + 2 * warm[k]), []).append(k)
        wide = min(WAVE, len(own))
        waves = [
            (L, ks[i : i + wide])
            for L, ks in sorted(by_length.items())
            for i in range(0, len(ks), wide)
        ]
        for L, ks in waves:
            first = [min(max(own[k][0] - warm[k], 0), n - L) for k in ks]
            # as many columns in every call (repeats of the last): one compiled kernel
            width = first + first[-1:] * (wide - len(first))
            idx = np.asarray(width)[None, :] + np.arange(L)[:, None]
            given = {"max_buffer": max_buffer, "sizes": None if sizes is None else sizes[idx]}
            run = engine_replay(workload, policy, submit[idx], cls[idx], runtime[idx], **given)
            if run.overflow or run.capped:
                return None
            for j, k in enumerate(ks):
                cols[k] = (first[j], run.start[:, j])
            done += sum(own[k][1] - own[k][0] for k in ks)
            if progress is not None:
                progress(f"replayed {min(done, n)}/{n} jobs ({min(done / n, 1.0):.0%})")
        start = np.empty(n)
        for k, (o, e) in enumerate(own):
            f, st = cols[k]
            start[o:e] = st[o - f : e - f]
        todo = [k for k in range(len(own)) if not _exact(k, own, cols, start, submit, runtime, tol)]
        for k in todo:
            warm[k] *= 2
        if todo and progress is not None:
            progress(f"{len(todo)} of {len(own)} sections again with a longer warm-up")
            done = n - sum(own[k][1] - own[k][0] for k in todo)
    return start


def _exact(k, own, cols, start, submit, runtime, tol) -> bool:
    """The checks 1 and 2 of the module docstring for column ``k``."""
    n = submit.shape[0]
    o, e = own[k]
    f, st = cols[k]
    past = f + st.shape[0]
    if f > 0:
        a = submit[o]
        if not np.max(start[:f] + runtime[:f]) < a - tol:
            return False
        if not _same_at(st[: o - f], start[f:o], runtime[f:o], a, tol):
            return False
    return past >= n or bool(np.max(st[o - f : e - f]) < submit[past] - tol)


def _same_at(mine, true, runtime, a, tol) -> bool:
    """The warm-up jobs in the system just before time ``a`` (not yet ended), and which of
    them have started and when, alike in a column (starts ``mine``) and in the replay
    (``true``); a job starting or ending within ``tol`` of ``a`` must start alike in both."""
    alike = np.abs(mine - true) <= tol
    ends_m, ends_t = mine + runtime, true + runtime
    edge = np.zeros(mine.shape, bool)
    for t in (mine, true, ends_m, ends_t):
        edge |= np.abs(t - a) <= tol
    if np.any(edge & ~alike):
        return False
    here = ends_m >= a
    if np.any(here != (ends_t >= a)) or np.any(here & ((mine < a) != (true < a))):
        return False
    return bool(np.all(alike[here & (mine < a)]))


def timeline(submit, start, runtime, cores, servers):
    """``(area_jobs, area_idle, area_hol, time)`` of a non-preemptive replay from its starts:
    the time integrals of the jobs in the system, the idle servers and the idle servers while
    a job waits, from the first arrival to the last departure (as the engine sums them)."""
    end = start + runtime
    t = np.concatenate([submit, start, end])
    waiting = np.concatenate([np.ones_like(submit), -np.ones_like(start), np.zeros_like(end)])
    busy = np.concatenate([np.zeros_like(submit), cores, -cores]).astype(np.float64)
    order = np.argsort(t, kind="stable")
    t = t[order]
    waits = np.cumsum(waiting[order])[:-1] > 0.5
    idle = servers - np.cumsum(busy[order])[:-1]
    dt = np.diff(t)
    return (
        float(np.sum(end - submit)),
        float(np.sum(dt * idle)),
        float(np.sum(dt * idle * waits)),
        float(t[-1] - t[0]),
    )
