"""Plain-Python definitions of the size-aware, weighted and threshold MJQM policies.

A test reference: it imports nothing from ``jaxqueue``. :func:`select` takes the jobs present
(arrival order, a :class:`Job` each), the number of servers ``s`` and returns the positions of
the jobs in service (sorted, sum of needs ``<= s``). Policy names and their definitions:

``maxweight``  c_n jobs of need n present, weight w_n = c_n * floor(s / n); all jobs ordered by
    (w_n descending, n descending, arrival), served first fit from s free servers.
    (msj-simulator weighs floor(c_n s / n) and breaks ties between needs at random and by a
    job order kept between decisions: ``mjqm_events``' ``maxweight-msj``.)
``srpt-greedy``  order by remaining work ``rem * need`` (ties: arrival); serve in that order,
    stop at the first job that does not fit.
``first-fit-srpt``  the same order, first fit.
``server-filling-srpt``  the same order; its shortest prefix needing ``>= s`` servers (all jobs
    if fewer), served by need descending (ties: the order), first fit.
``server-filling-gittins``  as server-filling-srpt with the order (Gittins index descending,
    arrival); the index of a job of class c is :func:`gittins_index` of the class's duration
    law at the attained service time, divided by the need (the index of the work law
    ``need * duration`` at attained work ``need * attained``). Needs ``laws`` (per class).

These five are preemptive; a simulator decides at every arrival and departure (exact for SRPT,
whose served jobs only gain priority, and for constant indices; an age-dependent Gittins index
is compared only at those events). Non-preemptive ones
(``running`` jobs stay; the result is the running jobs plus those started now):

``msfq:L``  (integer 0 <= L < s) most servers first with quickswap. K = the largest need of
    the workload (``max_need``); one flag ``swap`` (``state``), false at the start. At every
    event: (a) if swap and free >= K: swap off; (b) unless swap: start waiting jobs first fit
    in the order (need descending, arrival) (non-preemptive MSF); (c) if not swap, no K-job
    in service, a K-job waiting and busy servers <= L: swap on (admit nothing until a K-job
    fits). In the one-or-all case (needs 1 and K = s) these are the paper's four phases with
    threshold L; L = 0 never swaps: MSF (mjqm-simulator's quick swap threshold T, on free
    servers, is L = s - T).
``balanced-splitting:R0/R1/.../Rm-1+H``  class c owns R_c servers, H helpers are shared
    (sum R_c + H <= s). Scan the waiting jobs in arrival order: a job of class c starts in
    its partition if the partition is not blocked and has room, else the partition blocks
    (for this scan) and the job starts on the helpers if they are not blocked and have room;
    a job that fits neither while its need is <= H blocks the helpers. ``Job.helper`` says
    where a running job runs (:func:`balanced_splitting_starts` gives the placements).
``easy-backfilling:estimate=F``  (F > 1) EASY backfilling planning with estimates: job work w
    is planned as :func:`estimate` (w, F) = the smallest integer power of F that is >= w; a
    running job's planned end is its start plus that. (1) start waiting jobs in arrival order
    while they fit; (2) the first one left is the head; its reservation t_r is the earliest
    planned end of running jobs at which the freed servers reach its need; (3) each later
    waiting job (arrival order) starts if it fits in the free servers and its estimate <= t_r
    - now (msj-simulator: ``<``). Jobs run their true work.

Sources: isaacg1/msj-simulator (``src/main.rs``: MaxWeight, GreedySRPT, FirstFitSRPT,
ServerFillingSRPT, EASYBackfillingEstimate); Grosof, Scully, Harchol-Balter and Scheller-Wolf
2022 (ServerFilling-SRPT / -Gittins); Gittins index: sup over D > 0 of P(X-a <= D | X > a) /
E[min(X-a, D) | X > a]; Chen, Anggraito, Olliaro, Marin, Ajmone Marsan, Berg and Grosof 2025
and NeDS-Lab/mjqm-simulator (QuickSwap, BalancedSplitting).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "NONPREEMPTIVE",
    "PREEMPTIVE",
    "Job",
    "balanced_splitting_starts",
    "estimate",
    "gittins_index",
    "gittins_index_numeric",
    "parse_policy",
    "select",
]

#: Preemptive policies: each decision from the present state alone.
PREEMPTIVE = (
    "maxweight",
    "srpt-greedy",
    "first-fit-srpt",
    "server-filling-srpt",
    "server-filling-gittins",
)
#: Non-preemptive parametrised policies (the name's prefix; the parameter follows ``:``).
NONPREEMPTIVE = ("msfq", "balanced-splitting", "easy-backfilling-estimate")


class Job(NamedTuple):
    """A job present: ``need`` servers, remaining service time ``rem`` (at rate 1),
    ``attained`` service time received so far, class ``cls``, ``running`` (in service now)."""

    need: int
    rem: float = 1.0
    attained: float = 0.0
    cls: int = 0
    running: bool = False
    helper: bool = False  # balanced-splitting: runs on the helper servers


_FORMS = "msfq:L, balanced-splitting:R0/.../Rm-1+H, easy-backfilling:estimate=F"


def parse_policy(policy: str) -> tuple[str, dict]:
    """``(kind, params)`` of a policy name; ``ValueError`` for an unknown one.

    ``msfq:L`` -> ``("msfq", {"L": L})``; ``balanced-splitting:R0/.../Rm-1+H`` ->
    ``("balanced-splitting", {"reserve": (R0, ...), "helpers": H})`` (``+H`` may be left out:
    H = 0); ``easy-backfilling:estimate=F`` -> ``("easy-backfilling-estimate", {"F": F})``.
    """
    if policy in PREEMPTIVE:
        return policy, {}
    name, _, arg = str(policy).partition(":")
    try:
        if name == "msfq" and arg:
            L = int(arg)
            if L >= 0:
                return "msfq", {"L": L}
        elif name == "balanced-splitting" and arg:
            parts, _, h = arg.partition("+")
            reserve = tuple(int(x) for x in parts.split("/"))
            helpers = int(h) if h else 0
            if min(reserve) >= 0 and helpers >= 0:
                return "balanced-splitting", {"reserve": reserve, "helpers": helpers}
        elif name == "easy-backfilling" and arg.startswith("estimate="):
            F = float(arg[len("estimate=") :])
            if F > 1.0 and math.isfinite(F):
                return "easy-backfilling-estimate", {"F": F}
    except ValueError:
        pass
    raise ValueError(f"unknown policy {policy!r}; expected one of {PREEMPTIVE} or {_FORMS}")


def _first_fit(order: Sequence[int], jobs: Sequence[Job], free: int) -> list[int]:
    chosen = []
    for i in order:
        if jobs[i].need <= free:
            chosen.append(i)
            free -= jobs[i].need
    return chosen


def _greedy(order: Sequence[int], jobs: Sequence[Job], free: int) -> list[int]:
    chosen = []
    for i in order:
        if jobs[i].need > free:
            break
        chosen.append(i)
        free -= jobs[i].need
    return chosen


def _server_filling(order: Sequence[int], jobs: Sequence[Job], s: int) -> list[int]:
    """Shortest prefix of ``order`` needing ``>= s`` servers, largest need first, first fit."""
    prefix, total = [], 0
    for i in order:
        if total >= s:
            break
        prefix.append(i)
        total += jobs[i].need
    rank = {i: r for r, i in enumerate(prefix)}
    return _first_fit(sorted(prefix, key=lambda i: (-jobs[i].need, rank[i])), jobs, s)


def _srpt_order(jobs: Sequence[Job]) -> list[int]:
    return sorted(range(len(jobs)), key=lambda i: (jobs[i].rem * jobs[i].need, i))


def select(
    policy: str,
    jobs: Sequence[Job],
    s: int,
    *,
    laws: Sequence | None = None,
    max_need: int | None = None,
    state: dict | None = None,
) -> list[int]:
    """Positions (sorted) of the jobs of ``jobs`` (arrival order) that ``policy`` serves.

    ``laws[c]`` is class c's duration law (see :func:`gittins_index`), needed by
    ``server-filling-gittins`` only. ``msfq:L`` needs ``max_need`` (K, the workload's largest
    need) and ``state`` (a dict holding ``"swap"``, read and updated in place). For the
    non-preemptive policies the ``running`` jobs are in the result.
    """
    kind, par = parse_policy(policy)
    s = int(s)
    if any(not 1 <= j.need <= s for j in jobs):
        raise ValueError(f"every need must be in [1, {s}]")
    if sum(j.need for j in jobs if j.running) > s:
        raise ValueError(f"the running jobs need more than {s} servers")
    n = len(jobs)
    if kind in NONPREEMPTIVE:
        running = [i for i in range(n) if jobs[i].running]
        if kind == "msfq":
            if max_need is None or state is None:
                raise ValueError("msfq needs max_need= and state=")
            started = _msfq_starts(jobs, s, par["L"], int(max_need), state)
        elif kind == "balanced-splitting":
            started = [i for i, _ in balanced_splitting_starts(jobs, s, **par)]
        else:
            started = _easy_estimate_starts(jobs, s, par["F"])
        return sorted(running + started)
    if kind == "maxweight":
        count: dict[int, int] = {}
        for j in jobs:
            count[j.need] = count.get(j.need, 0) + 1
        weight = {d: c * (s // d) for d, c in count.items()}
        order = sorted(range(n), key=lambda i: (-weight[jobs[i].need], -jobs[i].need, i))
        chosen = _first_fit(order, jobs, s)
    elif kind == "srpt-greedy":
        chosen = _greedy(_srpt_order(jobs), jobs, s)
    elif kind == "first-fit-srpt":
        chosen = _first_fit(_srpt_order(jobs), jobs, s)
    elif kind == "server-filling-srpt":
        chosen = _server_filling(_srpt_order(jobs), jobs, s)
    elif kind == "server-filling-gittins":
        if laws is None:
            raise ValueError("server-filling-gittins needs the class laws (laws=...)")
        index = [gittins_index(laws[j.cls], j.attained) / j.need for j in jobs]
        chosen = _server_filling(sorted(range(n), key=lambda i: (-index[i], i)), jobs, s)
    else:  # pragma: no cover - parse_policy refused it
        raise AssertionError(kind)
    assert sum(jobs[i].need for i in chosen) <= s
    return sorted(chosen)


def _msfq_starts(jobs: Sequence[Job], s: int, L: int, K: int, state: dict) -> list[int]:
    if not 0 <= L < s:
        raise ValueError(f"msfq threshold L={L} not in [0, {s - 1}]")
    busy = sum(j.need for j in jobs if j.running)
    if state.get("swap", False) and s - busy >= K:  # (a)
        state["swap"] = False
    started: list[int] = []
    if not state.get("swap", False):  # (b)
        waiting = [i for i, j in enumerate(jobs) if not j.running]
        started = _first_fit(sorted(waiting, key=lambda i: (-jobs[i].need, i)), jobs, s - busy)
        busy += sum(jobs[i].need for i in started)
        on = set(started)
        big_in = any(j.need == K and (j.running or i in on) for i, j in enumerate(jobs))
        big_waits = any(j.need == K and not j.running and i not in on for i, j in enumerate(jobs))
        if not big_in and big_waits and busy <= L:  # (c)
            state["swap"] = True
    return started


def balanced_splitting_starts(
    jobs: Sequence[Job], s: int, reserve: Sequence[int], helpers: int
) -> list[tuple[int, bool]]:
    """The waiting jobs balanced splitting starts now: ``(position, on_helpers)`` pairs."""
    if sum(reserve) + helpers > s:
        raise ValueError(f"balanced-splitting: partitions {list(reserve)} + {helpers} > {s}")
    free = list(reserve)
    free_h = helpers
    for j in jobs:
        if j.running:
            if not 0 <= j.cls < len(reserve):
                raise ValueError(f"class {j.cls} has no partition in {list(reserve)}")
            if j.helper:
                free_h -= j.need
            else:
                free[j.cls] -= j.need
    if free_h < 0 or min(free) < 0:
        raise ValueError("balanced-splitting: running jobs overfill a partition")
    blocked = [False] * len(reserve)
    blocked_h = False
    out = []
    for i, j in enumerate(jobs):
        if j.running:
            continue
        c = j.cls
        if not 0 <= c < len(reserve):
            raise ValueError(f"class {c} has no partition in {list(reserve)}")
        if not blocked[c] and j.need <= free[c]:
            free[c] -= j.need
            out.append((i, False))
            continue
        blocked[c] = True
        if not blocked_h and j.need <= free_h:
            free_h -= j.need
            out.append((i, True))
        elif j.need <= helpers:
            blocked_h = True
    return out


def estimate(w: float, F: float) -> float:
    """The smallest integer power of ``F`` that is ``>= w`` (``w > 0``, ``F > 1``)."""
    k = math.ceil(math.log(w) / math.log(F))
    while F**k < w:  # the logarithms' rounding, both ways
        k += 1
    while F ** (k - 1) >= w:
        k -= 1
    return F**k


def _easy_estimate_starts(jobs: Sequence[Job], s: int, F: float) -> list[int]:
    free = s - sum(j.need for j in jobs if j.running)
    waiting = [i for i, j in enumerate(jobs) if not j.running]
    started = []
    while waiting and jobs[waiting[0]].need <= free:  # (1)
        started.append(waiting.pop(0))
        free -= jobs[started[-1]].need
    if not waiting:
        return started
    head = jobs[waiting[0]]
    # (2) planned remaining of a running job: its estimate less the service it received.
    # Jobs started in (1) count as running (received nothing yet).
    on = set(started)
    plan = sorted(
        (estimate(j.rem + j.attained, F) - j.attained, i)
        for i, j in enumerate(jobs)
        if j.running or i in on
    )
    freed, horizon = free, None
    for left, i in plan:
        freed += jobs[i].need
        if freed >= head.need:
            horizon = left
            break
    assert horizon is not None  # the head's need is <= s
    for i in waiting[1:]:  # (3)
        if jobs[i].need <= free and estimate(jobs[i].rem, F) <= horizon:
            started.append(i)
            free -= jobs[i].need
    return started


# -- Gittins index of a duration law at age a ---------------------------------------------------
# A law is a tuple: ("exponential", mean), ("deterministic", value),
# ("hyperexponential", probs, means), ("erlang", k, mean) (k phases, total mean `mean`).


def _survival(law, x: float) -> float:
    kind = law[0]
    if kind == "exponential":
        return math.exp(-x / law[1])
    if kind == "deterministic":
        return 1.0 if x < law[1] else 0.0
    if kind == "hyperexponential":
        return sum(p * math.exp(-x / m) for p, m in zip(law[1], law[2], strict=True))
    if kind == "erlang":
        k, rate = int(law[1]), int(law[1]) / law[2]
        y = rate * x
        term, acc = 1.0, 1.0
        for i in range(1, k):
            term *= y / i
            acc += term
        return math.exp(-y) * acc
    raise ValueError(f"unknown law {law!r}")


def gittins_index(law, a: float) -> float:
    """Gittins index of a duration law at age ``a``: sup over D > 0 of
    P(X - a <= D | X > a) / E[min(X - a, D) | X > a].

    Closed forms where the law's hazard is monotone: exponential 1/mean; deterministic
    1/(value - a) (sup at D = value - a); hyperexponential (decreasing hazard: sup at D -> 0,
    the hazard at a); Erlang (increasing hazard: sup at D -> infinity, 1 / E[X - a | X > a]).
    :func:`gittins_index_numeric` computes the definition directly (the tests compare them).
    """
    kind = law[0]
    if kind == "exponential":
        return 1.0 / law[1]
    if kind == "deterministic":
        # At its size the job completes in no time: the highest index (ties at an instant).
        return 1.0 / (law[1] - a) if a < law[1] else math.inf
    if kind == "hyperexponential":
        w = [p * math.exp(-a / m) for p, m in zip(law[1], law[2], strict=True)]
        return sum(wi / m for wi, m in zip(w, law[2], strict=True)) / sum(w)
    if kind == "erlang":
        # E[(X - a)^+] = (1/r) e^{-ra} sum_{j<k} (k - j) (ra)^j / j! (Gamma tails), over S(a).
        k, rate = int(law[1]), int(law[1]) / law[2]
        y, term, tail, surv = rate * a, 1.0, 0.0, 0.0
        for j in range(k):
            if j:
                term *= y / j
            tail += (k - j) * term
            surv += term
        return rate * surv / tail
    raise ValueError(f"unknown law {law!r}")


def _mean_residual(law, a: float, upper: float | None = None, steps: int = 20000) -> float:
    """E[min(X - a, upper - a) | X > a] by Simpson's rule on the survival function."""
    if upper is None:
        scale = {
            "exponential": lambda: law[1],
            "erlang": lambda: law[2],
            "hyperexponential": lambda: max(law[2]),
            "deterministic": lambda: law[1],
        }
        upper = a + 60.0 * scale[law[0]]()  # the tail beyond is below exp(-60 / k)
    h = (upper - a) / steps
    sa = _survival(law, a)
    acc = _survival(law, a) + _survival(law, upper)
    for i in range(1, steps):
        acc += (4 if i % 2 else 2) * _survival(law, a + i * h)
    return acc * h / 3.0 / sa


def gittins_index_numeric(law, a: float, deltas: Sequence[float]) -> float:
    """The definition on a grid of D: max over ``deltas`` of the ratio (for the tests)."""
    sa = _survival(law, a)
    best = 0.0
    for d in deltas:
        done = 1.0 - _survival(law, a + d) / sa
        best = max(best, done / _mean_residual(law, a, a + d, steps=2000))
    return best
