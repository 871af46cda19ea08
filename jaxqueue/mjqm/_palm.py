"""Job and system metrics from backward samples (``mjsre`` Section 6).

A sample ``W`` is the ordered workload found by an arriving job (Palm probability of the
arrivals). Job 0 is independent of ``W``, so one sample gives the waiting time of every class:
a class-``c`` job waits ``W^{alpha_c}`` (Section 6.2) and stays ``r = W^{alpha_c} + sigma_0``.
Averaging over classes with weights ``p_c`` inside each sample (a conditional expectation)
gives the overall mean wait with a smaller variance. Intervals are Student-t over the
independent samples; the upper ends of the mean intervals (wait, response, ``L``) are raised by
the sampler's bias bound (``BackwardSamples.bias_bound``, the batch-level test of
:mod:`._backward`): sub-perfect samples are lower bounds, so their bias is one-sided.

System metrics (Section 6.3), corrected as in ``docs/errata.md`` item 1:

* servers idle because of HOL blocking: ``w_HOL = lam E0[sum_{i <= alpha_0} (W^{alpha_0} -
  W^i)]`` (untruncated: the printed eqs. (12)-(13) cut each term at ``tau`` and miss the part
  of a HOL gap beyond the next arrival);
* all idle servers: ``w = s - lam E[alpha sigma]`` (servers serve ``alpha sigma`` per job);
* mean number of jobs (Little): ``L_c = lam p_c E[r_c]``.
"""

from __future__ import annotations

import math

import jax
import numpy as np
from scipy.special import ndtri  # the normal quantile

from .._random import stream_key
from ..stats import mean_ci
from ._bspec import workload_fields
from .engines.recurrence import BackwardSamples

__all__ = ["palm_metrics", "wait_samples", "wait_density"]


def _mean_ci(x: np.ndarray, level: float) -> tuple[float, list[float]]:
    """Mean of independent samples with the shape-corrected t interval (``stats.mean_ci``)."""
    est = mean_ci(np.asarray(x, dtype=np.float64), level=level, shape=True)
    return float(est.mean), [float(est.low), float(est.high)]


def _widen(ci: list[float], bias: float) -> list[float]:
    """Raise the upper end of an interval by a bound of the downward bias."""
    return [ci[0], ci[1] + bias]


def _var_ci(x: np.ndarray, level: float) -> tuple[float, list[float]]:
    """Sample variance with the asymptotic interval ``Var(s^2) ~ (mu_4 - sigma^4) / n``."""
    n = x.shape[0]
    v = float(np.var(x, ddof=1))
    m4 = float(np.mean((x - x.mean()) ** 4))
    se = math.sqrt(max(m4 - v * v, 0.0) / n)
    z = float(ndtri(0.5 + level / 2))
    return v, [v - z * se, v + z * se]


def _quantile_ci(x: np.ndarray, q: float, level: float, bias: float = 0.0):
    """Empirical quantile with the distribution-free order-statistic interval, its upper end
    raised for a downward bias of at most ``bias`` in the mean (sub-perfect samples).

    On the same inputs a sub-perfect sample is below the stationary one, ``D = W - W_ell >= 0``
    with ``E D <= bias``; Markov's inequality gives ``F(y + d) >= F_ell(y) - bias / d``, so
    ``Q(q) <= Q_ell(q + bias / d) + d`` for every ``d > 0``: the upper end is the least of
    these over a grid of ``d`` (``inf`` where no ``q + bias / d < 1`` helps)."""
    n = x.shape[0]
    xs = np.sort(x)
    z = float(ndtri(0.5 + level / 2))

    def upper(p: float) -> float:
        i = math.ceil(n * p + z * math.sqrt(n * p * (1 - p)))
        return float(xs[i]) if i <= n - 1 else math.inf

    lo = int(max(0, math.floor(n * q - z * math.sqrt(n * q * (1 - q)))))
    if bias == 0:
        hi = upper(q)
    elif bias == math.inf:
        hi = math.inf
    else:  # eps = bias / d: the quantile level moves up by eps, the value by d
        hi = min(upper(q + e) + bias / e for e in (1 - q) * np.geomspace(1e-4, 0.999, 60))
    return float(np.quantile(x, q)), [float(xs[lo]), hi]


def wait_samples(workload, samples: BackwardSamples) -> np.ndarray:
    """``(n, classes)`` waiting times: column ``c`` is ``W^{alpha_c}`` of each sample."""
    _, cores, _, _, _ = workload_fields(workload)
    return np.asarray(samples.W)[:, cores - 1]


def wait_density(
    workload, samples: BackwardSamples, bins: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-class density of the waiting time on ``bins`` and the atom ``P(wait = 0)``.

    Returns:
        ``(density (classes, len(bins) - 1), p_zero (classes,))``; the density integrates to
        ``1 - p_zero`` over the bins that cover the samples.
    """
    w = wait_samples(workload, samples)
    n = w.shape[0]
    widths = np.diff(bins)
    dens = np.stack(
        [np.histogram(w[w[:, c] > 0, c], bins=bins)[0] / (n * widths) for c in range(w.shape[1])]
    )
    return dens, np.mean(w == 0, axis=0)


def _class_row(x, law, cores: int, prob: float, lam: float, bias: float, level, key) -> dict:
    """The metrics of one class from its waits ``x`` (one per sample): mean (its interval
    raised by the bias bound ``bias``), variance, quantiles, P(no wait), response time (job
    0's service time drawn with ``key``) and ``L`` (Little)."""
    mean_s, var_s = float(law.mean()), float(law.var())
    m, mci = _mean_ci(x, level)
    mci = _widen(mci, bias)
    v, vci = _var_ci(x, level)
    r = x + np.asarray(law.sample(key, (x.shape[0],)), dtype=np.float64)
    row = {
        "cores": cores,
        "prob": prob,
        "wait_mean": m,
        "wait_mean_ci": mci,
        "wait_mean_bias_bound": bias,
        "wait_var": v,
        "wait_var_ci": vci,
        "p_wait_zero": float(np.mean(x == 0)),
        "response_mean": m + mean_s,
        "response_mean_ci": [mci[0] + mean_s, mci[1] + mean_s],
        "response_var": v + var_s,
        "response_p90": float(np.quantile(r, 0.9)),
        "L": lam * prob * (m + mean_s),
        "L_ci": [lam * prob * (mci[0] + mean_s), lam * prob * (mci[1] + mean_s)],
    }
    for q in (0.5, 0.9, 0.99):
        qv, qci = _quantile_ci(x, q, level, bias)
        row[f"wait_p{int(round(q * 100))}"] = qv
        row[f"wait_p{int(round(q * 100))}_ci"] = qci
    return row


def palm_metrics(
    workload,
    samples: BackwardSamples,
    *,
    level: float = 0.95,
    key=None,
    throw: bool = False,
) -> dict:
    """Per-class and system metrics with confidence intervals from backward samples.

    Args:
        workload: the workload the samples were drawn for.
        samples: output of :func:`sample_backward` (any stationary arrivals: the system
            metrics use the Palm inversion formula, not PASTA).
        level: confidence level of every interval. Samples that hit the ``ell`` cap
            (``unconverged``) are lower bounds: every mean interval then ends at ``inf``.
            Samples whose batch bias test failed (``biased``) have their bias bound in the
            intervals.
        key: PRNG key for job 0's service time (system-time quantiles); default: derived
            from the samples' key.
        throw: raise :class:`~jaxqueue.stats.EstimateError` when the samples' status is not
            ``ok`` (default: the metrics with that status).

    Returns:
        A JSON-able dict with the keys of ``jaxqueue mjqm sample --json``: ``lam``,
        ``classes`` (``cores, prob, wait_mean, wait_mean_ci, wait_var, wait_var_ci, wait_p50,
        wait_p90, wait_p99`` (+ ``_ci``), ``p_wait_zero, response_mean, response_mean_ci,
        response_var, response_p90, L``), ``wait_mean``, ``wait_mean_ci``,
        ``response_mean``, ``idle_servers``, ``hol_idle_servers(_ci)``, ``busy_servers``,
        ``L``, ``samples``, ``status`` (a :class:`~jaxqueue.stats.Status`: ``ok``,
        ``unconverged``, ``biased``),
        ``n_unconverged``, ``bias_bound`` (added to the upper ends of the mean intervals;
        per class ``wait_mean_bias_bound``; the quantile intervals' upper ends are raised
        for it too, :func:`_quantile_ci`; the variance and HOL intervals are sampling
        intervals of the sub-perfect samples, their horizon bias is not bounded),
        ``ell_batch``, ``ell_more`` (the horizon of the samples drawn after the pilot),
        ``bias_tests``. Every mean with
        an interval is a :class:`~jaxqueue.stats.Estimate` by
        ``jaxqueue.stats.estimate(m, "wait_mean")`` (``cls=c`` for class ``c``).

    Raises:
        ValueError: fewer than 2 samples.
        EstimateError: with ``throw``, a status other than ``ok``.
    """
    if throw:
        samples.raise_for_status()
    if samples.n < 2:
        raise ValueError("metrics need at least 2 samples")
    s, cores, probs, laws, _ = workload_fields(workload)
    lam = float(samples.lam)
    W = np.asarray(samples.W, dtype=np.float64)
    n = W.shape[0]
    w = W[:, cores - 1]
    key = stream_key(samples.key, "palm") if key is None else key
    bias = float(samples.bias_bound)
    bias_c = (
        np.zeros(len(cores))
        if samples.bias_bound_class is None
        else np.asarray(samples.bias_bound_class, dtype=np.float64)
    )
    if samples.n_unconverged > 0:  # capped samples are lower bounds: no upper end
        bias, bias_c = math.inf, np.full(len(cores), math.inf)
    means = np.array([float(law.mean()) for law in laws])
    classes = [
        _class_row(
            w[:, c],
            laws[c],
            int(cores[c]),
            float(probs[c]),
            lam,
            float(bias_c[c]),
            level,
            jax.random.fold_in(key, c),
        )
        for c in range(len(cores))
    ]
    wbar = w @ probs
    wm, wci = _mean_ci(wbar, level)
    wci = _widen(wci, bias)
    csum = np.cumsum(W, axis=1)[:, cores - 1]
    hol = lam * ((cores[None, :] * w - csum) @ probs)
    hm, hci = _mean_ci(hol, level)
    busy = lam * float(np.sum(probs * cores * means))  # lam E[alpha sigma], in float64
    es = float(np.sum(probs * means))
    return {
        "lam": lam,
        "classes": classes,
        "wait_mean": wm,
        "wait_mean_ci": wci,
        "response_mean": wm + es,
        "response_mean_ci": [wci[0] + es, wci[1] + es],
        "idle_servers": s - busy,
        "idle_servers_ci": [s - busy, s - busy],
        "hol_idle_servers": hm,
        "hol_idle_servers_ci": hci,
        "busy_servers": busy,
        "L": lam * (wm + es),
        "L_ci": [lam * (wci[0] + es), lam * (wci[1] + es)],
        "samples": n,
        "level": level,
        "status": samples.status,
        "n_unconverged": samples.n_unconverged,
        "bias_bound": bias,
        "ell_batch": int(samples.ell_batch),
        "ell_more": int(samples.ell_more),
        "bias_tests": [t.as_dict() for t in samples.bias_tests],
        "ell_max": int(np.max(samples.ell)),
        "ell_mean": float(np.mean(samples.ell)),
        "work_ratio": samples.work_ratio,
        "method": "backward (Algorithm 1)",
    }
