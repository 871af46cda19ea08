"""Phase-level representation of the laws that are mixtures of sums of exponential phases.

A job-size law ``X`` is a *phase mixture* when, with probability ``probs[j]``, ``X`` is the sum
of ``counts[j]`` independent exponential phases of rate ``rates[j]`` (mean ``1 / rates[j]``).
Exponential, Erlang-k, hyperexponential and the ``PhaseCount`` laws of ``bf-clusters``
Section 5 (bimodal and Zipf numbers of phases) are all of this form, which turns a queue with
these sizes into a continuous-time Markov chain on the remaining phase counts (the setting of
the simulator in ``jaxqueue.sched``).
"""

from __future__ import annotations

import equinox as eqx
import numpy as np

from ._laws import Erlang, Exponential, HyperExponential, Law, PhaseCount

__all__ = ["PhaseMixture", "phase_mixture"]


class PhaseMixture(eqx.Module):
    """``counts[j]`` exponential phases of rate ``rates[j]`` with probability ``probs[j]``.

    Attributes:
        counts: number of phases of each component (positive integers).
        rates: phase rate of each component (> 0).
        probs: component probabilities (>= 0, summing to 1).

    Mean ``sum_j p_j n_j / r_j``; second moment ``sum_j p_j n_j (n_j + 1) / r_j^2``.
    """

    counts: np.ndarray
    rates: np.ndarray
    probs: np.ndarray

    def __check_init__(self):
        c, r, p = (np.asarray(v) for v in (self.counts, self.rates, self.probs))
        if not (c.ndim == r.ndim == p.ndim == 1 and c.shape == r.shape == p.shape and c.size):
            raise ValueError("PhaseMixture counts, rates, probs must be 1-D of the same length")
        if np.any(c < 1) or np.any(c != np.round(c)):
            raise ValueError("PhaseMixture counts must be positive integers")
        if not np.all(np.isfinite(r)) or np.any(r <= 0):
            raise ValueError("PhaseMixture rates must be finite and > 0")
        if np.any(p < 0) or not np.isclose(p.sum(), 1.0, atol=1e-6):
            raise ValueError("PhaseMixture probs must be >= 0 and sum to 1")

    def mean(self) -> float:
        c, r, p = (np.asarray(v, dtype=float) for v in (self.counts, self.rates, self.probs))
        return float(np.sum(p * c / r))

    def second_moment(self) -> float:
        c, r, p = (np.asarray(v, dtype=float) for v in (self.counts, self.rates, self.probs))
        return float(np.sum(p * c * (c + 1) / r**2))

    def var(self) -> float:
        return self.second_moment() - self.mean() ** 2

    def scv(self) -> float:
        return self.var() / self.mean() ** 2


def phase_mixture(law: Law) -> PhaseMixture:
    """The phase-mixture representation of ``law`` (concrete parameters).

    Args:
        law: an ``Exponential``, ``Erlang``, ``HyperExponential`` or ``PhaseCount`` law.

    Returns:
        The ``PhaseMixture`` with the same distribution (numpy arrays, float64 rates).

    Raises:
        ValueError: for laws that are not mixtures of sums of exponential phases.
    """
    if isinstance(law, Exponential):
        return PhaseMixture(np.array([1]), np.array([1.0 / float(law.mean_)]), np.array([1.0]))
    if isinstance(law, Erlang):
        return PhaseMixture(
            np.array([law.k]), np.array([law.k / float(law.mean_)]), np.array([1.0])
        )
    if isinstance(law, HyperExponential):
        means = np.asarray(law.means, dtype=float)
        return PhaseMixture(
            np.ones(means.shape, dtype=int), 1.0 / means, np.asarray(law.probs, dtype=float)
        )
    if isinstance(law, PhaseCount):
        counts = np.asarray(law.counts).astype(int)
        rate = 1.0 / float(law.phase_mean)
        return PhaseMixture(counts, np.full(counts.shape, rate), np.asarray(law.probs, dtype=float))
    raise ValueError(
        f"law {type(law).__name__} is not a mixture of sums of exponential phases; "
        "use Exponential, Erlang, HyperExponential or PhaseCount"
    )
