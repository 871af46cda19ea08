"""What the MJQM's engines (recurrence and events) share of their estimators (``mjsre``
Section 6): the parameters of the status rules (:func:`jaxqueue.stats.judge`), of the
idle-server control variate and identity test, and the waiting-time histogram's layout."""

from __future__ import annotations

import numpy as np

from ..stats import StatusRules, log_histogram

__all__ = [
    "RULES",
    "MIN_REPLICATIONS",
    "MIN_EFFECTIVE",
    "MIN_CONTROL_REPS",
    "IDLE_LEVEL",
    "wait_histogram",
]

RULES = StatusRules(
    min_replications=64,
    min_effective=10.0,
    few_why="an interval of heavy-tailed waits needs",
)
"""Status rules of the MJQM simulators. ``min_replications``: with fewer, the interval of a
ratio over heavy-tailed replications is too short (a run that drew few of the rare long jobs
also shows a small spread; no formula restores a tail the sample did not reach); coverage of
the 95% interval of the mean wait in ``benchmarks/bench_coverage.py``. ``min_effective``: the
measured jobs of a run started away from the stationary regime span at least 20 integrated
autocorrelation times (the drift and idle tests have no power on shorter runs)."""

MIN_REPLICATIONS = RULES.min_replications
MIN_EFFECTIVE = RULES.min_effective

MIN_CONTROL_REPS = 128
"""Fewest replications for the idle-server control variate: its coefficient is estimated from
the replications, and with few of them it fits their heavy tails and the interval is too short
(coverage in ``benchmarks/bench_coverage.py``); with fewer the plain ratio interval is used."""

IDLE_LEVEL = 0.999
"""Two-sided level of the idle-server identity test (:func:`jaxqueue.stats.identity_z`, a
Student t statistic with ``R - 1`` degrees of freedom): the level of the drift test."""


def few_replications_reason(n: int) -> str:
    """The one-line reason of status ``unconverged`` below ``MIN_REPLICATIONS`` replications."""
    return RULES.few_reason(n)


def wait_histogram(workload, hist_range=None, bins_per_octave: int = 16):
    """The log-spaced waiting-time histogram layout (:func:`jaxqueue.stats.log_histogram`)
    of ``workload``: by default ``1e-4`` to ``1e6`` times its mean service time. Returns
    ``(n_bins, shift, lo_code, edges)``."""
    mean_service = float(np.sum(np.asarray(workload.probs) * np.asarray(workload.mean_service())))
    return log_histogram(mean_service, hist_range, bins_per_octave)
