"""An event-driven (heapq) simulator of the FCFS multiserver-job queue, independent of the MJSRE.

Written from the model description (``papers/mjsre.md`` Section 4.1) only: ``s`` identical
servers, one FCFS waiting line; job ``n`` arrives at ``t_n`` and needs ``alpha_n`` servers at
once for ``sigma_n``; at every departure (and arrival) the scheduler starts jobs from the head of
the line while the head fits in the free servers (head-of-line blocking). No workload vector,
no recurrence. Idle servers are integrated over time: *HOL idle* while the line is non-empty,
*free idle* while it is empty.

Used by the forward (``test_mjqm_forward*.py``) and backward (``test_mjqm_backward*.py``) tests.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np


def event_simulate(s, alpha, sigma, tau, *, warmup=0):
    """Simulate the FCFS MJQM on the given job sequence.

    Args:
        s: number of servers.
        alpha: ``(n,)`` servers asked per job (``1 <= alpha <= s``).
        sigma: ``(n,)`` service times.
        tau: ``(n,)`` inter-arrival times: job ``k + 1`` arrives ``tau[k]`` after job ``k``
            (job 0 arrives at time 0 in an empty system).
        warmup: jobs whose statistics are left out; time integrals run over
            ``[t_warmup, t_n]`` with ``t_n = sum(tau)`` (the arrival epoch after the last job).

    Returns:
        dict with ``wait`` (``(n,)`` waiting times of all jobs), ``time`` (length of the
        window), ``idle`` and ``hol_idle`` (time-average idle and HOL-idle servers over the
        window), ``busy`` (time-average busy servers).
    """
    alpha = np.asarray(alpha, dtype=int)
    sigma = np.asarray(sigma, dtype=float)
    tau = np.asarray(tau, dtype=float)
    n = alpha.shape[0]
    arrivals = np.concatenate([[0.0], np.cumsum(tau)])  # arrivals[n] = end of the window
    t_start, t_end = arrivals[warmup], arrivals[n]
    wait = np.full(n, np.nan)
    free = s
    line: deque[int] = deque()
    departures: list[tuple[float, int]] = []  # (time, servers released)
    now = 0.0
    idle_int = 0.0
    hol_int = 0.0
    busy_int = 0.0

    def integrate(until):
        nonlocal now, idle_int, hol_int, busy_int
        lo, hi = max(now, t_start), min(until, t_end)
        if hi > lo:
            dt = hi - lo
            idle_int += free * dt
            busy_int += (s - free) * dt
            if line:
                hol_int += free * dt
        now = until

    def start_jobs():
        nonlocal free
        while line and alpha[line[0]] <= free:
            k = line.popleft()
            free -= alpha[k]
            wait[k] = now - arrivals[k]
            heapq.heappush(departures, (now + sigma[k], int(alpha[k])))

    k = 0
    while k < n or departures:
        t_arr = arrivals[k] if k < n else np.inf
        if departures and departures[0][0] <= t_arr:
            t_dep, released = heapq.heappop(departures)
            integrate(t_dep)
            free += released
            start_jobs()
        else:
            integrate(t_arr)
            line.append(k)
            start_jobs()
            k += 1
        if k >= n and now >= t_end and not line:
            break
    integrate(max(now, t_end))
    T = t_end - t_start
    return {
        "wait": wait,
        "time": T,
        "idle": idle_int / T,
        "hol_idle": hol_int / T,
        "busy": busy_int / T,
    }


def random_jobs(rng, n, cores, probs, service_samplers, lam):
    """Draw ``n`` i.i.d. jobs with numpy: classes, cores, service times, Poisson inter-arrivals.

    Args:
        rng: ``numpy.random.Generator``.
        cores, probs: per class.
        service_samplers: per class, ``f(rng, size) -> samples``.
        lam: arrival rate.

    Returns:
        ``(cls, alpha, sigma, tau)`` arrays.
    """
    cls = rng.choice(len(probs), size=n, p=np.asarray(probs) / np.sum(probs))
    sigma = np.empty(n)
    for c, f in enumerate(service_samplers):
        idx = cls == c
        sigma[idx] = f(rng, int(idx.sum()))
    tau = rng.exponential(1.0 / lam, size=n)
    return cls, np.asarray(cores)[cls], sigma, tau


def bpareto_sampler(xmin, xmax, shape):
    """Inverse-CDF sampler of the bounded Pareto law on [xmin, xmax]."""

    def f(rng, size):
        u = rng.random(size)
        r = (xmin / xmax) ** shape
        return xmin * (1.0 - u * (1.0 - r)) ** (-1.0 / shape)

    return f


def exp_sampler(mean):
    return lambda rng, size: rng.exponential(mean, size=size)
