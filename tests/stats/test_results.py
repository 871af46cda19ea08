"""The result convention (docs/ARCHITECTURE.md, "Results"): every public estimator returns an
immutable result whose ``status`` is a ``jaxqueue.stats.Status``, takes ``throw=`` (raise
``EstimateError`` on a status other than ok), and gives each estimated quantity as a
``stats.Estimate``."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import Exponential, get_law
from jaxqueue.mjqm import (
    Workload,
    exact,
    palm_metrics,
    pile_growth,
    sample_backward,
    simulate,
    simulate_policy,
    simulate_steady,
    stability_limit,
)
from jaxqueue.mjqm._estimators import MIN_REPLICATIONS
from jaxqueue.mjqm.options import Budget
from jaxqueue.optimize import Positive, Problem, SubsetBF, Target, minimize
from jaxqueue.sched import ClassAssignment
from jaxqueue.sched import simulate as sched_simulate
from jaxqueue.stats import Estimate, EstimateError, Result, Status, estimate

MM2 = Workload(2, [1], [1.0], [Exponential(1.0)])
"""M/M/2 (lambda_c = 2): small and exact."""


def _throws_iff_not_ok(run):
    """``run(throw=False)`` returns a result with a ``Status``; ``run(throw=True)`` raises
    ``EstimateError`` naming that status exactly when it is not ok."""
    res = run(throw=False)
    assert isinstance(res.status, Status)
    if res.status == Status.ok:
        run(throw=True)
    else:
        with pytest.raises(EstimateError, match=f"status {res.status}: ") as err:
            run(throw=True)
        assert err.value.status == res.status and "\n" not in str(err.value)
    return res


def _immutable(res) -> None:
    assert isinstance(res, Result)
    with pytest.raises(AttributeError):
        res.status = Status.ok


def test_status_is_a_string_for_json_and_comparisons_internal():
    from jaxqueue.cli._common import STATUSES

    assert Status.ok == "ok" and f"{Status.biased}" == "biased" and str(Status.overflow)
    assert json.dumps({"status": Status.unstable}) == '{"status": "unstable"}'
    # the command line's vocabulary is the package's (infeasible: optimisation only)
    assert set(STATUSES) == {s.value for s in Status} - {"infeasible"}
    assert issubclass(EstimateError, ValueError)


def test_forward_too_few_replications_throw_and_ok_does_not():
    # compiled kernels shared in a run: M/M/2 at 32 replications is test_simulate_steady_throw's
    # first round, M/M/1 at 64 the M/M/1 runs of tests/mjqm/test_forward.py (float32, 2000 jobs)
    run = dict(key=jax.random.key(5), n_jobs=2000, dtype=jnp.float32)
    few = simulate(MM2, 1.0, n_replications=MIN_REPLICATIONS // 2, **run)
    assert few.status is Status.unconverged
    with pytest.raises(EstimateError, match="status unconverged: 32 replications, fewer than"):
        simulate(MM2, 1.0, n_replications=MIN_REPLICATIONS // 2, throw=True, **run)
    mm1 = Workload(1, [1], [1.0], [Exponential(1.0)])
    ok = simulate(mm1, 0.5, n_replications=MIN_REPLICATIONS, throw=True, **run)
    assert ok.status is Status.ok
    _immutable(ok)
    e = ok.estimate("wait_mean_all")
    assert isinstance(e, Estimate) and e.n == MIN_REPLICATIONS and e.level == 0.95
    assert (float(e.mean), float(e.low), float(e.high)) == (
        ok.wait_mean_all,
        *map(float, ok.wait_mean_all_ci),
    )
    per_class = ok.estimate("wait_mean")
    assert per_class.mean.shape == (1,) and float(ok.estimate("wait_mean", cls=0).mean) == float(
        ok.wait_mean[0]
    )
    for name in ("system_time_mean", "number_in_system", "idle_servers", "hol_idle_servers"):
        assert float(np.max(ok.estimate(name).half_width)) >= 0
    with pytest.raises(AttributeError, match="has no interval"):
        ok.estimate("wait_var")


def test_simulate_steady_throw():
    res = _throws_iff_not_ok(
        lambda throw: simulate_steady(
            MM2, 1.0, key=jax.random.key(5), n_jobs=2000, n_replications=32, throw=throw
        )
    )
    assert res.status is Status.unconverged  # fewer than MIN_REPLICATIONS
    # not extended (more jobs do not mend too few replications), and stationary, just few
    # (tests/mjqm/test_forward.py's slow test_too_few_replications_are_unconverged_and_not_extended)
    assert len(res.rounds) == 1
    assert abs(res.idle_z) < 3.29 and abs(res.wait_growth) < 0.5


def test_backward_sampler_and_palm_metrics():
    wl = scenarios.get("five-class-exp")

    def capped(throw):
        return sample_backward(
            wl,
            1.75,
            64,
            key=jax.random.key(1),
            ell0=256,
            budget=Budget(512),
            override=True,
            throw=throw,
        )

    S = _throws_iff_not_ok(capped)
    assert S.status is Status.unconverged
    _immutable(S)
    m = palm_metrics(wl, S)
    assert m["status"] is Status.unconverged
    with pytest.raises(EstimateError, match="status unconverged"):
        palm_metrics(wl, S, throw=True)
    e = estimate(m, "wait_mean")
    assert e.n == 64 and float(e.mean) == m["wait_mean"] and float(e.high) == np.inf
    e1 = estimate(m, "response_mean", cls=1)
    assert float(e1.mean) == m["classes"][1]["response_mean"]


def test_event_engine_throw_and_estimates():
    def run(throw):
        key = jax.random.key(3)
        return simulate_policy(MM2, 1.0, "first-fit", key=key, n_jobs=2000, throw=throw)

    res = _throws_iff_not_ok(run)
    _immutable(res)
    assert res.estimate("response_mean") is res.response_mean
    assert float(res.estimate("wait_mean_class", cls=0).mean) == float(res.wait_mean_class.mean[0])


def test_pile_growth_unconverged_throws():
    def run(throw, max_jobs=1 << 10):
        return pile_growth(
            scenarios.get("five-class-hyperexp"), key=jax.random.key(0), replications=8,
            rel_tol=1e-4, jobs0=256, max_jobs=max_jobs, throw=throw,
        )  # fmt: skip

    res = _throws_iff_not_ok(run)
    assert res.status is Status.unconverged and not res.converged
    _immutable(res)
    e = res.estimate("lambda_c")
    assert (float(e.low), float(e.high)) == res.lambda_c_ci and e.n == 8
    assert stability_limit(MM2, throw=True).status is Status.ok  # exact: 2 / E[sigma]
    with pytest.raises(EstimateError, match="no method is known"):
        # no divisibility chain of the needs (M/M/2's one-server jobs have one: lambda_ideal)
        stability_limit(scenarios.get("five-class-exp"), "msf", throw=True)


def test_exact_result_status():
    # one compiled kernel for both (the status of an eager call: tests/mjqm/test_exact.py)
    batch = jax.jit(jax.vmap(lambda lam: exact(MM2, lam)))
    ok = batch(jnp.array([1.0, 1.5]))
    unstable = batch(jnp.array([1.0, 2.5]))  # crosses the limit
    assert ok.status is Status.ok and unstable.status is Status.unstable
    with pytest.raises(EstimateError, match="status unstable"):
        unstable.raise_for_status()
    _immutable(ok)


def test_scheduler_too_few_replications_throw():
    from jaxqueue.sched import MIN_REPLICATIONS as SCHED_MIN

    def run(throw, replications=SCHED_MIN - 1):
        return sched_simulate(
            ClassAssignment([[0]], [1.0]), [0.7], get_law("exp"), m=1.0, key=jax.random.key(14),
            replications=replications, jumps=4000, warmup=2000, queue_size=64, throw=throw,
        )  # fmt: skip

    few = _throws_iff_not_ok(run)
    assert few.status is Status.unconverged
    _immutable(few)
    e = few.estimate("delay")
    assert e.n == SCHED_MIN - 1 and np.allclose(e.low, few.delay_low)
    assert np.allclose(few.estimate("delay_all").high, few.delay_all_high)


def test_optimize_result_is_immutable_and_infeasible_throws():
    lam = 0.7
    engine = SubsetBF([[0]])  # one jitted engine for the three runs

    def metrics(p):
        return engine.metrics(p["mu"], jnp.array([lam]))

    def run(throw, t=1e-2):
        problem = Problem(
            params0={"mu": jnp.array([3.0])},
            transforms={"mu": Positive()},
            cost=lambda p: p["mu"][0],
            metrics=metrics,
            targets=[Target("T", t, index=0)],
        )
        return minimize(problem, steps=2, rounds=1, throw=throw)

    res = _throws_iff_not_ok(run)
    assert res.status is Status.infeasible and not res.targets_met
    _immutable(res)
    with pytest.raises(AttributeError):
        res.cost = 0.0
    assert run(True, t=10.0).status is Status.ok
