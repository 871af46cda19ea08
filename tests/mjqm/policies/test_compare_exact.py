"""``mjqm compare`` with fcfs solved exactly where its services are exponential: the rows of
the exact QBD (means, and the response time's quantiles by the numerical convolution of the
exact wait law with the service time) against the M/M/c closed forms and against
``mjqm.exact``; a load at or beyond ``lambda_c`` is ``unstable`` without a run."""

from __future__ import annotations

import json
import math

import pytest

from jaxqueue.cli import main
from jaxqueue.cli._mjqm_policies import _compare_table, _exact_fcfs_rows
from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, exact


def _mmc_tails(c, lam, mu=1.0):
    """``(P(W > t), P(T > t))`` of the M/M/c FCFS queue (Erlang C; ``T = W + S``)."""
    a = lam / mu
    top = a**c / math.factorial(c) / (1.0 - a / c)
    erlang_c = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    theta = c * mu - lam

    def wait(t):
        return erlang_c * math.exp(-theta * t)

    def resp(t):
        if abs(theta - mu) < 1e-12:
            return math.exp(-mu * t) * (1.0 + erlang_c * mu * t)
        return math.exp(-mu * t) + erlang_c * mu * (math.exp(-mu * t) - math.exp(-theta * t)) / (
            theta - mu
        )

    return wait, resp


def _quantile(tail, q):
    """``inf {t : tail(t) <= 1 - q}`` by bisection (0 where the atom at 0 is enough)."""
    if tail(0.0) <= 1.0 - q:
        return 0.0
    lo, hi = 0.0, 1.0
    while tail(hi) > 1.0 - q:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tail(mid) > 1.0 - q else (lo, mid)
    return 0.5 * (lo + hi)


_SLOW = pytest.mark.slow  # a compile of the QBD per server count


@pytest.mark.parametrize(
    "c, lam", [pytest.param(1, 0.5, marks=_SLOW), (2, 1.2), pytest.param(3, 2.7, marks=_SLOW)]
)
def test_exact_rows_match_the_mmc_closed_forms(c, lam):
    wl = Workload(servers=c, cores=(1,), probs=(1.0,), services=(Exponential(1.0),))
    (row,) = _exact_fcfs_rows(wl, [lam / c], float(c))  # lambda_c = c for one-server jobs
    wait, resp = _mmc_tails(c, lam)
    assert row["method"] == "exact" and row["status"] == "ok"
    for q in ("0.5", "0.9", "0.99"):
        want = _quantile(resp, float(q))
        assert row["response_quantiles"][q] == pytest.approx(want, rel=1e-4)
        assert row["response_quantiles_ci"][q] == [row["response_quantiles"][q]] * 2
        assert row["wait_quantiles"][q] == pytest.approx(_quantile(wait, float(q)), abs=1e-6)
    # E[T] = C / (c mu - lam) + 1 / mu
    assert row["response_mean"] == pytest.approx(wait(0.0) / (c - lam) + 1.0, rel=1e-9)


def test_compare_uses_the_exact_solver_for_fcfs(small_toml, capsys):
    f = small_toml
    argv = ["mjqm", "compare", "--scenario", str(f), "--policies", "fcfs", "--loads"]
    argv += ["0.9,1.0", "--jobs", "1000", "--replications", "8", "--json"]
    status = main(argv)
    res = json.loads(capsys.readouterr().out)
    assert status == 0
    (fcfs,) = res["policies"]
    near, at = fcfs["rows"]
    wl = Workload(
        servers=3,
        cores=(1, 2),
        probs=(0.6, 0.4),
        services=(Exponential(1.0), Exponential(1.25)),
    )
    want = exact(wl, near["lam"])
    assert near["method"] == "exact" and near["status"] == "ok"
    assert near["response_mean"] == pytest.approx(float(want.response_mean), rel=1e-12)
    assert near["wait_mean"] == pytest.approx(float(want.wait_mean), rel=1e-12)
    assert near["response_mean_ci"] == [near["response_mean"]] * 2
    assert at["status"] == "unstable" and "response_mean" not in at
    table = _compare_table(res)
    assert any(r.split()[:2] == ["fcfs", "0.9"] and "exact" in r for r in table.splitlines())
