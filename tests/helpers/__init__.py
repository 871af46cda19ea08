"""The one tolerance-aware comparison helper of the test suite."""

import jax
import numpy as np


def tree_allclose(x, y, *, rtol=1e-9, atol=1e-12) -> bool:
    """True when two pytrees have the same structure and all leaves are close."""
    lx, tx = jax.tree_util.tree_flatten(x)
    ly, ty = jax.tree_util.tree_flatten(y)
    if tx != ty:
        return False
    return all(
        np.allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)
        for a, b in zip(lx, ly, strict=True)
    )


def assert_close(actual, expected, *, rtol=1e-9, atol=1e-12, what=""):
    """``np.testing.assert_allclose`` with a label."""
    np.testing.assert_allclose(
        np.asarray(actual), np.asarray(expected), rtol=rtol, atol=atol, err_msg=what
    )


def assert_within_ci(estimate, low, high, truth, *, what=""):
    """Assert ``low <= truth <= high`` elementwise, reporting the estimate on failure."""
    est, lo, hi, tr = (np.asarray(v, dtype=float) for v in (estimate, low, high, truth))
    ok = (lo <= tr) & (tr <= hi)
    assert np.all(ok), f"{what}: truth {tr} not in CI [{lo}, {hi}] (estimate {est})"
