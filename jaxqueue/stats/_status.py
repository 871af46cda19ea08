"""One rule set that judges a simulation run's status, parameterised per model.

A run is ``overflow`` when a buffer filled; ``nonstationary`` when its mean grows between the
halves of the measured observations, an identity of the stationary regime fails, or (when
its start is not known to be stationary) it spans fewer than ``min_effective`` effective
observations per replication (:func:`~jaxqueue.stats.effective_samples`); ``unconverged``
when a quantity was seen in fewer than 2 replications or the run has fewer than
``min_replications`` replications; else ``ok``. The first that applies is the status.
"""

from __future__ import annotations

import dataclasses

from ._result import Status

__all__ = ["StatusRules", "judge"]


@dataclasses.dataclass(frozen=True)
class StatusRules:
    """The parameters of :func:`judge` for one model.

    Attributes:
        min_replications: fewest replications for ``ok`` (the interval's width is itself a
            guess with fewer).
        min_effective: fewest effective observations per replication for ``ok`` when the
            start is not known to be stationary.
        few_why: what the replications are needed for, completing the reason "N
            replications, fewer than the M ...".
    """

    min_replications: int
    min_effective: float
    few_why: str = "an interval needs"

    def few_reason(self, n: int) -> str:
        """The one-line reason of ``unconverged`` below ``min_replications``."""
        return (
            f"{n} replications, fewer than the {self.min_replications} {self.few_why}; "
            "raise n_replications"
        )


def judge(
    rules: StatusRules,
    *,
    replications: int,
    n_eff: float = float("inf"),
    growing: bool = False,
    failed: bool = False,
    thin: bool = False,
    overflow: bool = False,
    stationary_start: bool = False,
) -> tuple[Status, str]:
    """The status of a run and a one-line reason (empty for ``ok``).

    Args:
        rules: the model's :class:`StatusRules`.
        replications: independent replications of the run.
        n_eff: effective observations per replication (the smallest over sweep points).
        growing: the drift test saw a significant growth between the halves.
        failed: another stationarity check failed (an identity, an event cap).
        thin: a quantity was seen in fewer than 2 replications.
        overflow: a buffer filled.
        stationary_start: the start is (nearly) a stationary sample: ``min_effective`` is
            not applied.
    """
    short = not stationary_start and n_eff < rules.min_effective
    if overflow:
        return Status.overflow, "a buffer filled"
    if growing or failed or short:
        why = (
            "the mean grew between the halves of the run"
            if growing
            else (
                "a stationarity check failed"
                if failed
                else f"{n_eff:.3g} effective observations per replication, fewer than "
                f"{rules.min_effective:g}"
            )
        )
        return Status.nonstationary, why
    if replications < rules.min_replications:
        return Status.unconverged, rules.few_reason(replications)
    if thin:
        return Status.unconverged, "a quantity was seen in fewer than 2 replications"
    return Status.ok, ""
