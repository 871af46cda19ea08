"""``exact_lambda_c`` of the largest phase-type chains: aggregation-disaggregation (``_iad``).

References: the independent brute-force saturated chain of ``tests/references/mjqm_ph_ctmc.py``
and the sparse LU of the same chain (the aggregation forced on a small chain), and, for
``five-class-erlang3`` (324,780 head phases) and ``five-class-hyperexp`` (25,263, GMRES), both
slow, the pile-growth intervals recorded in ``benchmarks/RESULTS.md`` (``bench_mjqm_backward``:
1.8479 [1.8398, 1.8561] and 1.5172 [1.5046, 1.53]; 95% intervals, inside the 99% ones).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxqueue import scenarios
from jaxqueue.dist import Erlang, HyperExponential
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
    the pile-growth interval; the fast guard is the aggregation test above."""
    _check_stability_exact("five-class-erlang3", 1.8398, 1.8561, capsys)


@pytest.mark.slow
def test_five_class_hyperexp_is_inside_the_pile_growth_interval(capsys):
    """``mjqm stability`` gives the exact limit of ``five-class-hyperexp`` (GMRES + incomplete
    LU), inside the pile-growth interval; the fast guard is
    ``test_gmres_equals_the_sparse_lu_and_the_brute_force``."""
    _check_stability_exact("five-class-hyperexp", 1.5046, 1.53, capsys)


def _check_stability_exact(name, lo, hi, capsys):
    import json

    from jaxqueue.cli import main

    assert main(["mjqm", "stability", "--scenario", name, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "exact" and out["status"] == "ok"
    lc = out["lambda_c"]
    assert np.isfinite(lc) and lo <= lc <= hi, lc
    assert out["lambda_c_ci"] == [lc, lc]


def test_gmres_equals_the_sparse_lu_and_the_brute_force(monkeypatch):
    """The GMRES + incomplete-LU solve (five-class-hyperexp's path, beyond ``DIRECT_MAX``
    unknowns) forced on a small chain: lambda_c and its gradient in a mean (the second solve,
    the Poisson equation of the adjoint) equal the direct LU's, lambda_c the brute force's."""
    h2 = ([0.01, 0.99], [40.0, 0.3])

    def lc(x):
        laws = [Erlang(3, MEANS[0] * x), HyperExponential(*h2[::-1]), Erlang(3, MEANS[2])]
        return exact_lambda_c(Workload(8, [1, 2, 5], [0.6, 0.25, 0.15], laws))

    lu, lu_grad = (float(y) for y in jax.value_and_grad(lc)(1.0))
    monkeypatch.setattr(_ph, "DIRECT_MAX", 0)
    it, it_grad = (float(y) for y in jax.value_and_grad(lc)(1.0))
    laws = [ref.erlang(3, MEANS[0]), ref.hyperexp(*h2), ref.erlang(3, MEANS[2])]
    brute = ref.lambda_c(8, [1, 2, 5], [0.6, 0.25, 0.15], *zip(*laws, strict=True))
    assert abs(it - lu) <= 1e-10 * lu and abs(it - brute) <= 1e-10 * brute
    assert abs(it_grad - lu_grad) <= 1e-8 * abs(lu_grad), (it_grad, lu_grad)
