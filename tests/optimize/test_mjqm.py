"""The MJQM case studies of jaxqueue.optimize (Newton on mjqm.sensitivity's steady-state
values and derivatives).

References: the exact solver called again outside the case (values; derivatives by central
differences of the exact waits).
"""

import numpy as np
import pytest

from jaxqueue.mjqm import exact
from jaxqueue.optimize import cases as C
from jaxqueue.optimize import five_class_workload
from jaxqueue.optimize._mjqm_cases import (
    MAX_RATE,
    SPEEDUP,
    SPEEDUP_FAST,
    small_exact_workload,
)

WL = five_class_workload()


def _exact_at(wl):
    """The exact solver at a concrete rate (eager: it shares the case's compilation)."""
    return lambda lam: exact(wl, float(lam))


def _within(x, ci, ref, k=3.0):
    """``ref`` within ``k`` half-widths of the estimate ``x`` with interval ``ci`` (the
    acceptance of the sensitivity study: no run misses by more than 3 half-widths)."""
    return abs(x - ref) <= k * 0.5 * (ci[1] - ci[0])


def _check_search(out, target, rtol, runs):
    s = out["search"]
    sz = out["sizes"]["search"]
    assert s["converged"], s["history"]
    assert target * (1 - rtol) <= s["value_ci"][1] <= target
    assert s["jobs"] == runs * sz["n_jobs"] * sz["n_replications"] * s["iterations"]
    assert out["targets_met"] and out["status"] == "ok" and min(out["slack"]) >= 0
    assert out["recheck"] == "exact"


@pytest.fixture(scope="module")
def max_rate_fast():
    return C.run_case("mjqm-max-rate", fast=True)


def test_mjqm_max_rate_fast(max_rate_fast):
    """The fast case (three-class-6): the stopping rule, the job count, and the exact waits at
    the answer recomputed here: they are the reported metrics, meet the target, and the
    binding class's is within the search's interval (3 half-widths)."""
    out = max_rate_fast
    _check_search(out, MAX_RATE["wait_target"], MAX_RATE["rtol"], 2)
    wl = small_exact_workload()
    r = _exact_at(wl)(out["lam"])
    w = np.asarray(r.wait_mean_class)
    np.testing.assert_allclose(out["metrics"]["W"], w, rtol=1e-12)
    assert np.all(w <= MAX_RATE["wait_target"])
    assert out["cost"] == -out["params"]["lam"] == -out["lam"]
    s = out["search"]
    assert _within(s["value"], s["value_ci"], w[s["binding_class"]]), (s, w)


def test_mjqm_max_rate_uses_the_steady_state_derivative(max_rate_fast):
    """At every rate of the Newton iteration the d/dlam that set the step is the steady-state
    derivative: the exact solver's (central differences of the exact waits) lies within 3
    half-widths of it, for the class that bound there."""
    h = max_rate_fast["search"]["history"]
    W = _exact_at(small_exact_workload())
    for lam, c, d, ci in zip(
        h["lam"], h["binding_class"], h["derivative"], h["derivative_ci"], strict=True
    ):
        eps = 1e-5 * lam
        up, dn = W(lam + eps).wait_mean_class[c], W(lam - eps).wait_mean_class[c]
        ref = float(up - dn) / (2 * eps)
        assert _within(d, ci, ref), (lam, c, d, ci, ref)


def test_mjqm_speedup_fast():
    """The fast speed-up case (three-class-6 at lam = 2 > lambda_c): the stopping rule, the
    job count, and the exact 0.9-quantiles at the answer (rate lam / speed, divided by the
    speed) recomputed here: they are the reported metrics, meet the target, and the binding
    class's is within the search's interval (3 half-widths)."""
    out = C.run_case("mjqm-speedup", fast=True)
    c = SPEEDUP_FAST
    _check_search(out, c["p90_target"], c["rtol"], 3)
    v = out["speed"]
    assert out["cost"] == v == out["params"]["speed"] > 1.0
    assert abs(out["search"]["rate"] * v - c["lam"]) <= 1e-12
    wl = small_exact_workload()
    d = _exact_at(wl)(c["lam"] / v).wait_distribution(quantiles=(0.9,))
    q = np.asarray([float(d.quantile(0.9, k)) for k in range(wl.n_classes)]) / v
    np.testing.assert_allclose(out["metrics"]["W_p90"], q, rtol=1e-12)
    assert np.all(q <= c["p90_target"])
    s = out["search"]
    assert _within(s["value"], s["value_ci"], q[s["binding_class"]]), (s, q)


@pytest.mark.slow
def test_mjqm_max_rate_full():
    """five-class-exp: the exact waits at the answer meet the target, the 15-core class binds
    in the search and in the exact waits, and its exact wait is within the search's interval.
    The fast guard of the same code path: test_mjqm_max_rate_fast."""
    out = C.run_case("mjqm-max-rate", fast=False)
    _check_search(out, MAX_RATE["wait_target"], MAX_RATE["rtol"], 2)
    w = np.asarray(_exact_at(WL)(out["lam"]).wait_mean_class)
    np.testing.assert_allclose(out["metrics"]["W"], w, rtol=1e-12)
    s = out["search"]
    assert s["binding_class"] == int(np.argmax(w)) == 4
    assert _within(s["value"], s["value_ci"], w[4]), (s, w)


@pytest.mark.slow
def test_mjqm_speedup_full():
    """five-class-exp at lam = 1: the exact 0.9-quantiles at the answer meet the target and
    the binding class's is within the search's interval. The fast guard of the same code
    path: test_mjqm_speedup_fast."""
    out = C.run_case("mjqm-speedup", fast=False)
    _check_search(out, SPEEDUP["p90_target"], SPEEDUP["rtol"], 3)
    q = np.asarray(out["metrics"]["W_p90"])
    s = out["search"]
    assert _within(s["value"], s["value_ci"], q[s["binding_class"]]), (s, q)


@pytest.mark.parametrize("name", ["mjqm-max-rate", "mjqm-speedup", "mjqm-p99-server-filling"])
def test_the_command_lines_seed_reaches_the_simulated_cases(name, monkeypatch, capsys):
    """``jaxqueue optimize --case NAME --seed S`` runs the case with seed ``S`` (the cases'
    own runs are checked above; here only the seed's way in, the case replaced by a recorder)."""
    from jaxqueue.cli import main
    from jaxqueue.optimize import _mjqm_cases, _mjqm_quantile

    seen = []

    def record(fast=False, progress=None, seed=0):
        seen.append(seed)
        raise RuntimeError("recorded")

    module = _mjqm_quantile if name == "mjqm-p99-server-filling" else _mjqm_cases
    monkeypatch.setattr(module, name.replace("-", "_"), record)
    try:
        main(["optimize", "--case", name, "--fast", "--seed", "5", "--json"])
    except RuntimeError:  # the recorder's stop, whether or not the command reports it
        pass
    assert seen == [5]
