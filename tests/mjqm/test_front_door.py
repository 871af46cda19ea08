"""``mjqm.simulate``, the one front door: the engine chosen from the policy, the same numbers as
the engine called directly, and one-line refusals."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxqueue import mjqm, scenarios
from jaxqueue.mjqm import engines
from jaxqueue.mjqm.options import Execution, Histogram
from jaxqueue.mjqm.policies import FCFS, MostServersFirst, RandomAssignment

WL = scenarios.get("five-class-exp")
KW = dict(n_jobs=1500, n_replications=8, dtype=jnp.float64)
# the forward runs at the sizes of test_forward.py's five_f32 (float32 by default): one kernel
FORWARD_KW = dict(n_jobs=3000, n_replications=64)


def _same(a, b):
    for f in ("wait_mean", "wait_mean_ci", "idle_servers"):
        x, y = getattr(a, f, None), getattr(b, f, None)
        if x is not None:
            assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True), f


def _spy(monkeypatch, engine, answer):
    """Replace ``engine.simulate`` by a stand-in that records its calls and returns ``answer``."""
    calls = []

    @functools.wraps(engine.simulate)
    def spy(workload, lam, policy, **kw):
        calls.append((workload, lam, policy, kw))
        return answer

    monkeypatch.setattr(engine, "simulate", spy)
    return calls


def test_fcfs_runs_on_the_recurrence_engine_with_its_numbers(monkeypatch):
    key = jax.random.key(5)
    res = mjqm.simulate(WL, 1.2, key=key, **FORWARD_KW)
    assert isinstance(res, mjqm.ForwardResult)
    _same(res, engines.recurrence.simulate(WL, 1.2, key=key, **FORWARD_KW))
    _same(res, mjqm.simulate(WL, 1.2, FCFS(), key=key, **FORWARD_KW))
    # random assignment goes to the recurrence engine with the options (a spy: its numbers
    # there are checked in tests/mjqm/test_forward.py against independent M/M/1 queues)
    calls = _spy(monkeypatch, engines.recurrence, "ran on recurrence")
    ra = mjqm.simulate(WL, 0.8, RandomAssignment(), key=key, **KW)
    assert ra == "ran on recurrence"
    assert calls == [(WL, 0.8, RandomAssignment(), dict(key=key, **KW))]


def test_a_job_list_policy_runs_on_the_event_engine_with_its_numbers(monkeypatch):
    key = jax.random.key(6)
    res = mjqm.simulate(WL, 1.2, "msf", key=key, **KW)
    assert isinstance(res, mjqm.PolicyResult)
    direct = mjqm.simulate_policy(WL, 1.2, MostServersFirst(), key=key, **KW)
    assert np.array_equal(np.asarray(res.wait_mean.mean), np.asarray(direct.wait_mean.mean))
    # engine="events" sends fcfs to the event engine with the options (a spy: the event
    # engine's fcfs numbers are checked in tests/mjqm/policies)
    calls = _spy(monkeypatch, engines.events, "ran on events")
    assert mjqm.simulate(WL, 1.2, "fcfs", key=key, engine="events", **KW) == "ran on events"
    assert calls == [(WL, 1.2, FCFS(), dict(key=key, **KW))]


@pytest.mark.parametrize(
    "policy, engine, options, match",
    [
        ("msf", "recurrence", {}, "no form on the ordered workload vector"),
        (RandomAssignment(), "events", {}, "recurrence engine only"),
        ("fcfs", "auto", {"max_buffer": 64}, "option max_buffer does not apply to the recurrence"),
        ("msf", "auto", {"histogram": Histogram()}, "option histogram does not apply"),
        ("fcfs", "auto", {"execution": Execution(buffer=64)}, "Execution.buffer does not apply"),
        ("msf", "auto", {"execution": Execution(chunk=64)}, "Execution.chunk does not apply"),
        ("fcfs", "gpu", {}, "engine must be one of"),
        ("lifo", "auto", {}, "unknown policy"),
    ],
)
def test_refusals_are_one_line(policy, engine, options, match):
    with pytest.raises(ValueError, match=match) as err:
        mjqm.simulate(WL, 1.2, policy, key=jax.random.key(0), engine=engine, **options)
    assert "\n" not in str(err.value)
