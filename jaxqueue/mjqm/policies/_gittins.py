"""The Gittins rank of a service law at attained service (Gittins, "Bandit processes and
dynamic allocation indices", JRSS B 41, 1979; for the M/G/1 queue, Scully and Harchol-Balter,
"The Gittins policy in the M/G/k queue", WiOpt 2021, eq. (2.1)):

    r(a) = inf_{b > a} int_a^b F(t) dt / (F(a) - F(b)),   F the survival function,

the least expected service per unit chance of completing, over the budgets ``b - a`` (the
inverse of the Gittins index). The lower the rank, the earlier served. Where the hazard rate
is monotone the infimum is at an end (Aalto, Ayesta and Righter, "On the Gittins index in the
M/G/1 queue", Queueing Systems 63, 2009): exponential, the mean; deterministic, the time left;
hyperexponential (decreasing hazard, budget to 0), one over the hazard rate; Erlang
(increasing hazard, budget to infinity), the mean residual life, all in closed form
(:func:`rank`). Bounded Pareto: on a grid of ages from its survival function (numpy, host
side, :func:`rank_table`), read by linear interpolation.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ...dist import BoundedPareto, Deterministic, Erlang, Exponential, HyperExponential

_GRID = 256  # ages per class (and as many again on a geometric grid)


def _survival(law):
    """``(F, upper)``: the survival function (numpy) and an age beyond which F is negligible."""
    if isinstance(law, HyperExponential):
        m, p = np.asarray(law.means, float), np.asarray(law.probs, float)
        return (lambda t: np.exp(-np.asarray(t)[..., None] / m) @ p), 40.0 * float(m.max())
    if isinstance(law, Erlang):
        k, rate = law.k, law.k / float(law.mean_)

        def F(t):
            x = rate * np.asarray(t)
            return np.exp(-x) * sum(x**j / math.factorial(j) for j in range(k))

        return F, 40.0 * float(law.mean_)
    if isinstance(law, BoundedPareto):
        lo, hi, a = float(law.xmin), float(law.xmax), float(law.shape)
        c = 1.0 - (lo / hi) ** a

        def F(t):
            t = np.clip(np.asarray(t, float), lo, hi)
            return ((lo / t) ** a - (lo / hi) ** a) / c

        return F, hi
    raise ValueError(
        f"server-filling-gittins: no Gittins rank for a {type(law).__name__} service law "
        "(exponential, erlang, hyperexponential, bounded-pareto, deterministic)"
    )


def rank_table(law) -> tuple[np.ndarray, np.ndarray]:
    """``(ages, ranks)`` of ``law`` on a grid of ``_GRID`` ages (the rank is constant beyond
    the last age); exponential: one age, its mean; deterministic: ``value - age``, two
    points."""
    if isinstance(law, Exponential):
        m = float(law.mean_)
        return np.array([0.0, 1.0]), np.array([m, m])
    if isinstance(law, Deterministic):
        v = float(law.value)
        return np.array([0.0, v]), np.array([v, 0.0])
    F, upper = _survival(law)
    # ages on a linear and a geometric grid; budgets on a finer one holding the ages
    ages = np.unique(
        np.concatenate(
            [np.linspace(0, upper, _GRID + 1), np.geomspace(upper * 1e-4, upper, _GRID // 2)]
        )
    )
    t = np.unique(
        np.concatenate(
            [
                ages,
                np.linspace(0, upper, 16 * _GRID + 1),
                np.geomspace(upper * 1e-7, upper, 8 * _GRID),
            ]
        )
    )
    f = F(t)
    # the integral of F from each point to the end (summed from the end: no cancellation
    # where F is small)
    piece = 0.5 * (f[1:] + f[:-1]) * np.diff(t)
    tail = np.concatenate([np.cumsum(piece[::-1])[::-1], [0.0]])
    ranks = np.empty_like(ages)
    for i, a in enumerate(np.searchsorted(t, ages)):
        gain = f[a] - f[a + 1 :]
        ok = gain > 1e-9 * f[a]
        if f[a] <= 1e-300 or not ok.any():  # beyond the support: the last rank
            ranks[i] = ranks[i - 1] if i else 0.0
            continue
        ranks[i] = np.min((tail[a] - tail[a + 1 :])[ok] / gain[ok])
    return ages, ranks


def table(law):
    """What :func:`rank` reads besides the law: the grid of a bounded Pareto law (``None``
    for the laws in closed form); ``ValueError`` for a law without a rank here."""
    if isinstance(law, BoundedPareto):
        return rank_table(law)
    if isinstance(law, (Exponential, Deterministic, HyperExponential, Erlang)):
        return None
    raise ValueError(
        f"server-filling-gittins: no Gittins rank for a {type(law).__name__} service law "
        "(exponential, erlang, hyperexponential, bounded-pareto, deterministic)"
    )


def rank(law, grid, a):
    """The Gittins rank of ``law`` at the attained services ``a`` (module docstring;
    ``grid``: :func:`table`'s)."""
    dt = a.dtype
    if isinstance(law, Exponential):
        return jnp.full_like(a, jnp.asarray(law.mean_, dt))
    if isinstance(law, Deterministic):
        return jnp.maximum(jnp.asarray(law.value, dt) - a, 0.0)
    if isinstance(law, HyperExponential):  # 1 / hazard, the weights scaled by the largest
        m, p = jnp.asarray(law.means, dt), jnp.asarray(law.probs, dt)
        logw = jnp.log(p) - a[..., None] / m
        w = jnp.exp(logw - jnp.max(logw, axis=-1, keepdims=True))
        return jnp.sum(w, axis=-1) / jnp.sum(w / m, axis=-1)
    if isinstance(law, Erlang):  # mean residual life: sum (k - i) x^i / i! over sum x^i / i!
        rate = law.k / jnp.asarray(law.mean_, dt)
        x = rate * a
        terms = [x**i / math.factorial(i) for i in range(law.k)]
        return sum((law.k - i) * v for i, v in enumerate(terms)) / sum(terms) / rate
    ages, ranks = grid
    return jnp.interp(a, jnp.asarray(ages, dt), jnp.asarray(ranks, dt))
