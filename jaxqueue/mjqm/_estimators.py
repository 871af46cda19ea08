"""What the MJQM's engines (recurrence and events) share of their estimators (``mjsre``
Section 6): the parameters of the status rules (:func:`jaxqueue.stats.judge`), of the
idle-server control variate and identity test, the waiting-time histogram's layout, and the
quantile and tail keys of a policy run's JSON."""

from __future__ import annotations

import numpy as np

from ..stats import (
    Estimate,
    StatusRules,
    log_histogram,
    quantile_ci,
    quantile_from_hist,
    tail_ci,
)

__all__ = [
    "RULES",
    "MIN_REPLICATIONS",
    "MIN_EFFECTIVE",
    "MIN_CONTROL_REPS",
    "IDLE_LEVEL",
    "wait_histogram",
    "QUANTILES",
    "quantile_key",
    "quantile_fields",
    "Tails",
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


def unconverged_reason(replications: int, thin: str) -> str:
    """The one-line reason of status ``unconverged``, in :func:`jaxqueue.stats.judge`'s
    order: fewer than ``MIN_REPLICATIONS`` replications, else ``thin`` (a class measured in
    fewer than 2 replications, in the engine's words)."""
    return RULES.few_reason(replications) if replications < MIN_REPLICATIONS else thin


def wait_histogram(workload, hist_range=None, bins_per_octave: int = 16):
    """The log-spaced waiting-time histogram layout (:func:`jaxqueue.stats.log_histogram`)
    of ``workload``: by default ``1e-4`` to ``1e6`` times its mean service time. Returns
    ``(n_bins, shift, lo_code, edges)``."""
    mean_service = float(np.sum(np.asarray(workload.probs) * np.asarray(workload.mean_service())))
    return log_histogram(mean_service, hist_range, bins_per_octave)


QUANTILES = (0.5, 0.9, 0.99)
"""The quantiles every policy run reports (``response_quantiles``, ``wait_quantiles``)."""


def quantile_key(x: float) -> str:
    """The JSON key of a quantile level or a tail point: ``0.5 -> "0.5"``, ``10.0 -> "10"``."""
    return format(float(x), "g")


def _key(t) -> str:
    return t if isinstance(t, str) else quantile_key(t)


def quantile_fields(result, classes: int, quantiles=QUANTILES, tails=()) -> tuple[dict, list]:
    """The quantile and tail keys of a policy run's JSON, overall and per class:
    ``response_quantiles`` / ``wait_quantiles`` (``{"0.5": x, ...}``) with ``..._ci`` beside
    them (``{"0.5": [lo, hi], ...}``), and for ``tails`` ``response_tail`` / ``wait_tail``
    (``P(T > t)``, ``P(W > t)``; the key of a string ``t`` is ``t`` as given) with ``..._ci``,
    from the histograms of ``result`` (a :class:`Tails`). Returns ``(overall, [per class])``."""
    hists = dict(zip(("wait", "response"), result.tail_hists(), strict=True))

    def fields(kind, fn, points, name, cls):
        h = _pick(hists[kind], cls)
        est = {_key(x): _estimate(fn, h, result.edges, float(x), result.level) for x in points}
        return {
            f"{kind}_{name}": {k: float(e.mean) for k, e in est.items()},
            f"{kind}_{name}_ci": {k: [float(e.low), float(e.high)] for k, e in est.items()},
        }

    def block(cls):
        out = {}
        for kind in ("response", "wait"):
            out |= fields(kind, quantile_ci, quantiles, "quantiles", cls)
            if tails:
                out |= fields(kind, tail_ci, tails, "tail", cls)
        return out

    return block(None), [block(c) for c in range(classes)]


def _key(x) -> str:
    return x if isinstance(x, str) else quantile_key(x)


def _pick(h, cls):
    """Histograms ``(groups, classes, bins)`` of class ``cls``, or of all jobs."""
    if h is None:
        return None
    return h.sum(axis=1) if cls is None else h[:, cls]


def _estimate(fn, h, edges, x, level) -> Estimate:
    if h is None:  # no histogram (a service law with no known distribution function)
        nan = np.float64(np.nan)
        return Estimate(nan, nan, nan, 0, level)
    return fn(h, edges, x, level)


class Tails:
    """Quantiles and tails with intervals (a mixin of the engines' results): from the
    waiting-time and response-time histograms of :meth:`tail_hists`, ``(groups, classes,
    bins)`` counts on ``edges`` per independent replication or section of replications, at
    the result's ``level``; Woodruff's interval (:func:`~jaxqueue.stats.quantile_ci`,
    :func:`~jaxqueue.stats.tail_ci`). ``cls``: one class, ``None`` all jobs."""

    def tail_hists(self) -> tuple:
        """``(wait_hists, response_hists)``; ``response_hists`` ``None`` where unknown."""
        return self.wait_hists, self.response_hists

    def wait_quantile(self, q: float, cls: int | None = None) -> float:
        """Quantile ``q`` of the wait until (first) service of class ``cls`` (all jobs if
        ``None``) from the pooled histogram ``hist``, interpolated within a bin (accurate to a
        fraction of a bin)."""
        if not 0.0 < q < 1.0:
            raise ValueError(f"q must lie in (0, 1), got {q}")
        counts = self.hist.sum(axis=0) if cls is None else self.hist[cls]
        return quantile_from_hist(counts, self.edges, q)

    def _one(self, fn, kind, x, cls) -> Estimate:
        h = self.tail_hists()[kind == "response"]
        return _estimate(fn, _pick(h, cls), self.edges, float(x), self.level)

    def response_quantile_ci(self, q: float, cls: int | None = None) -> Estimate:
        """Quantile ``q`` of the response time (sojourn: wait plus service) with its
        interval."""
        return self._one(quantile_ci, "response", q, cls)

    def wait_quantile_ci(self, q: float, cls: int | None = None) -> Estimate:
        """Quantile ``q`` of the wait until (first) service with its interval."""
        return self._one(quantile_ci, "wait", q, cls)

    def response_tail_ci(self, t: float, cls: int | None = None) -> Estimate:
        """``P(T > t)`` of the response time with its interval."""
        return self._one(tail_ci, "response", t, cls)

    def wait_tail_ci(self, t: float, cls: int | None = None) -> Estimate:
        """``P(W > t)`` of the wait with its interval."""
        return self._one(tail_ci, "wait", t, cls)
