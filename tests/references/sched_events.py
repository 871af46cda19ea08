"""Independent event-driven baseline of the interruption scheduler (heapq, plain Python).

Written separately from the JAX kernel of ``jaxqueue.sched`` to check it: it follows
Algorithm 1 of ``papers/bf-clusters.md`` literally, with continuous job sizes (remaining work)
instead of exponential phases, per-server activity ``a_s`` and per-server interruption timers
of rate ``C_s / theta``, and completion events rescheduled when a job's rate changes. Job sizes
are sampled with numpy from the law's parameters (``PhaseCount``: a Gamma(N, phase_mean) size
with N drawn from the counts; ``HyperExponential``: an exponential of a random mean).

Usage: ``simulate_events(server_sets, mu, lam, law, m=..., events=..., warmup=..., seed=...)``
returns per-class time-averaged numbers of jobs and the measured event rate.
"""

from __future__ import annotations

import heapq
import itertools
import time

import numpy as np

from jaxqueue.dist import Erlang, Exponential, HyperExponential, PhaseCount


def make_sampler(law, rng: np.random.Generator):
    """A function drawing one job size from ``law`` with numpy."""
    if isinstance(law, Exponential):
        mean = float(law.mean_)
        return lambda: rng.exponential(mean)
    if isinstance(law, Erlang):
        k, mean = law.k, float(law.mean_)
        return lambda: rng.gamma(k, mean / k)
    if isinstance(law, HyperExponential):
        means, probs = np.asarray(law.means, float), np.asarray(law.probs, float)
        return lambda: rng.exponential(means[rng.choice(len(means), p=probs)])
    if isinstance(law, PhaseCount):
        counts = np.asarray(law.counts, float)
        probs = np.asarray(law.probs, float)
        scale = float(law.phase_mean)
        cdf = np.cumsum(probs)
        return lambda: rng.gamma(
            counts[min(np.searchsorted(cdf, rng.random()), len(cdf) - 1)], scale
        )
    raise TypeError(f"no sampler for {type(law).__name__}")


class _Job:
    __slots__ = ("cls", "servers", "work", "rate", "last", "version")

    def __init__(self, cls, servers, work, now):
        self.cls, self.servers, self.work = cls, servers, work
        self.rate, self.last, self.version = 0.0, now, 0


def simulate_events(
    server_sets,
    mu,
    lam,
    law,
    *,
    m: float,
    events: int,
    warmup: int,
    seed: int,
    random_d: int = 0,
):
    """Simulate Algorithm 1 event by event.

    Args:
        server_sets: per-class server lists (ignored when ``random_d > 0``).
        mu: server capacities C_s.
        lam: per-class arrival rates (one total rate when ``random_d > 0``).
        law: job-size law (mean sigma); theta = sigma / m, m = 0 for FCFS.
        events: measured events (arrivals, departures, interruptions) after ``warmup`` events.
        seed: numpy seed.
        random_d: if > 0, each job draws ``random_d`` servers uniformly among all servers.

    Returns:
        dict with ``L`` (per-class time-averaged numbers, a single entry for random assignment),
        ``time`` (measured duration), ``events``, ``interruptions``, ``departures`` and
        ``events_per_s`` (wall clock, warm-up included).
    """
    rng = np.random.default_rng(seed)
    sample = make_sampler(law, rng)
    mu = np.asarray(mu, float)
    lam = np.atleast_1d(np.asarray(lam, float))
    S = len(mu)
    sigma = float(law.mean())
    theta = sigma / m if m > 0 else np.inf
    n_cls = len(lam)
    seq = itertools.count()
    heap: list = []
    queue: list[_Job] = []
    active: list[_Job | None] = [None] * S  # a_s: job served by server s
    timer_version = [0] * S
    counts = np.zeros(n_cls)
    area = np.zeros(n_cls)
    now = 0.0
    t_start = 0.0
    done = 0
    measured = False
    stats = {"interruptions": 0, "departures": 0}

    for i in range(n_cls):
        heapq.heappush(heap, (rng.exponential(1 / lam[i]), next(seq), "arr", i, 0))

    def set_rate(job, rate):
        job.work -= job.rate * (now - job.last)
        job.last = now
        if rate != job.rate:
            job.rate = rate
            job.version += 1
            if rate > 0:
                heapq.heappush(heap, (now + job.work / rate, next(seq), "dep", job, job.version))

    def assign(s, job):
        active[s] = job
        timer_version[s] += 1
        if np.isfinite(theta):
            t = now + rng.exponential(theta / mu[s])
            heapq.heappush(heap, (t, next(seq), "tim", s, timer_version[s]))

    def release(job):
        freed = []
        for s in job.servers:
            if active[s] is job:
                active[s] = None
                timer_version[s] += 1
                freed.append(s)
        set_rate(job, 0.0)
        return freed

    def reallocate(freed, start):
        # Algorithm 1: the freed servers go to the oldest compatible jobs from position start
        touched = {}
        for k in range(start, len(queue)):
            job = queue[k]
            for s in freed:
                if active[s] is None and mu[s] > 0 and s in job.servers:
                    assign(s, job)
                    touched[id(job)] = job
        for job in touched.values():
            set_rate(job, sum(mu[s] for s in job.servers if active[s] is job))

    t0 = time.perf_counter()
    total = warmup + events
    while done < total:
        t, _, kind, obj, version = heapq.heappop(heap)
        if kind == "dep" and version != obj.version:
            continue
        if kind == "tim" and version != timer_version[obj]:
            continue
        if measured:
            area += counts * (t - now)
        now = t
        done += 1
        if not measured and done > warmup:
            measured, t_start = True, now
        if kind == "arr":
            i = obj
            heapq.heappush(heap, (now + rng.exponential(1 / lam[i]), next(seq), "arr", i, 0))
            if random_d:
                servers = tuple(int(s) for s in rng.choice(S, random_d, replace=False))
            else:
                servers = tuple(server_sets[i])
            job = _Job(i, frozenset(servers), sample(), now)
            queue.append(job)
            counts[i] += 1
            free = [s for s in job.servers if active[s] is None and mu[s] > 0]
            for s in free:
                assign(s, job)
            set_rate(job, sum(mu[s] for s in free))
        elif kind == "dep":
            job = obj
            k = queue.index(job)
            queue.pop(k)
            counts[job.cls] -= 1
            stats["departures"] += measured
            freed = release(job)
            reallocate(freed, k)
        else:  # timer expiry at server obj: interrupt its job, move it to the end
            job = active[obj]
            k = queue.index(job)
            queue.pop(k)
            queue.append(job)
            stats["interruptions"] += measured
            freed = release(job)
            reallocate(freed, k)
    wall = time.perf_counter() - t0
    duration = now - t_start
    return {
        "L": area / duration,
        "time": duration,
        "events": total,
        "events_per_s": total / wall,
        **stats,
    }
