"""Sanity tests of the size-aware / weighted / threshold policy references:
``tests/references/select_reference.py`` (the definitions) and the heapq event simulator
``tests/references/mjqm_events.py`` driven by them.

Hand-worked cases per policy (select on one state, run_trace on short traces), policies that
must coincide on special workloads, the Gittins closed forms against the definition computed
numerically, and the mean response on the k = 8 workload (needs 1, 2, 4, 8 w.p. 1/4, exponential
durations of mean 1/need) against isaacg1/msj-simulator's ``srpt-data.txt`` (1e7 jobs per point).
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from tests.references.mjqm_events import exp_work, run_trace, simulate
from tests.references.select_reference import (
    Job,
    balanced_splitting_starts,
    estimate,
    gittins_index,
    gittins_index_numeric,
    parse_policy,
    select,
)

NEW_PREEMPTIVE = [
    "maxweight",
    "srpt-greedy",
    "first-fit-srpt",
    "server-filling-srpt",
    "server-filling-gittins",
]


def _jobs(needs, rems=None, attained=None, classes=None):
    n = len(needs)
    rems = rems or [1.0] * n
    attained = attained or [0.0] * n
    classes = classes or [0] * n
    return [Job(d, r, a, c) for d, r, a, c in zip(needs, rems, attained, classes, strict=True)]


# ---------------------------------------------------------------------------------------------
# select on one state, worked by hand.
# ---------------------------------------------------------------------------------------------


def test_maxweight_select_by_hand():
    # s = 8; counts: need 1 x2 (w 16), need 2 x3 (w 12), need 4 x1 (w 2), need 8 x1 (w 1).
    # Order: 0, 4 (need 1), 1, 2, 6 (need 2), 3, 5. First fit: 0, 4, 1, 2, 6 fill 8.
    assert select("maxweight", _jobs([1, 2, 2, 4, 1, 8, 2]), 8) == [0, 1, 2, 4, 6]
    # Tie: need 1 x2 (w 16), need 2 x4 (w 16): larger need first -> the four need-2 jobs.
    assert select("maxweight", _jobs([1, 2, 2, 1, 2, 2, 8]), 8) == [1, 2, 4, 5]
    # s = 6 (4 does not divide it): need 4 x5 weighs 5 * floor(6/4) = 5 < need 1 x1 (6):
    # the need-1 job first, then the earliest need-4 job; 1 server left idle.
    assert select("maxweight", _jobs([4, 4, 4, 4, 4, 1]), 6) == [0, 5]
    # need 4 x7 weighs 7 > 6: the earliest need-4 job, then the need-1 job fits.
    assert select("maxweight", _jobs([4] * 7 + [1]), 6) == [0, 7]
    assert select("maxweight", [], 4) == []


def test_srpt_family_select_by_hand():
    # s = 4; (need, rem): remaining works 6, 1, 2, 0.8, 5 -> order 3, 1, 2, 4, 0.
    jobs = _jobs([2, 1, 4, 2, 1], [3.0, 1.0, 0.5, 0.4, 5.0])
    # greedy: 3 (2 left), 1 (1 left), 2 (need 4) does not fit: stop.
    assert select("srpt-greedy", jobs, 4) == [1, 3]
    # first fit: 3, 1, skip 2, 4 (need 1) fills the last server.
    assert select("first-fit-srpt", jobs, 4) == [1, 3, 4]
    # server filling: prefix 3, 1, 2 (needs 2 + 1 + 4 >= 4); need 4 first fills all servers.
    assert select("server-filling-srpt", jobs, 4) == [2]
    # Equal remaining works: arrival order.
    assert select("srpt-greedy", _jobs([1, 2], [2.0, 1.0]), 2) == [0]
    # Remaining work, not remaining time: need 4 x 0.3 = 1.2 > need 1 x 1.0.
    assert select("srpt-greedy", _jobs([4, 1], [0.3, 1.0]), 4) == [1]
    # Fewer servers needed in all than s: everybody.
    assert select("server-filling-srpt", _jobs([1, 2], [5.0, 1.0]), 4) == [0, 1]


def test_server_filling_gittins_select_by_hand():
    laws = [("exponential", 1.0), ("exponential", 0.25)]
    # Indices 1 / (need * mean): 0.5, 4, 1, 1 -> order 1, 2, 3, 0.
    jobs = _jobs([2, 1, 4, 1], classes=[0, 1, 1, 0])
    # s = 6: prefix 1, 2, 3 (needs 1 + 4 + 1 = 6), need 4 first, then 1 and 3 fit.
    assert select("server-filling-gittins", jobs, 6, laws=laws) == [1, 2, 3]
    # s = 4: prefix 1, 2 (needs 5 >= 4); the need-4 job takes every server.
    assert select("server-filling-gittins", jobs, 4, laws=laws) == [2]
    # Hyperexponential class: an old job (attained 1) has a low hazard (~0.1), a fresh one
    # (5.05); the fresh one goes first and takes both servers.
    hyp = [("hyperexponential", [0.5, 0.5], [0.1, 10.0])]
    jobs = _jobs([2, 2], attained=[1.0, 0.0])
    assert select("server-filling-gittins", jobs, 2, laws=hyp) == [1]
    with pytest.raises(ValueError, match="laws"):
        select("server-filling-gittins", jobs, 2)


def test_select_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown policy"):
        select("srpt", _jobs([1]), 2)
    with pytest.raises(ValueError, match="need"):
        select("maxweight", _jobs([3]), 2)


# ---------------------------------------------------------------------------------------------
# Gittins index: closed forms against the definition (sup over a grid of D).
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "law, ages, want",
    [
        (("exponential", 2.0), [0.0, 3.0], lambda a: 0.5),
        (("deterministic", 2.0), [0.0, 1.5], lambda a: 1.0 / (2.0 - a)),
        # Hyperexponential: hazard at age a, e.g. at 0: 0.5 * 10 + 0.5 * 0.1 = 5.05.
        (("hyperexponential", [0.5, 0.5], [0.1, 10.0]), [0.0], lambda a: 5.05),
        # Erlang-2 of mean 2 (rate 1 per phase): E[X] = 2 at age 0.
        (("erlang", 2, 2.0), [0.0], lambda a: 0.5),
        # ... at age 1: S(x) = (1 + x) e^-x, E[X - 1 | X > 1] = (e^-1 + 2 e^-1) / (2 e^-1) = 1.5.
        (("erlang", 2, 2.0), [1.0], lambda a: 1.0 / 1.5),
    ],
)
def test_gittins_closed_forms_by_hand(law, ages, want):
    for a in ages:
        assert gittins_index(law, a) == pytest.approx(want(a), rel=1e-6)


def test_erlang_index_is_one_over_the_mean_residual_life():
    from tests.references.select_reference import _mean_residual  # Simpson on the survival

    for law in (("erlang", 2, 2.0), ("erlang", 3, 1.0), ("erlang", 5, 0.5)):
        for a in (0.0, 0.7, 2.0):
            assert gittins_index(law, a) == pytest.approx(1.0 / _mean_residual(law, a), rel=1e-8)


@pytest.mark.parametrize(
    "law",
    [
        ("exponential", 1.5),
        ("hyperexponential", [0.3, 0.7], [0.2, 3.0]),
        ("erlang", 3, 1.0),
    ],
)
def test_gittins_closed_forms_are_the_sup_of_the_definition(law):
    deltas = [10.0**e for e in (-3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2)]
    for a in (0.0, 0.7, 2.0):
        numeric = gittins_index_numeric(law, a, deltas)
        assert numeric == pytest.approx(gittins_index(law, a), rel=2e-2)
        assert numeric <= gittins_index(law, a) * (1 + 1e-6)  # the closed form is the sup


# ---------------------------------------------------------------------------------------------
# run_trace on short traces worked by hand (s = 4).
# ---------------------------------------------------------------------------------------------


def _check(policy, trace, starts, deps, s=4, **kw):
    got_s, got_d = run_trace(policy, s, *trace, **kw)
    assert got_s == pytest.approx(starts, abs=1e-12)
    assert got_d == pytest.approx(deps, abs=1e-12)


# j0 (need 2, t 0, w 3), j1 (need 4, t 0.5, w 1), j2 (need 1, t 1, w 1).
TRACE_S = ([2, 4, 1], [0.0, 0.5, 1.0], [3.0, 1.0, 1.0])


def test_srpt_greedy_trace():
    # t0 j0 (ends 3). t0.5 works: j1 4, j0 2 x 2.5 = 5: j1 served, j0 out (rem 2.5).
    # t1 works: j2 1, j1 2, j0 5: j2 served; j1 (need 4) does not fit: stop; j1 out (rem 0.5).
    # t2 j2 leaves: j1 back (ends 2.5). t2.5: j0 back (ends 5).
    _check("srpt-greedy", TRACE_S, [0, 0.5, 1], [5, 2.5, 2])


def test_first_fit_srpt_trace():
    # As greedy to t1, where first fit goes on past j1: j0 (need 2) back (rem 2.5, ends 3.5).
    # t2 j2 leaves: works j1 2, j0 2 x 1.5 = 3: j1 back (ends 2.5), j0 out (rem 1.5).
    # t2.5 j1 leaves: j0 back, ends 4.
    _check("first-fit-srpt", TRACE_S, [0, 0.5, 1], [4, 2.5, 2])


def test_server_filling_srpt_trace():
    # As greedy to t1, where the prefix j2, j1 (needs 5 >= 4) is served need 4 first: j1 stays,
    # j2 waits. t1.5 j1 leaves: j2 and j0 (needs 3 < 4) both served: j2 ends 2.5, j0 ends 4.
    _check("server-filling-srpt", TRACE_S, [0, 0.5, 1.5], [4, 1.5, 2.5])


def test_server_filling_gittins_trace():
    # Classes 0, 1, 0 with exponential means 1, 0.25: indices 1/(need mean) 0.5, 1, 1.
    # t0 j0. t0.5 j1 (index 1) first, its prefix fills s: j0 out (rem 2.5).
    # t1 order j1, j2 (tie: arrival), j0: prefix j1 only. t1.5 j1 leaves: j2, j0 (needs 3)
    # served: j2 ends 2.5, j0 ends 4.
    laws = [("exponential", 1.0), ("exponential", 0.25)]
    _check(
        "server-filling-gittins", TRACE_S, [0, 0.5, 1.5], [4, 1.5, 2.5],
        classes=[0, 1, 0], laws=laws,
    )  # fmt: skip


def test_server_filling_gittins_uses_the_attained_service():
    # s = 2, one hyperexponential class (hazard 5.05 at age 0, ~0.1 at age 1); j0 (need 2,
    # work 3) at 0, j1 (need 2, work 3) at 1. At t1 j0's index (age 1) is far below j1's
    # (age 0): j1 runs to 4, then j0 (rem 2) to 6. SRPT keeps j0 (remaining work 4 < 6).
    trace = ([2, 2], [0.0, 1.0], [3.0, 3.0])
    laws = [("hyperexponential", [0.5, 0.5], [0.1, 10.0])]
    _check("server-filling-gittins", trace, [0, 1], [6, 4], s=2, laws=laws)
    _check("server-filling-srpt", trace, [0, 3], [3, 6], s=2)


def test_maxweight_trace():
    # needs 2, 2, 1, 1, 1 at 0, 0.5, 1, 1.1, 1.2; all works 2.
    # t0 j0 (ends 2). t0.5 j1 (ends 2.5).
    # t1 j2: w(2) = 2 x 2 = 4 = w(1) = 1 x 4, tie -> need 2 first: j0, j1 fill; j2 waits.
    # t1.1 j3: w(1) = 8 > 4: j2, j3, j0 (ends 2); j1 out (rem 1.4).
    # t1.2 j4: w(1) = 12: j2, j3, j4 (ends 3.2); j0 (need 2) no longer fits: out (rem 0.8).
    # t3.1 j2 leaves: w(1) = 8 > w(2) = 4: j3, j4, then j0 back (ends 3.9).
    # t3.1 j3 leaves: w(1) = 4 = w(2) tie: j0, j1 (back, ends 4.5); j4 out (rem 0.1).
    # t3.9 j0 leaves: w(1) = 4 > w(2) = 2: j4 back (ends 4.0), j1 stays. t4.5 j1 leaves.
    trace = ([2, 2, 1, 1, 1], [0.0, 0.5, 1.0, 1.1, 1.2], [2.0] * 5)
    _check("maxweight", trace, [0, 0.5, 1.1, 1.1, 1.2], [3.9, 4.5, 3.1, 3.1, 4.0])


# ---------------------------------------------------------------------------------------------
# Non-preemptive: msfq:L, balanced-splitting, easy-backfilling:estimate=F.
# ---------------------------------------------------------------------------------------------


def test_parse_policy_forms():
    assert parse_policy("msfq:2") == ("msfq", {"L": 2})
    assert parse_policy("balanced-splitting:2/2/4+1") == (
        "balanced-splitting", {"reserve": (2, 2, 4), "helpers": 1},
    )  # fmt: skip
    assert parse_policy("balanced-splitting:3/5") == (
        "balanced-splitting", {"reserve": (3, 5), "helpers": 0},
    )  # fmt: skip
    assert parse_policy("easy-backfilling:estimate=2") == ("easy-backfilling-estimate", {"F": 2.0})
    bad = ["msfq", "msfq:-1", "msfq:x", "balanced-splitting", "balanced-splitting:1/a+2",
           "balanced-splitting:2+-1", "easy-backfilling:estimate=1", "easy-backfilling:2",
           "easy-backfilling:estimate=inf", "srpt"]  # fmt: skip
    for name in bad:
        with pytest.raises(ValueError, match="unknown policy"):
            parse_policy(name)
        with pytest.raises(ValueError, match="unknown policy"):
            run_trace(name, 4, [1], [0.0], [1.0])


def test_estimate_rounds_up_to_a_power():
    assert estimate(3.0, 2.0) == 4.0
    assert estimate(4.0, 2.0) == 4.0  # a power is its own estimate
    assert estimate(0.3, 2.0) == 0.5
    assert estimate(1.0, 10.0) == 1.0
    assert estimate(1.01, 10.0) == 10.0
    assert estimate(1e-3, 10.0) == pytest.approx(1e-3)


def _run(*flags):
    return [Job(d, running=r) for d, r in flags]


def test_msfq_select_by_hand():
    # s = 4, K = 4: one 1-server job running, a 4-server job and a 1-server job waiting.
    jobs = _run((1, True), (4, False), (1, False))
    st = {"swap": False}
    # L = 1: (b) the 4-job does not fit, the 1-job starts (busy 2); (c) busy 2 > 1: no swap.
    assert select("msfq:1", jobs, 4, max_need=4, state=st) == [0, 2] and not st["swap"]
    # L = 2: the same start, then busy 2 <= 2 with the 4-job waiting: swap.
    assert select("msfq:2", jobs, 4, max_need=4, state=st) == [0, 2] and st["swap"]
    # Swap on, free 3 < K: nothing starts, swap stays.
    assert select("msfq:2", jobs, 4, max_need=4, state=st) == [0] and st["swap"]
    # Swap on, all free: swap off, then MSF starts the 4-job first.
    assert select("msfq:2", _run((4, False), (1, False)), 4, max_need=4, state=st) == [0]
    assert not st["swap"]
    # L = 0 never swaps (busy 0 means the K-job fits).
    st = {"swap": False}
    assert select("msfq:0", jobs, 4, max_need=4, state=st) == [0, 2] and not st["swap"]
    with pytest.raises(ValueError, match="max_need"):
        select("msfq:1", jobs, 4)
    with pytest.raises(ValueError, match="threshold"):
        select("msfq:4", jobs, 4, max_need=4, state=st)


# One-or-all, s = 4: three 1-jobs at 0 (works 5, 1, 2), a 4-job at 0.5 (work 1), 1-jobs at 1.5
# and 2.5 (work 1).
TRACE_Q = ([1, 1, 1, 4, 1, 1], [0.0, 0.0, 0.0, 0.5, 1.5, 2.5], [5.0, 1.0, 2.0, 1.0, 1.0, 1.0])


def test_msfq_traces():
    # L = 0 (MSF): 1-jobs keep starting while the 4-job waits. j4 starts 1.5 (ends 2.5), j5 at
    # 2.5 (after j4's completion at the same instant), ends 3.5. The 4-job starts when j0
    # leaves at 5.
    _check("msfq:0", TRACE_Q, [0, 0, 0, 5, 1.5, 2.5], [5, 1, 2, 6, 2.5, 3.5])
    # L = 1: j4 starts at 1.5 (busy 3 > 1). t2 j2 leaves: busy 2 > 1. t2.5 j4 leaves: busy 1
    # <= 1 with the 4-job waiting: swap; j5 (same instant) waits. t5 j0 leaves: 4 free, swap
    # off, the 4-job starts (ends 6), then j5 (ends 7).
    _check("msfq:1", TRACE_Q, [0, 0, 0, 5, 1.5, 6], [5, 1, 2, 6, 2.5, 7])
    # L = 2: t1 j1 leaves: busy 2 <= 2: swap; j4 and j5 wait until the 4-job is done.
    _check("msfq:2", TRACE_Q, [0, 0, 0, 5, 6, 6], [5, 1, 2, 6, 7, 7])


def test_balanced_splitting_select_by_hand():
    # s = 6, class 0 (need 1) owns 2 servers, class 1 (need 2) owns 2, 2 helpers.
    jobs = [Job(1, cls=0), Job(1, cls=0), Job(1, cls=0), Job(2, cls=1), Job(2, cls=1),
            Job(1, cls=0), Job(2, cls=1)]  # fmt: skip
    # j0, j1 fill partition 0; j2 goes to the helpers (1 left); j3 fills partition 1; j4 fits
    # neither and (need 2 <= 2 helpers) blocks the helpers: j5, j6 wait.
    got = balanced_splitting_starts(jobs, 6, (2, 2), 2)
    assert got == [(0, False), (1, False), (2, True), (3, False)]
    assert select("balanced-splitting:2/2+2", jobs, 6) == [0, 1, 2, 3]
    # A running helper job of class 1 takes the helpers; partitions are free.
    jobs = [Job(2, cls=1, running=True, helper=True), Job(1, cls=0), Job(2, cls=1)]
    assert select("balanced-splitting:2/2+2", jobs, 6) == [0, 1, 2]
    # FCFS inside a partition: class 0 owns 3; a need-2 job that does not fit there blocks the
    # partition (and goes to the helpers), so the need-1 job behind it waits, though 1 is free.
    jobs = [Job(2, running=True), Job(2), Job(1)]
    assert balanced_splitting_starts(jobs, 5, (3,), 2) == [(1, True)]
    with pytest.raises(ValueError, match="> 4"):
        select("balanced-splitting:2/2+1", jobs, 4)


def test_balanced_splitting_trace():
    # s = 3, partitions 1/1, 1 helper; j0, j1, j2 of class 0 at 0, 0.5, 1 (work 2), j3 of
    # class 1 at 1.5 (work 1). j0 partition 0 (ends 2); j1 the helper (ends 2.5); j2 waits;
    # j3 partition 1 (ends 2.5); t2 j0 leaves: j2 partition 0 (ends 4).
    trace = ([1, 1, 1, 1], [0.0, 0.5, 1.0, 1.5], [2.0, 2.0, 2.0, 1.0])
    _check("balanced-splitting:1/1+1", trace, [0, 0.5, 2, 1.5], [2, 2.5, 4, 2.5], s=3,
           classes=[0, 0, 0, 1])  # fmt: skip
    with pytest.raises(ValueError, match="fits nowhere"):
        run_trace("balanced-splitting:1/1+1", 3, [2], [0.0], [1.0])


def test_easy_backfilling_estimate_select_by_hand():
    # s = 4: running need 2 with work 3 (attained 1, so planned remaining 4 - 1 = 3); head
    # need 4; later jobs need 2 with works 2.5 (estimate 4 > 3: no) and 1.5 (2 <= 3: yes).
    jobs = [Job(2, 2.0, 1.0, running=True), Job(4, 1.0), Job(2, 2.5), Job(2, 1.5)]
    assert select("easy-backfilling:estimate=2", jobs, 4) == [0, 3]
    # Jobs started in step (1) count in the reservation: nothing running, need 2 (work 3,
    # planned 4) starts, head need 4 waits until 4; work 1.5 backfills.
    jobs = [Job(2, 3.0), Job(4, 1.0), Job(2, 1.5)]
    assert select("easy-backfilling:estimate=2", jobs, 4) == [0, 2]
    # F = 10: both plan 10; ending no later than the reservation is allowed.
    assert select("easy-backfilling:estimate=10", jobs, 4) == [0, 2]
    jobs = [Job(2, 3.0), Job(4, 1.0), Job(2, 11.0)]
    assert select("easy-backfilling:estimate=10", jobs, 4) == [0]  # estimate 100 > 10


def test_easy_backfilling_estimate_trace():
    # s = 4. j0 (need 2, t 0, work 3: planned end 4); j1 (4, t 0.1, 1) waits, reservation 4;
    # j2 (2, t 0.2, 2.5: estimate 4 > 3.8) waits; j3 (2, t 0.3, 1.5: estimate 2 <= 3.7)
    # backfills, ends 1.8. t3 j0 leaves: j1 starts (ends 4); t4: j2 (ends 6.5).
    trace = ([2, 4, 2, 2], [0.0, 0.1, 0.2, 0.3], [3.0, 1.0, 2.5, 1.5])
    _check("easy-backfilling:estimate=2", trace, [0, 3, 4, 0.3], [3, 4, 6.5, 1.8])
    # With true sizes j2 (2.5 <= 3 - 0.2) backfills at 0.2 instead and j3 waits for j1.
    _check("easy-backfilling", trace, [0, 3, 0.2, 4], [3, 4, 2.7, 5.5])


# ---------------------------------------------------------------------------------------------
# Policies that must coincide.
# ---------------------------------------------------------------------------------------------


def _random_trace(seed, n, s, needs, probs, means, load):
    rng = random.Random(seed)
    lam = load * s / sum(p * d * m for p, d, m in zip(probs, needs, means, strict=True))
    t, out = 0.0, ([], [], [], [])
    for _ in range(n):
        t += rng.expovariate(lam)
        k = rng.choices(range(len(needs)), weights=probs)[0]
        for lst, x in zip(out, (needs[k], t, rng.expovariate(1.0 / means[k]), k), strict=True):
            lst.append(x)
    return out


def _same(a, b):
    for x, y in zip(a, b, strict=True):
        assert x == pytest.approx(y, abs=1e-9)


def test_unit_needs_all_srpt_variants_are_srpt_k():
    # All needs 1: greedy, first fit and server filling all serve the s smallest remaining.
    needs, arr, works, _ = _random_trace(1, 300, 3, [1], [1.0], [1.0], 0.9)
    base = run_trace("srpt-greedy", 3, needs, arr, works)
    for p in ("first-fit-srpt", "server-filling-srpt"):
        got = run_trace(p, 3, needs, arr, works)
        _same(got[0], base[0])
        _same(got[1], base[1])
    # SRPT really reorders: the served set differs from arrival-order preemptive first fit.
    assert run_trace("preemptive-first-fit", 3, needs, arr, works)[1] != base[1]


def test_one_need_maxweight_is_arrival_order():
    needs, arr, works, _ = _random_trace(2, 300, 6, [2], [1.0], [1.0], 0.9)
    _same(run_trace("maxweight", 6, needs, arr, works)[1],
          run_trace("preemptive-first-fit", 6, needs, arr, works)[1])  # fmt: skip


def test_gittins_with_deterministic_laws_is_server_filling_srpt():
    # Deterministic duration per class: the index 1 / (need x remaining) orders as SRPT.
    rng = random.Random(3)
    needs_c, dur_c = [1, 2, 4], [1.3, 0.7, 0.4]
    t, needs, arr, works, cls = 0.0, [], [], [], []
    for _ in range(300):
        t += rng.expovariate(4 * 0.85 / (1.3 + 1.4 + 1.6) * 3)
        k = rng.randrange(3)
        needs.append(needs_c[k]), arr.append(t), works.append(dur_c[k]), cls.append(k)
    laws = [("deterministic", d) for d in dur_c]
    got = run_trace("server-filling-gittins", 4, needs, arr, works, classes=cls, laws=laws)
    want = run_trace("server-filling-srpt", 4, needs, arr, works)
    _same(got[1], want[1])


def test_special_cases_of_the_nonpreemptive_policies_are_fcfs_or_easy():
    trace = _random_trace(5, 300, 6, [1, 2, 3, 6], [0.4, 0.3, 0.2, 0.1], [1, 1, 1, 1], 0.7)
    needs, arr, works, cls = trace
    fcfs = run_trace("fcfs", 6, needs, arr, works)
    # All helpers, no partitions: one FCFS queue. One class owning every server: the same.
    for p, c in (("balanced-splitting:0/0/0/0+6", cls), ("balanced-splitting:6", None)):
        got = run_trace(p, 6, needs, arr, works, classes=c)
        _same(got[0], fcfs[0])
    # Works that are powers of F: the estimates are exact: EASY with true sizes.
    rng = random.Random(6)
    pw = [2.0 ** rng.randrange(-2, 3) for _ in works]
    _same(run_trace("easy-backfilling:estimate=2", 6, needs, arr, pw)[0],
          run_trace("easy-backfilling", 6, needs, arr, pw)[0])  # fmt: skip
    # msfq:0 is non-preemptive MSF: with one need everything is FCFS.
    one = [2] * len(needs)
    _same(run_trace("msfq:0", 6, one, arr, works)[0], run_trace("fcfs", 6, one, arr, works)[0])


def _stepping_trace(policy, s, needs, arrivals, works, index):
    """msj-simulator's loop, written again: decide, advance every served job's remaining time to
    the next arrival or completion, repeat. Decisions restated inline (no select_reference);
    ``index(j, attained)`` is the Gittins index of job j's duration law at that age."""
    n = len(needs)
    rem, first, dep = list(map(float, works)), [None] * n, [None] * n
    present, nxt, now = [], 0, 0.0

    def decide():
        if policy == "maxweight":
            c = {d: sum(needs[j] == d for j in present) for d in set(needs[j] for j in present)}
            order = sorted(present, key=lambda j: (-c[needs[j]] * (s // needs[j]), -needs[j], j))
        elif policy == "server-filling-gittins":
            order = sorted(present, key=lambda j: (-index(j, works[j] - rem[j]) / needs[j], j))
        else:
            order = sorted(present, key=lambda j: (rem[j] * needs[j], j))
        if policy.startswith("server-filling"):
            k, tot = 0, 0
            while k < len(order) and tot < s:
                tot += needs[order[k]]
                k += 1
            order = sorted(order[:k], key=lambda j: -needs[j])  # stable: keeps the order
        out, free = [], s
        for j in order:
            if needs[j] <= free:
                out.append(j)
                free -= needs[j]
            elif policy == "srpt-greedy":
                break
        return out

    while nxt < n or present:
        served = decide()
        for j in served:
            if first[j] is None:
                first[j] = now
        ta = arrivals[nxt] if nxt < n else math.inf
        tc = now + min((rem[j] for j in served), default=math.inf)
        t = min(ta, tc)
        for j in served:
            rem[j] -= t - now
        now = t
        if tc <= ta:
            for j in [j for j in served if rem[j] <= 1e-12]:
                present.remove(j)
                dep[j] = now
        else:
            present.append(nxt)
            nxt += 1
    return first, dep


@pytest.mark.parametrize("policy", NEW_PREEMPTIVE)
def test_new_preemptive_policies_equal_a_time_stepping_restatement(policy):
    means = [1.0, 0.5, 0.25, 0.125]
    laws = [("exponential", m) for m in means]
    for seed in range(2):
        needs, arr, works, cls = _random_trace(10 + seed, 300, 8, [1, 2, 4, 8], [0.25] * 4,
                                               means, 0.85)  # fmt: skip
        got = run_trace(policy, 8, needs, arr, works, classes=cls, laws=laws)
        rate = [1 / means[k] for k in cls]
        want = _stepping_trace(policy, 8, needs, arr, works, lambda j, a, r=rate: r[j])
        _same(got[0], want[0])
        _same(got[1], want[1])


def test_gittins_with_hyperexponential_laws_equals_the_time_stepping_restatement():
    # Age-dependent indices: the hazard rate of the posterior mixture at the attained age.
    probs, means = [0.8, 0.2], [[0.2, 4.0], [0.1, 1.0]]
    laws = [("hyperexponential", probs, m) for m in means]

    def hazard(c, a):
        w = [p * math.exp(-a / m) for p, m in zip(probs, means[c], strict=True)]
        return sum(wi / m for wi, m in zip(w, means[c], strict=True)) / sum(w)

    rng = random.Random(12)
    needs, arr, works, cls, t = [], [], [], [], 0.0
    for _ in range(300):
        t += rng.expovariate(1.2)
        c = rng.randrange(2)
        m = means[c][0] if rng.random() < probs[0] else means[c][1]
        needs.append([1, 2][c]), arr.append(t), works.append(rng.expovariate(1 / m)), cls.append(c)
    got = run_trace("server-filling-gittins", 4, needs, arr, works, classes=cls, laws=laws)
    want = _stepping_trace("server-filling-gittins", 4, needs, arr, works,
                           lambda j, a: hazard(cls[j], a))  # fmt: skip
    _same(got[0], want[0])
    _same(got[1], want[1])
    # The ages matter: with each class's age-0 index held fixed the schedule differs.
    fixed = _stepping_trace("server-filling-gittins", 4, needs, arr, works,
                            lambda j, a: hazard(cls[j], 0.0))  # fmt: skip
    assert max(abs(x - y) for x, y in zip(fixed[1], want[1], strict=True)) > 1e-3


def _srpt_mm1_response(lam):
    """Schrage and Miller's M/G/1 SRPT mean response time for exponential(1) sizes:
    E[T] = int f(x) [lam (m2(x) + x^2 (1 - F(x))) / (2 (1 - rho(x))^2) + int_0^x dt / (1 -
    rho(t))] dx, rho(x) = lam int_0^x t dF(t), m2(x) = int_0^x t^2 dF(t) (trapezoid rule)."""
    h, top = 2e-3, 30.0
    total, inner, prev = 0.0, 0.0, None
    for i in range(int(top / h) + 1):
        x = i * h
        e = math.exp(-x)
        rho_x = lam * (1.0 - e * (1.0 + x))
        if i:
            inner += 0.5 * h * (1.0 / (1.0 - rho_x) + 1.0 / (1.0 - prev))
        prev = rho_x
        m2 = 2.0 - e * (x * x + 2.0 * x + 2.0)
        g = e * (lam * (m2 + x * x * e) / (2.0 * (1.0 - rho_x) ** 2) + inner)
        total += g * (0.5 * h if i in (0, int(top / h)) else h)
    return total


def test_single_server_srpt_matches_schrage_miller():
    # s = 1, every need 1: srpt-greedy is the M/M/1 under SRPT (rho 0.7: E[T] = 1.8746 against
    # 1 / (1 - rho) = 3.33 under FCFS).
    want = _srpt_mm1_response(0.7)
    means = []
    for seed in range(5):
        r = simulate("srpt-greedy", 1, [1], [1.0], exp_work([1.0]), 0.7, 5000, 500, seed)
        means.append(r["response_mean"])
    m = statistics.fmean(means)
    half = 4.604 * statistics.stdev(means) / math.sqrt(5)  # t 0.995, 4 degrees of freedom
    assert abs(m - want) <= half + 0.03 * want, (m, half, want)


def test_new_policies_differ_and_conserve_work():
    trace = _random_trace(4, 400, 8, [1, 2, 4, 8], [0.25] * 4, [1, 0.5, 0.25, 0.125], 0.8)
    laws = [("exponential", m) for m in (1, 0.5, 0.25, 0.125)]
    deps = {}
    for p in NEW_PREEMPTIVE:
        start, dep = run_trace(p, 8, *trace[:3], classes=trace[3], laws=laws)
        assert all(d - a >= w - 1e-9 for d, a, w in zip(dep, trace[1], trace[2], strict=True))
        assert all(a <= st <= d for a, st, d in zip(trace[1], start, dep, strict=True))
        deps[p] = tuple(dep)
    assert len(set(deps.values())) == len(deps)


# ---------------------------------------------------------------------------------------------
# Published figures: isaacg1/msj-simulator srpt-data.txt, k = 8, needs 1, 2, 4, 8 (1/4 each),
# exponential durations of mean 1/need, rho = lam E[need x duration] / k = lam / 8.
# ---------------------------------------------------------------------------------------------

PUBLISHED = {  # (msj-simulator's policy, rho): mean response time, one run of 1e7 jobs
    ("ServerFilling", 0.6): 0.6605309690959078,
    ("MaxWeight", 0.6): 1.6060470108718568,
    ("ServerFillingSRPT", 0.6): 0.6226818653510711,
    ("ServerFilling", 0.9): 1.5837887789880074,
    ("MaxWeight", 0.9): 3.6349273490121106,
    ("ServerFillingSRPT", 0.9): 0.9757400204048676,
    ("GreedySRPT", 0.4): 0.7260751806810569,
    ("GreedySRPT", 0.5): 1.119144156069345,
    ("FirstFitSRPT", 0.4): 0.6438887296799134,
    ("FirstFitSRPT", 0.5): 0.770848033988072,
}
# Ours. msj-simulator breaks MaxWeight's ties between needs of equal weight at random (a hash
# map's order) and by a job order kept between decisions; maxweight-msj does the same (the
# deterministic maxweight, larger need first, runs about 3% lower on this workload).
OURS = {
    "ServerFilling": "server-filling",
    "MaxWeight": "maxweight-msj",
    "ServerFillingSRPT": "server-filling-srpt",
    "GreedySRPT": "srpt-greedy",
    "FirstFitSRPT": "first-fit-srpt",
}
# Student t 0.995 quantiles (two-sided 99%) for the replication counts used.
_T995 = {5: 4.032, 10: 3.169}  # degrees of freedom: quantile


def _k8_interval(policy, rho, reps, n_jobs):
    means = []
    for seed in range(reps):
        r = simulate(policy, 8, [1, 2, 4, 8], [0.25] * 4, exp_work([1.0, 0.5, 0.25, 0.125]),
                     8.0 * rho, n_jobs, n_jobs // 10, 1000 + seed)  # fmt: skip
        means.append(r["response_mean"])
    m = statistics.fmean(means)
    half = _T995[reps - 1] * statistics.stdev(means) / math.sqrt(reps)
    return m, half


@pytest.mark.parametrize("theirs", ["ServerFilling", "MaxWeight", "ServerFillingSRPT"])
def test_k8_published_means_short(theirs):
    # Loose: 6 x 3000 jobs at rho 0.6, the 99% interval of the mean plus 3% of slack.
    m, half = _k8_interval(OURS[theirs], 0.6, 6, 3000)
    want = PUBLISHED[(theirs, 0.6)]
    assert abs(m - want) <= half + 0.03 * want, (m, half, want)


@pytest.mark.slow
@pytest.mark.parametrize("theirs, rho", list(PUBLISHED))
def test_k8_published_means_long(theirs, rho):
    # 11 x 40000 jobs: the published figure lies in the 99% interval of the mean.
    m, half = _k8_interval(OURS[theirs], rho, 11, 40000)
    want = PUBLISHED[(theirs, rho)]
    assert abs(m - want) <= half, (m, half, want)


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.6, 0.9])
def test_k8_deterministic_maxweight_near_the_published_figure(rho):
    # Only the ties differ from maxweight-msj: within 5% (measured: 1.559 +- 0.019 at 0.6,
    # 3.518 +- 0.100 at 0.9, against 1.606 and 3.635).
    m, half = _k8_interval("maxweight", rho, 11, 40000)
    want = PUBLISHED[("MaxWeight", rho)]
    assert abs(m - want) <= half + 0.05 * want, (m, half, want)
