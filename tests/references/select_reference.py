"""Plain-Python definitions of the size-aware, weighted and threshold MJQM policies.

A test reference: it imports nothing from ``jaxqueue``. :func:`select` takes the jobs present
(arrival order, a :class:`Job` each), the number of servers ``s`` and returns the positions of
the jobs in service (sorted, sum of needs ``<= s``). Policy names and their definitions:

``maxweight``  c_n jobs of need n present, weight w_n = c_n * floor(s / n); all jobs ordered by
    (w_n descending, n descending, arrival), served first fit from s free servers.
``srpt-greedy``  order by remaining work ``rem * need`` (ties: arrival); serve in that order,
    stop at the first job that does not fit.
``first-fit-srpt``  the same order, first fit.
``server-filling-srpt``  the same order; its shortest prefix needing ``>= s`` servers (all jobs
    if fewer), served by need descending (ties: the order), first fit.
``server-filling-gittins``  as server-filling-srpt with the order (Gittins index descending,
    arrival); the index of a job of class c is :func:`gittins_index` of the class's duration
    law at the attained service time, divided by the need (the index of the work law
    ``need * duration`` at attained work ``need * attained``). Needs ``laws`` (per class).

Preemptive: each decision uses only the present state. Sources: isaacg1/msj-simulator
(``src/main.rs``: MaxWeight, GreedySRPT, FirstFitSRPT, ServerFillingSRPT); Grosof, Scully,
Harchol-Balter and Scheller-Wolf 2022 (ServerFilling-SRPT / -Gittins); Gittins index as in
Scully and Harchol-Balter's M/G/1 survey: sup over D > 0 of P(X-a <= D | X > a) / E[min(X-a, D)
| X > a].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["POLICIES", "Job", "gittins_index", "parse_policy", "select"]

#: The policy names :func:`select` knows.
POLICIES = (
    "maxweight",
    "srpt-greedy",
    "first-fit-srpt",
    "server-filling-srpt",
    "server-filling-gittins",
)
#: Every one of them decides from the present state alone, preempting freely.
PREEMPTIVE = POLICIES


class Job(NamedTuple):
    """A job present: ``need`` servers, remaining service time ``rem`` (at rate 1),
    ``attained`` service time received so far, class ``cls``, ``running`` (in service now)."""

    need: int
    rem: float = 1.0
    attained: float = 0.0
    cls: int = 0
    running: bool = False


def parse_policy(policy: str) -> tuple[str, dict]:
    """``(kind, params)`` of a policy name; ``ValueError`` for an unknown one."""
    if policy in POLICIES:
        return policy, {}
    raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")


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


def select(policy: str, jobs: Sequence[Job], s: int, *, laws: Sequence | None = None) -> list[int]:
    """Positions (sorted) of the jobs of ``jobs`` (arrival order) that ``policy`` serves.

    ``laws[c]`` is class c's duration law (see :func:`gittins_index`), needed by
    ``server-filling-gittins`` only.
    """
    kind, _ = parse_policy(policy)
    s = int(s)
    if any(not 1 <= j.need <= s for j in jobs):
        raise ValueError(f"every need must be in [1, {s}]")
    n = len(jobs)
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
        return 1.0 / _mean_residual(law, a)
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
