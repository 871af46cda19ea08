"""``exact_lambda_c`` of the largest phase-type chains: aggregation-disaggregation (``_iad``).

References: the independent brute-force saturated chain of ``tests/references/mjqm_ph_ctmc.py``
and the sparse LU of the same chain (the aggregation forced on a small chain), and, for
``five-class-erlang3`` (324,780 head phases, slow), the pile-growth 99% interval recorded in
``benchmarks/RESULTS.md`` (``bench_mjqm_backward``: 1.8479 [1.8398, 1.8561]).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import Erlang
from jaxqueue.mjqm import Workload, exact_lambda_c
from jaxqueue.mjqm._exact import _ph
from tests.references import mjqm_ph_ctmc as ref

MEANS = (0.5, 0.83, 1.25)


def test_aggregation_equals_the_sparse_lu_and_the_brute_force(monkeypatch):
    w = Workload(8, [1, 2, 5], [0.6, 0.25, 0.15], [Erlang(3, m) for m in MEANS])
    lu = float(exact_lambda_c(w))
    monkeypatch.setattr(_ph, "IAD_MIN", 0)
    iad = float(exact_lambda_c(w))
    laws = [ref.erlang(3, m) for m in MEANS]
    brute = ref.lambda_c(8, [1, 2, 5], [0.6, 0.25, 0.15], *zip(*laws, strict=True))
    assert abs(iad - lu) <= 1e-10 * lu
    assert abs(iad - brute) <= 1e-10 * brute


def test_gradients_stop_at_the_sparse_limit():
    e3 = scenarios.get("five-class-erlang3")

    def lc(x):
        laws = [Erlang(3, law.mean_ * x) for law in e3.services]
        return exact_lambda_c(Workload(e3.servers, e3.cores, e3.probs, laws))

    with pytest.raises(ValueError, match="324,780 phases") as err:
        jax.grad(lc)(1.0)
    assert "\n" not in str(err.value) and "under a gradient" in str(err.value)


@pytest.mark.slow
def test_five_class_erlang3_is_inside_the_pile_growth_interval(capsys):
    """``mjqm stability`` gives the exact limit of ``five-class-erlang3`` (aggregation), inside
    the pile-growth 99% interval; the fast guard is the aggregation test above."""
    import json

    from jaxqueue.cli import main

    assert main(["mjqm", "stability", "--scenario", "five-class-erlang3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "exact" and out["status"] == "ok"
    lc = out["lambda_c"]
    assert np.isfinite(lc) and 1.8398 <= lc <= 1.8561, lc
    assert out["lambda_c_ci"] == [lc, lc]
