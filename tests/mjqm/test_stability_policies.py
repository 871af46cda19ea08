"""The stability limit of each policy (``mjqm.stability_limit``) on the workload of issue 34's
acceptance (k = 8 servers, needs 1, 2, 4, 8 with probability 1/4 each, exponential durations
of mean 1 / need: E[need x duration] = 1, so lambda_ideal = 8 by hand)."""

import pytest

from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, stability_limit


def _k8(needs=(1, 2, 4, 8)):
    return Workload(
        servers=8,
        cores=needs,
        probs=(1 / len(needs),) * len(needs),
        services=tuple(Exponential(1.0 / n) for n in needs),
        name="k8",
    )


@pytest.mark.parametrize(
    "policy", ["server-filling", "server-filling-srpt", "server-filling-gittins", "maxweight"]
)
def test_throughput_optimal_policies_reach_lambda_ideal_under_a_chain(policy):
    lim = stability_limit(_k8(), policy)
    assert lim.method == "ideal" and lim.lambda_c == pytest.approx(8.0)
    assert lim.summary() == {"lambda_c": pytest.approx(8.0), "ci": [8.0, 8.0], "method": "ideal"}


def test_fcfs_limit_is_the_published_load():
    """FCFS on this workload is unstable beyond rho = 0.46 (issue 34, the field's simulators):
    the exact saturated system gives lambda_c / lambda_ideal in [0.455, 0.465]."""
    lim = stability_limit(_k8(), "fcfs")
    assert lim.method == "exact" and 0.455 < lim.lambda_c / 8.0 < 0.465


def test_no_closed_form_without_a_chain_or_for_greedy_policies():
    """Needs 2 and 3 of s = 8 are no divisibility chain: maxweight's limit is not claimed;
    srpt-greedy and least-servers-first have no method (they are unknown, not guessed)."""
    wl = Workload(servers=8, cores=(2, 3), probs=(0.5, 0.5), services=(Exponential(1.0),) * 2)
    assert stability_limit(wl, "maxweight").lambda_c is None
    for policy in ("srpt-greedy", "least-servers-first"):
        lim = stability_limit(_k8(), policy)
        assert lim.method == "unknown" and lim.summary()["lambda_c"] is None
