"""The option objects of the MJQM simulators and of ``optimize.minimize``: immutable, their
bad values and a plain value in their place refused in one line before any work."""

import dataclasses

import jax
import pytest

from jaxqueue import optimize, scenarios
from jaxqueue.mjqm import sample_backward, sensitivity, simulate
from jaxqueue.mjqm.options import (
    Batching,
    BiasControl,
    Budget,
    Coupling,
    Execution,
    InitialState,
    Start,
)

WL = scenarios.get("five-class-exp")


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: BiasControl(tol=0.0), "BiasControl.tol must be > 0"),
        (lambda: BiasControl(level=1.0), r"BiasControl.level must be in \(0, 1\)"),
        (lambda: Budget(max_ell=0), "Budget.max_ell must be a positive integer"),
        (lambda: Budget(max_work=2.5), "Budget.max_work must be a positive integer"),
        (lambda: Budget(max_seconds=-1.0), "Budget.max_seconds must be >= 0"),
        (lambda: Batching(min_batch=0), "Batching.min_batch must be a positive integer"),
        (lambda: InitialState([0.0] * 10, job_offset=-1), "job_offset must be an integer >= 0"),
        (lambda: Execution(chunk=True), "Execution.chunk must be a positive integer"),
        (lambda: Start("warm"), "Start.kind: expected backward or empty"),
        (lambda: Coupling(horizon=0), "Coupling.horizon must be a positive integer"),
        (lambda: optimize.Penalty(growth=0.0), "Penalty.growth must be > 0"),
    ],
)
def test_bad_values_are_refused_in_one_line(make, match):
    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


def test_options_are_immutable_with_defaults():
    b = Budget()
    assert (b.max_ell, b.max_work, b.max_seconds) == (1 << 22, None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.max_ell = 8
    assert dataclasses.replace(b, max_ell=512).max_ell == 512


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda k: sample_backward(WL, 1.0, 8, key=k, bias_control=False),
            "bias_control must be a jaxqueue.mjqm.options.BiasControl or None, got bool",
        ),
        (
            lambda k: sample_backward(WL, 1.0, 8, key=k, budget=512),
            "budget must be a jaxqueue.mjqm.options.Budget, got int",
        ),
        (
            lambda k: simulate(WL, 1.0, key=k, init=[0.0] * 10),
            "init must be a jaxqueue.mjqm.options.InitialState or None, got list",
        ),
        (
            lambda k: simulate(WL, 1.0, "msf", key=k, execution=jax.devices()),
            "execution must be a jaxqueue.mjqm.options.Execution, got list",
        ),
        (
            lambda k: sensitivity(WL, 1.0, key=k, start="empty"),
            "start must be a jaxqueue.mjqm.options.Start, got str",
        ),
        (
            lambda k: sensitivity(WL, 1.0, key=k, differences=True),
            "differences must be a jaxqueue.mjqm.options.Differences, got bool",
        ),
        (
            lambda k: sensitivity(WL, 1.0, key=k, coupling=64),
            "coupling must be a jaxqueue.mjqm.options.Coupling, got int",
        ),
    ],
)
def test_a_plain_value_for_an_option_object_is_refused(call, match):
    with pytest.raises(ValueError, match=match) as err:
        call(jax.random.key(0))
    assert "\n" not in str(err.value)
