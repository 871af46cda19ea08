"""The response-time histograms of a policy whose waits do not depend on the job's own service
time (FCFS on the ordered workload vector, ``mjsre`` eq. (2), and random assignment):
``T = W + sigma`` with ``W`` and ``sigma`` independent given the class, so

    ``P(T <= t) = E[F_sigma(t - W)]``,

the expectation over the waiting-time histogram (within a bin, ``W`` log-uniform as the
quantiles interpolate it, by a 4-point Gauss-Legendre rule in ``log w``; the atom at 0
exactly). ``F_sigma`` is the distribution function of the class's service law in closed form
(exponential, Erlang, hyperexponential, bounded Pareto, deterministic, empirical, or a law's
own ``cdf``). The result is binned as the waits are, with fractional counts, so that the
quantile estimators of :mod:`jaxqueue.stats` read it as any histogram.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammainc

from ..dist import BoundedPareto, Deterministic, Empirical, Erlang, Exponential, HyperExponential

__all__ = ["service_cdf", "response_hists"]

_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(4)


def service_cdf(law, x: np.ndarray) -> np.ndarray | None:
    """``P(sigma <= x)`` of a service law (``None`` for a law with no known form)."""
    x = np.asarray(x, dtype=float)
    pos = np.maximum(x, 0.0)
    if isinstance(law, Exponential):
        return -np.expm1(-pos / float(law.mean_))
    if isinstance(law, Erlang):
        return gammainc(law.k, pos * law.k / float(law.mean_))
    if isinstance(law, HyperExponential):
        m, p = np.asarray(law.means, float), np.asarray(law.probs, float)
        return np.sum(p * -np.expm1(-pos[..., None] / m), axis=-1)
    if isinstance(law, BoundedPareto):
        a, lo, hi = float(law.shape), float(law.xmin), float(law.xmax)
        y = np.clip(x, lo, hi)
        return (1.0 - (lo / y) ** a) / (1.0 - (lo / hi) ** a)
    if isinstance(law, Deterministic):
        return (x >= float(law.value)).astype(float)
    if isinstance(law, Empirical):
        v = np.sort(np.asarray(law.values, float))
        return np.searchsorted(v, x, side="right") / len(v)
    cdf = getattr(law, "cdf", None)
    return None if cdf is None else np.asarray(cdf(x), dtype=float)


def _kernel(law, edges, rows) -> np.ndarray | None:
    """``K[i, k] = E[F_sigma(x_k - W) | W in bin rows[i]]`` at the upper edges ``x_k`` of the
    bins (``(len(rows), bins)``; the overflow bin's ``W`` at its lower edge)."""
    nb = len(edges) - 1
    upper = edges[1:]
    lo, hi = edges[1:-1], edges[2:]  # bins 1 .. nb - 1 (the last: [lo, inf))
    w = np.empty((nb, len(_NODES)))
    w[0] = 0.0
    u = (_NODES + 1) / 2
    w[1] = hi[0] * u  # (0, lo): uniform
    fin = np.isfinite(hi[1:])
    inner = np.log(lo[1:][fin])[:, None] + np.log(hi[1:][fin] / lo[1:][fin])[:, None] * u
    w[2:][fin] = np.exp(inner)
    w[2:][~fin] = lo[1:][~fin, None]
    w = w[rows]
    with np.errstate(invalid="ignore"):
        f = service_cdf(law, upper[None, :, None] - w[:, None, :])
    if f is None:
        return None
    f = np.where(np.isfinite(upper)[None, :, None], f, 1.0)
    return f @ (_WEIGHTS / 2)


def response_hists(wait_hists, edges, laws) -> np.ndarray | None:
    """Response-time histograms ``(..., classes, bins)`` (fractional counts, binned as
    ``edges``) from waiting-time histograms of the same shape and each class's service law
    (module docstring); ``None`` when a law has no known distribution function."""
    wait_hists = np.asarray(wait_hists, dtype=float)
    out = np.empty_like(wait_hists)
    for c, law in enumerate(laws):
        rows = np.flatnonzero(wait_hists[..., c, :].reshape(-1, wait_hists.shape[-1]).any(axis=0))
        K = _kernel(law, np.asarray(edges, float), rows)
        if K is None:
            return None
        below = wait_hists[..., c, rows] @ K  # counts with T at or below each upper edge
        total = wait_hists[..., c, :].sum(axis=-1, keepdims=True)
        below[..., -1] = total[..., 0]
        out[..., c, :] = np.diff(below, axis=-1, prepend=0.0)
    return out
