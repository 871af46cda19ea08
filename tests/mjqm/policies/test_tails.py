"""Response-time and waiting-time quantiles (with intervals) and tails of the event engine:
against the empirical quantiles of the same jobs through the plain-Python heapq simulator
(``mjqm_events.py``), and against the closed forms of M/M/s (Erlang C)."""

import math

import jax
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, simulate_policy
from tests.mjqm.policies.test_policies import _five_class_run


# msf: 8 replications of 1,500 measured jobs, the run of the histogram test in
# test_policies.py (its kernel that of the job-by-job test there); server-filling-srpt: 4 of
# 2,600
@pytest.mark.parametrize(
    "policy, sizes", [("msf", (8, 200, 1700)), ("server-filling-srpt", (4, 400, 3000))]
)
def test_quantiles_match_the_heapq_simulator_on_the_same_jobs(policy, sizes):
    """p50, p90, p99 of the response time and the wait (overall and per class, from the
    engine's per-replication histograms) against the empirical quantiles of the same jobs
    through the heapq simulator: within a bin (1/16 octave, 4.4%); the interval holds its
    point; ``P(T > t)`` at the empirical p90 is 0.1 to within the binning; the JSON carries
    the keys of the contract."""
    wl = scenarios.get("five-class-exp")
    res, cls, wait, resp = _five_class_run(policy, *sizes)
    np.testing.assert_array_equal(
        res.response_hists.sum(axis=(0, 2)), np.bincount(cls, minlength=wl.n_classes)
    )
    for c in (None, 0, 4):
        sel = np.ones_like(cls, bool) if c is None else cls == c
        for q in (0.5, 0.9, 0.99):
            e = res.response_quantile_ci(q, c)
            want = float(np.quantile(resp[sel], q))
            assert abs(math.log2(float(e.mean) / want)) < 1 / 16, (c, q, float(e.mean), want)
            assert float(e.low) <= float(e.mean) <= float(e.high)
            w = res.wait_quantile_ci(q, c)
            want_w = float(np.quantile(wait[sel], q))
            if want_w > 0:
                assert abs(math.log2(float(w.mean) / want_w)) < 1 / 16, (c, q)
        t = float(np.quantile(resp[sel], 0.9))
        assert abs(float(res.response_tail_ci(t, c).mean) - 0.1) < 0.01
    out = res.as_dict(wl, tails=(1.0,))
    for block in (out, *out["classes"]):
        for kind in ("response", "wait"):
            assert set(block[f"{kind}_quantiles"]) == {"0.5", "0.9", "0.99"}
            assert set(block[f"{kind}_quantiles_ci"]) == {"0.5", "0.9", "0.99"}
            lo, hi = block[f"{kind}_quantiles_ci"]["0.9"]
            assert lo <= block[f"{kind}_quantiles"]["0.9"] <= hi
            assert set(block[f"{kind}_tail"]) == set(block[f"{kind}_tail_ci"]) == {"1"}
    assert set(out["stability"]) >= {"lambda_c", "ci", "method"}


def _erlang_c(s, a):
    """Probability of waiting in M/M/s with offered load ``a = lam / mu`` (Erlang C)."""
    top = a**s / math.factorial(s) * s / (s - a)
    return top / (sum(a**k / math.factorial(k) for k in range(s)) + top)


@pytest.mark.slow
def test_fcfs_quantile_intervals_cover_erlang_c():
    """M/M/4 under fcfs on the event engine: the intervals of the wait's p90 and p99 cover
    the Erlang C quantiles ``ln(C / (1 - q)) / (s mu - lam)``, those of ``P(W > t)`` cover
    ``C e^-(s mu - lam) t``, and the response's p90 interval covers the root of the M/M/s
    response-time tail (wait plus an independent exponential service). The default suite:
    the same intervals (``Tails``, one code for both engines) on the forward scan's M/M/4
    histograms in ``test_tails_forward.py::test_forward_scan_quantiles_cover_erlang_c``, the
    event engine's histograms against the heapq simulator's jobs above (msf), and its fcfs
    p90 interval against the exact quantile in ``test_sensitivity.py::
    test_event_quantile_crn_difference_agrees_with_exact_quantile_differences``."""
    s, mu, lam = 4, 1.0, 3.0
    wl = Workload(servers=s, cores=(1,), probs=(1.0,), services=(Exponential(1.0 / mu),))
    res = simulate_policy(wl, lam, "fcfs", key=jax.random.key(4), n_jobs=10_000, n_replications=64)
    assert res.status == "ok"
    C, d = _erlang_c(s, lam / mu), s * mu - lam
    for q in (0.9, 0.99):
        e = res.wait_quantile_ci(q)
        assert float(e.low) <= math.log(C / (1 - q)) / d <= float(e.high), q
    for t in (0.5, 2.0):
        e = res.wait_tail_ci(t)
        assert float(e.low) <= C * math.exp(-d * t) <= float(e.high), t

    def response_tail(t):  # P(W + S > t) = e^-mu t + int_0^t mu e^-mu x C e^-d (t - x) dx
        if d == mu:
            return math.exp(-mu * t) * (1 + C * mu * t)
        return math.exp(-mu * t) + C * mu / (mu - d) * (math.exp(-d * t) - math.exp(-mu * t))

    lo, hi = 0.0, 50.0
    for _ in range(200):  # bisection for P(T > t) = 0.1
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if response_tail(mid) > 0.1 else (lo, mid)
    e = res.response_quantile_ci(0.9)
    assert float(e.low) <= lo <= float(e.high)


def _cli(argv, capsys):
    from jaxqueue.cli import main

    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def test_cli_quantiles_tails_and_the_stability_column(small_toml, tmp_path, capsys):
    """``mjqm simulate --policy msf --tail`` puts the quantiles, their intervals and the
    tails (keys as given) in its JSON, overall and per class; ``mjqm compare --quantiles``
    tabulates p50, p90, p99 and each policy's limit with its method, and marks a load beyond
    the limit ``unstable`` without a figure; with ``--plot --json``: the policies in order,
    each with its limit, the run's status ``unstable``, and the figure."""
    import json

    from jaxqueue.cli._mjqm_policies import _compare_table

    f = small_toml
    common = ["--scenario", str(f), "--jobs", "1000", "--replications", "64"]
    argv = ["mjqm", "simulate", *common, "--lam", "0.5", "--policy", "msf", "--tail", "1,2.50"]
    status, out, _ = _cli([*argv, "--json"], capsys)
    res = json.loads(out)
    assert status == 0
    for block in (res, *res["classes"]):
        assert set(block["response_tail"]) == set(block["wait_tail_ci"]) == {"1", "2.50"}
        lo, hi = block["response_quantiles_ci"]["0.99"]
        assert lo <= block["response_quantiles"]["0.99"] <= hi
        assert 0 <= block["response_tail"]["1"] <= 1
    assert res["stability"]["method"] and "ci" in res["stability"]
    status, out, _ = _cli(argv, capsys)
    assert status == 0 and "response p50" in out and "response P(> 2.50)" in out
    # 1.2 lambda_c is beyond lambda_ideal too: msf runs 0.5 alone, the kernel of the simulate
    # command above (one load, the same sizes); the text table is the JSON's (what the
    # command prints without --json)
    cmp = ["mjqm", "compare", *common, "--policies", "fcfs,msf", "--loads", "0.5,1.2"]
    fig = tmp_path / "cmp.png"
    status, out, _ = _cli([*cmp, "--quantiles", "--plot", str(fig), "--json"], capsys)
    res = json.loads(out)
    assert status == 0 and fig.stat().st_size > 0
    head, rule, *rows = _compare_table(res, quantiles=True).splitlines()[1:]
    assert head.split()[5:9] == ["p50", "p90", "p99", "p99"]
    fcfs_beyond = [r for r in rows if r.split()[:2] == ["fcfs", "1.2"]]
    assert len(fcfs_beyond) == 1 and "unstable" in fcfs_beyond[0]
    assert "(exact)" in fcfs_beyond[0] or "(closed-form)" in fcfs_beyond[0]
    assert [p["policy"] for p in res["policies"]] == ["fcfs", "msf"]
    fcfs, msf = res["policies"]
    assert fcfs["stability"]["lambda_c"] == pytest.approx(res["lambda_c"])
    assert fcfs["rows"][1]["status"] == "unstable" and "response_mean" not in fcfs["rows"][1]
    assert msf["rows"][1]["status"] == "unstable" and "response_mean" not in msf["rows"][1]
    assert res["status"] == "unstable"
    row = msf["rows"][0]
    assert "response_mean_ci" in row
    assert {"response_quantiles", "response_quantiles_ci", "wait_quantiles"} <= set(row)
    assert fcfs["rows"][0]["method"] == "exact" and "p50" not in fcfs["rows"][0]
    assert set(fcfs["rows"][0]["response_quantiles"]) == {"0.5", "0.9", "0.99"}
