"""``mjqm-max-rate-exact``: Newton on the exact gradient of the QBD solver's mean waits.

References: the exact solver called again outside the Newton loop, a value-only bracketing root
finder (``scipy.optimize.brentq``) on the same exact function, and central finite differences
for the gradient that drives the iteration. The default suite uses the three-class, six-server
workload (``fast``); the five-class case against the simulation-based ``mjqm-max-rate`` is in
the slow suite (``tests/optimize/test_mjqm.py`` has the default-suite check of the simulation
answer against the exact waits, on the three-class workload).
"""

import contextlib
import io
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

from jaxqueue.mjqm import exact
from jaxqueue.optimize import cases as C
from jaxqueue.optimize._mjqm_cases import (
    MAX_RATE,
    exact_max_rate,
    five_class_workload,
    small_exact_workload,
)
from tests.helpers import assert_close

TARGET = MAX_RATE["wait_target"]


@pytest.fixture(scope="module")
def cli_out():
    """One run of ``jaxqueue optimize --case mjqm-max-rate-exact --fast --json``."""
    from jaxqueue.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["optimize", "--case", "mjqm-max-rate-exact", "--fast", "--json"]) == 0
    return json.loads(buf.getvalue())


def _exact(wl):
    """The exact solver at a concrete rate, jitted (one compilation instead of many eager ones)."""
    f = jax.jit(lambda lam: exact(wl, lam))
    return lambda lam: f(jnp.asarray(lam, jnp.float64))


_exact_small = _exact(small_exact_workload())
"""The exact solver on the small workload: one compilation shared by the tests below."""


def test_cli_json_has_the_contract_keys(cli_out):
    out = cli_out
    for key in (
        "case",
        "cost",
        "targets_met",
        "slack",
        "params",
        "targets",
        "targets_list",
        "history",
        "device",
        "status",
        "lam",
        "lambda_c",
        "metrics",
        "dW_dlam",
        "rel_error",
        "newton",
    ):
        assert key in out, key
    assert out["case"] == "mjqm-max-rate-exact" and out["scenario"] == "three-class-6"
    assert out["targets_met"] is True and out["status"] == "ok" and out["converged"] is True
    assert out["cost"] == -out["params"]["lam"] == -out["lam"]
    assert len(out["slack"]) == len(out["targets"]["W"]) == 3
    assert min(out["slack"]) >= 0 and min(out["slack"]) <= 1e-9 * TARGET


def test_newton_on_the_exact_gradient_reaches_the_target(cli_out):
    lam = cli_out["params"]["lam"]
    # the exact waits at the answer, recomputed outside the Newton loop
    solve = _exact_small
    r = solve(lam)
    w = np.asarray(r.wait_mean_class)
    assert np.all(w <= TARGET)
    assert abs(w.max() / TARGET - 1.0) <= 1e-9, w
    assert_close(w, cli_out["metrics"]["W"], rtol=1e-12)
    assert_close(cli_out["lambda_c"], float(r.lambda_c), rtol=1e-12)

    # the same root by a value-only bracketing solver on the exact function
    def W(x):
        return float(np.max(solve(x).wait_mean_class))

    root = brentq(lambda x: W(x) - TARGET, 0.1, 0.999 * cli_out["lambda_c"], xtol=1e-13)
    assert abs(lam - root) <= 1e-8 * root, (lam, root)
    # the gradient that drove the iteration is the derivative of the exact waits
    h = 1e-5 * lam
    fd = (W(lam + h) - W(lam - h)) / (2 * h)
    assert_close(cli_out["dW_dlam"], fd, rtol=1e-6)
    # every step after the start is a Newton step, converging quadratically
    nt = cli_out["newton"]
    assert nt["step"][0] == "start" and set(nt["step"][1:]) == {"newton"}
    err = np.abs(np.asarray(nt["W"]) / TARGET - 1.0)
    assert len(err) <= 6 and err[-1] <= 1e-9
    assert all(err[i + 1] <= 0.1 * err[i] or err[i + 1] <= 1e-9 for i in range(1, len(err) - 1))


def test_mean_of_all_jobs_and_unstable_start_bisect():
    """``per_class=False`` targets ``wait_mean``; a start beyond ``lambda_c`` (inf waits, no
    Newton step) is recovered by bisection."""
    wl = small_exact_workload()
    sol = exact_max_rate(wl, 1.5, per_class=False, lam0=10.0)
    assert sol["converged"] and "bisect" in sol["history"]["step"]
    assert not np.isfinite(sol["history"]["W"][0])
    w = float(_exact_small(sol["lam"]).wait_mean)
    assert w <= 1.5 and abs(w / 1.5 - 1.0) <= 1e-9
    assert sol["binding_class"] is None


def test_bad_target_and_non_exponential_workload_raise(monkeypatch):
    from jaxqueue.optimize import _mjqm_cases
    from jaxqueue.scenarios import get

    with pytest.raises(ValueError, match="target"):
        exact_max_rate(small_exact_workload(), 0.0)
    # the refusal comes from the exact solver under jit; the start's lambda_c (12 s of
    # saturated-chain solve for Erlang-3 services; tests/mjqm check it) is given here
    monkeypatch.setattr(_mjqm_cases, "exact_lambda_c", lambda wl: 1.8437)
    with pytest.raises(ValueError, match="324,780 phases per level"):  # the size refusal
        exact_max_rate(get("five-class-erlang3"), 3.0)


@pytest.mark.slow
def test_five_class_exact_vs_simulation_case():
    """The simulation-based answer against the exact one: the same class binds, the exact
    wait at the simulated answer is within 3 half-widths of the search's value there, and the
    simulated answer is below the exact one (the target met) by no more than the stopping
    rule allows: ``W(lam_exact) - W(lam_sim) <= rtol target + 4 half-widths``, in rate units
    through the exact slope at ``lam_sim`` (``W`` is convex in ``lam``)."""
    _, ex = C.build_case("mjqm-max-rate-exact", fast=False)
    _, sim = C.build_case("mjqm-max-rate", fast=False)
    assert ex["targets_met"] and abs(ex["rel_error"]) <= 1e-6
    assert ex["binding_class"] == sim["search"]["binding_class"] == 4  # the 15-core jobs
    c = ex["binding_class"]
    s = sim["search"]
    half = 0.5 * (s["value_ci"][1] - s["value_ci"][0])
    W = _exact(five_class_workload())
    lam = sim["lam"]
    w_at_sim = float(W(lam).wait_mean_class[c])
    assert abs(s["value"] - w_at_sim) <= 3 * half, (s["value"], w_at_sim, half)
    h = 1e-5 * lam
    slope = float(W(lam + h).wait_mean_class[c] - W(lam - h).wait_mean_class[c]) / (2 * h)
    gap = (MAX_RATE["rtol"] * TARGET + 4 * half) / slope
    assert lam <= ex["lam"] <= lam + gap, (lam, ex["lam"], gap)
