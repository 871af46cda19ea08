"""Quantile intervals of ``palm_metrics`` under a horizon bias (issue 14): sub-perfect samples
are below the stationary ones on the same inputs, so the upper end must move up."""

import math

import numpy as np

from jaxqueue.mjqm._palm import _quantile_ci


def test_quantile_upper_end_covers_the_unbiased_quantile_under_a_mean_bias_bound():
    # W ~ Exp(1) stationary; the sub-perfect W_ell = max(W - 0.5, 0) <= W with E[W - W_ell] =
    # 1 - exp(-0.5). Without the bias the 90% interval of W_ell misses log 10; with it, it covers.
    rng = np.random.default_rng(0)
    q90 = math.log(10.0)
    bias = 1 - math.exp(-0.5)
    covered_plain = covered_bias = 0
    for _ in range(50):
        w_ell = np.maximum(rng.exponential(1.0, 4000) - 0.5, 0.0)
        _, plain = _quantile_ci(w_ell, 0.9, 0.95)
        _, wide = _quantile_ci(w_ell, 0.9, 0.95, bias)
        covered_plain += plain[0] <= q90 <= plain[1]
        covered_bias += wide[0] <= q90 <= wide[1]
        assert wide[0] == plain[0] and math.isfinite(wide[1]) and wide[1] >= plain[1]
    assert covered_plain == 0 and covered_bias == 50


def test_quantile_interval_unchanged_without_bias_and_unbounded_with_an_infinite_one():
    rng = np.random.default_rng(1)
    x = rng.exponential(1.0, 2000)
    q, ci = _quantile_ci(x, 0.5, 0.95)
    assert ci[0] <= q <= ci[1] and ci[1] < math.inf
    assert _quantile_ci(x, 0.5, 0.95, 0.0) == (q, ci)
    assert _quantile_ci(x, 0.5, 0.95, math.inf)[1][1] == math.inf
    # 99% of 50 samples: no order statistic is above the upper confidence level.
    assert _quantile_ci(x[:50], 0.99, 0.95)[1][1] == math.inf
