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
