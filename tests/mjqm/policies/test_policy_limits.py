"""The stability limits of the policies (``mjqm.stability_limit(workload, policy)``) against
independent checks: the limits computed by hand, the premise of the ``lambda_ideal`` argument
(every server busy once enough work is present) on random states of the plain-Python reference
``tests/references/select_reference.py``, and the heapq event simulator
``tests/references/mjqm_events.py`` below and above each limit (the number of jobs left in
the system when the arrivals stop)."""

from __future__ import annotations

import random

import pytest

from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, stability_limit
from tests.references import select_reference as ref
from tests.references.mjqm_events import run_trace

# needs 1, 2, 4, 8 of k = 8 servers w.p. 1/4, exponential durations of mean 1 / need (the
# issue's workload): E[need x duration] = 1, so lambda_ideal = 8
K8 = Workload(
    servers=8,
    cores=(1, 2, 4, 8),
    probs=(0.25,) * 4,
    services=tuple(Exponential(1.0 / n) for n in (1, 2, 4, 8)),
    name="k8",
)
# needs 2 and 3 of s = 6: each divides s, but they form no chain
ODD = Workload(
    servers=6,
    cores=(2, 3),
    probs=(0.5, 0.5),
    services=(Exponential(1.0), Exponential(1.0)),
)
# balanced-splitting 2/2+0 here: class 0 on 2 one-server slots, class 1 on one two-server slot
SPLIT = Workload(
    servers=4,
    cores=(1, 2),
    probs=(0.5, 0.5),
    services=(Exponential(1.0), Exponential(1.0)),
)

CHAIN = ("msf", "maxweight", "server-filling", "server-filling-srpt", "server-filling-gittins")


@pytest.mark.parametrize("policy", CHAIN)
def test_chain_policies_reach_lambda_ideal(policy):
    res = stability_limit(K8, policy)
    assert res.lambda_c == 8.0 and res.lambda_c_ci == (8.0, 8.0)  # 8 / (sum_n 1/4 n (1/n))
    assert res.method == "ideal" and res.status == "ok" and res.policy == policy
    off_chain = stability_limit(ODD, policy)
    assert off_chain.method == "unknown" and off_chain.lambda_c is None


def test_balanced_splitting_without_helpers_is_one_queue_per_class():
    # class 0: lam / 2 on 2 slots of mean 1 -> lam < 4; class 1: lam / 2 on 1 slot -> lam < 2
    res = stability_limit(SPLIT, "balanced-splitting:2/2+0")
    assert res.lambda_c == 2.0 and res.method == "closed-form"
    assert stability_limit(SPLIT, "balanced-splitting:2/2").lambda_c == 2.0
    assert stability_limit(SPLIT, "balanced-splitting:2/0+2").method == "unknown"


@pytest.mark.parametrize("policy", ["least-servers-first", "first-fit-srpt", "srpt-greedy"])
def test_policies_without_a_method_say_unknown(policy):
    res = stability_limit(K8, policy)
    assert res.method == "unknown" and res.lambda_c is None and res.status != "ok"


# ------------------------------------------------------------------------------------------
# The premise: under a divisibility chain these policies leave no server idle once enough
# is present (the reference's definitions, not jaxqueue's code).


def _msf(jobs, s):  # most servers first: need descending, arrival order, first fit
    order = sorted(range(len(jobs)), key=lambda i: (-jobs[i].need, i))
    return ref._first_fit(order, jobs, s)


def _random_jobs(rng, needs, n):
    return [
        ref.Job(rng.choice(needs), rng.randint(1, 16) / 4, rng.randint(0, 8) / 4, cls=0)
        for _ in range(n)
    ]


@pytest.mark.parametrize("s, needs", [(8, (1, 2, 4, 8)), (12, (1, 3, 6)), (16, (2, 4, 16))])
def test_chain_fills_every_server(s, needs):
    rng = random.Random(s)
    laws = [("exponential", 1.0)]
    K = len(needs)
    for _ in range(300):
        jobs = _random_jobs(rng, needs, rng.randint(1, 3 * s))
        total = sum(j.need for j in jobs)
        full = min(total, s)
        for name in ("server-filling-srpt", "server-filling-gittins"):
            got = ref.select(name, jobs, s, laws=laws)
            assert sum(jobs[i].need for i in got) == full, (name, jobs)
        assert sum(jobs[i].need for i in _msf(jobs, s)) == full
        many = _random_jobs(rng, needs, K * s * s)  # MaxWeight: K s^2 jobs or more
        assert sum(many[i].need for i in ref.select("maxweight", many, s)) == s


def test_off_chain_leaves_servers_idle():
    """Why the closed forms stop at a chain: needs 3, 2, 2 on 6 servers (server-filling's
    prefix, msf) leave a server idle with work waiting; so does MaxWeight with needs 1, 8 on 8
    servers and few jobs."""
    jobs = [ref.Job(3), ref.Job(2), ref.Job(2), ref.Job(3)]
    served = ref.select("server-filling-srpt", jobs, 6)
    assert sum(jobs[i].need for i in served) == 5
    assert sum(jobs[i].need for i in _msf([ref.Job(3), ref.Job(2), ref.Job(2)], 6)) == 5
    few = [ref.Job(1), ref.Job(1), ref.Job(1), ref.Job(8)]
    assert sum(few[i].need for i in ref.select("maxweight", few, 8)) == 3


# ------------------------------------------------------------------------------------------
# The heapq simulator below and above the limits.


def _left_at_end(policy, wl, lam, n, seed):
    """Jobs in the system when the last of ``n`` Poisson arrivals comes (heapq simulator)."""
    rng = random.Random(seed)
    needs = [int(a) for a in wl.cores_array[:, 0]]
    means = [float(m) for m in wl.mean_service()]
    probs = [float(p) for p in wl.probs]
    t, arrivals, cls = 0.0, [], []
    for _ in range(n):
        t += rng.expovariate(lam)
        arrivals.append(t)
        cls.append(rng.choices(range(len(needs)), probs)[0])
    works = [rng.expovariate(1.0 / means[c]) for c in cls]
    laws = [("exponential", m) for m in means]
    _, dep = run_trace(
        policy, wl.s, [needs[c] for c in cls], arrivals, works, classes=cls, laws=laws
    )
    return sum(d > t for d in dep)


@pytest.mark.parametrize("policy", ["msf", "maxweight", "server-filling-srpt"])
def test_chain_policies_are_stable_below_lambda_ideal(policy):
    """At 0.85 lambda_ideal on the k = 8 workload these stay small after 6,000 jobs, where
    least-servers-first (no such limit) keeps growing: the check tells the two apart."""
    lam = 0.85 * stability_limit(K8, policy).lambda_c
    assert _left_at_end(policy, K8, lam, 6000, 1) < 60
    assert _left_at_end("least-servers-first", K8, lam, 6000, 1) > 300


def test_balanced_splitting_below_and_above_its_limit():
    lam_c = stability_limit(SPLIT, "balanced-splitting:2/2+0").lambda_c
    assert _left_at_end("balanced-splitting:2/2+0", SPLIT, 0.85 * lam_c, 5000, 2) < 60
    # class 1 gets lam / 2 = 1.25 on one slot of rate 1: about 0.25 x 2000 = 500 jobs behind
    assert _left_at_end("balanced-splitting:2/2+0", SPLIT, 1.25 * lam_c, 5000, 2) > 250


# Jobs left after 20,000 arrivals at 1.07 lambda_ideal on K8 (every class's work need x
# duration is exponential of mean 1). The work in excess, 0.07 x 8 per unit time over
# 20,000 / 8.56 = 2,336, is about 1,310: as many jobs where the order does not look at sizes.
# Under SRPT order the work left sits in the largest jobs: only those above x* go unserved,
# 1.07 (1 - e^-x* (1 + x*)) = 1, x* = 4.42, about 20,000 e^-4.42 = 241 jobs. Half of each.
_ABOVE = {"server-filling-srpt": 120}


@pytest.mark.slow  # 20,000 jobs per run near the limit, heapq (minutes)
@pytest.mark.parametrize("policy", [*CHAIN, "balanced-splitting:2/2+0"])
def test_limits_hold_closer_to_the_edge(policy):
    wl = SPLIT if policy.startswith("balanced") else K8
    lam_c = stability_limit(wl, policy).lambda_c
    assert _left_at_end(policy, wl, 0.93 * lam_c, 20_000, 3) < 200
    assert _left_at_end(policy, wl, 1.07 * lam_c, 20_000, 3) > _ABOVE.get(policy, 600)
