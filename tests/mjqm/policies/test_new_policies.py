"""The policies of the size-aware, weighted and estimate families (``maxweight``,
``srpt-greedy``, ``first-fit-srpt``, ``server-filling-srpt``, ``server-filling-gittins``,
``easy-backfilling:estimate=F``): their ``select`` on hand cases worked out from the
definitions, the Gittins rank against closed forms, and the event engine's two ways of running
maxweight (per-need picks; ``select`` on every job) against each other job by job."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import BoundedPareto, Deterministic, Erlang, Exponential, HyperExponential
from jaxqueue.mjqm import Workload
from jaxqueue.mjqm.engines.events._loop import Run, _run
from jaxqueue.mjqm.policies import BalancedSplitting, Jobs, MaxWeight, parse_policy
from jaxqueue.mjqm.policies._gittins import rank, rank_table
from tests.mjqm.policies.test_policies import _engine_sums, _reference_sums

NEW = (
    "maxweight",
    "srpt-greedy",
    "first-fit-srpt",
    "server-filling-srpt",
    "server-filling-gittins",
    "easy-backfilling:estimate=2",
    "msfq",
    "balanced-splitting",
)

# per workload: msfq's threshold, balanced-splitting's partitions and helpers, and its load
_MSFQ = {"five-class-exp": "msfq:5", "rare-8": "msfq:3", "mixed-6": "msfq:2"}
_SPLIT = {
    "five-class-exp": ("balanced-splitting:2/2/0/0/0+15", 0.6),
    "rare-8": ("balanced-splitting:0/0+8", 0.8),
    "mixed-6": ("balanced-splitting:0/0/0/0+6", 0.6),
}
# srpt-greedy and first-fit-srpt serve rare-8's 8-server jobs only while no 1-server job is
# present (any one is shorter, comes first and leaves no room): a time fraction about
# exp(-0.95 lam) (the one-server jobs as an M/M/inf) against the class's load 0.05 x 4 x lam.
# At 1.8 that is 0.18 < 0.36: unstable, and a long 8-server job is passed by every shorter one
# that comes later, so the measured jobs need not ever all leave. At 1.0: 0.39 > 0.20.
_SRPT_LAM = {"rare-8": 1.0}


def _workloads():
    """Three workloads (the reference's Gittins index has no bounded Pareto, so the heavy
    tails are hyperexponential here): exponential; a rare all-server class; mixed laws."""
    rare = Workload(
        servers=8,
        cores=(1, 8),
        probs=(0.95, 0.05),
        services=(Exponential(1.0), Exponential(4.0)),
        name="rare-8",
    )
    mixed = Workload(
        servers=6,
        cores=(1, 2, 3, 6),
        probs=(0.4, 0.3, 0.2, 0.1),
        services=(
            HyperExponential(means=(0.3, 4.0), probs=(0.9, 0.1)),
            Erlang(3, 1.5),
            Exponential(1.0),
            HyperExponential(means=(0.5, 5.0), probs=(0.8, 0.2)),
        ),
        name="mixed-6",
    )
    exp5 = scenarios.get("five-class-exp")
    return {"five-class-exp": (exp5, 1.2), "rare-8": (rare, 1.8), "mixed-6": (mixed, 1.3)}


def _reference_law(law):
    """A law in the reference's form (``select_reference.gittins_index``)."""
    if isinstance(law, Exponential):
        return ("exponential", float(law.mean_))
    if isinstance(law, HyperExponential):
        return ("hyperexponential", tuple(map(float, law.probs)), tuple(map(float, law.means)))
    if isinstance(law, Erlang):
        return ("erlang", law.k, float(law.mean_))
    return ("deterministic", float(law.value))


def _jobs(need, rem, run, cls=None):
    n = len(need)
    return Jobs(
        cls=jnp.asarray(cls if cls is not None else [0] * n, jnp.int32)[:, None],
        need=jnp.asarray(need, jnp.int32)[:, None],
        rem=jnp.asarray(rem, jnp.float64)[:, None],
        age=jnp.zeros((n, 1)),
        wait=jnp.zeros((n, 1)),
        started=jnp.asarray(run)[:, None],
        run=jnp.asarray(run)[:, None],
        count=jnp.asarray([n], jnp.int32),
    )


def test_msfq_swaps_below_its_threshold():
    # s = 4, K = 4: a 1-job runs, the 4-job and a 1-job wait
    pol = parse_policy("msfq:2")
    need, run = [1, 4, 1], [True, False, False]
    got, _, state = pol.step(_jobs(need, [1.0] * 3, run), 4, (4, 1), jnp.zeros(1, jnp.int32))
    # (b) the 1-job starts (MSF: the 4-job does not fit); (c) 2 busy <= L = 2: swap on
    assert np.asarray(got)[:, 0].tolist() == [True, False, True] and int(state[0]) == 1
    # swapped, 3 free < K: nothing starts, though a 1-job fits
    got, _, state = pol.step(_jobs(need, [1.0] * 3, run), 4, (4, 1), jnp.ones(1, jnp.int32))
    assert np.asarray(got)[:, 0].tolist() == [True, False, False] and int(state[0]) == 1
    # with L = 1 the flag stays off (2 busy > 1)
    got, _, state = parse_policy("msfq:1").step(
        _jobs(need, [1.0] * 3, run), 4, (4, 1), jnp.zeros(1, jnp.int32)
    )
    assert int(state[0]) == 0
    # msfq:0 is non-preemptive MSF: largest need first
    assert _select("msfq:0", [1, 1, 2], [1.0] * 3, 2) == [False, False, True]


def test_balanced_splitting_partitions_then_helpers():
    # s = 6, R = (2, 2), H = 2: job 0 (class 0, need 2) runs in its partition; job 1 (class 0,
    # need 1): partition full -> blocked, helpers; job 2 (class 1, need 2): its partition;
    # job 3 (class 0, need 1): partition blocked -> helpers; job 4 (class 1, need 1): its
    # partition is full, the helpers too: waits
    pol = parse_policy("balanced-splitting:2/2+2")
    jobs = _jobs([2, 1, 2, 1, 1], [1.0] * 5, [True] + [False] * 4, cls=[0, 0, 1, 0, 1])
    jobs = jobs._replace(mark=jnp.zeros_like(jobs.run))
    run, mark, _ = pol.step(jobs, 6, (2, 1), jnp.zeros(1, jnp.int32))
    assert np.asarray(run)[:, 0].tolist() == [True, True, True, True, False]
    assert np.asarray(mark)[:, 0].tolist() == [False, True, False, True, False]


@pytest.mark.parametrize("bad", ["balanced-splitting:1/1+4", "balanced-splitting:4/4+4", "msfq:4"])
def test_parameters_that_do_not_fit_the_workload(bad):
    wl = Workload(
        servers=4, cores=(1, 2), probs=(0.5, 0.5), services=(Exponential(1.0), Exponential(1.0))
    )
    with pytest.raises(ValueError, match="policy"):
        parse_policy(bad).bind(wl)


def _select(name, need, rem, s, run=None, size=None, cls=None, needs=None, served=None):
    """``served``: each job's time since its first start (its age; no wait)."""
    n = len(need)
    need = jnp.asarray(need, jnp.int32)[:, None]
    jobs = Jobs(
        cls=jnp.asarray(cls if cls is not None else [0] * n, jnp.int32)[:, None],
        need=need,
        rem=jnp.asarray(rem, jnp.float64)[:, None],
        age=jnp.asarray(served if served is not None else [0.0] * n, jnp.float64)[:, None],
        wait=jnp.zeros((n, 1)),
        started=jnp.asarray(run if run is not None else [False] * n)[:, None],
        run=jnp.asarray(run if run is not None else [False] * n)[:, None],
        count=jnp.asarray([n], jnp.int32),
        size=None if size is None else jnp.asarray(size, jnp.float64)[:, None],
    )
    needs = needs or tuple(sorted(set(np.asarray(need)[:, 0].tolist()), reverse=True))
    pol = name if not isinstance(name, str) else parse_policy(name)
    return np.asarray(pol.select(jobs, s, needs))[:, 0].tolist()


def test_maxweight_serves_needs_by_weight():
    # s = 8: weights 2 x 8 (need 1), 1 x 4 (need 2), 1 x 2 (need 4), 1 x 1 (need 8)
    assert _select("maxweight", [1, 1, 4, 8, 2], [1.0] * 5, 8) == [True, True, True, False, True]
    # s = 4, needs 1 and 2 of equal weight (4): the larger need first, the 1 does not fit
    assert _select("maxweight", [1, 2, 2], [1.0] * 3, 4) == [False, True, True]
    # a heavier need first even behind older jobs: three 1s (12) before the 4 (4)
    assert _select("maxweight", [4, 1, 1, 1], [1.0] * 4, 4) == [False, True, True, True]


def test_srpt_family_orders_by_remaining_work():
    need, rem = [2, 1, 3, 1], [1.0, 5.0, 1.0, 0.1]  # work 2, 5, 3, 0.1
    assert _select("srpt-greedy", need, rem, 4) == [True, False, False, True]
    assert _select("first-fit-srpt", need, rem, 4) == [True, True, False, True]
    # the prefix in that order reaching 4 servers: jobs 3, 0, 2; largest need first: 2, then 3
    assert _select("server-filling-srpt", need, rem, 4) == [False, False, True, True]
    # ties in remaining work: arrival order
    assert _select("srpt-greedy", [1, 1, 1], [2.0, 1.0, 2.0], 2) == [True, True, False]


def test_server_filling_gittins_with_exponential_laws_orders_by_need_times_mean():
    wl = Workload(
        servers=4, cores=(1, 2), probs=(0.5, 0.5), services=(Exponential(3.0), Exponential(1.0))
    )
    pol = parse_policy("server-filling-gittins").bind(wl)
    # ranks: need 1 x 3 = 3 (class 0), need 2 x 1 = 2 (class 1): class 1 first
    got = _select(pol, [1, 2, 2, 1], [9.0] * 4, 4, size=[9.0] * 4, cls=[0, 1, 1, 0])
    assert got == [False, True, True, False]
    # remaining work does not matter, only the law and the attained service
    got = _select(pol, [1, 2, 2, 1], [0.1, 5.0, 7.0, 0.1], 4, size=[9.0] * 4, cls=[0, 1, 1, 0])
    assert got == [False, True, True, False]


def test_gittins_rank_closed_forms():
    ages, ranks = rank_table(Exponential(2.0))
    np.testing.assert_allclose(ranks, 2.0)
    ages, ranks = rank_table(Deterministic(3.0))
    np.testing.assert_allclose(np.interp(1.0, ages, ranks), 2.0)
    # hyperexponential (decreasing hazard): below the mean at age 0 (a short budget is worth
    # more), rising to the long phase's mean
    h = HyperExponential(means=(0.5, 5.0), probs=(0.9, 0.1))
    ages, ranks = rank_table(h)
    assert ranks[0] < 0.95 * float(h.mean())
    assert np.all(np.diff(ranks) >= -1e-4) and abs(ranks[-1] - 5.0) < 0.05  # (quadrature)


def _brute_rank(F, a, hi):
    """inf over b in (a, hi] of int_a^b F / (F(a) - F(b)), by scipy (quadrature, a bounded
    scalar search and the end point)."""
    from scipy import integrate, optimize

    def ratio(b):
        gain = F(a) - F(b)
        return integrate.quad(F, a, b, limit=200)[0] / gain if gain > 0 else np.inf

    lo = a + 1e-7
    best = optimize.minimize_scalar(ratio, bounds=(lo, hi), method="bounded")
    grid = np.linspace(lo, hi, 400)[1:]
    return min(best.fun, ratio(lo), ratio(hi), min(ratio(b) for b in grid))


@pytest.mark.parametrize("age", [0.0, 0.7, 3.0])
def test_gittins_rank_against_quadrature(age):
    m, p = np.array([0.5, 5.0]), np.array([0.9, 0.1])
    ages, ranks = rank_table(HyperExponential(means=tuple(m), probs=tuple(p)))
    want = _brute_rank(lambda t: float(p @ np.exp(-t / m)), age, 200.0)
    np.testing.assert_allclose(np.interp(age, ages, ranks), want, rtol=5e-3)
    lo, hi, sh = 0.5, 20.0, 1.2
    ages, ranks = rank_table(BoundedPareto(lo, hi, sh))

    def F(t):
        t = min(max(t, lo), hi)
        return ((lo / t) ** sh - (lo / hi) ** sh) / (1 - (lo / hi) ** sh)

    np.testing.assert_allclose(np.interp(age, ages, ranks), _brute_rank(F, age, hi), rtol=5e-3)


def test_easy_backfilling_plans_with_estimates():
    # s = 4; job 0 runs (need 2, size 3, 2 served: estimate 4, 2 left by it, 1 in truth);
    # job 1 (need 4) is the head; job 2 (need 2, size 1.5, estimate 2) backfills only by the
    # estimate: the reservation is at 2 by the estimates, at 1 in truth
    need, run, served = [2, 4, 2], [True, False, False], [2.0, 0.0, 0.0]
    rem, size = [1.0, 6.0, 1.5], [3.0, 6.0, 1.5]
    est = _select("easy-backfilling:estimate=2", need, rem, 4, run, size, served=served)
    assert est == [True, False, True]
    assert _select("easy-backfilling", need, rem, 4, run) == [True, False, False]
    size2, rem2 = [3.0, 6.0, 2.5], [1.0, 6.0, 2.5]  # estimate 4 > 2: waits
    est = _select("easy-backfilling:estimate=2", need, rem2, 4, run, size2, served=served)
    assert est == [True, False, False]


def test_easy_backfilling_estimate_tie_with_a_job_started_now():
    """s = 4. At time 40.43075575458172 (an end time, not a whole number) job 0 (need 3,
    size 0.3, estimate 0.5) has just started; job 1 (need 3) is the head, its reservation job
    0's estimated end, 0.5 from now; job 2 (need 1, estimate 0.5) ends by it exactly and
    backfills (as the reference simulator plans, in exact arithmetic). Job 0's remaining
    work, its start plus its size less now, is its size only up to rounding: an estimate less
    the size less the remaining work misses the tie."""
    now, size0 = 40.43075575458172, 0.3
    rem0 = (now + size0) - now
    assert rem0 != size0  # the case: the rounded remaining work is not the size
    need, run, served = [3, 3, 1], [True, False, False], [0.0, 0.0, 0.0]
    rem, size = [rem0, 2.0, 0.4], [size0, 2.0, 0.4]
    est = _select("easy-backfilling:estimate=2", need, rem, 4, run, size, served=served)
    assert est == [True, False, True]


@pytest.mark.parametrize(
    "bad",
    [
        "easy-backfilling:estimate=1",
        "easy-backfilling:estimate=x",
        "easy-backfilling:F=2",
        "maxweight:2",
        "srpt-greedy:1",
        "msfq",
        "msfq:-1",
        "msfq:x",
        "balanced-splitting:1/x+2",
        "balanced-splitting:1/2+-1",
    ],
)
def test_bad_parameters(bad):
    with pytest.raises(ValueError, match="policy"):
        parse_policy(bad)


def _sums(wl, lam, pol, key, B):
    st = _run(
        pol,
        wl,
        Run(
            jnp.asarray(lam, jnp.float64),
            key,
            jnp.arange(2, dtype=jnp.int32),
            jnp.int32(100),
            jnp.int32(800),
            jnp.int32(80_000),
            B,
            False,
            jnp.dtype(jnp.float64),
        ),
    )
    assert not np.any(np.asarray(st.overflow))
    return np.asarray(st.acc.resp), np.asarray(st.acc.wait), np.asarray(st.acc.cnt)


class _MaxWeightOnRows(MaxWeight):
    size_aware = True  # the engine runs select on every job instead of its per-need picks


@pytest.mark.slow  # two kernels on a workload of its own: 40 s of compiles
def test_maxweight_picks_equal_its_select_on_every_job():
    """The per-need picks (``_picks.by_weight``) and ``select`` run on the whole job list at
    every event give the same responses and waits, job for job."""
    wl = Workload(
        servers=6,
        cores=(1, 2, 3, 6),
        probs=(0.4, 0.3, 0.2, 0.1),
        services=(
            BoundedPareto(0.2, 50.0, 1.5),
            HyperExponential(means=(0.5, 5.0), probs=(0.9, 0.1)),
            Exponential(1.0),
            BoundedPareto(0.5, 20.0, 1.2),
        ),
    )
    key = jax.random.key(11)
    picks = _sums(wl, 1.6, MaxWeight(), key, 256)
    rows = _sums(wl, 1.6, _MaxWeightOnRows(), key, 128)
    for a, b in zip(picks, rows, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


class _SplitOnRows(BalancedSplitting):
    partitions = False  # the engine runs its step on every job instead of its per-class picks


@pytest.mark.slow  # four kernels: 30 s of compiles
def test_balanced_splitting_picks_equal_its_step_on_every_job():
    """The per-class picks (``_picks.partitions``) and ``step`` run on the whole job list at
    every event give the same sums bit for bit (the waits summed at departures in both), on
    five-class-exp and on a workload whose classes share needs (a deque per class)."""
    shared = Workload(
        servers=6,
        cores=(1, 1, 2, 3),
        probs=(0.4, 0.2, 0.3, 0.1),
        services=(
            HyperExponential(means=(0.3, 4.0), probs=(0.9, 0.1)),
            Exponential(1.0),
            Erlang(3, 1.5),
            Exponential(2.0),
        ),
    )
    cases = [
        (scenarios.get("five-class-exp"), 0.6, (2, 2, 0, 0, 0), 15),
        (shared, 1.2, (1, 1, 0, 0), 4),
    ]
    key = jax.random.key(11)
    for wl, lam, reserve, helpers in cases:
        picks = _sums(wl, lam, BalancedSplitting(reserve, helpers), key, 128)
        rows = _sums(wl, lam, _SplitOnRows(reserve, helpers), key, 64)
        for a, b in zip(picks, rows, strict=True):
            np.testing.assert_array_equal(a, b)


# in the default suite one policy per layout (the per-need picks; the per-class picks; the
# slots sorted by estimated end; select on every job, with the most machinery: Gittins ranks,
# the key order, the prefix); the others with the slow tests
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "policy",
    [
        "maxweight",
        pytest.param("srpt-greedy", marks=_SLOW),
        pytest.param("first-fit-srpt", marks=_SLOW),
        pytest.param("server-filling-srpt", marks=_SLOW),
        "server-filling-gittins",
        "easy-backfilling:estimate=2",
        "msfq",
        "balanced-splitting",
    ],
)
@pytest.mark.parametrize(
    "name",
    [
        "five-class-exp",
        pytest.param("rare-8", marks=pytest.mark.slow),
        pytest.param("mixed-6", marks=pytest.mark.slow),
    ],
)
def test_new_policy_equals_heapq_simulator_job_by_job(name, policy):
    """Same jobs (counter-based inputs), same responses and waits as the heapq simulator
    written separately from the definitions, to 1e-9, on three workloads."""
    wl, lam = _workloads()[name]
    if policy == "msfq":
        policy = _MSFQ[name]
    elif policy == "balanced-splitting":
        policy, lam = _SPLIT[name]
    elif policy in ("srpt-greedy", "first-fit-srpt"):
        lam = _SRPT_LAM.get(name, lam)
    key = jax.random.key(11)
    # five-class-exp on the engine's first buffer (first_buffer: 16 rows for the pairwise
    # policies, 32 for the other all-rows ones, a fraction of the compilation of 128; msfq
    # and EASY with estimates, whose deque would have 64 entries, on 32; no replication
    # overflows, which _engine_sums asserts); the other workloads queue further
    B = None if name == "five-class-exp" else 128
    if name == "five-class-exp" and policy.startswith(("msfq", "easy-backfilling")):
        B = 32
    resp, wait, cnt = _engine_sums(wl, lam, policy, key, 2, 100, 1000, B=B)
    laws = [_reference_law(law) for law in wl.services]
    for r in range(2):
        ref = _reference_sums(wl, lam, policy, key, r, 100, 1000, laws)
        np.testing.assert_array_equal(cnt[:, r], ref[2])
        np.testing.assert_allclose(resp[:, r], ref[0], rtol=1e-9)
        np.testing.assert_allclose(wait[:, r], ref[1], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("age", [0.0, 0.4, 2.0, 6.0])
def test_gittins_closed_forms_equal_the_definition(age):
    """The closed forms of the rank (hyperexponential: one over the hazard; Erlang: the mean
    residual life) against the infimum over budgets by quadrature (:func:`_brute_rank`)."""
    m, p = np.array([0.3, 4.0]), np.array([0.9, 0.1])
    law = HyperExponential(means=tuple(m), probs=tuple(p))
    got = float(rank(law, None, jnp.asarray([age]))[0])
    want = _brute_rank(lambda t: float(p @ np.exp(-t / m)), age, age + 200.0)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    rate = 2.0  # Erlang(3, mean 1.5)

    def F(t):
        x = rate * t
        return float(np.exp(-x) * (1 + x + x * x / 2))

    got = float(rank(Erlang(3, 1.5), None, jnp.asarray([age]))[0])
    np.testing.assert_allclose(got, _brute_rank(F, age, age + 60.0), rtol=1e-4)
