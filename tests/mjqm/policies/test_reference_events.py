"""Sanity tests of the plain-Python policy reference ``tests/references/mjqm_events.py``.

Hand-worked traces per policy, a literal (slow, O(n^2)) re-statement of every policy compared
on random traces, window:1 = fcfs and window:large = first-fit, M/M/1 and M/M/c (Erlang-C)
statistics, Little's law, and the all-servers case where every policy is fcfs.
"""

from __future__ import annotations

import math
import random

import pytest

from tests.references.mjqm_events import (
    det_work,
    exp_work,
    hyperexp_work,
    run_trace,
    simulate,
)

ALL_POLICIES = [
    "fcfs",
    "first-fit",
    "window:1",
    "window:2",
    "window:3",
    "preemptive-first-fit",
    "msf",
    "least-servers-first",
    "server-filling",
    "easy-backfilling",
]


def _close(got, want, tol=1e-12):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=tol), (got, want)


def _check(policy, s, trace, starts, deps):
    got_s, got_d = run_trace(policy, s, *trace)
    _close(got_s, starts)
    _close(got_d, deps)


# ---------------------------------------------------------------------------------------------
# Hand-worked traces. A trace is (needs, arrivals, works); s = 4 throughout.
# ---------------------------------------------------------------------------------------------

# TRACE_W: j0 (need 2, t=0, w=10), j1 (4, t=1, w=1), j2 (1, t=2, w=5), j3 (2, t=3, w=1),
#          j4 (1, t=4, w=1).
TRACE_W = ([2, 4, 1, 2, 1], [0.0, 1.0, 2.0, 3.0, 4.0], [10.0, 1.0, 5.0, 1.0, 1.0])


def test_fcfs_trace_w():
    # t0 j0 starts (ends 10, 2 free). j1 (need 4) waits and blocks j2, j3, j4.
    # t10 j0 leaves: j1 starts (ends 11). t11: j2 (ends 16), j3 (ends 12), j4 (ends 12) start.
    _check("fcfs", 4, TRACE_W, [0, 10, 11, 11, 11], [10, 11, 16, 12, 12])
    _check("window:1", 4, TRACE_W, [0, 10, 11, 11, 11], [10, 11, 16, 12, 12])


def test_window2_trace_w():
    # t0 j0 starts (2 free). t1 j1 waits. t2 window [j1, j2]: j2 fits -> starts, ends 7 (1 free).
    # t3 j3 (need 2) waits. t4 waiting [j1, j3, j4], window [j1, j3]: nothing fits; j4 waits
    #   (first-fit would start j4 here).
    # t7 j2 leaves (2 free): window [j1, j3]: j3 starts, ends 8 (0 free).
    # t8 j3 leaves (2 free): window [j1, j4]: j4 starts, ends 9.
    # t10 j0 leaves (4 free after j4 left at 9): j1 starts, ends 11.
    _check("window:2", 4, TRACE_W, [0, 10, 2, 7, 8], [10, 11, 7, 8, 9])


def test_first_fit_trace_w():
    # As window:2 up to t4, where j4 (need 1) fits in the 1 free server: starts, ends 5.
    # t5: 1 free, j1 (4) and j3 (2) do not fit. t7 j2 leaves (2 free): j3 starts, ends 8.
    # t8: j1 does not fit. t10 j0 leaves: j1 starts, ends 11.
    want = ([0, 10, 2, 7, 4], [10, 11, 7, 8, 5])
    _check("first-fit", 4, TRACE_W, *want)
    _check("window:3", 4, TRACE_W, *want)  # j4 is within the first 3 waiting jobs at t4
    _check("window:1000", 4, TRACE_W, *want)


# TRACE_P: j0 (need 2, t=0, w=5), j1 (3, t=1, w=1.5), j2 (1, t=2, w=10), j3 (1, t=3, w=10).
TRACE_P = ([2, 3, 1, 1], [0.0, 1.0, 2.0, 3.0], [5.0, 1.5, 10.0, 10.0])


def test_fcfs_and_first_fit_trace_p():
    # fcfs: j0 [0, 5]; j1 (3) blocks j2, j3. t5: j1 starts (ends 6.5, 1 free), j2 starts (ends
    # 15, 0 free). t6.5: j1 leaves, j3 starts (ends 16.5).
    _check("fcfs", 4, TRACE_P, [0, 5, 5, 6.5], [5, 6.5, 15, 16.5])
    # first-fit: t2 j2 starts (ends 12), t3 j3 starts (ends 13); t5 j0 leaves: 2 free < 3.
    # t12 j2 leaves: 3 free, j1 starts (ends 13.5). t13 j3 leaves.
    _check("first-fit", 4, TRACE_P, [0, 12, 2, 3], [5, 13.5, 12, 13])


def test_easy_backfilling_trace_p_no_backfill():
    # t1: head j1, reservation t_r = 5 (j0 ends). t2: j2 fits but 10 > 5 - 2; t3: j3, 10 > 2.
    # So nothing is backfilled and the result is fcfs's.
    _check("easy-backfilling", 4, TRACE_P, [0, 5, 5, 6.5], [5, 6.5, 15, 16.5])


def test_preemptive_first_fit_trace_p():
    # t0 j0 (ends 5). t1 j1 (3) does not fit in 2. t2 j2 served (ends 12). t3 j3 served (ends 13).
    # t5 j0 leaves; from scratch in arrival order: j1 (3 of 4) served, ends 6.5; j2 (1 of 1)
    #   served; j3 does not fit: preempted with 13 - 5 = 8 left.
    # t6.5 j1 leaves: j2, j3 served; j3 resumes, ends 6.5 + 8 = 14.5. t12 j2 leaves.
    _check("preemptive-first-fit", 4, TRACE_P, [0, 5, 2, 3], [5, 6.5, 12, 14.5])


def test_msf_trace_p():
    # t0 j0 (ends 5). t1 order j1 (3), j0 (2): j1 served (ends 2.5, 1 free), j0 preempted, 4 left.
    # t2 order j1, j0, j2: j1; j0 does not fit; j2 (1) served, ends 12.
    # t2.5 j1 leaves: j0 (resumes, ends 6.5), j2 served; 1 free.
    # t3 order j0, j2, j3: all served, j3 ends 13. t6.5 j0 leaves, t12 j2, t13 j3.
    _check("msf", 4, TRACE_P, [0, 1, 2, 3], [6.5, 2.5, 12, 13])


def test_least_servers_first_trace():
    # s = 4; j0 (need 3, t=0, w=5), j1 (2, t=1, w=2), j2 (1, t=2, w=1).
    # t1 order j1 (2), j0 (3): j1 served (ends 3), j0 (3 > 2 free) preempted with 4 left.
    # t2 order j2, j1, j0: j2 served (ends 3); j0 still does not fit.
    # t3 j1 and j2 leave (ties in arrival order); j0 resumes at 3, ends 7.
    # (msf on the same jobs keeps j0: it ends 5, j1 waits until then.)
    trace = ([3, 2, 1], [0.0, 1.0, 2.0], [5.0, 2.0, 1.0])
    _check("least-servers-first", 4, trace, [0, 1, 2], [7, 3, 3])
    _check("msf", 4, trace, [0, 5, 2], [5, 7, 3])


def test_server_filling_trace_p():
    # t0 jobs [j0] (total 2 < 4): j0 served, ends 5.
    # t1 prefix [j0, j1] (2 + 3 >= 4); by need: j1 served (ends 2.5), j0 (2 > 1 free) preempted,
    #   4 left.
    # t2 prefix still [j0, j1]: j2 is outside the prefix and waits although a server is free.
    # t2.5 j1 leaves: jobs [j0, j2] (total 3 < 4): both served; j0 ends 6.5, j2 ends 12.5.
    # t3 prefix [j0, j2, j3] (total 4): all served, j3 ends 13.
    _check("server-filling", 4, TRACE_P, [0, 1, 2.5, 3], [6.5, 2.5, 12.5, 13])


# TRACE_E: j0 (need 2, t=0, w=10), j1 (4, t=1, w=1), j2 (1, t=2, w=9), j3 (2, t=3, w=5),
#          j4 (1, t=4, w=1).
TRACE_E = ([2, 4, 1, 2, 1], [0.0, 1.0, 2.0, 3.0, 4.0], [10.0, 1.0, 9.0, 5.0, 1.0])


def test_easy_backfilling_trace_e():
    # t0 j0 starts (ends 10, 2 free). t1 head j1 (4): t_r = 10.
    # t2 j2 fits but 9 > 10 - 2 = 8: waits (first-fit would start it).
    # t3 j3 fits and 5 <= 7: backfilled, ends 8 (0 free).
    # t4 j4: 0 free, waits.
    # t8 j3 leaves (2 free): t_r = 10; j2: 9 > 2 no; j4: 1 <= 2 yes, starts, ends 9 (1 free).
    # t9 j4 leaves: j2 9 > 1 no. t10 j0 leaves: j1 starts (ends 11). t11: j2 starts (ends 20).
    _check("easy-backfilling", 4, TRACE_E, [0, 10, 11, 3, 8], [10, 11, 20, 8, 9])
    # first-fit for contrast: j2 [2, 11], j4 [4, 5], j3 [10, 15], j1 [15, 16].
    _check("first-fit", 4, TRACE_E, [0, 15, 2, 10, 4], [10, 16, 11, 15, 5])


# TRACE_E2: j0 (need 1, t=0, w=6), j1 (1, t=0, w=8), j2 (4, t=1, w=1), j3 (1, t=2, w=7),
#           j4 (1, t=3, w=4.5).
TRACE_E2 = ([1, 1, 4, 1, 1], [0.0, 0.0, 1.0, 2.0, 3.0], [6.0, 8.0, 1.0, 7.0, 4.5])


def test_easy_backfilling_reservation_needs_several_completions():
    # t0 j0 (ends 6) and j1 (ends 8) start, 2 free. t1 head j2 (4): free 2 -> 3 at 6 -> 4 at 8:
    #   t_r = 8 (the first completion alone is not enough).
    # t2 j3: fits, 7 > 8 - 2 = 6: waits. t3 j4: fits, 4.5 <= 5: backfilled, ends 7.5 (1 free).
    # t6 j0 leaves: t_r = 8 still (2 free, +1 at 7.5, +1 at 8); j3: 7 > 2, waits.
    # t7.5 j4 leaves: j3 7 > 0.5 waits. t8 j1 leaves: j2 starts (ends 9). t9: j3 (ends 16).
    _check("easy-backfilling", 4, TRACE_E2, [0, 0, 8, 9, 3], [6, 8, 9, 16, 7.5])


def test_preemption_at_the_instant_of_completion():
    # s = 4; j0 (need 2, t=0, w=10), j1 (3, t=1, w=1), j2 (1, t=2, w=20), j3 (1, t=3, w=7).
    # Preemptive first-fit: j0, j2, j3 in service from t3; j1 waits. At t10 both j0 and j3 reach
    # their work (exact tie): j0 leaves first (arrival order); from scratch j1 (3) and j2 (1) are
    # served and j3 is taken out with 0 work left: it departs at 10 too. j1 ends 11, j2 ends 22.
    trace = ([2, 3, 1, 1], [0.0, 1.0, 2.0, 3.0], [10.0, 1.0, 20.0, 7.0])
    _check("preemptive-first-fit", 4, trace, [0, 10, 2, 3], [10, 11, 22, 10])


def test_tie_completion_before_arrival():
    # s = 1: j0 [0, 1]; j1 arrives at 1 exactly when j0 leaves: the completion is handled first,
    # so j1 starts at 1 under every policy.
    for policy in ALL_POLICIES:
        _check(policy, 1, ([1, 1], [0.0, 1.0], [1.0, 2.0]), [0, 1], [1, 3])


# ---------------------------------------------------------------------------------------------
# A literal, slow statement of every policy (lists scanned from scratch), to compare with.
# ---------------------------------------------------------------------------------------------
def _literal_trace(policy, s, needs, arrivals, works):
    n = len(needs)
    rem = [float(w) for w in works]
    end = [None] * n
    first, dep = [None] * n, [None] * n
    present, running = [], set()  # present: indices in arrival order

    def free():
        return s - sum(needs[j] for j in running)

    def start(j, now):
        running.add(j)
        if first[j] is None:
            first[j] = now
        end[j] = now + rem[j]

    def first_fit(order, room):
        chosen = []
        for j in order:
            if needs[j] <= room:
                chosen.append(j)
                room -= needs[j]
        return chosen

    def apply(now):
        waiting = [j for j in present if j not in running]
        if policy == "fcfs":
            for j in waiting:
                if needs[j] > free():
                    break
                start(j, now)
        elif policy == "first-fit":
            for j in first_fit(waiting, free()):
                start(j, now)
        elif policy.startswith("window:"):
            w = int(policy.split(":")[1])
            while True:
                waiting = [j for j in present if j not in running]
                fits = [j for j in waiting[:w] if needs[j] <= free()]
                if not fits:
                    break
                start(fits[0], now)
        elif policy == "easy-backfilling":
            for j in waiting:
                if needs[j] > free():
                    break
                start(j, now)
            waiting = [j for j in present if j not in running]
            if waiting:
                head = waiting[0]
                for t in sorted([now] + [end[j] for j in running]):
                    done = sum(needs[j] for j in running if end[j] - now <= t - now)
                    if free() + done >= needs[head]:
                        t_r = t
                        break
                for j in waiting[1:]:
                    if needs[j] <= free() and works[j] <= t_r - now:
                        start(j, now)
        else:
            if policy == "preemptive-first-fit":
                target = first_fit(present, s)
            elif policy == "msf":
                target = first_fit(sorted(present, key=lambda j: (-needs[j], j)), s)
            elif policy == "least-servers-first":
                target = first_fit(sorted(present, key=lambda j: (needs[j], j)), s)
            elif policy == "server-filling":
                k = 0
                while k < len(present) and sum(needs[j] for j in present[:k]) < s:
                    k += 1
                target = first_fit(sorted(present[:k], key=lambda j: (-needs[j], j)), s)
            else:
                raise ValueError(policy)
            for j in sorted(running):
                if j not in target:
                    running.remove(j)
                    rem[j] = end[j] - now
            for j in target:
                if j not in running:
                    start(j, now)

    nxt = 0
    while True:
        tc, jc = min(((end[j], j) for j in running), default=(math.inf, -1))
        ta = arrivals[nxt] if nxt < n else math.inf
        if tc == math.inf and ta == math.inf:
            break
        if tc <= ta:
            now = tc
            running.remove(jc)
            present.remove(jc)
            dep[jc] = now
        else:
            now = ta
            present.append(nxt)
            nxt += 1
        apply(now)
    return first, dep


def _random_trace(seed, n, s, needs, probs, means, load):
    """Poisson arrivals scaled to the given offered load sum(lam * need * work) / s."""
    rng = random.Random(seed)
    mean_area = sum(p * d * m for p, d, m in zip(probs, needs, means, strict=True))
    lam = load * s / mean_area
    t = 0.0
    tr_needs, tr_arr, tr_works = [], [], []
    for _ in range(n):
        t += rng.expovariate(lam)
        k = rng.choices(range(len(needs)), weights=probs)[0]
        tr_needs.append(needs[k])
        tr_arr.append(t)
        tr_works.append(rng.expovariate(1.0 / means[k]))
    return tr_needs, tr_arr, tr_works


@pytest.mark.parametrize("policy", ALL_POLICIES + ["window:5"])
def test_matches_literal_statement(policy):
    for seed in range(3):
        trace = _random_trace(seed, 250, 6, [1, 2, 3, 4, 6], [0.4, 0.2, 0.15, 0.15, 0.1],
                              [1.0, 2.0, 0.5, 1.5, 1.0], 0.85)  # fmt: skip
        got = run_trace(policy, 6, *trace)
        want = _literal_trace(policy, 6, *trace)
        _close(got[0], want[0], 1e-9)
        _close(got[1], want[1], 1e-9)


def test_policies_differ_on_random_trace():
    trace = _random_trace(7, 300, 6, [1, 2, 3, 6], [0.5, 0.2, 0.2, 0.1], [1.0, 1.0, 1.0, 1.0], 0.8)
    deps = {p: tuple(run_trace(p, 6, *trace)[1]) for p in ALL_POLICIES if p != "window:1"}
    assert len(set(deps.values())) == len(deps)


def test_window_limits_on_2000_jobs():
    trace = _random_trace(11, 2000, 8, [1, 2, 3, 5, 8], [0.4, 0.25, 0.15, 0.1, 0.1],
                          [1.0, 1.0, 2.0, 1.0, 0.5], 0.8)  # fmt: skip
    fcfs = run_trace("fcfs", 8, *trace)
    ff = run_trace("first-fit", 8, *trace)
    assert fcfs != ff  # the comparison is not vacuous
    assert run_trace("window:1", 8, *trace) == fcfs
    assert run_trace("window:1000", 8, *trace) == ff


def test_all_jobs_need_every_server_is_fcfs():
    # Every job needs all s servers: one job in service at a time, in arrival order, so
    # departure_j = max(arrival_j, departure_{j-1}) + work_j under every policy.
    rng = random.Random(5)
    n, s = 400, 3
    arr, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(0.8)
        arr.append(t)
    works = [rng.expovariate(1.0) for _ in range(n)]
    want_start, want_dep, last = [], [], 0.0
    for a, w in zip(arr, works, strict=True):
        st = max(a, last)
        last = st + w
        want_start.append(st)
        want_dep.append(last)
    for policy in ALL_POLICIES:
        got_start, got_dep = run_trace(policy, s, [s] * n, arr, works)
        _close(got_start, want_start, 1e-9)
        _close(got_dep, want_dep, 1e-9)
    # The same through simulate: all policies give identical statistics.
    stats = [
        simulate(p, 2, [2], [1.0], exp_work([1.0]), 0.7, 3000, 300, seed=3) for p in ALL_POLICIES
    ]
    for st in stats[1:]:
        assert st == stats[0]


# ---------------------------------------------------------------------------------------------
# Steady-state statistics.
# ---------------------------------------------------------------------------------------------
def test_mm1_response_mean():
    st = simulate("fcfs", 1, [1], [1.0], exp_work([1.0]), 0.5, 100_000, 5_000, seed=1)
    assert st["n"] == 95_000
    # M/M/1, mu = 1, lam = 0.5: E[T] = 1 / (mu - lam) = 2, E[N] = rho / (1 - rho) = 1.
    assert st["response_mean"] == pytest.approx(2.0, rel=0.05)
    assert st["jobs_mean"] == pytest.approx(1.0, rel=0.05)
    assert st["idle_servers_mean"] == pytest.approx(0.5, rel=0.05)


def _erlang_c_wait(c, lam, mu):
    """Mean wait in queue of M/M/c: Wq = C(c, a) / (c mu - lam), a = lam / mu, with
    C(c, a) = [a^c / c! * c / (c - a)] / [sum_{k<c} a^k / k! + a^c / c! * c / (c - a)]."""
    a = lam / mu
    top = a**c / math.factorial(c) * c / (c - a)
    bottom = sum(a**k / math.factorial(k) for k in range(c)) + top
    return (top / bottom) / (c * mu - lam)


@pytest.mark.slow
def test_mmc_erlang_c_wait_and_little():
    """The default suite: the same statistics of the same simulator (fcfs) against the M/M/1
    closed forms, Little's law and the busy servers in test_mm1_response_mean; its multiserver
    fcfs job by job against the literal statement in test_matches_literal_statement."""
    c, lam = 3, 2.0
    wq = _erlang_c_wait(c, lam, 1.0)  # = 0.4444...
    assert wq == pytest.approx(4 / 9)
    # One run of 100k jobs has a relative standard error of about 4% on the mean wait at this
    # load (measured over seeds), so four independent runs are pooled (about 2%).
    runs = [
        simulate("fcfs", c, [1], [1.0], exp_work([1.0]), lam, 100_000, 5_000, seed=seed)
        for seed in (2, 3, 4, 5)
    ]
    assert sum(r["wait_mean"] for r in runs) / len(runs) == pytest.approx(wq, rel=0.05)
    st = runs[0]
    assert st["response_mean"] == pytest.approx(wq + 1.0, rel=0.05)
    # Little's law and the mean number of busy servers (lam * E[work]).
    assert st["jobs_mean"] == pytest.approx(lam * st["response_mean"], rel=0.05)
    assert st["idle_servers_mean"] == pytest.approx(c - lam, rel=0.05)


def test_first_fit_with_one_core_jobs_is_fcfs():
    """With one-core jobs first-fit never skips a waiting job, so it is fcfs (M/M/3)."""
    c, lam = 3, 2.0
    assert simulate("first-fit", c, [1], [1.0], exp_work([1.0]), lam, 3000, 300, 2) == simulate(
        "fcfs", c, [1], [1.0], exp_work([1.0]), lam, 3000, 300, 2
    )


def test_simulate_multiclass_consistency():
    # Two classes; per-class means are nan-free and combine to the overall mean; Little's law;
    # busy servers = lam * E[need * work].
    needs, probs, means = [1, 4], [0.7, 0.3], [1.0, 0.5]
    lam = 1.5
    st = simulate("msf", 4, needs, probs, exp_work(means), lam, 20_000, 2_000, seed=4)
    assert all(math.isfinite(x) for x in st["response_mean_class"] + st["wait_mean_class"])
    assert st["jobs_mean"] == pytest.approx(lam * st["response_mean"], rel=0.1)
    busy = lam * sum(p * d * m for p, d, m in zip(probs, needs, means, strict=True))
    assert 4 - st["idle_servers_mean"] == pytest.approx(busy, rel=0.05)
    # A class that never occurs reports nan.
    st = simulate("fcfs", 2, [1, 2], [1.0, 0.0], det_work([1.0, 1.0]), 0.5, 500, 50, seed=0)
    assert math.isnan(st["response_mean_class"][1])
    assert st["response_mean_class"][0] == pytest.approx(st["response_mean"])


def test_samplers():
    rng = random.Random(0)
    f = hyperexp_work([[0.5, 0.5], [1.0, 0.0]], [[0.5, 3.5], [2.0, 1.0]])
    xs = [f(rng, 0) for _ in range(40_000)]
    assert sum(xs) / len(xs) == pytest.approx(2.0, rel=0.05)
    ys = [f(rng, 1) for _ in range(40_000)]
    assert sum(ys) / len(ys) == pytest.approx(2.0, rel=0.05)
    g = exp_work([3.0])
    zs = [g(rng, 0) for _ in range(40_000)]
    assert sum(zs) / len(zs) == pytest.approx(3.0, rel=0.05)
    assert det_work([1.5, 2.5])(rng, 1) == 2.5


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        run_trace("lifo", 2, [1], [0.0], [1.0])
    with pytest.raises(ValueError):
        run_trace("window:0", 2, [1], [0.0], [1.0])
    with pytest.raises(ValueError):
        run_trace("fcfs", 2, [3], [0.0], [1.0])
    with pytest.raises(ValueError):
        run_trace("fcfs", 2, [1, 1], [1.0, 0.0], [1.0, 1.0])
