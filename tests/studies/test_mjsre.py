"""``jaxqueue reproduce mjsre``, Table 1: the exact column (QBD solver) and ``lambda_max``.

The study runs two-class-256 (257 levels); the same code on a small one-or-all workload keeps
the test short.
"""

import jax
import numpy as np

from jaxqueue.dist import Exponential
from jaxqueue.mjqm import Workload, exact, lambda_c_closed_form
from jaxqueue.studies.mjsre import _exact_column


def test_table1_exact_column_uses_the_exact_limit_internal():
    wl = Workload(4, [1, 4], np.array([0.8, 0.2]), [Exponential(1.0), Exponential(3.0)])
    ks = [2, 8]
    lmax, waits, times, t_compile = _exact_column(wl, ks)
    # the exact limit of the QBD equals the closed form eq. (8) of papers/mjsre.md
    assert abs(lmax / lambda_c_closed_form(wl) - 1.0) <= 1e-10
    assert len(times) == len(ks) and np.isfinite(t_compile)
    # the column is the exact mean wait at lam = 0.1 k lambda_max
    solve = jax.jit(lambda lam: exact(wl, lam).wait_mean)
    for k, w in zip(ks, waits, strict=True):
        assert abs(w / float(solve(0.1 * k * lmax)) - 1.0) <= 1e-12
    assert 0 < waits[0] < waits[1]


def test_five_class_exact_limit_beside_pile_growth_internal():
    """The ``lambda_c_exact`` column of ``stability_five_class.csv``: the exact limit of a
    phase-type workload (the brute-force saturated chain of ``tests/references/mjqm_ph_ctmc.py``
    to 1e-10), ``nan`` for a law without a phase form, and ``nan`` in fast mode beyond 8000
    phases (five-class-hyperexp: 25,263; the full run solves it, slow test
    ``test_five_class_hyperexp_is_inside_the_pile_growth_interval``)."""
    from jaxqueue import scenarios
    from jaxqueue.dist import BoundedPareto, Erlang, HyperExponential
    from jaxqueue.studies.mjsre import _exact_or_nan
    from tests.references import mjqm_ph_ctmc as ref

    laws = [Erlang(3, 0.5), HyperExponential(np.array([2.0, 0.4]), np.array([0.2, 0.8]))]
    got = _exact_or_nan(Workload(4, [1, 3], [0.7, 0.3], laws), fast=True)
    forms = [ref.erlang(3, 0.5), ref.hyperexp([0.2, 0.8], [2.0, 0.4])]
    want = ref.lambda_c(4, [1, 3], [0.7, 0.3], *zip(*forms, strict=True))
    assert abs(got - want) <= 1e-10 * want
    bp = Workload(4, [1, 3], [0.7, 0.3], [Erlang(3, 0.5), BoundedPareto(0.5, 20.0, 1.5)])
    assert np.isnan(_exact_or_nan(bp, fast=False))
    assert np.isnan(_exact_or_nan(scenarios.get("five-class-hyperexp"), fast=True))
