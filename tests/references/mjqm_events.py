"""The event simulator of the multiserver-job queue (MJQM): one heapq engine, every policy.

This is a test reference: it shares no code with ``jaxqueue``; the engine uses only the
standard library (numpy only for the arrays in and out of :func:`event_simulate`).
Model: one pool of ``s`` identical servers; job ``j`` has a class, a ``need`` (servers
occupied while in service, ``1 <= need <= s``), a ``work`` (service time at rate 1) and an
arrival time. Preempt-resume: a job taken out of service keeps its remaining work. At every
arrival and at every completion the policy chooses the set of jobs in service (sum of needs
``<= s``).

Policies (jobs are kept in arrival order):

``fcfs``
    non-preemptive; waiting jobs start in arrival order while the earliest waiting job fits;
    the first one that does not fit blocks all behind it.
``first-fit``
    non-preemptive; scan the waiting jobs in arrival order and start each one that fits in the
    (decreasing) free servers.
``window:W``
    non-preemptive; repeat until nothing changes: among the first ``W`` jobs of the current
    waiting list start the earliest one that fits (``window:1`` is fcfs, ``window:inf`` is
    first-fit).
``preemptive-first-fit``
    preemptive; from scratch at every event: scan all jobs in the system in arrival order,
    starting from ``s`` free servers, and serve each one that fits in what is left.
``msf``
    preemptive (most servers first); from scratch at every event: order all jobs by need,
    largest first (arrival order within equal needs) and serve them first-fit in that order.
``least-servers-first``
    preemptive; from scratch at every event: order all jobs by need, smallest first (arrival
    order within equal needs) and serve them first-fit in that order.
``server-filling``
    preemptive; from scratch at every event: take the shortest arrival-order prefix whose needs
    sum to at least ``s`` (all jobs if the total is below ``s``); serve that prefix ordered by
    need, largest first (arrival order within equal needs), first-fit.
``easy-backfilling``
    non-preemptive, clairvoyant. (1) start waiting jobs in arrival order while they fit (as
    fcfs); (2) if a job still waits, the earliest waiting one is the head and its reservation
    time ``t_r`` is the earliest time ``>= now`` at which ``free now + needs of running jobs with
    remaining work <= t_r - now`` reaches the head's need; (3) each later waiting job, in arrival
    order, starts now if it fits in the currently free servers and ``work <= t_r - now``.
``maxweight``, ``srpt-greedy``, ``first-fit-srpt``, ``server-filling-srpt``,
``server-filling-gittins``
    preemptive; at every event the served set is ``select_reference.select`` of the jobs present
    (arrival order) with their remaining and attained service times (definitions there).
``msfq:L``, ``balanced-splitting:R0/.../Rm-1+H``
    non-preemptive; at every event the jobs ``select_reference`` starts (definitions there;
    msfq's K is the largest need of the workload, its swap flag lives in the engine).
``maxweight-msj``
    maxweight with isaacg1/msj-simulator's tie handling (random pick among needs of equal
    weight, a job order kept between decisions): only to reproduce its published figures.
``easy-backfilling:estimate=F``
    as easy-backfilling, planning with ``select_reference.estimate(work, F)``: a running job's
    planned end is ``first_start + estimate``, a later job backfills if ``estimate <= t_r - now``
    (in exact arithmetic).
``easy-backfilling:estimate=requested``
    the same with each job's own estimate (``run_trace``'s ``estimates``: a log's requested
    times), which is never below its work.

Events are handled one at a time in time order. Exact ties: completions before arrivals,
completions in arrival order of the jobs, arrivals in input order; the policy is applied after
every single event. One tie case needs a rule of its own (it only happens with exactly equal
times): a preemptive policy may take a job out of service at the very instant its remaining
work reaches 0 (another completion at the same instant changed the served set). Such a job has
received all its work, so it departs at that instant; this reference processes it as a
completion right after the policy application that preempted it (earliest arrival first if
several), and applies the policy again after it.

API: :func:`run_trace` (explicit job list: start and departure times), :func:`simulate`
(Poisson arrivals, steady-state statistics) and the samplers :func:`exp_work`,
:func:`hyperexp_work`, :func:`det_work`; for the MJSRE tests, :func:`event_simulate` (a job
sequence as the arrays of ``papers/mjsre.md`` Section 4.1: waits and the time-average idle and
head-of-line-idle servers) with the numpy job streams :func:`random_jobs`,
:func:`exp_sampler`, :func:`bpareto_sampler`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from fractions import Fraction
from itertools import islice

import numpy as np

from tests.references import select_reference

__all__ = [
    "POLICIES",
    "bpareto_sampler",
    "det_work",
    "event_simulate",
    "exp_sampler",
    "exp_work",
    "hyperexp_work",
    "random_jobs",
    "run_trace",
    "simulate",
]

#: Names accepted by :func:`run_trace` and :func:`simulate` (plus ``"window:W"``, W >= 1).
POLICIES = (
    "fcfs",
    "first-fit",
    "preemptive-first-fit",
    "msf",
    "least-servers-first",
    "server-filling",
    "easy-backfilling",
) + select_reference.PREEMPTIVE
_PREEMPTIVE = (
    "preemptive-first-fit", "msf", "least-servers-first", "server-filling", "maxweight-msj",
)  # fmt: skip
# Preemptive policies whose rule is select_reference.select on the present state.
_SELECT_PREEMPTIVE = select_reference.PREEMPTIVE
# Parametrised names (NAME:PARAM) whose definitions are in select_reference.
_SELECT_FORMS = ("msfq", "balanced-splitting", "easy-backfilling")

_INF = math.inf


class _Job:
    __slots__ = (
        "idx", "cls", "need", "work", "arrival", "rem", "end", "first_start", "departure", "helper",
        "estimate",
    )  # fmt: skip

    def __init__(self, idx: int, cls: int, need: int, work: float, arrival: float):
        self.idx = idx  # arrival rank: arrival order is idx order
        self.cls = cls
        self.need = need
        self.work = work
        self.arrival = arrival
        self.rem = work  # remaining work while not in service
        self.end: float | None = None  # completion time while in service, else None
        self.first_start: float | None = None
        self.departure: float | None = None
        self.helper = False  # balanced-splitting: started on the helper servers
        self.estimate: float | None = None  # easy-backfilling:estimate=requested: its own


def _parse_policy(policy: str) -> tuple[str, int | dict | None]:
    if policy in POLICIES or policy == "maxweight-msj":
        return policy, None
    if policy == "easy-backfilling:estimate=requested":  # each job's own estimate
        return "easy-backfilling-estimate", {"F": None}
    if isinstance(policy, str) and policy.partition(":")[0] in _SELECT_FORMS:
        return select_reference.parse_policy(policy)  # ValueError if malformed
    if isinstance(policy, str) and policy.startswith("window:"):
        try:
            w = int(policy[len("window:") :])
        except ValueError:
            w = 0
        if w >= 1:
            return "window", w
    raise ValueError(
        f"unknown policy {policy!r}; expected one of {POLICIES}, 'window:W' or "
        + select_reference._FORMS
    )


def _earliest_fit_in_arrival_order(groups: dict[int, dict[int, _Job]], free: int) -> list[_Job]:
    """Jobs taken by the first-fit scan, in arrival order, of the union of ``groups``.

    ``groups`` maps a need to the jobs with that need (a dict in arrival order). The literal
    rule "scan all jobs in arrival order and take each one whose need fits in what is left" is
    computed as "repeatedly take the earliest job whose need fits in what is left": they pick the
    same jobs because the free count only decreases, so every job skipped by the scan before the
    last pick still does not fit. Within one need group only the earliest untaken job can be the
    pick, so the search looks at one head per distinct need (cheap when the queue is long).
    """
    heads: dict[int, _Job] = {}
    iters = {}
    for need, group in groups.items():
        if group and need <= free:
            it = iter(group.values())
            iters[need] = it
            heads[need] = next(it)
    chosen: list[_Job] = []
    while heads:
        best = None
        for need, job in heads.items():
            if need <= free and (best is None or job.idx < best.idx):
                best = job
        if best is None:
            break
        chosen.append(best)
        free -= best.need
        nxt = next(iters[best.need], None)
        if nxt is None:
            del heads[best.need]
        else:
            heads[best.need] = nxt
    return chosen


class _Engine:
    """State of the pool: jobs present, jobs in service, and the policy rule."""

    def __init__(
        self,
        policy: str,
        s: int,
        on_depart: Callable[[_Job], None] | None = None,
        laws: Sequence | None = None,
        max_need: int | None = None,
        tie_seed: int = 0,
    ):
        self.kind, self.window = _parse_policy(policy)
        self.params = self.window if isinstance(self.window, dict) else {}
        self.max_need = max_need  # msfq: K, the workload's largest need
        self.msfq_state = {"swap": False}
        self._shadow: list[int] = []  # maxweight-msj: its job order, kept between decisions
        self._tie_rng = random.Random(tie_seed)  # maxweight-msj: its arbitrary tie picks
        self.preemptive = self.kind in _PREEMPTIVE or self.kind in _SELECT_PREEMPTIVE
        self.policy = policy
        self.laws = laws  # per-class duration laws (server-filling-gittins)
        self.s = int(s)
        self.busy = 0  # servers in use
        self.system: dict[int, _Job] = {}  # every job present, arrival order
        self.by_need: dict[int, dict[int, _Job]] = {}  # same jobs grouped by need
        self.needs_desc: list[int] = []  # distinct needs seen, largest first
        # Non-preemptive policies only: the waiting jobs (a job leaves these once, on start).
        self.waiting: dict[int, _Job] = {}
        self.waiting_by_need: dict[int, dict[int, _Job]] = {}
        self.running: dict[int, _Job] = {}
        self._heap: list[tuple[float, int]] = []  # (end, idx), stale entries skipped lazily
        self._on_depart = on_depart
        if not self.preemptive:  # the rule's method, looked up once
            self._apply_nonpreemptive = getattr(self, "_apply_" + self.kind.replace("-", "_"))

    # -- bookkeeping ------------------------------------------------------------------------
    @property
    def n_system(self) -> int:
        return len(self.system)

    @property
    def free(self) -> int:
        return self.s - self.busy

    def next_completion(self) -> float:
        heap = self._heap
        while heap:
            end, idx = heap[0]
            job = self.running.get(idx)
            if job is not None and job.end == end:
                return end
            heapq.heappop(heap)
        return _INF

    def arrive(self, job: _Job) -> None:
        if self.kind == "balanced-splitting":
            reserve, helpers = self.params["reserve"], self.params["helpers"]
            if not (job.cls < len(reserve) and job.need <= max(reserve[job.cls], helpers)):
                raise ValueError(f"job {job.idx}: class {job.cls} need {job.need} fits nowhere")
        self.system[job.idx] = job
        if job.need not in self.by_need:
            self.by_need[job.need] = {}
            self.waiting_by_need[job.need] = {}
            self.needs_desc = sorted(self.by_need, reverse=True)
        self.by_need[job.need][job.idx] = job
        if not self.preemptive:
            self.waiting[job.idx] = job
            self.waiting_by_need[job.need][job.idx] = job

    def complete_next(self, now: float) -> None:
        """Depart the in-service job completing at ``now`` (earliest arrival among ties)."""
        end, idx = heapq.heappop(self._heap)
        job = self.running[idx]
        assert job.end == end == now
        del self.running[idx]
        self.busy -= job.need
        job.end = None
        job.rem = 0.0
        self._depart(job, now)

    def _depart(self, job: _Job, now: float) -> None:
        del self.system[job.idx]
        del self.by_need[job.need][job.idx]
        job.departure = now
        if self._on_depart is not None:
            self._on_depart(job)

    def _start(self, job: _Job, now: float) -> None:
        assert job.need <= self.s - self.busy
        self.running[job.idx] = job
        self.busy += job.need
        if job.first_start is None:
            job.first_start = now
        job.end = now + job.rem
        heapq.heappush(self._heap, (job.end, job.idx))
        if not self.preemptive:
            del self.waiting[job.idx]
            del self.waiting_by_need[job.need][job.idx]

    def _preempt(self, job: _Job, now: float) -> None:
        del self.running[job.idx]
        self.busy -= job.need
        job.rem = job.end - now
        job.end = None

    # -- policies ---------------------------------------------------------------------------
    def apply(self, now: float) -> None:
        """Apply the policy at ``now`` (after one event)."""
        if not self.preemptive:
            self._apply_nonpreemptive(now)
            return
        finished: list[_Job] = []  # preempted at the instant their remaining work hit 0
        while True:
            target = self._preemptive_target(now)
            assert sum(j.need for j in target) <= self.s
            keep = {j.idx for j in target}
            for job in list(self.running.values()):
                if job.idx not in keep:
                    self._preempt(job, now)
                    if job.rem <= 0.0:  # exact tie: it received all its work at `now`
                        finished.append(job)
            for job in target:
                if job.idx not in self.running:
                    self._start(job, now)  # a finished job served again completes at `now`
            finished = [j for j in finished if j.idx not in self.running]
            if not finished:
                return
            # Depart the earliest such job, then apply the policy again.
            job = min(finished, key=lambda j: j.idx)
            finished.remove(job)
            job.rem = 0.0
            self._depart(job, now)

    def _apply_fcfs(self, now: float) -> None:
        while self.waiting:
            head = next(iter(self.waiting.values()))
            if head.need > self.free:
                break
            self._start(head, now)

    def _apply_first_fit(self, now: float) -> None:
        for job in _earliest_fit_in_arrival_order(self.waiting_by_need, self.free):
            self._start(job, now)

    def _apply_window(self, now: float) -> None:
        while True:
            pick = None
            for job in islice(self.waiting.values(), self.window):
                if job.need <= self.free:
                    pick = job
                    break
            if pick is None:
                return
            self._start(pick, now)

    def _views(self, now: float) -> tuple[list[_Job], list]:
        """The jobs present (arrival order) and their select_reference.Job views at ``now``."""
        present = list(self.system.values())
        views = []
        for job in present:
            running = job.end is not None
            rem = job.end - now if running else job.rem
            views.append(
                select_reference.Job(job.need, rem, job.work - rem, job.cls, running, job.helper)
            )
        return present, views

    def _apply_msfq(self, now: float) -> None:
        present, views = self._views(now)
        chosen = select_reference.select(
            self.policy, views, self.s, max_need=self.max_need, state=self.msfq_state
        )
        for i in chosen:
            if not views[i].running:
                self._start(present[i], now)

    def _apply_balanced_splitting(self, now: float) -> None:
        present, views = self._views(now)
        for i, on_helpers in select_reference.balanced_splitting_starts(
            views, self.s, **self.params
        ):
            present[i].helper = on_helpers
            self._start(present[i], now)

    def _apply_easy_backfilling_estimate(self, now: float) -> None:
        """EASY with planned ends ``first_start + estimate(work)`` (see select_reference). A
        comparison within a few ulps of a tie is made again in exact arithmetic (``Fraction``:
        the tie decided as by the real numbers); the others in floats, as fast as before."""
        F = self.params["F"]

        def estimate(j: _Job) -> float:
            return j.estimate if F is None else select_reference.estimate(j.work, F)

        def horizon(exact: bool):
            """The time from now to the head's reservation: the first planned end by which
            the free servers and those of the jobs ending by then reach its need."""
            num = Fraction if exact else float
            planned = sorted(
                (num(j.first_start) + num(estimate(j)), j.idx, j.need)
                for j in self.running.values()
            )
            free = self.free
            for end, _, need in planned:
                free += need
                if free >= head.need:
                    return end - num(now)
            raise AssertionError("the head never fits")

        self._apply_fcfs(now)  # (1)
        if not self.waiting:
            return
        it = iter(self.waiting.values())
        head = next(it)
        h, exact = horizon(False), None
        near = 4 * math.ulp(abs(now) + abs(h))  # the floats' error bound, with room
        backfill = []
        free = self.free
        for job in it:
            e = estimate(job)
            if abs(e - h) <= near and exact is None:
                exact = horizon(True)
            if job.need <= free and (e <= h if abs(e - h) > near else e <= exact):
                backfill.append(job)
                free -= job.need
        for job in backfill:
            self._start(job, now)

    def _apply_easy_backfilling(self, now: float) -> None:
        self._apply_fcfs(now)  # (1)
        if not self.waiting:
            return
        it = iter(self.waiting.values())
        head = next(it)
        # (2) reservation: running jobs release their servers at their exact end times.
        free = self.free
        t_r = None
        for job in sorted(self.running.values(), key=lambda j: (j.end, j.idx)):
            free += job.need
            if free >= head.need:
                t_r = job.end
                break
        assert t_r is not None and t_r >= now  # head.need <= s, and it did not fit now
        horizon = t_r - now
        # (3) backfill later jobs that fit now and end no later than the reservation.
        backfill = []
        free = self.free
        for job in it:
            if free <= 0:
                break
            if job.need <= free and job.work <= horizon:
                backfill.append(job)
                free -= job.need
        for job in backfill:
            self._start(job, now)

    def _maxweight_msj_target(self) -> list[_Job]:
        """MaxWeight as isaacg1/msj-simulator runs it (its published figures): the need of
        largest weight floor(c_n s / n) is picked at random among ties; if its jobs fill the
        servers, the first floor(s / n) of them are served; otherwise a job order kept between
        decisions (arrivals appended) is stably sorted by weight and served first fit."""
        s = self.s
        present = self.system
        if not present:
            return []
        self._shadow = [i for i in self._shadow if i in present]
        seen = set(self._shadow)
        self._shadow += [i for i in present if i not in seen]
        count: dict[int, int] = {}
        for job in present.values():
            count[job.need] = count.get(job.need, 0) + 1
        weight = {d: c * s // d for d, c in count.items()}
        top = max(weight.values())
        best = self._tie_rng.choice(sorted(d for d in weight if weight[d] == top))
        if best * count[best] >= s:
            return list(self.by_need[best].values())[: s // best]
        self._shadow.sort(key=lambda i: -weight[present[i].need])
        chosen, free = [], s
        for i in self._shadow:
            job = present[i]
            if job.need <= free:
                chosen.append(job)
                free -= job.need
        return chosen

    def _preemptive_target(self, now: float) -> list[_Job]:
        s = self.s
        if self.kind == "maxweight-msj":
            return self._maxweight_msj_target()
        if self.kind in _SELECT_PREEMPTIVE:
            present = list(self.system.values())  # arrival order
            views = []
            for job in present:
                rem = job.end - now if job.end is not None else job.rem
                running = job.end is not None
                views.append(select_reference.Job(job.need, rem, job.work - rem, job.cls, running))
            chosen = select_reference.select(self.policy, views, s, laws=self.laws)
            return [present[i] for i in chosen]
        if self.kind == "preemptive-first-fit":
            return _earliest_fit_in_arrival_order(self.by_need, s)
        if self.kind == "msf":
            chosen = []
            free = s
            for need in self.needs_desc:
                if need > free:
                    continue
                for job in self.by_need[need].values():  # arrival order within a need
                    if need > free:
                        break
                    chosen.append(job)
                    free -= need
            return chosen
        if self.kind == "least-servers-first":
            chosen = []
            free = s
            for need in sorted(self.by_need):  # smallest need first
                if need > free:  # no larger need fits either
                    break
                for job in self.by_need[need].values():  # arrival order within a need
                    if need > free:
                        break
                    chosen.append(job)
                    free -= need
            return chosen
        if self.kind == "server-filling":
            prefix = []
            total = 0
            for job in self.system.values():
                prefix.append(job)
                total += job.need
                if total >= s:
                    break
            prefix.sort(key=lambda j: (-j.need, j.idx))
            chosen = []
            free = s
            for job in prefix:
                if job.need <= free:
                    chosen.append(job)
                    free -= job.need
            return chosen
        raise AssertionError(self.kind)


def _drive(
    engine: _Engine,
    next_job: Callable[[], _Job | None],
    stop: Callable[[], bool] | None = None,
    observe: Callable[[float, _Engine], None] | None = None,
) -> None:
    """Event loop: one event at a time, completions before arrivals at equal times."""
    pending = next_job()
    while True:
        tc = engine.next_completion()
        ta = pending.arrival if pending is not None else _INF
        if tc == _INF and ta == _INF:
            return
        t = tc if tc <= ta else ta
        if observe is not None:
            observe(t, engine)  # state on the interval that ends at t
        if tc <= ta:
            engine.complete_next(t)
        else:
            engine.arrive(pending)
            pending = next_job()
        engine.apply(t)
        if stop is not None and stop():
            return


def run_trace(
    policy: str,
    s: int,
    needs: Sequence[int],
    arrivals: Sequence[float],
    works: Sequence[float],
    *,
    classes: Sequence[int] | None = None,
    laws: Sequence | None = None,
    max_need: int | None = None,
    estimates: Sequence[float] | None = None,
) -> tuple[list[float], list[float]]:
    """Simulate an explicit job list until every job has departed.

    ``needs[j]``, ``arrivals[j]`` (nondecreasing) and ``works[j]`` (positive) describe job ``j``;
    ``classes[j]`` (default 0) its class, whose duration law ``laws[classes[j]]`` only
    ``server-filling-gittins`` reads (the laws of ``select_reference.gittins_index``);
    ``max_need`` (default the largest need of the list) is msfq's K; ``estimates[j]``
    (``>= works[j]``) job ``j``'s estimate under ``easy-backfilling:estimate=requested``.
    Returns ``(first_start, departure)``, per job in input order.
    """
    n = len(needs)
    if not (len(arrivals) == n and len(works) == n):
        raise ValueError("needs, arrivals and works must have the same length")
    if classes is None:
        classes = [0] * n
    elif len(classes) != n:
        raise ValueError("classes must have one entry per job")
    s = int(s)
    jobs = []
    prev = -_INF
    for j in range(n):
        need, a, w = int(needs[j]), float(arrivals[j]), float(works[j])
        if need != needs[j] or not 1 <= need <= s:
            raise ValueError(f"job {j}: need {needs[j]!r} not an integer in [1, {s}]")
        if not (math.isfinite(a) and a >= prev):
            raise ValueError(f"job {j}: arrivals must be finite and nondecreasing")
        if not (math.isfinite(w) and w > 0.0):
            raise ValueError(f"job {j}: work must be positive and finite")
        prev = a
        jobs.append(_Job(j, int(classes[j]), need, w, a))
        if estimates is not None:
            jobs[-1].estimate = float(estimates[j])
            if not jobs[-1].estimate >= w:
                raise ValueError(f"job {j}: estimate {estimates[j]!r} below its work {w!r}")
    if max_need is None:
        max_need = max(int(d) for d in needs) if n else s
    engine = _Engine(policy, s, laws=laws, max_need=max_need)
    feed = iter(jobs)
    _drive(engine, lambda: next(feed, None))
    assert not engine.system
    return [j.first_start for j in jobs], [j.departure for j in jobs]


def simulate(
    policy: str,
    s: int,
    needs: Sequence[int],
    probs: Sequence[float],
    sample_work: Callable[[random.Random, int], float],
    lam: float,
    n_jobs: int,
    warmup: int,
    seed: int,
    *,
    laws: Sequence | None = None,
) -> dict:
    """Poisson(``lam``) arrivals, class ``k`` w.p. ``probs[k]`` with need ``needs[k]`` and work
    ``sample_work(rng, k)``.

    Jobs ``0 .. n_jobs-1`` are simulated until all of them have departed; arrivals keep coming
    (jobs ``n_jobs, n_jobs+1, ...``) meanwhile so the measured jobs see the steady-state system.
    Jobs ``warmup .. n_jobs-1`` are measured. The time averages ``jobs_mean`` and
    ``idle_servers_mean`` are taken over ``[arrival of job warmup, arrival of job n_jobs-1]``.

    Random draws, per job in order: interarrival (``rng.expovariate(lam)``), class
    (``rng.random()`` against the cumulative ``probs``), then ``sample_work(rng, k)``.
    ``laws`` (per class) are the duration laws ``server-filling-gittins`` reads.
    """
    s = int(s)
    n_jobs, warmup = int(n_jobs), int(warmup)
    if not 0 <= warmup < n_jobs:
        raise ValueError("need 0 <= warmup < n_jobs")
    if len(needs) != len(probs) or not needs:
        raise ValueError("needs and probs must be nonempty and of equal length")
    if any(int(d) != d or not 1 <= d <= s for d in needs):
        raise ValueError(f"needs must be integers in [1, {s}]")
    if any(p < 0 for p in probs) or abs(sum(probs) - 1.0) > 1e-9:
        raise ValueError("probs must be nonnegative and sum to 1")
    if not lam > 0:
        raise ValueError("lam must be positive")
    n_cls = len(needs)
    cum = []
    acc = 0.0
    for p in probs:
        acc += p
        cum.append(acc)
    rng = random.Random(seed)
    clock = [0.0]

    def make_job(idx: int) -> _Job:
        clock[0] += rng.expovariate(lam)
        u = rng.random()
        k = next((i for i, c in enumerate(cum) if u < c and probs[i] > 0), None)
        if k is None:  # u beyond the rounded cumulative sum: last class with positive prob.
            k = max(i for i in range(n_cls) if probs[i] > 0)
        w = float(sample_work(rng, k))
        if not (math.isfinite(w) and w > 0.0):
            raise ValueError(f"sample_work returned {w!r} for class {k}")
        return _Job(idx, k, int(needs[k]), w, clock[0])

    measured = [make_job(i) for i in range(n_jobs)]
    t0, t1 = measured[warmup].arrival, measured[n_jobs - 1].arrival
    max_extra = 20 * n_jobs + 100_000
    counter = {"next": 0, "done": 0}

    def next_job() -> _Job | None:
        i = counter["next"]
        counter["next"] = i + 1
        if i < n_jobs:
            return measured[i]
        if i - n_jobs > max_extra:
            raise RuntimeError("measured jobs never all departed (unstable system?)")
        return make_job(i)

    def on_depart(job: _Job) -> None:
        if job.idx < n_jobs:
            counter["done"] += 1

    area = {"t": 0.0, "jobs": 0.0, "idle": 0.0}

    def observe(t: float, eng: _Engine) -> None:
        a, b = max(area["t"], t0), min(t, t1)
        if b > a:
            area["jobs"] += eng.n_system * (b - a)
            area["idle"] += (eng.s - eng.busy) * (b - a)
        area["t"] = t

    engine = _Engine(
        policy,
        s,
        on_depart=on_depart,
        laws=laws,
        max_need=max(int(d) for d in needs),
        tie_seed=seed + 1,
    )
    _drive(engine, next_job, stop=lambda: counter["done"] == n_jobs, observe=observe)
    assert counter["done"] == n_jobs

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else math.nan

    resp = [[] for _ in range(n_cls)]
    wait = [[] for _ in range(n_cls)]
    for job in measured[warmup:]:
        resp[job.cls].append(job.departure - job.arrival)
        wait[job.cls].append(job.first_start - job.arrival)
    span = t1 - t0
    return {
        "response_mean": mean([x for r in resp for x in r]),
        "response_mean_class": [mean(r) for r in resp],
        "wait_mean": mean([x for w in wait for x in w]),
        "wait_mean_class": [mean(w) for w in wait],
        "jobs_mean": area["jobs"] / span if span > 0 else math.nan,
        "idle_servers_mean": area["idle"] / span if span > 0 else math.nan,
        "n": n_jobs - warmup,
    }


# -- work samplers: ``sample_work(rng, k)`` with ``rng`` a ``random.Random`` ----------------------
def exp_work(means: Sequence[float]) -> Callable[[random.Random, int], float]:
    """Exponential work with mean ``means[k]`` for class ``k``."""
    rates = [1.0 / float(m) for m in means]
    return lambda rng, k: rng.expovariate(rates[k])


def hyperexp_work(
    probs: Sequence[Sequence[float]], means: Sequence[Sequence[float]]
) -> Callable[[random.Random, int], float]:
    """Hyperexponential work: class ``k`` picks phase ``i`` w.p. ``probs[k][i]`` (one
    ``rng.random()`` draw) then draws an exponential of mean ``means[k][i]``."""
    if len(probs) != len(means) or any(len(p) != len(m) for p, m in zip(probs, means, strict=True)):
        raise ValueError("probs and means must have the same shape")
    cums = []
    for p in probs:
        acc, c = 0.0, []
        for x in p:
            acc += x
            c.append(acc)
        cums.append(c)
    rates = [[1.0 / float(m) for m in row] for row in means]

    def sample(rng: random.Random, k: int) -> float:
        u = rng.random()
        c = cums[k]
        i = next((i for i, x in enumerate(c) if u < x), len(c) - 1)
        return rng.expovariate(rates[k][i])

    return sample


def det_work(values: Sequence[float]) -> Callable[[random.Random, int], float]:
    """Deterministic work ``values[k]`` for class ``k`` (draws nothing from ``rng``)."""
    vals = [float(v) for v in values]
    return lambda rng, k: vals[k]


# -- job sequences as arrays (the MJSRE tests) ---------------------------------------------------
def event_simulate(s, alpha, sigma, tau, *, warmup=0, policy="fcfs"):
    """Simulate the queue on the given job sequence (FCFS unless ``policy`` says otherwise).

    Args:
        s: number of servers.
        alpha: ``(n,)`` servers asked per job (``1 <= alpha <= s``).
        sigma: ``(n,)`` service times.
        tau: ``(n,)`` inter-arrival times: job ``k + 1`` arrives ``tau[k]`` after job ``k``
            (job 0 arrives at time 0 in an empty system).
        warmup: jobs whose statistics are left out; time integrals run over
            ``[t_warmup, t_n]`` with ``t_n = sum(tau)`` (the arrival epoch after the last job).
        policy: a name of :data:`POLICIES` or ``"window:W"``.

    Returns:
        dict with ``wait`` (``(n,)`` waiting times of all jobs, to the first start), ``time``
        (length of the window), ``idle`` and ``hol_idle`` (time-average idle servers, and idle
        servers while a job waits, over the window), ``busy`` (time-average busy servers).
    """
    alpha = np.asarray(alpha, dtype=int)
    sigma = np.asarray(sigma, dtype=float)
    tau = np.asarray(tau, dtype=float)
    n = alpha.shape[0]
    arrivals = np.concatenate([[0.0], np.cumsum(tau)])  # arrivals[n] = end of the window
    t_start, t_end = float(arrivals[warmup]), float(arrivals[n])
    rows = zip(alpha.tolist(), sigma.tolist(), arrivals[:n].tolist(), strict=True)
    jobs = [_Job(k, 0, a, w, t) for k, (a, w, t) in enumerate(rows)]
    last = idle = hol = busy = 0.0

    def observe(t: float, eng: _Engine) -> None:
        nonlocal last, idle, hol, busy
        lo = last if last > t_start else t_start
        hi = t if t < t_end else t_end
        if hi > lo:
            dt = hi - lo
            free = eng.s - eng.busy
            idle += free * dt
            busy += eng.busy * dt
            if len(eng.system) > len(eng.running):  # somebody waits
                hol += free * dt
        last = t

    engine = _Engine(policy, s)
    feed = iter(jobs)
    _drive(engine, lambda: next(feed, None), observe=observe)
    observe(max(last, t_end), engine)  # the empty system up to the end of the window
    T = t_end - t_start
    return {
        "wait": np.array([job.first_start - job.arrival for job in jobs]),
        "time": T,
        "idle": idle / T,
        "hol_idle": hol / T,
        "busy": busy / T,
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
