"""Every policy's ``select`` (its definition on the whole job list, arrival order) against a
plain-Python reference written from the policy definitions, on random job lists.

The reference part (``_ref_*``) imports nothing from jaxqueue: it reads the live jobs
(``count`` of them, arrival order) as Python lists. The random cases are batched on axis 1 of
the ``Jobs`` arrays (slots on axis 0), so each policy compiles once per workload; the slots at
``count`` and beyond hold garbage (random needs and work, never in service) and must never be
selected."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

# --------------------------------------------------------------------------------------------
# The reference: the definitions, one job at a time, on the live jobs of one case.
# need, rem: lists (arrival order); run: the jobs in service before the event; s: servers.


def _free(need, sel, s):
    return s - sum(n for n, x in zip(need, sel, strict=True) if x)


def _fit_in_order(order, need, sel, free):
    """Start, in ``order``, every job not yet selected that fits in what is left of ``free``."""
    sel = list(sel)
    for i in order:
        if not sel[i] and need[i] <= free:
            sel[i] = True
            free -= need[i]
    return sel


def _ref_fcfs(need, run, rem, s):
    sel, free = list(run), _free(need, run, s)
    for i in range(len(need)):
        if sel[i]:
            continue
        if need[i] > free:  # the oldest waiting job does not fit: nothing behind it starts
            break
        sel[i] = True
        free -= need[i]
    return sel


def _ref_first_fit(need, run, rem, s):
    return _fit_in_order(range(len(need)), need, run, _free(need, run, s))


def _ref_window(W):
    def ref(need, run, rem, s):
        sel, free = list(run), _free(need, run, s)
        while True:
            window = [i for i in range(len(need)) if not sel[i]][:W]
            fits = [i for i in window if need[i] <= free]
            if not fits:
                return sel
            sel[fits[0]] = True
            free -= need[fits[0]]

    return ref


def _ref_preemptive_first_fit(need, run, rem, s):
    n = len(need)
    return _fit_in_order(range(n), need, [False] * n, s)


def _by_need(jobs, need):
    return sorted(jobs, key=lambda i: (-need[i], i))


def _ref_msf(need, run, rem, s):
    n = len(need)
    return _fit_in_order(_by_need(range(n), need), need, [False] * n, s)


def _ref_least_servers_first(need, run, rem, s):
    n = len(need)
    return _fit_in_order(sorted(range(n), key=lambda i: (need[i], i)), need, [False] * n, s)


def _ref_server_filling(need, run, rem, s):
    n, k, total = len(need), 0, 0
    while k < n and total < s:  # the shortest prefix whose needs reach s (or all jobs)
        total += need[k]
        k += 1
    return _fit_in_order(_by_need(range(k), need), need, [False] * n, s)


def _ref_easy(need, run, rem, s, info=None):
    """EASY backfilling; ``info`` (a dict) receives the head and its reservation ``t_r``."""
    sel = _ref_fcfs(need, run, rem, s)
    free = _free(need, sel, s)
    waiting = [i for i in range(len(need)) if not sel[i]]
    if not waiting:
        return sel
    head = waiting[0]
    t_r = math.inf
    for t in sorted({rem[i] for i in range(len(need)) if sel[i]}):
        freed = sum(need[i] for i in range(len(need)) if sel[i] and rem[i] <= t)
        if free + freed >= need[head]:
            t_r = t
            break
    if info is not None:
        info.update(head=head, t_r=t_r)
    for i in waiting[1:]:
        if need[i] <= free and rem[i] <= t_r:
            sel[i] = True
            free -= need[i]
    return sel


# --------------------------------------------------------------------------------------------
# The random cases.

# (s, the workload's distinct needs, largest first, slots B): needs dividing s or not
WORKLOADS = [
    (4, (4, 2, 1), 12),
    (6, (5, 4, 3, 2, 1), 12),
    (8, (8, 5, 3, 2, 1), 16),
    (20, (20, 7, 5, 4, 3, 1), 16),
]
CASES = 400  # random cases per workload

POLICIES = {
    "fcfs": (_ref_fcfs, False),
    "first-fit": (_ref_first_fit, False),
    "window:1": (_ref_window(1), False),
    "window:3": (_ref_window(3), False),
    "preemptive-first-fit": (_ref_preemptive_first_fit, True),
    "msf": (_ref_msf, True),
    "least-servers-first": (_ref_least_servers_first, True),
    "server-filling": (_ref_server_filling, True),
    "easy-backfilling": (_ref_easy, False),
}


def _cases(s, needs, B, seed):
    """``CASES`` random states, as numpy arrays ``(B, CASES)`` (``count``: ``(CASES,)``)."""
    rng = np.random.default_rng(seed)
    n = CASES
    count = rng.integers(0, B + 1, n)
    count[:4] = [0, 1, B - 1, B]
    # needs: a case draws from all needs or from a random pair of them (many equal needs)
    weights = rng.random((n, len(needs))) * (rng.random((n, len(needs))) < 0.6)
    weights[weights.sum(axis=1) == 0, -1] = 1.0
    cdf = np.cumsum(weights / weights.sum(axis=1, keepdims=True), axis=1)
    pick = (rng.random((B, n, 1)) > cdf[None]).sum(axis=2).clip(0, len(needs) - 1)
    need = np.asarray(needs)[pick]
    # remaining work: small integers (ties, and waiting jobs exactly at the reservation)
    rem = rng.integers(1, 7, (B, n)).astype(np.float64)
    live = np.arange(B)[:, None] < count[None]
    # in service: a random set that fits in s, built in a random order with a random density
    run = np.zeros((B, n), bool)
    density = rng.random(n)
    for c in range(n):
        free = s
        for i in rng.permutation(count[c]):
            if need[i, c] <= free and rng.random() < density[c]:
                run[i, c] = True
                free -= need[i, c]
    # garbage beyond count: any need (0 for an empty slot), any work, never in service
    garbage = ~live
    need = np.where(garbage & (rng.random((B, n)) < 0.3), 0, need)
    rem = np.where(garbage, rng.choice([np.nan, -1.0, 0.0, 1.0, 1e9], (B, n)), rem)
    started = run | (live & (rng.random((B, n)) < 0.2))
    age = rem + rng.random((B, n))
    return {
        "cls": pick.astype(np.int32),
        "need": need.astype(np.int32),
        "rem": rem,
        "age": age,
        "wait": np.where(started, age * 0.5, 0.0),
        "started": started,
        "run": run,
        "count": count.astype(np.int32),
    }


@pytest.fixture(scope="module")
def cases():
    return [
        (s, needs, B, _cases(s, needs, B, seed)) for seed, (s, needs, B) in enumerate(WORKLOADS)
    ]


def _jobs(arrays, preemptive, seed):
    from jaxqueue.mjqm.policies import Jobs

    arrays = dict(arrays)
    if preemptive:  # jobs.run is ignored: any mask, even one that does not fit or is garbage
        arrays["run"] = np.random.default_rng(100 + seed).random(arrays["run"].shape) < 0.5
    return Jobs(**{k: jax.numpy.asarray(v) for k, v in arrays.items()})


@pytest.fixture(scope="module")
def selected(cases):
    """Per workload, the jobs given to each policy and its ``select`` on them, op by op
    (``disable_jit``: faster here than compiling the policies, one by one or in one program
    per workload)."""
    from jaxqueue.mjqm.policies import parse_policy

    policies = {name: parse_policy(name) for name in POLICIES}
    out = []
    for seed, (s, needs, _, arrays) in enumerate(cases):
        jobs = {pre: _jobs(arrays, pre, seed) for pre in (False, True)}

        def select_all(jobs, s=s, needs=needs):
            return {n: p.select(jobs[p.preemptive], s, needs) for n, p in policies.items()}

        with jax.disable_jit():
            got = select_all(jobs)
        out.append({n: (jobs[p.preemptive], np.asarray(got[n])) for n, p in policies.items()})
    return out


@pytest.mark.parametrize("name", list(POLICIES))
def test_select_matches_definition(name, cases, selected):
    from jaxqueue.mjqm.policies import parse_policy

    ref, preemptive = POLICIES[name]
    assert parse_policy(name).preemptive == preemptive
    mismatches = []
    for (s, needs, B, arrays), results in zip(cases, selected, strict=True):
        jobs, got = results[name]
        assert got.shape == (B, CASES) and got.dtype == bool
        need, run, rem = arrays["need"], np.asarray(jobs.run), arrays["rem"]
        for c in range(CASES):
            k = int(arrays["count"][c])
            assert not got[k:, c].any(), f"s={s} case {c}: a slot beyond count={k} selected"
            sel = got[:k, c]
            assert need[:k, c][sel].sum() <= s, f"s={s} case {c}: more than s servers"
            if not preemptive:
                assert sel[run[:k, c]].all(), f"s={s} case {c}: a job in service was stopped"
            want = ref(need[:k, c].tolist(), run[:k, c].tolist(), rem[:k, c].tolist(), s)
            if sel.tolist() != want:
                mismatches.append(
                    f"s={s} needs={needs} need={need[:k, c].tolist()} "
                    f"run={run[:k, c].astype(int).tolist()} rem={rem[:k, c].tolist()}: "
                    f"select {sel.astype(int).tolist()}, definition {np.array(want, int).tolist()}"
                )
    assert not mismatches, f"{len(mismatches)} cases differ, e.g.\n" + "\n".join(mismatches[:5])


def test_cases_exercise_the_definitions(cases):
    """The random cases reach the branches that tell the policies apart: window:1 is FCFS,
    window:3 differs from both FCFS and first fit, and EASY backfills jobs whose service time
    equals the reservation and holds back jobs just above it."""
    differ = {"window:3 vs fcfs": 0, "window:3 vs first-fit": 0, "msf vs pff": 0, "lsf": 0}
    at_t_r = above_t_r = backfilled = 0
    for s, _, _, a in cases:
        for c in range(CASES):
            k = int(a["count"][c])
            need, run, rem = (a[x][:k, c].tolist() for x in ("need", "run", "rem"))
            w1, w3 = _ref_window(1)(need, run, rem, s), _ref_window(3)(need, run, rem, s)
            assert w1 == _ref_fcfs(need, run, rem, s)
            differ["window:3 vs fcfs"] += w3 != _ref_fcfs(need, run, rem, s)
            differ["window:3 vs first-fit"] += w3 != _ref_first_fit(need, run, rem, s)
            differ["msf vs pff"] += _ref_msf(need, run, rem, s) != _ref_preemptive_first_fit(
                need, run, rem, s
            )
            lsf = _ref_least_servers_first(need, run, rem, s)
            differ["lsf"] += lsf not in (
                _ref_msf(need, run, rem, s),
                _ref_preemptive_first_fit(need, run, rem, s),
            )
            info = {}
            sel = _ref_easy(need, run, rem, s, info)
            fcfs = _ref_fcfs(need, run, rem, s)
            new = [i for i in range(k) if sel[i] and not fcfs[i]]
            backfilled += bool(new)
            at_t_r += any(rem[i] == info["t_r"] for i in new)
            free = _free(need, fcfs, s)
            above_t_r += any(
                not sel[i] and need[i] <= free and rem[i] > info["t_r"]
                for i in range(info.get("head", k) + 1, k)
            )
    assert min(differ.values()) >= 20, differ
    assert backfilled >= 100 and at_t_r >= 20 and above_t_r >= 50, (
        backfilled,
        at_t_r,
        above_t_r,
    )
