"""Closed forms of single-class queues, for the tests of the exact solvers.

A test reference: textbook formulas only (math and numpy/scipy), nothing from ``jaxqueue``.

* M/G/1 FCFS: Pollaczek-Khinchine mean wait ``E[W] = lam E[S^2] / (2 (1 - rho))``,
  ``P(W > 0) = rho``; the moments of Erlang-``k``, two-phase hyperexponential and general
  phase-type laws ``E[S^n] = n! alpha (-T)^{-n} 1``.
* M/PH/1 FCFS: the waiting time is a geometric sum of ladder heights, each ``PH(beta, T)``
  with ``beta = lam alpha (-T)^{-1}`` (the defective equilibrium law of the service), so it is
  phase-type (Asmussen, *Applied Probability and Queues*): ``P(W > x) = beta exp((T + t beta)
  x) 1`` with ``t = -T 1``.
* M/M/c FCFS: Erlang C ``C(c, a)`` (``a = lam / mu``), ``P(W > t) = C(c, a) e^{-(c mu - lam) t}``,
  ``E[W] = C(c, a) / (c mu - lam)``, and the quantile inverse of that tail.
* M/M/1: ``P(W > t) = rho e^{-(mu - lam) t}``, ``E[W] = rho / (mu - lam)``,
  ``E[N] = rho / (1 - rho)``, response ``P(R > t) = e^{-(mu - lam) t}``.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla

__all__ = [
    "erlang_c",
    "erlang_moments",
    "h2_moments",
    "mg1_mean_wait",
    "mg1_p_wait",
    "mm1_jobs_mean",
    "mm1_mean_wait",
    "mm1_response_tail",
    "mm1_wait_tail",
    "mmc_mean_wait",
    "mmc_wait_quantile",
    "mmc_wait_tail",
    "mph1_mean_wait",
    "mph1_wait_tail",
    "ph_moment",
]


# -- moments --------------------------------------------------------------------------------------
def erlang_moments(k: int, mean: float) -> tuple[float, float]:
    """``(E[S], E[S^2])`` of Erlang-``k`` with the given mean: ``E[S^2] = (k + 1) / k mean^2``."""
    return mean, (k + 1) / k * mean**2


def h2_moments(probs, means) -> tuple[float, float]:
    """``(E[S], E[S^2])`` of a mixture of exponentials: ``sum p_i m_i``, ``sum 2 p_i m_i^2``."""
    return (
        float(sum(p * m for p, m in zip(probs, means, strict=True))),
        float(sum(2 * p * m * m for p, m in zip(probs, means, strict=True))),
    )


def ph_moment(alpha, T, n: int) -> float:
    """``E[S^n] = n! alpha (-T)^{-n} 1`` of ``PH(alpha, T)``."""
    T = np.asarray(T, float)
    x = np.ones(len(T))
    for _ in range(n):
        x = np.linalg.solve(-T, x)
    return float(math.factorial(n) * np.asarray(alpha, float) @ x)


# -- M/G/1 ----------------------------------------------------------------------------------------
def mg1_mean_wait(lam: float, es: float, es2: float) -> float:
    """Pollaczek-Khinchine: ``lam E[S^2] / (2 (1 - lam E[S]))``."""
    rho = lam * es
    if not 0 < rho < 1:
        raise ValueError("need 0 < lam E[S] < 1")
    return lam * es2 / (2.0 * (1.0 - rho))


def mg1_p_wait(lam: float, es: float) -> float:
    """``P(W > 0) = rho`` (PASTA: an arrival waits iff the server is busy)."""
    return lam * es


def _mph1_law(lam, alpha, T):
    """``(beta, S)``: M/PH/1's waiting time is ``PH(beta, S)`` plus an atom ``1 - rho`` at 0."""
    alpha = np.asarray(alpha, float)
    T = np.asarray(T, float)
    beta = lam * np.linalg.solve(-T.T, alpha)
    if not 0 < beta.sum() < 1:
        raise ValueError("need 0 < rho < 1")
    return beta, T + np.outer(-T.sum(axis=1), beta)


def mph1_wait_tail(lam: float, alpha, T, t) -> np.ndarray:
    """M/PH/1 FCFS: ``P(W > t) = beta exp((T + t_exit beta) t) 1``, ``beta = lam alpha (-T)^-1``."""
    beta, S = _mph1_law(lam, alpha, T)
    one = np.ones(len(S))
    return np.array([beta @ sla.expm(S * x) @ one for x in np.atleast_1d(t)])


def mph1_mean_wait(lam: float, alpha, T) -> float:
    """``E[W] = beta (-S)^{-1} 1`` of the M/PH/1 law (equals Pollaczek-Khinchine)."""
    beta, S = _mph1_law(lam, alpha, T)
    return float(beta @ np.linalg.solve(-S, np.ones(len(S))))


# -- M/M/c ----------------------------------------------------------------------------------------
def erlang_c(c: int, a: float) -> float:
    """Erlang C: probability that an arrival waits in M/M/c with offered load ``a = lam / mu``."""
    rho = a / c
    if not 0 < rho < 1:
        raise ValueError("need 0 < a / c < 1")
    # stable recursion through Erlang B: B(0) = 1, B(k) = a B(k-1) / (k + a B(k-1))
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b / (1.0 - rho * (1.0 - b))


def mmc_wait_tail(c: int, lam: float, mu: float, t) -> np.ndarray:
    """``P(W > t) = C(c, lam / mu) e^{-(c mu - lam) t}``."""
    return erlang_c(c, lam / mu) * np.exp(-(c * mu - lam) * np.asarray(t, float))


def mmc_mean_wait(c: int, lam: float, mu: float) -> float:
    return erlang_c(c, lam / mu) / (c * mu - lam)


def mmc_wait_quantile(c: int, lam: float, mu: float, q: float) -> float:
    """Smallest ``t`` with ``P(W <= t) >= q``: 0 when ``1 - q >= C``, else
    ``log(C / (1 - q)) / (c mu - lam)``."""
    if not 0 < q < 1:
        raise ValueError("q must be in (0, 1)")
    C = erlang_c(c, lam / mu)
    return 0.0 if 1.0 - q >= C else math.log(C / (1.0 - q)) / (c * mu - lam)


# -- M/M/1 ----------------------------------------------------------------------------------------
def mm1_wait_tail(lam: float, mu: float, t) -> np.ndarray:
    rho = lam / mu
    return rho * np.exp(-(mu - lam) * np.asarray(t, float))


def mm1_response_tail(lam: float, mu: float, t) -> np.ndarray:
    return np.exp(-(mu - lam) * np.asarray(t, float))


def mm1_mean_wait(lam: float, mu: float) -> float:
    return lam / mu / (mu - lam)


def mm1_jobs_mean(lam: float, mu: float) -> float:
    rho = lam / mu
    return rho / (1.0 - rho)
