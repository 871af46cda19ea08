"""mjqm-p99-server-filling: the rate found by Newton's method on simulated quantile
derivatives, checked with the heapq event simulator of tests/references/mjqm_events.py (no
jaxqueue code): its p99 wait at the answer meets the target and lies in the case's re-check
interval."""

from __future__ import annotations

import numpy as np
import pytest

from jaxqueue.optimize import cases as C
from jaxqueue.optimize._mjqm_quantile import P99, P99_FAST, _sizes
from tests.references.mjqm_events import bpareto_sampler, event_simulate, random_jobs


def _hyperexp(means, probs):
    return lambda rng, size: (
        rng.exponential(1.0, size) * means[rng.choice(len(probs), size, p=probs)]
    )


def _reference_quantile(workload, lam, q, n, samplers):
    """Quantile ``q`` of the wait of ``n`` jobs (a twentieth left out as warm-up) under
    server-filling, from numpy streams (``samplers``: per class ``f(rng, size)``)."""
    rng = np.random.default_rng(0)
    cores = [c[0] for c in workload.cores]
    _, alpha, sigma, tau = random_jobs(rng, n, cores, np.asarray(workload.probs), samplers, lam)
    out = event_simulate(workload.s, alpha, sigma, tau, warmup=n // 20, policy="server-filling")
    return float(np.quantile(out["wait"][n // 20 :], q))


def _check(out, c, fast):
    sz = _sizes(fast)
    target, rtol = c["target"], c["rtol"]
    assert out["case"] == "mjqm-p99-server-filling" and out["policy"] == "server-filling"
    search = out["search"]
    # the stopping rule: the value's upper bound within rtol under the target
    assert search["converged"], search["history"]
    assert target * (1 - rtol) <= search["value_ci"][1] <= target
    jobs = sz["search"]["n_jobs"] * sz["search"]["n_replications"]
    assert search["jobs"] == 3 * jobs * search["iterations"]
    grid = out["grid"]
    assert grid["jobs"] == jobs * grid["points"]
    # the grid runs on the Newton iteration's sample: the same quantile at the start
    assert grid["history"]["value_ci"][0] == search["history"]["value_ci"][0]
    # the independent re-check (another key, longer runs) meets the target
    lo, hi = out["recheck"]["ci"]
    assert out["targets_met"] and out["status"] == "ok"
    assert lo <= out["metrics"]["W_p99"] <= hi <= target


def test_p99_server_filling_fast():
    """The fast case (two classes, hyperexponential services, 4 servers) against the heapq
    reference at the answer: 200,000 jobs, one run."""
    wl = C._mjqm_quantile.small_hyperexp_workload()
    out = C.run_case("mjqm-p99-server-filling", fast=True)
    _check(out, P99_FAST, True)
    laws = [_hyperexp(np.asarray(law.means), np.asarray(law.probs)) for law in wl.services]
    ref = _reference_quantile(wl, out["lam"], 0.99, 200_000, laws)
    lo, hi = out["recheck"]["ci"]
    slack = 0.5 * (hi - lo)  # the reference's own noise: one run, no interval
    assert ref <= P99_FAST["target"]
    assert lo - slack <= ref <= hi + slack, (ref, out["recheck"])


@pytest.mark.slow
def test_p99_server_filling_full():
    """five-class-bpareto: the full case, re-checked by the case and by a 1,000,000-job
    heapq run. The fast guard of the same code path: test_p99_server_filling_fast."""
    out = C.run_case("mjqm-p99-server-filling", fast=False)
    _check(out, P99, False)
    from jaxqueue.scenarios import get

    wl = get("five-class-bpareto")
    laws = [bpareto_sampler(float(b.xmin), float(b.xmax), float(b.shape)) for b in wl.services]
    ref = _reference_quantile(wl, out["lam"], 0.99, 1_000_000, laws)
    assert ref <= P99["target"], (ref, out["recheck"])
