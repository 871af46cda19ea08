"""``select`` (and ``step``) of the size-aware, weighted and threshold policies against the
plain-Python reference ``tests/references/select_reference.py`` (written from the papers and
the field's simulators, importing nothing from jaxqueue) on seeded random job lists.

Each workload draws ``CASES`` random states batched on axis 1 of the ``Jobs`` arrays (slots on
axis 0), so every policy compiles once per workload. The slots at ``count`` and beyond hold
garbage (any need, NaN or negative work, never in service) and must never be selected. Sizes
and attained services lie on a dyadic grid: remaining works tie often (the arrival-order
rule), an ``easy-backfilling:estimate=F`` estimate equals the head's reservation often, and
``size = rem + attained`` (and, in service, ``age - wait = attained``) holds exactly in both
codes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue.dist import Deterministic, Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload
from jaxqueue.mjqm.policies import Jobs, parse_policy
from tests.references import select_reference as ref

CASES = 300  # random states per workload

# (s, one need per class, one law per class, msfq:L, balanced-splitting, easy estimate, slots)
WORKLOADS = {
    "k8": (
        8,
        (1, 2, 4, 8),
        (Exponential(1.0), Exponential(1.0), Exponential(0.5), Exponential(0.25)),
        "msfq:3",
        "balanced-splitting:1/2/0/0+4",
        "easy-backfilling:estimate=2",
        12,
    ),
    "mixed-6": (
        6,
        (1, 2, 3, 4, 6),
        (
            HyperExponential(means=(0.5, 4.0), probs=(0.75, 0.25)),
            Erlang(3, 1.5),
            Exponential(0.3),
            Deterministic(2.0),
            HyperExponential(means=(0.25, 2.0), probs=(0.5, 0.5)),
        ),
        "msfq:2",
        "balanced-splitting:1/2/0/0/0+3",
        "easy-backfilling:estimate=1.5",
        12,
    ),
    "odd-20": (
        20,
        (1, 3, 4, 5, 7, 20),
        (
            Exponential(1.0),
            Erlang(2, 1.0),
            Exponential(2.0),
            HyperExponential(means=(0.5, 3.0), probs=(0.6, 0.4)),
            Exponential(0.75),
            Exponential(4.0),
        ),
        "msfq:9",
        "balanced-splitting:2/3/4/5/0/0+6",
        "easy-backfilling:estimate=2",
        12,
    ),
}
PREEMPTIVE = ref.PREEMPTIVE  # maxweight, srpt-greedy, first-fit-srpt, server-filling-srpt/-gittins
KINDS = (*PREEMPTIVE, "msfq", "balanced-splitting", "easy-backfilling-estimate")


def _reference_law(law):
    """A law in the reference's tuple form (``select_reference.gittins_index``)."""
    if isinstance(law, Exponential):
        return ("exponential", float(law.mean_))
    if isinstance(law, HyperExponential):
        return ("hyperexponential", tuple(map(float, law.probs)), tuple(map(float, law.means)))
    if isinstance(law, Erlang):
        return ("erlang", law.k, float(law.mean_))
    return ("deterministic", float(law.value))


def _names(wname):
    _, _, _, msfq, split, easy, _ = WORKLOADS[wname]
    names = {k: k for k in PREEMPTIVE}
    return names | {"msfq": msfq, "balanced-splitting": split, "easy-backfilling-estimate": easy}


def _cases(wname, seed):
    """``CASES`` random states: numpy arrays ``(B, CASES)`` (``count``, ``state``:
    ``(CASES,)``); ``run`` fits ``s`` (msfq, EASY), ``run_bs`` / ``mark_bs`` fit the
    partitions and the helpers (balanced-splitting)."""
    s, cneed, _, _, split, _, B = WORKLOADS[wname]
    _, par = ref.parse_policy(split)
    reserve, helpers = par["reserve"], par["helpers"]
    rng = np.random.default_rng(seed)
    n, C = CASES, len(cneed)
    count = rng.integers(0, B + 1, n)
    count[:4] = [0, 1, B - 1, B]
    # classes: a case draws from all classes or from a few (many equal needs)
    weights = rng.random((n, C)) * (rng.random((n, C)) < 0.6)
    weights[weights.sum(axis=1) == 0, rng.integers(0, C)] = 1.0
    cdf = np.cumsum(weights / weights.sum(axis=1, keepdims=True), axis=1)
    cls = (rng.random((B, n, 1)) > cdf[None]).sum(axis=2).clip(0, C - 1)
    need = np.asarray(cneed)[cls]
    # sizes on a grid of 1/8 (powers of 2 and of 1.5 among them), attained service below
    size = rng.integers(1, 41, (B, n)) / 8.0
    attained = np.floor(size * rng.random((B, n)) * 8.0) / 8.0
    attained = np.where(rng.random((B, n)) < 0.3, 0.0, attained)
    live = np.arange(B)[:, None] < count[None]
    run = np.zeros((B, n), bool)
    run_bs, mark_bs = np.zeros((B, n), bool), np.zeros((B, n), bool)
    density = rng.random(n)
    for c in range(n):
        free, part, free_h = s, list(reserve), helpers
        for i in rng.permutation(count[c]):
            if rng.random() >= density[c]:
                continue
            if need[i, c] <= free:
                run[i, c] = True
                free -= need[i, c]
            k = cls[i, c]
            if rng.random() < 0.5 and need[i, c] <= part[k]:
                run_bs[i, c] = True
                part[k] -= need[i, c]
            elif need[i, c] <= free_h:
                run_bs[i, c] = mark_bs[i, c] = True
                free_h -= need[i, c]
    garbage = ~live
    need = np.where(garbage & (rng.random((B, n)) < 0.3), 0, need)
    bad = rng.choice([np.nan, -1.0, 0.0, 1.0, 1e9], (B, n))
    size = np.where(garbage, bad, size)
    mark_bs |= garbage & (rng.random((B, n)) < 0.5)  # the marks of jobs not in service: noise
    mark_bs |= live & ~run_bs & (rng.random((B, n)) < 0.3)
    return {
        "cls": cls.astype(np.int32),
        "need": need.astype(np.int32),
        "size": size,
        "attained": np.where(garbage, 0.0, attained),
        "count": count.astype(np.int32),
        "run": run,
        "run_bs": run_bs,
        "mark_bs": mark_bs,
        "state": (rng.random(n) < 0.4).astype(np.int32),
    }


def _jobs(a, kind, seed):
    """The ``Jobs`` a policy of ``kind`` sees: preemptive ones a garbage ``run`` (ignored);
    the non-preemptive ones their valid running set (the running jobs have had service, the
    waiting ones none)."""
    B, n = a["need"].shape
    noise = np.random.default_rng(1000 + seed).random((B, n)) < 0.5
    if kind in PREEMPTIVE:
        run, mark, att = noise, None, a["attained"]
    elif kind == "balanced-splitting":
        run, mark = a["run_bs"], a["mark_bs"]
        att = np.where(run, a["attained"], 0.0)
    else:
        run, mark, att = a["run"], None, np.where(a["run"], a["attained"], 0.0)
    rem = a["size"] - att
    return Jobs(
        cls=jnp.asarray(a["cls"]),
        need=jnp.asarray(a["need"]),
        rem=jnp.asarray(rem),
        age=jnp.asarray(att + 1.0),  # in service since age - wait = attained (one time unit waited)
        wait=jnp.ones((B, n)),
        started=jnp.asarray(run | (att > 0)),
        run=jnp.asarray(run),
        count=jnp.asarray(a["count"]),
        size=jnp.asarray(a["size"]),
        mark=None if mark is None else jnp.asarray(mark),
    )


@pytest.fixture(scope="module")
def runs():
    """Per workload: the cases, the jobs each policy saw and its ``(run, mark, state)``."""
    out = {}
    for seed, wname in enumerate(WORKLOADS):
        s, cneed, laws, *_ = WORKLOADS[wname]
        wl = Workload(servers=s, cores=cneed, probs=(1.0 / len(cneed),) * len(cneed), services=laws)
        needs = tuple(sorted(set(cneed), reverse=True))
        names = _names(wname)
        pols = {k: parse_policy(names[k]) for k in KINDS}  # partitions that leave a class out
        pols["server-filling-gittins"] = pols["server-filling-gittins"].bind(wl)  # its laws
        a = _cases(wname, seed)
        jobs = {k: _jobs(a, k, seed) for k in KINDS}
        state = jnp.asarray(a["state"])

        def all_steps(jobs, state, pols=pols, s=s, needs=needs):
            got = {}
            for k, p in pols.items():
                if k in ("msfq", "balanced-splitting"):
                    got[k] = p.step(jobs[k], s, needs, state)
                else:
                    got[k] = (p.select(jobs[k], s, needs), None, None)
            return got

        with jax.disable_jit():  # op by op: faster here than compiling eight policies
            got = all_steps(jobs, state)
        out[wname] = (a, jobs, jax.tree.map(np.asarray, got))
    return out


def _reference_jobs(a, jobs, c, kind, laws):
    k = int(a["count"][c])
    rem, need = np.asarray(jobs.rem)[:k, c], a["need"][:k, c]
    run = np.asarray(jobs.run)[:k, c] if kind not in PREEMPTIVE else np.zeros(k, bool)
    mark = np.asarray(jobs.mark)[:k, c] if jobs.mark is not None else np.zeros(k, bool)
    size = a["size"][:k, c]
    return [
        ref.Job(
            int(need[i]),
            float(rem[i]),
            float(size[i] - rem[i]),
            int(a["cls"][i, c]),
            bool(run[i]),
            bool(mark[i] and run[i]),
        )
        for i in range(k)
    ]


def _reference(wname, kind, a, jobs, c):
    """``(run, helper marks, state)`` of the reference on case ``c`` (live slots only)."""
    s, cneed, laws, *_ = WORKLOADS[wname]
    name = _names(wname)[kind]
    rjobs = _reference_jobs(a, jobs, c, kind, laws)
    k = len(rjobs)
    run = np.zeros(k, bool)
    mark = np.array([j.helper for j in rjobs], bool)
    state = None
    if kind == "msfq":
        st = {"swap": bool(a["state"][c])}
        run[ref.select(name, rjobs, s, max_need=max(cneed), state=st)] = True
        state = int(st["swap"])
    elif kind == "balanced-splitting":
        run[[i for i, j in enumerate(rjobs) if j.running]] = True
        for i, on_h in ref.balanced_splitting_starts(rjobs, s, **ref.parse_policy(name)[1]):
            run[i], mark[i] = True, on_h
    else:
        chosen = ref.select(name, rjobs, s, laws=[_reference_law(x) for x in laws])
        run[chosen] = True
    return run, mark, state


@pytest.mark.parametrize("kind", KINDS)
def test_select_equals_the_reference_on_random_cases(kind, runs):
    mismatches, total = [], 0
    for wname, (a, jobs, got) in runs.items():
        s = WORKLOADS[wname][0]
        run_all, mark_all, state_all = got[kind]
        for c in range(CASES):
            k = int(a["count"][c])
            assert not run_all[k:, c].any(), f"{wname} case {c}: a slot beyond count={k} runs"
            run = run_all[:k, c]
            assert a["need"][:k, c][run].sum() <= s, f"{wname} case {c}: more than s servers"
            want, want_mark, want_state = _reference(wname, kind, a, jobs[kind], c)
            same = run.tolist() == want.tolist()
            if kind == "balanced-splitting":
                same &= mark_all[:k, c][run].tolist() == want_mark[want].tolist()
            if kind == "msfq":
                same &= int(state_all[c]) == want_state
            total += 1
            if not same:
                mismatches.append(
                    f"{wname} case {c}: need={a['need'][:k, c].tolist()} "
                    f"rem={np.asarray(jobs[kind].rem)[:k, c].tolist()} "
                    f"run before={np.asarray(jobs[kind].run)[:k, c].astype(int).tolist()}: "
                    f"jaxqueue {run.astype(int).tolist()}, reference {want.astype(int).tolist()}"
                )
    assert total == CASES * len(WORKLOADS)
    assert not mismatches, f"{len(mismatches)} cases differ, e.g.\n" + "\n".join(mismatches[:5])


def test_random_cases_reach_the_branches(runs):
    """The cases tell the policies apart and reach the rules' corners: MaxWeight's order
    differs from most-servers-first's, the SRPT family's three rules differ, msfq turns its
    flag on and off, balanced-splitting starts jobs on the helpers and blocks them, EASY with
    estimates backfills a job whose estimate equals the time to the reservation."""
    seen = dict.fromkeys(
        ("mw!=msf", "greedy!=ff", "ff!=sf", "swap on", "swap off", "helpers", "tie"), 0
    )
    for wname, (a, jobs, _) in runs.items():
        s, cneed, laws, msfq, split, easy, _ = WORKLOADS[wname]
        for c in range(CASES):
            k = int(a["count"][c])
            pre = _reference_jobs(a, jobs["maxweight"], c, "maxweight", laws)
            mw = ref.select("maxweight", pre, s)
            msf = ref._first_fit(sorted(range(k), key=lambda i: (-pre[i].need, i)), pre, s)
            seen["mw!=msf"] += mw != sorted(msf)
            greedy, ff = (ref.select(p, pre, s) for p in ("srpt-greedy", "first-fit-srpt"))
            seen["greedy!=ff"] += greedy != ff
            seen["ff!=sf"] += ff != ref.select("server-filling-srpt", pre, s)
            st = {"swap": bool(a["state"][c])}
            rj = _reference_jobs(a, jobs["msfq"], c, "msfq", laws)
            ref.select(msfq, rj, s, max_need=max(cneed), state=st)
            seen["swap on"] += st["swap"] and not a["state"][c]
            seen["swap off"] += a["state"][c] and not st["swap"]
            bj = _reference_jobs(a, jobs["balanced-splitting"], c, "balanced-splitting", laws)
            par = ref.parse_policy(split)[1]
            seen["helpers"] += any(h for _, h in ref.balanced_splitting_starts(bj, s, **par))
            ej = _reference_jobs(a, jobs["easy-backfilling-estimate"], c, "easy", laws)
            F = ref.parse_policy(easy)[1]["F"]
            seen["tie"] += _estimate_tie(ej, s, F)
    assert min(seen.values()) >= 10, seen


def _estimate_tie(jobs, s, F):
    """A job backfilled whose estimate equals the time to the head's reservation."""
    started = set(ref._easy_estimate_starts(jobs, s, F))
    free = s - sum(j.need for j in jobs if j.running)
    waiting = [i for i, j in enumerate(jobs) if not j.running]
    while waiting and jobs[waiting[0]].need <= free:
        free -= jobs[waiting.pop(0)].need
    if not waiting:
        return False
    ends = sorted(
        (ref.estimate(j.rem + j.attained, F) - j.attained, i)
        for i, j in enumerate(jobs)
        if j.running or (i in started and i < waiting[0])
    )
    freed = free
    for left, i in ends:
        freed += jobs[i].need
        if freed >= jobs[waiting[0]].need:
            return any(ref.estimate(jobs[b].rem, F) == left for b in waiting[1:] if b in started)
    return False
