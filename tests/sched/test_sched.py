"""The interruption scheduler (``jaxqueue.sched``) against independent ground truth.

* closed forms: M/M/1 (any theta), Pollaczek-Khinchine (FCFS M/G/1), processor sharing
  ``1 / (mu - lam)`` (theta -> 0), the M-model balanced-fairness service rates of
  ``bf-clusters`` eqs. (10)-(11) coded here;
* the exact balanced-fairness engine ``jaxqueue.pools.solve`` (a random 8-server graph, slow)
  and the structured random-assignment curve: with exponential sizes the law does not depend
  on theta;
* the separately written event-driven baseline ``tests/references/sched_events.py`` for
  non-exponential laws (FCFS and m = 1).

Statistical checks use fixed keys and 99% Student-t intervals across replications. The default
suite runs small sizes; ``@pytest.mark.slow`` repeats the acceptance checks at larger sizes.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
import scipy.stats

from jaxqueue.dist import HyperExponential, get_law
from jaxqueue.pools import Pool, solve
from jaxqueue.sched import (
    ClassAssignment,
    RandomAssignment,
    check_stability,
    simulate,
    simulate_sweep,
)
from tests.helpers import assert_within_ci
from tests.references.sched_events import simulate_events

LEVEL = 0.99
M_VALUES = np.array([0.0, 1.0, 5.0])  # theta = inf, 1, 0.2 for unit-mean sizes


def mmodel_delays(lam1, lam2, mu1, mu2, mu3):
    """Mean delays 1 / gamma_i from ``bf-clusters`` eqs. (10)-(11) (written out here)."""
    mu = mu1 + mu2 + mu3
    rho = (lam1 + lam2) / mu
    rho1, rho2 = lam1 / (mu1 + mu3), lam2 / (mu2 + mu3)
    den = mu - (mu1 + mu3) * rho1 - (mu2 + mu3) * rho2 + mu3 * rho1 * rho2
    g1 = 1 / (1 / (mu * (1 - rho)) + mu2 / (mu1 + mu3) * (1 - rho2) / (1 - rho1) / den)
    g2 = 1 / (1 / (mu * (1 - rho)) + mu1 / (mu2 + mu3) * (1 - rho1) / (1 - rho2) / den)
    return np.array([1 / g1, 1 / g2])


def sweep(pool, lam, law, ms, *, key, reps=12, jumps=20_000, warmup=5_000, q=32):
    lam = np.asarray(lam, float)
    lams = np.broadcast_to(lam, (len(ms), *lam.shape)).copy()
    return simulate_sweep(
        pool,
        lams,
        law,
        np.asarray(ms),
        key=jax.random.key(key),
        replications=reps,
        jumps=jumps,
        warmup=warmup,
        queue_size=q,
        level=LEVEL,
    )


def check_points(res, truth, what):
    assert res.status == "ok"
    for p in range(res.delay.shape[0]):
        assert_within_ci(
            res.delay[p], res.delay_low[p], res.delay_high[p], truth, what=f"{what} p{p}"
        )


# --------------------------------------------------------------------------- single server


def test_mm1_any_theta():
    lam = 0.6
    for m in M_VALUES:  # one point per run: the shapes of test_buffer_grows_... (one compile)
        res = sweep(ClassAssignment([[0]], [1.0]), [lam], get_law("exp"), [m], key=2)
        check_points(res, np.array([1 / (1 - lam)]), f"M/M/1 m={m}")
        # interruptions per job: Poisson(m X) given X, mean m sigma = m
        np.testing.assert_allclose(res.interruptions_per_job, [m], rtol=0.05, atol=0.01)
        # work conservation: the mean capacity in use is lam * sigma
        np.testing.assert_allclose(res.busy, lam, rtol=0.03)


def test_single_server_fcfs_pk_and_ps_limit():
    """FCFS: Pollaczek-Khinchine; theta -> 0 (m large): processor sharing 1 / (mu - lam)."""
    law = HyperExponential(np.array([5.0, 0.2]), np.array([1 / 6, 5 / 6]))
    lam = 0.5
    # one point per run (a point's numbers do not depend on the others'): the summary's shapes
    # are test_mm1_any_theta's
    fcfs, ps_run = (
        sweep(
            ClassAssignment([[0]], [1.0]),
            [lam],
            law,
            [m],
            key=2,
            reps=12,
            jumps=60_000,
            warmup=5_000,
            q=64,  # the size a 32-job buffer grew to (each size is a compile)
        )
        for m in (0.0, 30.0)
    )
    es2 = float(law.var() + law.mean() ** 2)
    pk = 1.0 + lam * es2 / (2 * (1 - lam))
    ps = 1.0 / (1.0 - lam)
    assert_within_ci(fcfs.delay[0], fcfs.delay_low[0], fcfs.delay_high[0], [pk], what="P-K")
    assert_within_ci(ps_run.delay[0], ps_run.delay_low[0], ps_run.delay_high[0], [ps], what="PS")
    assert ps_run.delay_high[0] < pk  # the two regimes are told apart


# --------------------------------------------------------------------------- BF, exponential


_MMODEL_CASES = [
    ([[0, 2], [1, 2]], [1.0, 1.0, 1.0], [1.05, 1.05]),  # m-model-sym, rho = 0.7
    ([[0, 1], [1]], [1.0, 1.0], [0.6, 0.6]),
]


def _mmodel_rates(mu):
    """(mu1, mu2, mu3) of eqs. (10)-(11) for the two cases above (unit rates)."""
    return (mu[0], 1.0, mu[1]) if len(mu) == 3 else (mu[0], 0.0, mu[1])


@pytest.mark.parametrize(
    "server_sets,mu,lam",
    [
        _MMODEL_CASES[0],
        # the same check on an asymmetric graph (slow too: test_random_8_server_graph_...)
        pytest.param(*_MMODEL_CASES[1], marks=pytest.mark.slow),
    ],
    ids=["sym", "asym"],
)
def test_mmodel_exponential_matches_bf(server_sets, mu, lam):
    # the closed form coded above (jaxqueue.pools.solve against it: test_slow_pools_solve_...,
    # and in the default suite tests/pools/test_core.py's M-model closed forms)
    exact = mmodel_delays(*lam, *_mmodel_rates(mu))
    for m in M_VALUES:  # one point per run: sym has the shapes of test_cli_json_contract
        res = sweep(ClassAssignment(server_sets, mu), lam, get_law("exp"), [m], key=6)
        check_points(res, exact, f"M model m={m}")


@pytest.mark.slow
@pytest.mark.parametrize("server_sets,mu,lam", _MMODEL_CASES, ids=["sym", "asym"])
def test_slow_pools_solve_is_the_mmodel_closed_form(server_sets, mu, lam):
    """The exact engine against eqs. (10)-(11) as coded here (was a line of the default
    test_mmodel_exponential_matches_bf; the default suite checks the engine against the M
    model's closed forms in tests/pools/test_core.py)."""
    exact = np.asarray(solve(Pool(server_sets, np.asarray(mu)), np.asarray(lam)).T)
    np.testing.assert_allclose(exact, mmodel_delays(*lam, *_mmodel_rates(mu)), rtol=1e-9)


def random_graph(seed=8, n_servers=8, n_classes=5):
    rng = np.random.default_rng(seed)
    sets = [
        sorted(rng.choice(n_servers, rng.integers(1, 4), replace=False).tolist())
        for _ in range(n_classes)
    ]
    covered = set().union(*sets)
    sets.append(sorted(set(range(n_servers)) - covered) or [0])
    mu = rng.uniform(0.5, 2.0, n_servers)
    return sets, mu


def max_uniform_load(sets, mu):
    """Largest c such that c * (1, ..., 1) is stable (bisection on the stability check)."""
    lo, hi = 0.0, float(np.sum(mu))
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        try:
            check_stability(ClassAssignment(sets, mu), np.full(len(sets), mid))
            lo = mid
        except ValueError:
            hi = mid
    return lo


@pytest.mark.slow
def test_random_8_server_graph_matches_bf():
    """Slow (a kernel configuration of its own, and the exact engine's compile for its graph).
    Default guard: test_mmodel_exponential_matches_bf[sym], the same property (exponential
    sizes: every m's simulated delays cover the exact balanced-fairness delays) on the same
    class-queue kernel; test_class_queues_and_server_queues_make_the_same_jumps runs an
    asymmetric 4-class graph with unequal capacities."""
    sets, mu = random_graph()
    pool = Pool(sets, mu)
    lam = np.full(len(sets), 0.6 * max_uniform_load(sets, mu))
    exact = np.asarray(solve(pool, lam).T)
    res = sweep(ClassAssignment(sets, mu), lam, get_law("exp"), M_VALUES, key=5)
    check_points(res, exact, "random graph")


_SIZES_FULL = dict(replications=12, jumps=20_000, warmup=5_000)
_SIZES_FAST = dict(replications=8, jumps=5_000, warmup=1_000)


@pytest.mark.parametrize(
    "S,dtype,ms,sizes",
    [
        (10, None, [0.0], _SIZES_FULL),
        # m = 1 on the same kernel at S = 40: test_random_assignment_row_overflow_grows_the_buffer
        pytest.param(10, None, [1.0], _SIZES_FULL, marks=pytest.mark.slow),
        # S = 40 in float64 at small size: test_random_assignment_row_overflow_grows_the_buffer
        pytest.param(40, None, [0.0, 1.0], _SIZES_FULL, marks=pytest.mark.slow),
        (40, np.float32, [1.0], _SIZES_FAST),
        pytest.param(40, np.float32, [0.0, 1.0], _SIZES_FULL, marks=pytest.mark.slow),
    ],
    ids=["S10", "S10-m1", "S40", "S40-f32-fast", "S40-f32"],
)
def test_random_assignment_matches_bf_curve(S, dtype, ms, sizes):
    """S = 40 > 32: the per-server layout draws a block of servers, then a server in it."""
    from jaxqueue.pools.structured import random_assignment_bf_curve

    d, rho = 2, 0.7
    delay, _ = random_assignment_bf_curve(S, d, np.array([rho]))
    # one point per run and the buffer sizes the runs grew to from 32 and 64 (each size and
    # shape is a compile; S = 10 shares test_cli_json_contract's)
    for m in ms:
        res = simulate_sweep(
            RandomAssignment(S, d), np.array([[rho * S]]), get_law("exp"), np.array([m]),
            key=jax.random.key(5), queue_size=64 if S == 10 else 128, level=LEVEL, dtype=dtype,
            **sizes,
        )  # fmt: skip
        assert res.status == "ok"
        assert_within_ci(
            res.delay_all[0],
            res.delay_all_low[0],
            res.delay_all_high[0],
            float(delay[0]),
            what=f"random assignment m={m}",
        )


# --------------------------------------------------------------------------- baseline


def _baseline_ci(server_sets, mu, lam, law, m, *, reps, events, warmup, random_d=0):
    lam = np.atleast_1d(np.asarray(lam, float))
    delays = []
    for r in range(reps):
        out = simulate_events(
            server_sets,
            mu,
            lam,
            law,
            m=m,
            events=events,
            warmup=warmup,
            seed=1000 + r,
            random_d=random_d,
        )
        delays.append(out["L"] / lam if not random_d else out["L"] / lam.sum())
    delays = np.asarray(delays)
    return delays.mean(0), delays.std(0, ddof=1) / np.sqrt(reps)


def _agree(res, p, mean_b, se_b, reps_b, level=LEVEL):
    """Two-sample check: |a - b| <= t sqrt(se_a^2 + se_b^2), t with the smaller sample's df."""
    q = res.delay_high[p] - res.delay[p]
    se_a = q / scipy.stats.t.ppf(0.5 + res.level / 2, res.replications - 1)
    z = scipy.stats.t.ppf(0.5 + level / 2, min(reps_b, res.replications) - 1)
    gap = np.abs(res.delay[p] - mean_b)
    assert np.all(gap <= z * np.sqrt(se_a**2 + se_b**2)), (res.delay[p], mean_b, se_a, se_b)


# The event-driven baseline's (mean delay per class, standard error) for
# test_baseline_agrees_bimodal_fcfs_and_m1 (m = 0, 1): _baseline_ci(..., reps=5, events=15_000,
# warmup=2_000) of tests/references/sched_events.py; test_slow_baseline_values_tabulated reruns it.
_BASELINE_SETUP = ([[0, 2], [1, 2]], [1.0, 1.0, 1.0], [0.9, 0.9], "bimodal")
_BASELINE_VALUES = {
    0.0: ([1.8415584980100803, 1.890056054578912], [0.05367706964068379, 0.05007747811829125]),
    1.0: ([1.4299140074152712, 1.4576181295590178], [0.07061667933679984, 0.0340616073378175]),
}


def test_baseline_agrees_bimodal_fcfs_and_m1():
    sets, mu, lam, name = _BASELINE_SETUP
    law = get_law(name)
    # one point per run (a point's numbers do not depend on the others'): the summary's shapes
    # are test_mmodel_exponential_matches_bf's
    runs = [
        sweep(ClassAssignment(sets, mu), lam, law, [m], key=6, jumps=60_000, q=64)
        for m in (0.0, 1.0)
    ]
    for res, m in zip(runs, (0.0, 1.0), strict=True):
        mean_b, se_b = (np.asarray(v) for v in _BASELINE_VALUES[m])
        _agree(res, 0, mean_b, se_b, 5)
    # the law matters under FCFS: bimodal FCFS is slower than its m = 1 version
    assert np.all(runs[0].delay_low[0] > runs[1].delay_high[0])


# --------------------------------------------------------------------------- contract


def test_overflow_is_reported_not_truncated():
    res = simulate(
        ClassAssignment([[0]], [1.0]),
        [0.95],
        get_law("exp"),
        m=0.0,
        key=jax.random.key(0),
        replications=12,
        jumps=20_000,
        warmup=0,
        queue_size=16,
        max_queue_size=16,
    )
    assert res.status == "overflow" and res.overflow > 0


def test_buffer_grows_and_result_independent_of_buffer():
    pool, law = ClassAssignment([[0]], [1.0]), get_law("exp")
    kw = dict(m=1.0, key=jax.random.key(3), replications=12, jumps=20_000, warmup=0)
    small = simulate(pool, [0.9], law, queue_size=16, **kw)
    big = simulate(pool, [0.9], law, queue_size=64, **kw)
    assert small.status == "ok" and small.queue_size > 16 and small.n_max > 16
    np.testing.assert_array_equal(small.L_reps, big.L_reps)


def test_progress_tells_the_fraction_done_and_changes_no_number():
    """``progress``: the blocks done out of all (45 blocks of 200 jumps, warm-up included, told
    every 3 blocks), from the start again for the point rerun with a larger buffer; every
    number as in one call without it."""
    pool, lam = ClassAssignment([[0]], [1.0]), [[0.3], [0.9]]
    kw = dict(key=jax.random.key(3), replications=8, jumps=5000, warmup=4000, chunk=200)
    kw.update(law=get_law("exp"), m=np.ones(2), queue_size=16, max_queue_size=32)
    told = []
    res = simulate_sweep(pool, lam, progress=told.append, **kw)
    plain = simulate_sweep(pool, lam, **kw)
    steps = [f"{k}/45 blocks of 200 jumps ({k / 45:.0%})" for k in range(3, 46, 3)]
    assert steps[0] == "3/45 blocks of 200 jumps (7%)" and steps[-1].startswith("45/45")
    again = [f"1 of 2 points again with a buffer of 32: {t}" for t in steps]
    assert list(plain.queue_size) == [16, 32] and told == steps + again
    for name, value in vars(plain).items():
        if name not in ("jumps_per_s", "compile_s"):
            np.testing.assert_array_equal(getattr(res, name), value, err_msg=name)


def test_random_assignment_row_overflow_grows_the_buffer():
    """A full server row (C = 8 entries at a 64-job buffer) drops the arrival and counts it;
    the rerun with a larger buffer (and rows) gives the numbers of a large buffer from the
    start: without overflow the jumps do not depend on the sizes. The run covers the
    balanced-fairness curve of random assignment at S = 40 (the per-server layout's blocks).
    (Started at 64 jobs, not 16: each buffer size the run grows through is a compile.)"""
    from jaxqueue.pools.structured import random_assignment_bf_curve
    from jaxqueue.sched._kernel import KernelSpec

    assert KernelSpec(64, 40, 2, 1, 2, True, 100).row_size == 8
    pool, law = RandomAssignment(40, 2), get_law("exp")
    kw = dict(m=1.0, key=jax.random.key(4), level=LEVEL, **_SIZES_FAST)
    stuck = simulate(pool, 32.0, law, queue_size=64, max_queue_size=64, **kw)
    assert stuck.status == "overflow" and stuck.overflow > 0
    small = simulate(pool, 32.0, law, queue_size=64, **kw)
    big = simulate(pool, 32.0, law, queue_size=256, **kw)
    assert small.queue_size > 64 and small.overflow == 0
    np.testing.assert_array_equal(small.L_reps, big.L_reps)
    delay, _ = random_assignment_bf_curve(40, 2, np.array([0.8]))
    assert big.status == "ok"
    assert_within_ci(
        big.delay_all, big.delay_all_low, big.delay_all_high, float(delay[0]), what="S = 40"
    )


def test_pick_two_levels_lands_in_the_right_interval():
    """``_pick`` on more than 32 rates (blocks of ceil(sqrt(L))): the index whose cumulated
    interval holds the target, zero rates never picked, and the cumulated rate before it."""
    from jaxqueue.sched._kernel import _pick

    rng = np.random.default_rng(0)
    # jitted: one compile per L (an eager vmap compiles _pick's operations one by one)
    pick = jax.jit(jax.vmap(lambda u, r: _pick(r, u), in_axes=(0, None)))
    for L in (33, 101, 400):
        rates = rng.exponential(size=L) * (rng.random(L) < 0.6)
        us = rng.random(200)
        idx, total, before = pick(us, rates)
        cum = np.cumsum(rates)
        want = np.searchsorted(cum, us * cum[-1], side="right")
        np.testing.assert_array_equal(np.asarray(idx), want)
        assert np.all(rates[np.asarray(idx)] > 0)
        np.testing.assert_allclose(np.asarray(total), cum[-1], rtol=1e-12)
        np.testing.assert_allclose(np.asarray(before), (cum - rates)[want], rtol=1e-12, atol=1e-12)


def test_validation():
    law = get_law("exp")
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="unstable"):
        simulate(ClassAssignment([[0, 1], [1]], [1.0, 1.0]), [0.5, 1.0], law, key=key)
    with pytest.raises(ValueError, match="unstable"):
        simulate(RandomAssignment(10, 2), 10.5, law, key=key)
    with pytest.raises(ValueError, match="server_sets"):
        ClassAssignment([[0, 3]], [1.0, 1.0])
    with pytest.raises(ValueError, match="degrees must"):
        RandomAssignment(3, 4)
    with pytest.raises(ValueError, match="one degree"):
        simulate(RandomAssignment(10, (2, 3), p=[0.5, 0.5]), 5.0, law, key=key)
    with pytest.raises(ValueError, match="replications"):
        simulate(ClassAssignment([[0]], [1.0]), [0.5], law, key=key, replications=1)
    with pytest.raises(ValueError, match="m "):
        simulate(ClassAssignment([[0]], [1.0]), [0.5], law, m=-1.0, key=key)
    with pytest.raises(ValueError, match="phases"):
        simulate(ClassAssignment([[0]], [1.0]), [0.5], get_law("det"), key=key)
    for kw, match in (
        ({"queue_size": 0}, "queue_size must be an integer >= 1"),
        ({"queue_size": 64, "max_queue_size": 32}, "max_queue_size"),
    ):
        with pytest.raises(ValueError, match=match):  # was a traceback from inside the kernel
            simulate(ClassAssignment([[0]], [1.0]), [0.5], law, key=key, **kw)
    # the stability check is the pools LP: a bottleneck of several classes is named
    with pytest.raises(ValueError, match=r"bottleneck classes \[0, 1\]"):
        simulate(ClassAssignment([[0], [0]], [1.0]), [0.6, 0.6], law, key=key)


def test_float32_keeps_dtype_and_agrees():
    res = simulate(
        ClassAssignment([[0]], [1.0]),
        [0.5],
        get_law("exp"),
        m=1.0,
        key=jax.random.key(9),
        replications=12,
        jumps=20_000,
        warmup=2_000,
        queue_size=32,
        dtype=np.float32,
        level=LEVEL,
    )
    assert_within_ci(res.delay, res.delay_low, res.delay_high, [2.0], what="float32 M/M/1")


def test_cli_json_contract(capsys, tmp_path):
    import json

    from jaxqueue.cli import main

    spec = tmp_path / "pool.json"
    spec.write_text(json.dumps({"server_sets": [[0, 2], [1, 2]], "mu": [1.0, 1.0, 1.0]}))
    args = ["--rho", "0.5", "--law", "exp", "--m", "1", "--replications", "12", "--jumps",
            "4000", "--json", "--queue-size", "32"]  # fmt: skip
    outs = []
    for pool in ("m-model-sym", str(spec)):
        assert main(["sched", "simulate", "--pool", pool, *args]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["classes"] == outs[1]["classes"]  # the preset is the file's pool
    out = outs[0]
    assert len(out["classes"]) == 2
    for c in out["classes"]:
        assert c["delay_ci"][0] <= c["delay"] <= c["delay_ci"][1]
        assert c["service_rate_ci"][0] <= c["service_rate"] <= c["service_rate_ci"][1]
    assert out["delay_ci"][0] <= out["delay"] <= out["delay_ci"][1]
    rc = main(
        [
            "sched",
            "simulate",
            "--pool",
            "random:S=10,d=2",
            "--rho",
            "0.5",
            "--law",
            "exp",
            "--m",
            "0",
            "--replications",
            "12",
            "--events",
            "3000",
            "--json",
            "--queue-size",
            "64",  # the shapes of test_random_assignment_matches_bf_curve[S10]
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["delay"] >= 0.5 and "classes" not in out  # a job is served at rate <= d = 2
    assert main(["sched", "simulate", "--pool", "random:K=12,d=2", "--rho", "1.5"]) == 1


# --------------------------------------------------------------------------- slow versions


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sym", "asym", "graph8"])
@pytest.mark.parametrize("rho", [0.5, 0.85])
def test_slow_exponential_matches_bf(name, rho):
    if name == "graph8":
        # loads as fractions of the stability limit of the uniform direction (a fixed total load
        # would leave one class near its own saturation, beyond what these run lengths resolve)
        sets, mu = random_graph()
        lam = np.full(len(sets), rho * max_uniform_load(sets, mu))
    else:
        sets, mu = ([[0, 2], [1, 2]], np.ones(3)) if name == "sym" else ([[0, 1], [1]], np.ones(2))
        lam = np.full(len(sets), rho * np.sum(mu) / len(sets))
    exact = np.asarray(solve(Pool(sets, mu), lam).T)
    res = sweep(
        ClassAssignment(sets, mu),
        lam,
        get_law("exp"),
        M_VALUES,
        key=11,
        reps=30,
        jumps=200_000,
        warmup=50_000,
        q=64,
    )
    check_points(res, exact, f"{name} rho={rho}")


@pytest.mark.slow
def test_slow_baseline_values_tabulated():
    """The event-driven baseline's numbers the default test_baseline_agrees_bimodal_fcfs_and_m1
    reads, recomputed."""
    sets, mu, lam, name = _BASELINE_SETUP
    for m, (mean, se) in _BASELINE_VALUES.items():
        mean_b, se_b = _baseline_ci(sets, mu, lam, get_law(name), m, reps=5, events=15_000,
                                    warmup=2_000)  # fmt: skip
        np.testing.assert_allclose(mean_b, mean, rtol=1e-12)
        np.testing.assert_allclose(se_b, se, rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("law", ["bimodal", "hyperexp", "zipf"])
def test_slow_baseline_agrees(law):
    sets, mu, lam = [[0, 2], [1, 2]], [1.0, 1.0, 1.0], [1.05, 1.05]
    lw = get_law(law)
    res = sweep(
        ClassAssignment(sets, mu),
        lam,
        lw,
        [0.0, 1.0],
        key=12,
        reps=30,
        jumps=200_000,
        warmup=20_000,
        q=64,
    )
    for p, m in enumerate([0.0, 1.0]):
        mean_b, se_b = _baseline_ci(sets, mu, lam, lw, m, reps=10, events=50_000, warmup=5_000)
        _agree(res, p, mean_b, se_b, 10)


@pytest.mark.slow
def test_slow_random_assignment_baseline():
    S, d, rho = 20, 3, 0.7
    lw = get_law("bimodal")
    res = sweep(
        RandomAssignment(S, d),
        [rho * S],
        lw,
        [0.0, 1.0],
        key=13,
        reps=20,
        jumps=200_000,
        warmup=20_000,
        q=128,
    )
    for p, m in enumerate([0.0, 1.0]):
        mean_b, se_b = _baseline_ci(
            None, np.ones(S), [rho * S], lw, m, reps=8, events=30_000, warmup=3_000, random_d=d
        )
        q = res.delay_all_high[p] - res.delay_all[p]
        se_a = q / scipy.stats.t.ppf(0.5 + res.level / 2, res.replications - 1)
        gap = abs(res.delay_all[p] - mean_b[0])
        t = scipy.stats.t.ppf(0.5 + LEVEL / 2, 8 - 1)
        assert gap <= t * np.sqrt(se_a**2 + se_b[0] ** 2)


@pytest.mark.slow
def test_slow_sharded_replications_match_single_device():
    """Replications sharded over 4 host devices (6 padded to 8) give the same numbers, with
    ``progress`` (the run in parts) too."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    code = (
        "import jax, json, numpy as np; jax.config.update('jax_enable_x64', True)\n"
        "from jaxqueue.sched import ClassAssignment, simulate\n"
        "from jaxqueue.dist import get_law\n"
        "r = simulate(ClassAssignment([[0, 2], [1, 2]], [1.0, 1.0, 1.0]), [1.0, 1.0],"
        " get_law('bimodal'), m=1.0, key=jax.random.key(5), replications=6, jumps=3000,"
        " warmup=0, queue_size=32)\n"
        "p = simulate(ClassAssignment([[0, 2], [1, 2]], [1.0, 1.0, 1.0]), [1.0, 1.0],"
        " get_law('bimodal'), m=1.0, key=jax.random.key(5), replications=6, jumps=3000,"
        " warmup=0, queue_size=32, progress=lambda text: None)\n"
        "print(json.dumps({'n': len(jax.devices()), 'L': r.L_reps.tolist(),"
        " 'P': p.L_reps.tolist()}))\n"
    )
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
    env["PYTHONPATH"] = str(root)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=root
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["n"] == 4
    assert got["P"] == got["L"]  # the run in parts, its state kept on the devices
    ref = simulate(
        ClassAssignment([[0, 2], [1, 2]], [1.0, 1.0, 1.0]),
        [1.0, 1.0],
        get_law("bimodal"),
        m=1.0,
        key=jax.random.key(5),
        replications=6,
        jumps=3000,
        warmup=0,
        queue_size=32,
    )
    np.testing.assert_allclose(np.asarray(got["L"]), ref.L_reps, rtol=1e-12)


def test_a_run_that_has_not_reached_steady_state_is_flagged():
    # M/M/1 at rho = 0.98 started empty, no warm-up, 20k jumps (~ the relaxation time): the
    # number of jobs still grows between the two halves of the run; a long warm-up removes it.
    pool, law = ClassAssignment([[0]], [1.0]), get_law("exp")
    kw = dict(m=0.0, key=jax.random.key(5), replications=100, queue_size=512)
    short = simulate(pool, [0.98], law, jumps=20_000, warmup=0, **kw)
    assert short.status == "nonstationary" and not short.stationary and short.drift > 0.05
    assert short.delay_high < 1 / (1 - 0.98)  # the biased estimate the status warns about
    # (rho = 0.8: tau_int ~ (1 + rho) / (1 - rho)^2 = 45, so 10k jumps ~ 5.5k time units
    # are ~60 effective observations per replication, far above MIN_EFFECTIVE)
    settled = simulate(pool, [0.8], law, jumps=10_000, warmup=10_000, **kw)
    assert settled.status == "ok" and settled.stationary


# --------------------------------------------------------------------------- honest status


def _sched_cli_json(capsys, *args):
    """Run ``jaxqueue sched simulate ... --json``; the JSON object and the stderr lines."""
    import json

    from jaxqueue.cli import main

    assert main(["sched", "simulate", *args, "--json"]) == 0
    cap = capsys.readouterr()
    return json.loads(cap.out), cap.err.strip().splitlines()


def _assert_not_ok_and_positive(out, err):
    assert out["status"] != "ok", out
    lows = [out["delay_ci"][0], out["service_rate_ci"][0]]
    lows += [c[k][0] for c in out["classes"] for k in ("delay_ci", "service_rate_ci")]
    assert min(lows) >= 0.0, lows  # never a negative bound on a positive quantity
    warnings = [line for line in err if "warning" in line]
    assert len(warnings) == 1 and out["status"] in warnings[0], err


@pytest.mark.slow
def test_cli_few_replications_near_saturation_is_not_ok(capsys):
    """Slow (4 replications: a kernel configuration of its own). Default guards: the same
    status path at 7 replications in
    test_few_replications_are_unconverged_with_a_positive_lower_bound (unconverged, a positive
    lower bound), and the command line's non-ok status near
    saturation (one warning line naming it, no negative bound) in
    test_cli_one_short_chunk_near_saturation_is_not_ok."""
    # issue 14: 4 replications at rho = 0.99 printed delay 9.65 in [-3.07, 22.36], status ok
    out, err = _sched_cli_json(
        capsys, "--pool", "m-model-sym", "--rho", "0.99", "--law", "exp", "--m", "1",
        "--jumps", "2000", "--replications", "4",
    )  # fmt: skip
    _assert_not_ok_and_positive(out, err)
    assert out["delay_ci"][0] < out["delay"] < out["delay_ci"][1]


def test_cli_one_short_chunk_near_saturation_is_not_ok(capsys):
    # issue 14: 100 replications of 500 jumps (one chunk, so no drift test before) printed
    # 7.3 [6.3, 8.3], status ok, against the exact (balanced fairness) 34.19
    exact = float(mmodel_delays(1.485, 1.485, 1.0, 1.0, 1.0)[0])  # bf-clusters eqs. (10)-(11)
    out, err = _sched_cli_json(
        capsys, "--pool", "m-model-sym", "--rho", "0.99", "--law", "exp", "--m", "0",
        "--jumps", "500", "--replications", "100",
    )  # fmt: skip
    _assert_not_ok_and_positive(out, err)
    assert out["status"] == "nonstationary" and out["n_eff"] < 5
    assert out["drift"] != 0.0  # the halves are compared inside the one chunk
    assert out["delay_ci"][1] < exact  # the wrong interval the status warns about


@pytest.mark.slow
def test_replication_intervals_cover_at_the_nominal_rate():
    """The default suite: the same log-t intervals hold the exact M/M/1 delay (and the
    closed forms of M/M/1 at any theta) in test_mm1_any_theta, and the status below
    MIN_REPLICATIONS with a positive lower bound in
    test_few_replications_are_unconverged_with_a_positive_lower_bound."""
    # 800 replications of M/M/1 (rho = 0.7, m = 1, exact delay 1 / (1 - rho)) cut into 100
    # experiments of MIN_REPLICATIONS = 8: their 95% log-t intervals hold the exact value
    # about 95 times (binomial sd 2.2); too narrow or too wide intervals leave [88, 99].
    from jaxqueue.sched import MIN_REPLICATIONS
    from jaxqueue.stats import log_mean_ci

    rho = 0.7
    res = simulate(
        ClassAssignment([[0]], [1.0]), [rho], get_law("exp"), m=1.0, key=jax.random.key(14),
        replications=100 * MIN_REPLICATIONS, jumps=4000, warmup=2000, queue_size=64,
    )  # fmt: skip
    assert res.status == "ok" and res.n_eff > 20
    groups = res.L_reps[:, 0].reshape(100, MIN_REPLICATIONS) / rho
    est = log_mean_ci(groups, axis=1, level=0.95)
    low, high = np.asarray(est.low), np.asarray(est.high)
    covered = int(np.sum((low <= 1 / (1 - rho)) & (1 / (1 - rho) <= high)))
    assert 88 <= covered <= 99, covered
    assert np.all(low > 0)


def test_few_replications_are_unconverged_with_a_positive_lower_bound():
    """The experiments of the coverage test above run as simulate() would call them, with
    fewer than MIN_REPLICATIONS: status unconverged, the log-t interval's lower end above 0
    (the run of tests/stats/test_results.py::test_scheduler_too_few_replications_throw)."""
    from jaxqueue.sched import MIN_REPLICATIONS

    few = simulate(
        ClassAssignment([[0]], [1.0]), [0.7], get_law("exp"), m=1.0, key=jax.random.key(14),
        replications=MIN_REPLICATIONS - 1, jumps=4000, warmup=2000, queue_size=64,
    )  # fmt: skip
    assert few.status == "unconverged" and few.delay_low > 0


# --------------------------------------------------------------------------- two layouts
class _ServerSpec(__import__("jaxqueue.sched._kernel", fromlist=["KernelSpec"]).KernelSpec):
    """The per-server layout on a class pool, with the class-queue layout's uniforms."""

    @property
    def class_queues(self) -> bool:
        return False

    @property
    def n_uniforms(self) -> int:
        from jaxqueue.sched._kernel import KernelSpec

        return KernelSpec(*(getattr(self, f) for f in _SPEC_FIELDS)).n_uniforms


_SPEC_FIELDS = (
    "queue_size",
    "n_servers",
    "width",
    "n_classes",
    "random_d",
    "single_phase",
    "chunk",
)


@functools.partial(jax.jit, static_argnums=0)
def _run_chains(spec, params, keys):
    """One warm-up chunk and five measured chunks per key; one compile per spec and shapes
    (the specs' classes differ, so the two layouts never share one), m is a traced parameter."""
    from jaxqueue.sched import _kernel

    return jax.vmap(lambda k: _kernel.run_chain(spec, params, k, 1, 5))(keys)


def _mixed_law():
    """40 components (more than ``_UNROLL``) of 1 to 4 phases at three phase rates, mean 1:
    every path of hyperexp (several rates) and zipf (several phase counts) at once."""
    from jaxqueue.dist import PhaseMixture

    k = np.arange(40)
    counts, rates = 1 + k % 4, np.array([5.0, 1.5, 0.3])[k % 3]
    probs = 0.9**k / np.sum(0.9**k)
    mean = float(np.sum(probs * counts / rates))
    return PhaseMixture(counts, rates * mean, probs)


@pytest.mark.parametrize(
    "law",
    [
        # the mixture covers every path of the others (one and several rates and phase
        # counts, more components than _UNROLL); the single-phase kernels' answers are
        # checked in the default suite by test_mm1_any_theta (class queues) and
        # test_random_assignment_matches_bf_curve[S10] (per-server layout)
        pytest.param("exp", marks=pytest.mark.slow),
        "mixed",
        pytest.param("hyperexp", marks=pytest.mark.slow),
        pytest.param("zipf", marks=pytest.mark.slow),
    ],
)
def test_class_queues_and_server_queues_make_the_same_jumps(law):
    """The class-queue layout (O(N S) per jump) and the per-server layout (O(S + D C), which
    stores each job's servers; the layout of random assignment) are two data structures for
    the same chain: from the same uniforms they make the same jumps, so every measured total is
    bit-identical, overflows included (a 4-class graph with unequal capacities, a 16-job
    buffer at 0.85 load), with and without interruptions (m = 0, 1: one compile each)."""
    from jaxqueue.sched import _kernel, _simulate

    pool = ClassAssignment([[0, 1], [1, 2, 3], [3], [0, 2]], [1.0, 2.0, 0.5, 1.0])
    lam = np.full((1, 4), 0.85 * pool.mu.sum() / 4)
    mix, sigma = _simulate._law_arrays(_mixed_law() if law == "mixed" else get_law(law))
    keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.key(3), r))(np.arange(16))
    for m in (0.0, 1.0):
        params, shape = _simulate._kernel_params(pool, lam, np.full(1, m / sigma), mix, np.float64)
        one = jax.tree.map(lambda x: x[0], params)

        def run(spec, one=one):
            assert spec.class_queues == (spec.__class__ is _kernel.KernelSpec)
            return _run_chains(spec, one, keys)

        fifo = run(_kernel.KernelSpec(16, *shape, 200))
        slots = run(_ServerSpec(16, *shape, 200))
        assert int(fifo.overflow.sum()) > 0 and int(fifo.departures.sum()) > 2_000, m
        for a, b in zip(jax.tree.leaves(fifo), jax.tree.leaves(slots), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"m={m}")


def test_class_queue_slots_fit_the_code():
    """The class-queue jump codes its ring slot in 24 bits (``_kernel._fifo_decide``): larger
    rings (N Q >= 2**24 - 1) take the per-server layout."""
    from jaxqueue.sched._kernel import KernelSpec

    assert KernelSpec(128, 3, 2, 2, 0, True, 1000).class_queues
    assert KernelSpec(2**19, 3, 2, 16, 0, True, 1000).class_queues
    assert not KernelSpec(2**20, 3, 2, 16, 0, True, 1000).class_queues


@pytest.mark.slow
@pytest.mark.parametrize("law", ["exp", "hyperexp"])
def test_class_queues_and_server_blocks_make_the_same_jumps(law):
    """On 40 servers the per-server layout draws a block of servers then a server in it and
    keeps the blocks' sums, the class queues draw from all rates at once: the same jumps (every
    event count equal), the measured totals equal up to the order of the additions.

    Slow (two large compiles; the per-server layout on a class pool exists for this test only).
    Default guards of its parts: the blocks' draws and sums on 40 servers, checked against the
    exact balanced-fairness curve, in test_random_assignment_row_overflow_grows_the_buffer
    (float64) and test_random_assignment_matches_bf_curve[S40-f32-fast]; the two layouts' same
    jumps in test_class_queues_and_server_queues_make_the_same_jumps[mixed]; the class queues'
    draw over more than 32 rates in test_pick_two_levels_lands_in_the_right_interval."""
    from jaxqueue.sched import _kernel, _simulate

    rng = np.random.default_rng(1)
    sets = [sorted(rng.choice(40, 3, replace=False).tolist()) for _ in range(12)]
    sets.append(sorted(set(range(40)) - set().union(*sets)) or [0])
    pool = ClassAssignment(sets, rng.uniform(0.5, 2.0, 40))
    lam = np.full((1, len(sets)), 0.6 * max_uniform_load(sets, pool.mu))
    mix, sigma = _simulate._law_arrays(get_law(law))
    params, shape = _simulate._kernel_params(pool, lam, np.full(1, 1.0 / sigma), mix, np.float64)
    one = jax.tree.map(lambda x: x[0], params)
    keys = jax.vmap(lambda r: jax.random.fold_in(jax.random.key(7), r))(np.arange(8))

    def run(spec):
        return jax.jit(jax.vmap(lambda k: _kernel.run_chain(spec, one, k, 1, 5)))(keys)

    fifo = run(_kernel.KernelSpec(64, *shape, 200))
    rows = run(_ServerSpec(64, *shape, 200))
    assert _kernel._blocks(_ServerSpec(64, *shape, 200))[0] > 1
    assert int(fifo.departures.sum()) > 2_000
    for name in ("arrivals", "departures", "interruptions", "overflow", "n_max", "n_final"):
        np.testing.assert_array_equal(getattr(fifo, name), getattr(rows, name), err_msg=name)
    for name in ("time", "area", "busy", "time_first", "area_first", "area_sq"):
        np.testing.assert_allclose(getattr(fifo, name), getattr(rows, name), rtol=1e-12)
